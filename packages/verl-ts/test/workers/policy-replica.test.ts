// PolicyReplicaActor, the policy replica of the RLOO example and the `torl new algorithm` skeleton:
// two replicas sample, take one REINFORCE step on the driver's advantages, and stay identical.
import { createCollectiveGroup, get, init, kill, RemoteError, shutdown } from "@torl-ts/actors";
import test from "ava";
import { DataProto } from "../../src/protocol/index.js";
import { PolicyReplicaActor } from "../../src/workers/index.js";
import { tinyModelDir } from "./helpers.js";

const ENV = { TORL_BACKEND: "cpu" };

test.before(async () => {
  await init({ numCpus: 2 });
});
test.after.always(async () => {
  await shutdown();
});

test.serial(
  "two replicas: a rollout's training batch, one step on the driver's advantages, identical weights after",
  async (t) => {
    const modelDir = tinyModelDir(11);
    const replicas = [0, 1].map(() =>
      PolicyReplicaActor.options({ env: ENV }).remote(modelDir, { learningRate: 1e-2, tool: null }),
    );
    const group = await createCollectiveGroup(replicas, { name: "policy-replica-test" });
    try {
      t.deepEqual(await get(replicas.map((r) => r.setup())), ["cpu", "cpu"]);
      await get(replicas.map((r) => r.broadcastWeights(0, group.name)));
      const before = await replicas[0]!.weightsFingerprint();
      const sampling = { samplesPerPrompt: 2, maxNewTokens: 6, temperature: 1, maxToolCalls: 1 };
      const wires = await get(replicas.map((r, i) => r.rollout(["1+1=", "2*3="], { ...sampling, seed: i })));
      const batches = wires.map((w) => DataProto.fromWire(w));
      for (const b of batches) {
        t.is(b.length, 4, "2 prompts x 2 samples");
        t.deepEqual(b.column("prompt_index"), [0, 0, 1, 1], "prompt-major");
        t.deepEqual(Array.from(b.tensor("num_tool_calls").data, Number), [0, 0, 0, 0], "no tool: no calls");
      }
      const stats = await get(
        replicas.map((r, i) => {
          const adv = Float32Array.from([1, -1, 0.5, -0.5]);
          const batch = batches[i]!.union(DataProto.fromDict({ advantages: { data: adv, shape: [4] } }));
          return r.update(
            batch.select(["input_ids", "attention_mask", "responses", "loss_mask", "advantages"]).toWire(),
            group.name,
          );
        }),
      );
      for (const s of stats) {
        t.true(Number.isFinite(s.policy_loss) && s.grad_norm > 0);
        t.true(s.response_tokens > 0);
      }
      t.is(stats[0]!.grad_norm, stats[1]!.grad_norm, "one all-reduced gradient");
      const after = await get(replicas.map((r) => r.weightsFingerprint()));
      t.deepEqual(after[0], after[1], "the replicas hold the same weights");
      t.notDeepEqual(after[0], before, "the step changed them");
    } finally {
      await group.destroy();
      await Promise.allSettled(replicas.map((r) => r.close()));
      for (const r of replicas) kill(r);
    }
  },
);

test.serial(
  "a method before setup() is refused by name; a bad tool setting is refused at setup(), naming its key",
  async (t) => {
    const modelDir = tinyModelDir(12);
    const early = PolicyReplicaActor.options({ env: ENV }).remote(modelDir, { learningRate: 1e-3 });
    const bad = PolicyReplicaActor.options({ env: ENV }).remote(modelDir, {
      learningRate: 1e-3,
      tool: { sandbox_actors: 0, run_timeout: -1 },
    });
    try {
      const notReady = await t.throwsAsync(early.weightsFingerprint(), { instanceOf: RemoteError });
      t.is(notReady?.remoteName, "PolicyNotReadyError");
      const refused = await t.throwsAsync(bad.setup(), { instanceOf: RemoteError });
      t.regex(refused!.message, /actor_rollout_ref\.rollout\.tool\.run_timeout must be a number > 0/);
    } finally {
      kill(early);
      kill(bad);
    }
  },
);
