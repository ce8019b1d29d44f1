import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { makeQwen2Config } from "@torl-ts/verl";
import type { ScaleProbeResult } from "@torl-ts/verl/bench/scale";
import test from "ava";
import { runTorchScript } from "../src/bench/peer.js";
import {
  benchScaleCommand,
  mergeScalePeer,
  SCALE_PHASES,
  scalePeerExitCode,
  torchScaleSpec,
} from "../src/bench/scale-peer.js";

const SCRIPT = fileURLToPath(new URL("../scripts/bench_scale_peer.py", import.meta.url));
const TINY = makeQwen2Config({
  vocabSize: 64,
  hiddenSize: 32,
  numHiddenLayers: 2,
  numAttentionHeads: 4,
  numKeyValueHeads: 2,
  intermediateSize: 48,
});

/** A probe result as runScaleProbe returns it after a full step (figures made up, shapes real). */
function probe(): ScaleProbeResult {
  return {
    parameters: 1,
    ranks: 2,
    lora_rank: 0,
    keep_ref: false,
    keep_actor_layers: false,
    compute_dtype: "float32",
    layers: 2,
    rows: 4,
    prompt_length: 6,
    response_length: 3,
    weight_file_bytes: 1,
    largest_tensor: { name: "x", shape: [1], fp32Bytes: 4, bf16Bytes: 2 },
    steps: 2,
    seconds: { generate: 2, old_log_prob: 1, ref_log_prob: 1, update_actor: 4 },
    step_grad_norms: [],
    step_seconds: [
      { generate: 3, old_log_prob: 1, ref_log_prob: 1, update_actor: 9 },
      { generate: 2, old_log_prob: 1, ref_log_prob: 1, update_actor: 4 },
    ],
    memory: {},
    usage: {},
    peak_rss_bytes_per_rank: [],
    shm_bytes_per_rank: [],
  };
}

test("without torch the scale figures carry torl-ts seconds and the reason, no torch keys", (t) => {
  const fakes = mkdtempSync(join(tmpdir(), "torl-no-torch-"));
  writeFileSync(join(fakes, "torch.py"), "raise ImportError('no torch in this test')\n");
  const saved = process.env.PYTHONPATH;
  process.env.PYTHONPATH = fakes;
  try {
    const r = runTorchScript("python3", SCRIPT, torchScaleSpec(TINY, probe(), "float32"), 1);
    t.false(r.ok);
    const out = mergeScalePeer(probe(), r as { ok: false; why: string });
    t.regex(String(out.torch), /^not run: python3 cannot import torch; to compare with PyTorch, install/);
    for (const phase of SCALE_PHASES) {
      t.is(typeof out[`scale_${phase}_seconds_torl`], "number");
      t.false(`scale_${phase}_seconds_torch_fp32` in out);
      t.false(`scale_${phase}_ratio_bf16` in out);
    }
  } finally {
    if (saved === undefined) delete process.env.PYTHONPATH;
    else process.env.PYTHONPATH = saved;
    rmSync(fakes, { recursive: true, force: true });
  }
});

test("the PyTorch side runs one rank's share at tiny shapes and every key lands with its ratio", (t) => {
  const spec = torchScaleSpec(TINY, probe(), "float32") as Record<string, unknown>;
  t.like(spec, { rows: 2, prompt_length: 6, new_tokens: 3, ranks: 2, dtype: "float32", steps: 2 });
  const runs: Parameters<typeof mergeScalePeer>[1] & { ok: true } = { ok: true, runs: {} };
  for (const [short, dtype] of [
    ["fp32", "float32"],
    ["bf16", "bfloat16"],
  ] as const) {
    const r = runTorchScript<{
      steps: number;
      seconds: Record<string, number>;
      step_seconds: Record<string, number>[];
      peak_rss_bytes: number;
      torch_version: string;
      threads: number;
    }>("python3", SCRIPT, torchScaleSpec(TINY, probe(), dtype), 1);
    if (!r.ok) {
      // python3 without torch: the test above covers this machine
      t.regex(r.why, /cannot import torch/);
      return;
    }
    t.is(r.out.threads, 1);
    // both steps ran; the figures are the last one's
    t.is(r.out.steps, 2);
    t.is(r.out.step_seconds.length, 2);
    t.deepEqual(r.out.seconds, r.out.step_seconds[1]);
    for (const phase of [...SCALE_PHASES, "update_forward_backward", "update_adamw"])
      t.true(r.out.seconds[phase]! > 0, `${dtype} ${phase}`);
    runs.runs[short] = r.out;
  }
  const out = mergeScalePeer(probe(), runs);
  t.regex(String(out.torch), /^\d+\.\d+.*, 1 thread$/);
  t.is(out.scale_steps, 2);
  for (const phase of SCALE_PHASES)
    for (const short of ["fp32", "bf16"]) {
      const theirs = out[`scale_${phase}_seconds_torch_${short}`] as number;
      t.true(theirs > 0);
      const ratio = out[`scale_${phase}_ratio_${short}`] as number;
      t.true(Math.abs(ratio - theirs / probe().seconds[phase]!) <= 1e-3 * ratio, `${phase} ${short}`);
    }
  t.true((out.scale_peak_rss_bytes_torch_bf16 as number) > 0);
  // every PyTorch step's seconds, the last of them the figures'
  const steps = out.scale_step_seconds_torch_fp32 as Record<string, number>[];
  t.is(steps.length, 2);
  t.is(steps[1]!.update_actor, out.scale_update_actor_seconds_torch_fp32 as number);
});

