/**
 * The stock trainer with its workers on WebGPU (SwiftShader, 2 ranks) against the same run on wasm: same
 * seed, 2 steps, the scores and losses agree. Skips, saying why, only where SwiftShader is missing.
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { init, shutdown } from "@torl-ts/actors";
import test from "ava";
import { RayPPOTrainer, readMetrics } from "../../src/trainer/index.js";
import { softwareGpu } from "../models/software-gpu.js";
import { tinyModelDir } from "../workers/helpers.js";
import { rows, tinyConfig, vowelReward } from "./fixtures/setup.js";

const gpu = softwareGpu();
const modelPath = tinyModelDir(11);

async function twoSteps(workerEnv: Record<string, string>): Promise<Record<string, number>[]> {
  const ckptDir = mkdtempSync(join(tmpdir(), "torl-ckpt-"));
  const runsDir = mkdtempSync(join(tmpdir(), "torl-runs-"));
  const cfg = tinyConfig({ modelPath, ckptDir, workers: 2, steps: 2 });
  const trainer = new RayPPOTrainer(cfg, {
    trainRows: rows(8),
    reward: vowelReward,
    runsDir,
    workerEnv,
    log: () => {},
  });
  await trainer.fit();
  return readMetrics(join(runsDir, "tiny", "metrics.jsonl")).filter((m) => m.step > 0) as Record<
    string,
    number
  >[];
}

if (!gpu.ok) test(`webgpu trainer test skipped: ${gpu.why}`, (t) => t.pass());

(gpu.ok ? test.serial : test.skip)(
  "2 trainer steps with 2 workers on webgpu score like the same seed on wasm",
  async (t) => {
    if (!gpu.ok) return;
    t.timeout(20 * 60_000, "SwiftShader compiles every shader in each worker on a loaded CPU");
    await init({ numCpus: 4 });
    t.teardown(() => shutdown());
    const onGpu = await twoSteps({ ...gpu.env, TORL_BACKEND: "webgpu" });
    const onWasm = await twoSteps({ TORL_BACKEND: "wasm" });
    t.is(onGpu.length, 2);
    t.is(onWasm.length, 2);
    for (let i = 0; i < 2; i++) {
      const [g, w] = [onGpu[i]!, onWasm[i]!];
      // Sampled tokens agree (logits differ by ~1e-6), so the scores agree exactly.
      t.is(g["critic/score/mean"], w["critic/score/mean"], `step ${i + 1} score`);
      t.is(g["response_length/mean"], w["response_length/mean"], `step ${i + 1} response length`);
      for (const key of ["actor/pg_loss", "actor/entropy", "actor/grad_norm"])
        t.true(
          Math.abs(g[key]! - w[key]!) <= 1e-3 * Math.max(1, Math.abs(w[key]!)),
          `step ${i + 1} ${key}: ${g[key]} on webgpu, ${w[key]} on wasm`,
        );
    }
  },
);
