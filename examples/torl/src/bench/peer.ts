/**
 * `pnpm torl bench peer [--json]`: the same Qwen2 architectures and weights trained and decoded on torl-ts
 * and on PyTorch (scripts/bench_peer.py), one thread each, in one run. Without an importable torch it
 * says how to get it and reports the torl-ts figures alone.
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import * as tf from "@tensorflow/tfjs";
import { defineBench } from "@torl-ts/core/cli";
import {
  adamOptimizer,
  applyGradients,
  forwardBackward,
  loadModel,
  makeQwen2Config,
  maskedMean,
  type Qwen2Config,
  Qwen2Model,
  saveModel,
  selectBackend,
} from "@torl-ts/verl";
import { cpuMs, decodeTiming, randomBatch } from "@torl-ts/verl/timing";
import { TINY_BASE_DIR } from "@torl-ts/verl/tiny";

/** The larger peer model: Qwen2 with hidden 512, 8 layers, 8/2 heads, vocab 8192, untied (~30.9M). */
export const PEER_MID_CONFIG: Qwen2Config = makeQwen2Config({
  vocabSize: 8192,
  hiddenSize: 512,
  numHiddenLayers: 8,
  numAttentionHeads: 8,
  numKeyValueHeads: 2,
  intermediateSize: 1408,
  tieWordEmbeddings: false,
});

const PEER_SCRIPT = fileURLToPath(new URL("../../scripts/bench_peer.py", import.meta.url));
const CACHE_DIR = fileURLToPath(new URL("../../../../.cache/bench-peer", import.meta.url));

/** One side's workload for one model; both sides run exactly these counts. */
interface Workload {
  name: "tiny" | "mid";
  dir: string;
  train: { batch: number; length: number; steps: number };
  decode: { context: number; steps_b1: number; steps_b64: number };
  check_ids: number[][];
}

const FIGURES = ["train", "decode_b1", "decode_b64"] as const;
type Figure = (typeof FIGURES)[number];

/** One side's figures for one model: tokens per wall-clock second and per process CPU second. */
type SideFigures = { [K in `${Figure}_tokens_per_s` | `${Figure}_tokens_per_cpu_s`]: number } & {
  check_logits: number[];
};