test("the whole-model run holds AdamW moments of every parameter, and the memory target is its peak over the ranks", (t) => {
  const spec = torchScaleSpec(TINY, probe(), "float32", true) as Record<string, unknown>;
  // one rank's rows, the whole model
  t.like(spec, { rows: 2, ranks: 2, dtype: "float32", whole_model: true });
  t.false("whole_model" in (torchScaleSpec(TINY, probe(), "float32") as object));
  const run = (wholeModel: boolean) =>
    runTorchScript<{
      whole_model: boolean;
      peak_rss_bytes: number;
      parameters: number;
      optimized_parameters: number;
    }>("python3", SCRIPT, torchScaleSpec(TINY, probe(), "float32", wholeModel), 1);
  const whole = run(true);
  if (!whole.ok) {
    t.regex(whole.why, /cannot import torch/);
    return;
  }
  t.true(whole.out.whole_model);
  t.true(whole.out.peak_rss_bytes > 0);
  // AdamW over every parameter, against the first half of them for one rank's share
  t.is(whole.out.optimized_parameters, whole.out.parameters);
  const share = run(false);
  t.true(share.ok);
  if (share.ok) {
    t.false(share.out.whole_model);
    t.true(share.out.optimized_parameters < share.out.parameters);
    t.true(share.out.optimized_parameters >= share.out.parameters / 2);
  }

  const p = { ...probe(), peak_rss_bytes_per_rank: [4.0e9, 4.1e9], shm_bytes_per_rank: [0.5e9, 0.5e9] };
  const fp32 = { peak_rss_bytes: 9e9, torch_version: "2.0.0", threads: 1, seconds: { ...probe().seconds } };
  const out = mergeScalePeer(p, { ok: true, runs: { fp32 }, wholeModel: { ...fp32, peak_rss_bytes: 11e9 } });
  t.is(out.scale_peak_rss_bytes_torch_fp32_whole_model, 11e9);
  t.is(out.scale_memory_target_bytes, 5.5e9);
  t.is(out.scale_memory_bytes_torl, 4.6e9);
  // the target over the largest rank's footprint, 5.5 / 4.6
  t.is(out.scale_memory_ratio, 1.196);
  // without the whole-model run there is no target
  t.false("scale_memory_target_bytes" in mergeScalePeer(p, { ok: true, runs: { fp32 } }));
  // a later run that could not run keeps the earlier runs' figures and says which did not run, and why
  const partial = mergeScalePeer(p, { ok: true, runs: { fp32 }, notRun: "the whole-model run: killed" });
  t.is(partial.scale_peak_rss_bytes_torch_fp32, 9e9);
  t.is(partial.torch, "2.0.0, 1 thread; not run: the whole-model run: killed");
  t.false("scale_memory_ratio" in partial);
  t.is(mergeScalePeer(p, { ok: true, runs: {}, notRun: "all: gone" }).torch, "not run: all: gone");
});

test("torchScaleSpec refuses a probe that never generated", (t) => {
  const p = probe();
  delete p.rows;
  t.throws(() => torchScaleSpec(TINY, p, "float32"), { message: /did not generate/ });
});

test("with --lora-rank the figures say the PyTorch side is full fine-tuning only; a failed LoRA run fails the command", (t) => {
  const lora = {
    ...probe(),
    lora_rank: 8,
    seconds: { generate: 3, old_log_prob: 1, ref_log_prob: 1, update_actor: 2 },
  };
  const run = { peak_rss_bytes: 1, torch_version: "2.0.0", threads: 1, seconds: { ...probe().seconds } };
  const out = mergeScalePeer({ ...probe(), lora }, { ok: true, runs: { fp32: run } });
  t.is(out.scale_fine_tuning, "full");
  // the side-by-side figures are the full fine-tuning run's, not the LoRA run's
  t.is(out.scale_generate_seconds_torl, 2);
  t.is(out.scale_generate_ratio_fp32, 1);
  t.regex(String(out.lora?.torch), /^not run: the PyTorch side runs full fine-tuning only/);
  t.is(out.lora?.seconds.generate, 3);
  t.false(
    Object.keys(out.lora ?? {}).some((k) => k.startsWith("scale_")),
    "no side-by-side keys under lora",
  );
  // without --lora-rank there is no lora entry, and the figures still name what they are
  const plain = mergeScalePeer(probe(), { ok: false, why: "no torch" });
  t.is(plain.scale_fine_tuning, "full");
  t.false("lora" in plain);
  t.is(scalePeerExitCode(out), 0);
  t.is(
    scalePeerExitCode({ ...out, lora: { ...out.lora!, failed: { phase: "update_actor", error: "x" } } }),
    1,
  );
  t.regex(benchScaleCommand.usage, /--lora-rank R/);
  t.regex(benchScaleCommand.usage, /scale_fine_tuning\s+"full": the PyTorch side runs full fine-tuning only/);
});
