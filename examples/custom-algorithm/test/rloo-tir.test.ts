// RLOO with the TIR rollout: the tiny ToRL base model, the Python tool in a sandbox, the project's verifier.
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import { train } from "../src/rloo.js";

test("RLOO with the Python tool and the verifier: the policy calls the tool, rewards are ToRL's, replicas stay identical", async (t) => {
  const runDir = mkdtempSync(join(tmpdir(), "rloo-tir-"));
  const lines: string[] = [];
  const summary = await train(
    {
      task: "tiny",
      tool: "python",
      maxToolCalls: 1,
      reward: "verifier",
      replicas: 2,
      steps: 1,
      promptsPerStep: 2,
      samplesPerPrompt: 4,
      maxNewTokens: 96,
      backend: "wasm",
      runDir,
    },
    (l) => lines.push(l),
  );
  t.log(lines.join("\n"));
  const [m] = readFileSync(join(runDir, "metrics.jsonl"), "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as Record<string, number>);
  t.log(JSON.stringify(m));
  t.true(m!["tool/code_ratio"]! > 0, "some responses called the Python tool");
  t.true(m!["tool/pass_ratio"]! > 0, "some tool calls ran in the sandbox without error");
  // ToRL's reward: +1 for an equivalent boxed answer, -1 otherwise, so the mean lies in [-1, 1].
  t.true(m!["charts/reward_mean"]! >= -1 && m!["charts/reward_mean"]! <= 1);
  t.true(Number.isFinite(m!["losses/policy_loss"]!));
  const [after0, after1] = summary.fingerprintsAfter;
  t.deepEqual(after0, after1, "the replicas hold the same weights");
});
