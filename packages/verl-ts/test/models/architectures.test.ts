/**
 * Qwen3 dense and Llama 3 (llama3 rotary scaling) against the plain PyTorch reference of
 * scripts/make-model-fixtures.py (checked there against transformers' own classes): logits and per-token
 * log-probs of a left-padded batch within 1e-4, gradients of a scalar loss within 1e-3 relative (with
 * and without gradient checkpointing), and greedy KV-cache generations identical, on the CPU backends
 * (wasm, with the native kernels where they load, and tfjs cpu) and on webgpu (SwiftShader), each in a
 * process of its own (fixtures/arch-run.ts). The committed fixtures need no torch.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import test from "ava";
import { runJsonScript } from "./helpers.js";
import { softwareGpu } from "./software-gpu.js";

const FIX = join(import.meta.dirname, "..", "fixtures", "models");
const RUNNER = join(import.meta.dirname, "fixtures", "arch-run.ts");
const FIXTURES = ["qwen3-tiny", "qwen3-tiny-tied", "llama3-tiny"];

interface Expected {
  ids: number[][];
  mask: number[][];
  logits: number[][][];
  logprobs: number[][];
  loss: number;
  grads: Record<string, number[]>;
  greedy: number[][];
}

interface Run {
  logits: number[];
  logProbs: number[];
  loss: number;
  grads: Record<string, number[]>;
  checkpointedLoss: number;
  checkpointedGrads: Record<string, number[]>;
  greedy: number[][];
}

function run(backend: string, env: Record<string, string>): Promise<Record<string, Run>> {
  return runJsonScript<Record<string, Run>>(RUNNER, [backend, ...FIXTURES], env);
}

/** Every check of one fixture's run against the reference; returns the failures (empty: all pass). */
function compare(name: string, got: Run): string[] {
  const e = JSON.parse(readFileSync(join(FIX, name, "expected.json"), "utf8")) as Expected;
  const B = e.ids.length;
  const L = e.ids[0]!.length;
  const V = e.logits[0]![0]!.length;
  const bad: string[] = [];
  let logitErr = 0;
  let lpErr = 0;
  for (let b = 0; b < B; b++)
    for (let i = 0; i < L; i++) {
      if (!e.mask[b]![i]) continue;
      for (let v = 0; v < V; v++)
        logitErr = Math.max(logitErr, Math.abs(got.logits[(b * L + i) * V + v]! - e.logits[b]![i]![v]!));
      // column i scores token i given the tokens before it; the reference's column i - 1
      if (i > 0 && e.mask[b]![i - 1])
        lpErr = Math.max(lpErr, Math.abs(got.logProbs[b * L + i]! - e.logprobs[b]![i - 1]!));
    }
  if (!(logitErr < 1e-4)) bad.push(`logits: max |diff| ${logitErr}`);
  if (!(lpErr < 1e-4)) bad.push(`log-probs: max |diff| ${lpErr}`);
  for (const [label, loss, grads] of [
    ["gradients", got.loss, got.grads],
    ["checkpointed gradients", got.checkpointedLoss, got.checkpointedGrads],
  ] as const) {
    if (!(Math.abs(loss - e.loss) < 1e-4 * Math.max(1, Math.abs(e.loss))))
      bad.push(`${label}: loss ${loss} vs ${e.loss}`);
    for (const [p, want] of Object.entries(e.grads)) {
      const g = grads[p]!;
      const scale = Math.max(...want.map(Math.abs));
      const err = want.reduce((m, w, i) => Math.max(m, Math.abs(g[i]! - w)), 0);
      if (!(err <= 1e-3 * scale)) bad.push(`${label}: ${p} max |diff| ${err} (max |grad| ${scale})`);
    }
  }
  if (JSON.stringify(got.greedy) !== JSON.stringify(e.greedy))
    bad.push(`greedy: ${JSON.stringify(got.greedy)} vs ${JSON.stringify(e.greedy)}`);
  return bad;
}

const gpu = softwareGpu();
const backends: [string, Record<string, string> | undefined][] = [
  ["wasm", {}],
  ["cpu", {}],
  ["webgpu", gpu.ok ? gpu.env : undefined],
];

for (const [backend, env] of backends) {
  if (!env) {
    test(`${backend}: Qwen3 and Llama 3 checks skipped: ${gpu.ok ? "" : gpu.why}`, (t) => t.pass());
    continue;
  }
  test(`${backend}: Qwen3 (untied, tied) and Llama 3 match the PyTorch reference: logits, log-probs, gradients, greedy generation`, async (t) => {
    t.timeout(600_000);
    const out = await run(backend, env);
    for (const name of FIXTURES) {
      const bad = compare(name, out[name]!);
      t.deepEqual(bad, [], `${backend} ${name}`);
    }
  });
}
