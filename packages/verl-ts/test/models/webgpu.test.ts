/**
 * The model on WebGPU (Dawn on SwiftShader, a Vulkan implementation on the CPU) against wasm: logits,
 * log-probs, gradients of every parameter, KV-cache generation, one Adam step, and tf.memory() over
 * repeated training steps and generations. Each backend runs test/models/fixtures/parity-run.ts in its
 * own process; the tests compare the two outputs. Skips, saying why, only where SwiftShader is missing.
 * SwiftShader is slow: the tiny test architecture, and 3 repeats for the memory checks (the bench
 * `pnpm torl bench model` is the place for long runs).
 */
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import test from "ava";
import { runJsonScript } from "./helpers.js";
import { softwareGpu } from "./software-gpu.js";

const gpu = softwareGpu();
const REPEATS = 3;
const FIXTURE = join(import.meta.dirname, "fixtures", "parity-run.ts");

interface RunOutput {
  backend: string;
  tfBackend: string;
  logits: number[];
  logProbs: number[];
  entropy: number[];
  loss: number;
  grads: Record<string, number[]>;
  greedy: number[][];
  sampled: number[][];
  stepped: Record<string, number[]>;
  trainMemory: [number, number][];
  genMemory: [number, number][];
}

function run(backend: "webgpu" | "wasm", env: Record<string, string>): Promise<RunOutput> {
  return runJsonScript<RunOutput>(FIXTURE, [backend, String(REPEATS)], env);
}

const maxAbs = (a: number[], b: number[]) => a.reduce((m, x, i) => Math.max(m, Math.abs(x - b[i]!)), 0);

/** Worst over parameters of max |a - b| / max |b| (each parameter's gradient on its own scale). */
function maxRel(a: Record<string, number[]>, b: Record<string, number[]>): { worst: number; name: string } {
  let worst = 0;
  let name = "";
  for (const [k, ref] of Object.entries(b)) {
    const scale = Math.max(1e-12, ...ref.map(Math.abs));
    const r = maxAbs(a[k]!, ref) / scale;
    if (r > worst) [worst, name] = [r, k];
  }
  return { worst, name };
}

let both: Promise<[RunOutput, RunOutput]> | undefined;
const outputs = () => {
  if (!gpu.ok) throw new Error(gpu.why);
  both ??= Promise.all([run("webgpu", gpu.env), run("wasm", {})]);
  return both;
};

const gpuTest = gpu.ok ? test.serial : test.skip;
if (!gpu.ok) test(`webgpu tests skipped: ${gpu.why}`, (t) => t.pass());

gpuTest(
  "webgpu runs on the SwiftShader adapter; logits and log-probs match wasm (<= 1e-3 absolute)",
  async (t) => {
    t.timeout(12 * 60_000, "SwiftShader compiles every shader on a loaded CPU");
    const [g, w] = await outputs();
    t.is(g.tfBackend, "webgpu");
    t.is(w.tfBackend, "wasm");
    t.is(g.logits.length, w.logits.length);
    t.true(maxAbs(g.logits, w.logits) <= 1e-3, `logits differ by ${maxAbs(g.logits, w.logits)}`);
    t.true(maxAbs(g.logProbs, w.logProbs) <= 1e-3, `log-probs differ by ${maxAbs(g.logProbs, w.logProbs)}`);
    t.true(maxAbs(g.entropy, w.entropy) <= 1e-3, `entropy differs by ${maxAbs(g.entropy, w.entropy)}`);
    t.true(Math.abs(g.loss - w.loss) <= 1e-3, `loss ${g.loss} vs ${w.loss}`);
  },
);

gpuTest(
  "gradients of every parameter match wasm within 1e-2 relative; one Adam step lands on the same weights",
  async (t) => {
    t.timeout(12 * 60_000);
    const [g, w] = await outputs();
    t.deepEqual(Object.keys(g.grads).sort(), Object.keys(w.grads).sort());
    const { worst, name } = maxRel(g.grads, w.grads);
    t.true(worst <= 1e-2, `gradient of ${name} differs by ${worst} relative`);
    // Adam moves each weight by about lr = 1e-2 whatever the gradient's size: compare the weights absolutely.
    let stepDiff = 0;
    for (const [k, v] of Object.entries(w.stepped)) stepDiff = Math.max(stepDiff, maxAbs(g.stepped[k]!, v));
    t.true(stepDiff <= 1e-3, `weights after one Adam step differ by ${stepDiff}`);
  },
);