/** The mid model's random weights, written once as an HF directory both sides load. */
async function midModelDir(): Promise<string> {
  const dir = join(CACHE_DIR, "mid-seed1");
  if (existsSync(join(dir, "model.safetensors"))) return dir;
  const tmp = `${dir}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  const model = Qwen2Model.random(PEER_MID_CONFIG, { seed: 1 });
  await saveModel(model, tmp, { dtype: "F32" });
  model.dispose();
  rmSync(dir, { recursive: true, force: true });
  renameSync(tmp, dir);
  return dir;
}

async function workloads(quick: boolean): Promise<Workload[]> {
  const check = [
    [5, 17, 3, 29, 11, 2, 8, 40],
    [7, 7, 21, 30, 4, 9, 1, 12],
  ];
  return [
    {
      name: "tiny",
      dir: TINY_BASE_DIR,
      train: quick ? { batch: 2, length: 16, steps: 1 } : { batch: 16, length: 128, steps: 6 },
      decode: quick
        ? { context: 8, steps_b1: 2, steps_b64: 1 }
        : { context: 64, steps_b1: 64, steps_b64: 16 },
      check_ids: check,
    },
    {
      name: "mid",
      dir: await midModelDir(),
      train: quick ? { batch: 1, length: 8, steps: 1 } : { batch: 4, length: 128, steps: 3 },
      decode: quick ? { context: 8, steps_b1: 1, steps_b64: 1 } : { context: 64, steps_b1: 16, steps_b64: 4 },
      check_ids: check,
    },
  ];
}

async function torlSide(w: Workload): Promise<SideFigures> {
  const model = loadModel(w.dir, { trainable: true });
  try {
    const lastLogits = tf.tidy(() => {
      const ids = Int32Array.from(w.check_ids.flat());
      const b = w.check_ids.length;
      const l = w.check_ids[0]!.length;
      const batch = { ids, mask: new Uint8Array(ids.length).fill(1), batch: b, length: l };
      const logits = model.forward(batch); // [B, L, V]
      const V = model.config.vocabSize;
      return tf.reshape(tf.slice(logits, [0, l - 1, 0], [b, 1, V]), [-1]);
    });
    const check_logits = Array.from(await lastLogits.data());
    lastLogits.dispose();
    const { batch: B, length: L, steps } = w.train;
    const batch = randomBatch(B, L, model.config.vocabSize, 3);
    const opt = adamOptimizer(1e-4);
    const mask = tf.ones([B, L]);
    const step = async () => {
      const { grads } = await forwardBackward(
        model,
        batch,
        (mb) => tf.neg(maskedMean(mb.scores.logProbs, mask)),
        {
          microBatchSize: B,
        },
      );
      applyGradients(model, opt, grads);
    };
    await step();
    const t0 = performance.now();
    const c0 = cpuMs();
    for (let i = 0; i < steps; i++) await step();
    const trainMs = performance.now() - t0;
    const trainCpuMs = cpuMs() - c0;
    mask.dispose();
    opt.dispose();
    const b1 = await decodeTiming(model, 1, w.decode.context, w.decode.steps_b1);
    const b64 = await decodeTiming(model, 64, w.decode.context, w.decode.steps_b64);
    return {
      train_tokens_per_s: (B * L * steps * 1000) / trainMs,
      train_tokens_per_cpu_s: (B * L * steps * 1000) / trainCpuMs,
      decode_b1_tokens_per_s: 1000 / b1.wallMs,
      decode_b1_tokens_per_cpu_s: 1000 / b1.cpuMs,
      decode_b64_tokens_per_s: 1000 / b64.wallMs,
      decode_b64_tokens_per_cpu_s: 1000 / b64.cpuMs,
      check_logits,
    };
  } finally {
    model.dispose();
  }
}

type TorchOutcome =
  | { ok: true; version: string; threads: number; models: Record<string, SideFigures> }
  | { ok: false; why: string };

const GET_TORCH =
  "to compare with PyTorch, install a CPU build of torch for python3 (pip install torch, or a local wheel: pip install /path/to/torch-*.whl)";

/**
 * Runs one of our PyTorch scripts (examples/torl/scripts) with `spec` as JSON on stdin and `threads`
 * threads; its last stdout line is the JSON result. Without an importable torch, the reason (and how to
 * get it) instead; a script that fails otherwise throws with its last stderr lines. The one place the
 * benchmarks start Python.
 */
export function runTorchScript<T>(
  python: string,
  script: string,
  spec: object,
  threads: number,
): { ok: true; out: T } | { ok: false; why: string } {
  const probe = spawnSync(python, ["-c", "import torch"], { encoding: "utf8" });
  if (probe.error)
    return { ok: false, why: `${python} did not start (${probe.error.message}); ${GET_TORCH}` };
  if (probe.status !== 0) return { ok: false, why: `${python} cannot import torch; ${GET_TORCH}` };
  const r = spawnSync(python, [script], {
    input: JSON.stringify(spec),
    encoding: "utf8",
    maxBuffer: 64 << 20,
    env: { ...process.env, OMP_NUM_THREADS: String(threads), MKL_NUM_THREADS: String(threads) },
  });
  if (r.status !== 0)
    throw new Error(
      `${script} exited ${r.status}: ${(r.stderr ?? "").trim().split("\n").slice(-3).join(" | ")}`,
    );
  return { ok: true, out: JSON.parse(r.stdout.trim().split("\n").at(-1)!) as T };
}

function torchSide(python: string, threads: number, ws: Workload[]): TorchOutcome {
  const r = runTorchScript<{ torch_version: string; threads: number; models: Record<string, SideFigures> }>(
    python,
    PEER_SCRIPT,
    { threads, models: ws },
    threads,
  );
  if (!r.ok) return r;
  return { ok: true, version: r.out.torch_version, threads: r.out.threads, models: r.out.models };
}

function round(x: number): number {
  return Number(x.toPrecision(4));
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

function maxAbsDiff(a: number[], b: number[]): number {
  if (a.length !== b.length) throw new Error(`logit checks differ in length: ${a.length} vs ${b.length}`);
  return a.reduce((m, v, i) => Math.max(m, Math.abs(v - b[i]!)), 0);
}

export type PeerBenchResult = Record<string, number | string>;

/** Per model, the median over repeats of each figure. */
function medians(runs: Array<Record<string, SideFigures>>, name: string): SideFigures {
  const first = runs[0]![name]!;
  const out = { check_logits: first.check_logits } as SideFigures;
  for (const f of FIGURES)
    for (const key of [`${f}_tokens_per_s`, `${f}_tokens_per_cpu_s`] as const)
      out[key] = median(runs.map((r) => r[name]![key]));
  return out;
}

export async function runPeerBench(
  options: { quick?: boolean; python?: string; repeats?: number; log?: (s: string) => void } = {},
): Promise<PeerBenchResult> {
  const log = options.log ?? ((s: string) => console.log(s));
  const info = await selectBackend();
  const ws = await workloads(options.quick ?? false);
  const repeats = options.repeats ?? 1;
  const result: PeerBenchResult = { backend: info.line.replace(/^\[torl\] tensor backend: /, ""), repeats };
  const torlRuns: Array<Record<string, SideFigures>> = [];
  const torchRuns: Array<Record<string, SideFigures>> = [];
  let torchWhy = "";
  // The sides alternate, so load from other jobs on the machine falls on both alike.
  for (let r = 0; r < repeats; r++) {
    const torl: Record<string, SideFigures> = {};
    for (const w of ws) {
      log(
        `[${r + 1}/${repeats}] torl-ts ${w.name}: train ${w.train.batch}x${w.train.length} x${w.train.steps}, decode ctx ${w.decode.context}`,
      );
      torl[w.name] = await torlSide(w);
    }
    torlRuns.push(torl);
    if (torchWhy) continue;
    log(`[${r + 1}/${repeats}] PyTorch: the same models, weights and workloads, 1 thread`);
    const torch = torchSide(options.python ?? "python3", 1, ws);
    if (torch.ok) {
      result.torch = `${torch.version}, ${torch.threads} thread`;
      torchRuns.push(torch.models);
    } else {
      torchWhy = torch.why;
      result.torch = `not run: ${torch.why}`;
      log(`PyTorch side skipped: ${torch.why}`);
    }
  }
  for (const w of ws) {
    const mine = medians(torlRuns, w.name);
    const theirs = torchRuns.length ? medians(torchRuns, w.name) : undefined;
    for (const f of FIGURES) {
      result[`${w.name}_${f}_tokens_per_s_torl`] = round(mine[`${f}_tokens_per_s`]);
      if (!theirs) continue;
      result[`${w.name}_${f}_tokens_per_s_torch`] = round(theirs[`${f}_tokens_per_s`]);
      result[`${w.name}_${f}_ratio`] = round(mine[`${f}_tokens_per_s`] / theirs[`${f}_tokens_per_s`]);
      result[`${w.name}_${f}_cpu_ratio`] = round(
        mine[`${f}_tokens_per_cpu_s`] / theirs[`${f}_tokens_per_cpu_s`],
      );
    }
    if (theirs)
      result[`${w.name}_logits_max_abs_diff`] = round(maxAbsDiff(mine.check_logits, theirs.check_logits));
  }
  return result;
}

export const benchPeerCommand = defineBench({
  summary: "train and decode the same Qwen2 models on torl-ts and on PyTorch (1 thread each), with ratios",
  usage: [
    "usage: pnpm torl bench peer [--json] [--quick] [--repeats N] [--python PATH]",
    "",
    "Two models, identical weights on both sides: tiny (the committed tiny base, packages/verl-ts/assets/tiny-base)",
    "and mid (Qwen2 hidden 512, 8 layers, 8/2 heads, intermediate 1408, vocab 8192, untied, ~30.9M, random",
    "weights written once under .cache/bench-peer). For each, float32, one thread on each side:",
    "  {tiny,mid}_train_tokens_per_s_{torl,torch}       forward+backward+Adam (tiny 16x128, mid 4x128)",
    "  {tiny,mid}_decode_b1_tokens_per_s_{torl,torch}   KV-cache decode, batch 1, after a 64-token prompt",
    "  {tiny,mid}_decode_b64_tokens_per_s_{torl,torch}  the same at batch 64",
    "  {tiny,mid}_{train,decode_b1,decode_b64}_ratio    torl / torch (above 1: torl-ts is faster)",
    "  {tiny,mid}_{train,decode_b1,decode_b64}_cpu_ratio  the same per process CPU second (steadier on a",
    "                                                   machine shared with other jobs)",
    "  {tiny,mid}_logits_max_abs_diff                   last-position logits of a fixed batch, both sides",
    "The PyTorch side (examples/torl/scripts/bench_peer.py) runs when `python3 -c 'import torch'` works;",
    "otherwise the torl-ts figures come alone. --repeats N: N alternating runs of both sides, medians",
    "(default 1). --quick: tiny workloads (a smoke run, figures not comparable).",
    "The last line is one JSON object with these figures.",
  ].join("\n"),
  flags: {
    quick: { type: "boolean" },
    python: { type: "string" },
    repeats: { type: "integer", min: 1 },
  },
  measure: ({ quick, python, repeats = 1 }) =>
    runPeerBench({ quick, python, repeats, log: (s) => console.log(s) }),
});
