/**
 * REINFORCE with a per-prompt moving-average baseline, written from the public API of the torl-ts
 * packages alone. Two policy replicas (`PolicyReplicaActor`, one actor process each) sample with the
 * TIR rollout, calling ToRL's Python tool in a sandbox; here, in the driver, the project's verifier
 * scores the answers and the baseline gives the advantages; the replicas average their gradients over
 * a collective group, so they stay identical.
 *
 *   npm start <model-dir> [steps]      (node --import tsx algorithm.ts <model-dir> [steps])
 *
 * <model-dir>: any HF-format Qwen2 directory (config.json, model.safetensors, tokenizer.json).
 */
import { fileURLToPath } from "node:url";
import { createCollectiveGroup, get, init, shutdown } from "@torl-ts/actors";
import {
  type CodeInterpreterToolConfig,
  computeMathScore,
  DataProto,
  executionInfoFromRollout,
  generateProblems,
  PolicyReplicaActor,
  renderPrompt,
} from "@torl-ts/verl";

// Hyperparameters, all in one place.
const REPLICAS = 2;
const PROMPTS_PER_REPLICA = 2;
const SAMPLES_PER_PROMPT = 2;
const MAX_RESPONSE_TOKENS = 96;
const MAX_TOOL_CALLS = 1;
const LEARNING_RATE = 1e-4;
const BASELINE_DECAY = 0.9;
const GROUP = "reinforce";
/** ToRL's Python tool (createCodeInterpreterTool's keys): one warm interpreter in each replica's process. */
const TOOL: CodeInterpreterToolConfig = { sandbox_actors: 0, sandbox_workers: 1, run_timeout: 10 };

async function main(modelDir: string, steps: number): Promise<void> {
  await init({ numCpus: REPLICAS });
  const replicas = Array.from({ length: REPLICAS }, () =>
    PolicyReplicaActor.remote(modelDir, { learningRate: LEARNING_RATE, tool: TOOL }),
  );
  try {
    const backends = await get(replicas.map((r) => r.setup()));
    const group = await createCollectiveGroup(replicas, { name: GROUP });
    try {
      await get(replicas.map((r) => r.broadcastWeights(0, GROUP)));
      const before = await replicas[0]!.weightsFingerprint();
      const problems = generateProblems({ count: steps * REPLICAS * PROMPTS_PER_REPLICA, seed: 1 });
      const baseline = new Map<string, number>();
      for (let step = 0; step < steps; step++) {
        const shards = replicas.map((_, i) => {
          const start = (step * REPLICAS + i) * PROMPTS_PER_REPLICA;
          return problems.slice(start, start + PROMPTS_PER_REPLICA);
        });
        // Each replica samples SAMPLES_PER_PROMPT responses per question of its shard, prompt-major.
        const wires = await get(
          replicas.map((r, i) =>
            r.rollout(
              shards[i]!.map((p) => renderPrompt("tir_base_0309", [{ role: "user", content: p.question }])),
              {
                samplesPerPrompt: SAMPLES_PER_PROMPT,
                maxNewTokens: MAX_RESPONSE_TOKENS,
                temperature: 1,
                seed: step * REPLICAS + i,
                maxToolCalls: MAX_TOOL_CALLS,
              },
            ),
          ),
        );
        const batches = wires.map((wire) => DataProto.fromWire(wire));
        const column = (batch: DataProto, key: string) => Array.from(batch.tensor(key).data, Number);
        const toolCalls = batches.map((batch) => column(batch, "num_tool_calls"));
        const questionOf = (i: number, row: number) => shards[i]![Math.floor(row / SAMPLES_PER_PROMPT)]!;
        // The verifier's reward for every response, with the rollout's record of the code it ran.
        const rewards = batches.map((batch, i) => {
          const passes = column(batch, "execution_passes");
          return batch.column<string>("response_text").map((text, row) => {
            const execution = { executionPasses: passes[row]!, numToolCalls: toolCalls[i]![row]! };
            return computeMathScore(text, questionOf(i, row).answer, {}, executionInfoFromRollout(execution))
              .score;
          });
        });
        // Advantage: reward minus the question's moving-average reward (0 before it was seen).
        const advantages = rewards.map((rs, i) =>
          rs.map((reward, row) => reward - (baseline.get(questionOf(i, row).question) ?? 0)),
        );
        for (const [i, rs] of rewards.entries())
          for (const [row, reward] of rs.entries()) {
            const q = questionOf(i, row).question;
            baseline.set(q, BASELINE_DECAY * (baseline.get(q) ?? 0) + (1 - BASELINE_DECAY) * reward);
          }
        // Each replica takes one step on its own rows, now with their advantages.
        const stats = await get(
          replicas.map((r, i) => {
            const adv = Float32Array.from(advantages[i]!);
            const batch = batches[i]!.union(
              DataProto.fromDict({ advantages: { data: adv, shape: [adv.length] } }),
            );
            return r.update(
              batch.select(["input_ids", "attention_mask", "responses", "loss_mask", "advantages"]).toWire(),
              GROUP,
            );
          }),
        );
        const all = rewards.flat();
        console.log(
          JSON.stringify({
            step: step + 1,
            reward_mean: all.reduce((a, b) => a + b, 0) / all.length,
            tool_calls: toolCalls.flat().reduce((a, b) => a + b, 0),
            loss: stats[0]!.policy_loss,
            grad_norm: stats[0]!.grad_norm,
          }),
        );
      }
      const after = await get(replicas.map((r) => r.weightsFingerprint()));
      console.log(JSON.stringify({ backends, fingerprint_before: before, fingerprints_after: after }));
    } finally {
      await group.destroy();
    }
  } finally {
    await Promise.allSettled(replicas.map((r) => r.close()));
    await shutdown();
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [modelDir, steps = "5"] = process.argv.slice(2);
  if (!modelDir) {
    console.error("usage: node --import tsx algorithm.ts <model-dir> [steps]");
    process.exitCode = 2;
  } else if (!/^[1-9][0-9]*$/.test(steps)) {
    console.error(`steps must be a positive integer, got ${JSON.stringify(steps)}`);
    console.error("usage: node --import tsx algorithm.ts <model-dir> [steps]");
    process.exitCode = 2;
  } else {
    main(modelDir, Number(steps)).catch((error) => {
      console.error(error);
      process.exitCode = 1;
    });
  }
}