gpuTest("KV-cache generation: greedy tokens identical to wasm; seeded sampling identical", async (t) => {
  t.timeout(12 * 60_000);
  const [g, w] = await outputs();
  t.deepEqual(g.greedy, w.greedy);
  // Sampling draws from the same seeded stream; logits agree to ~1e-6, far below the gap a token
  // boundary would need, so the tokens agree too.
  t.deepEqual(g.sampled, w.sampled);
});

gpuTest(
  `tf.memory() is flat over ${REPEATS} training steps and ${REPEATS} generations on webgpu`,
  async (t) => {
    t.timeout(12 * 60_000);
    const [g] = await outputs();
    t.is(new Set(g.trainMemory.map((m) => m.join())).size, 1, `training: ${JSON.stringify(g.trainMemory)}`);
    t.is(new Set(g.genMemory.map((m) => m.join())).size, 1, `generation: ${JSON.stringify(g.genMemory)}`);
  },
);

function selectIn(env: Record<string, string>): { ok: boolean; device?: string; message?: string } {
  const r = spawnSync(
    process.execPath,
    ["--import=tsx", join(import.meta.dirname, "fixtures", "select-webgpu.ts")],
    {
      env: { ...process.env, TORL_BACKEND: "", ...env },
      encoding: "utf8",
      timeout: 120_000,
    },
  );
  if (r.status !== 0) throw new Error(`select-webgpu exited with ${r.status}: ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split("\n").at(-1)!);
}

(gpu.ok ? test : test.skip)(
  "a worker binds to the adapter TORL_WEBGPU_ADAPTER names; an unknown name is refused listing the adapters",
  (t) => {
    if (!gpu.ok) return;
    const any = selectIn(gpu.env);
    t.true(any.ok, any.message);
    t.regex(any.device ?? "", /SwiftShader/);
    const named = selectIn({ ...gpu.env, TORL_WEBGPU_ADAPTER: "SwiftShader Device (Subzero)" });
    t.true(named.ok, named.message);
    const wrong = selectIn({ ...gpu.env, TORL_WEBGPU_ADAPTER: "No Such GPU" });
    t.false(wrong.ok);
    t.regex(wrong.message ?? "", /TORL_WEBGPU_ADAPTER='No Such GPU'.*SwiftShader Device/);
  },
);

gpuTest(
  "clip_cov and kl_cov run on webgpu (tokens chosen in tensor ops) and match the PyTorch reference",
  async (t) => {
    if (!gpu.ok) return;
    const script = join(import.meta.dirname, "fixtures", "cov-losses-run.ts");
    const res = spawnSync(process.execPath, ["--import=tsx", script, "webgpu"], {
      env: { ...process.env, ...gpu.env, TORL_BACKEND: "" },
      encoding: "utf8",
    });
    t.is(res.status, 0, res.stderr.slice(-2000));
    const { backend, out } = JSON.parse(res.stdout.trim().split("\n").at(-1)!);
    t.is(backend, "webgpu");
    const fx = JSON.parse(
      readFileSync(
        join(import.meta.dirname, "..", "fixtures", "core", "algorithm-variants-torch.json"),
        "utf8",
      ),
    );
    for (const name of ["clip_cov", "kl_cov"]) {
      const want = fx.policy_loss[`${name}/token-mean`];
      t.true(
        Math.abs(out[name].value - want.pg_loss) < 1e-5,
        `${name} value ${out[name].value} vs ${want.pg_loss}`,
      );
      t.true(maxAbs(out[name].grad, want.grad) < 1e-5, `${name} gradient`);
      for (const [k, v] of Object.entries(want.metrics as Record<string, number>))
        t.true(Math.abs(out[name].metrics[k] - v) < 1e-5, `${name} ${k}`);
    }
  },
);
