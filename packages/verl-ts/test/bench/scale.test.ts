/**
 * The pieces of `bench scale` on a tiny config: the fixture writes a bf16 HF directory that loads as
 * bf16, the largest tensor is named, and the whole probe (load, generate 16 tokens, one GRPO step on 2
 * ranks) runs and reports every phase. The real-size run is a benchmark, not a test.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import {
  benchScaleCommand,
  largestTensor,
  type PhaseUsage,
  runScaleProbe,
  SCALE_PHASES,
  type ScaleProbeResult,
  scaleJson,
  scaleTorlFigures,
  systemPageBytes,
} from "../../src/bench/scale.js";
import {
  bundledQwenTokenizerDir,
  loadModel,
  loadTokenizer,
  makeQwen2Config,
  QWEN2_5_0_5B_SHAPES,
  readSafetensorsHeader,
  selectBackend,
  writeRandomModelDir,
} from "../../src/index.js";

const tokenizer = loadTokenizer(bundledQwenTokenizerDir());
// Qwen2.5-0.5B's vocabulary, grouped-query heads, rope and norm settings on a tiny width and depth
const tiny = makeQwen2Config({
  ...QWEN2_5_0_5B_SHAPES,
  hiddenSize: 16,
  numHiddenLayers: 2,
  numAttentionHeads: 4,
  numKeyValueHeads: 2,
  headDim: 4,
  intermediateSize: 32,
});

test.before(async () => {
  await selectBackend({ backend: "wasm", log: null });
});

test("Qwen2.5-0.5B's largest tensor is its (tied) embedding, half the bytes in bf16", (t) => {
  t.deepEqual(largestTensor(QWEN2_5_0_5B_SHAPES), {
    name: "model.embed_tokens.weight",
    shape: [151936, 896],
    fp32Bytes: 151936 * 896 * 4,
    bf16Bytes: 151936 * 896 * 2,
  });
});

test("the fixture writes bf16 safetensors with the config's shapes, and they load as bf16", (t) => {
  const dir = mkdtempSync(join(tmpdir(), "torl-scale-fixture-"));
  try {
    const { parameters, weightBytes } = writeRandomModelDir(dir, tiny, tokenizer, { seed: 3 });
    const header = readSafetensorsHeader(join(dir, "model.safetensors"));
    t.true([...header.entries.values()].every((e) => e.dtype === "BF16"));
    t.deepEqual(header.entries.get("model.embed_tokens.weight")!.shape, [151936, 16]);
    t.true(weightBytes > 2 * parameters, "2 bytes per parameter plus the header");
    const model = loadModel(dir, { dtype: "auto", trainable: false });
    t.is(model.dtype, "bfloat16");
    t.is(model.numParameters(), parameters);
    t.is(model.config.ropeTheta, 1e6);
    t.is(model.weightBytes(), 2 * parameters);
    model.dispose();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test.serial(
  "the probe loads, generates 16 tokens and runs GRPO steps on 2 ranks, timing each phase of each step",
  async (t) => {
    const result = await runScaleProbe({ config: tiny, tokenizer, ranks: 2, steps: 2 });
    t.is(result.failed, undefined, JSON.stringify(result.failed));
    t.log(JSON.stringify(result.step_seconds));
    t.is(result.steps, 2);
    // each step's phases, the last step's in `seconds`
    t.is(result.step_seconds.length, 2);
    t.is(result.step_grad_norms.length, 2);
    t.is(result.step_grad_norms[1], result.update_metrics!["actor/grad_norm"]);
    t.not(result.step_grad_norms[0], result.step_grad_norms[1], "step 2 trains on step 1's weights");
    for (const s of result.step_seconds) t.deepEqual(Object.keys(s), [...SCALE_PHASES]);
    t.deepEqual(result.step_seconds[1], Object.fromEntries(SCALE_PHASES.map((p) => [p, result.seconds[p]])));
    // each phase's usage is step 2's own: a worker (one JS thread) spends about the phase's wall time at
    // most, not what steps 1 and 2 spent since the phase's first run
    const figures = scaleJson(result);
    t.is(figures.scale_steps, 2);
    for (const phase of SCALE_PHASES)
      for (const r of [0, 1]) {
        const cpu = figures[`scale_${phase}_cpu_seconds_rank${r}`] as number;
        t.true(cpu >= 0 && cpu <= 1.5 * result.seconds[phase]! + 0.3, `${phase} rank ${r}: ${cpu} s`);
        t.true((figures[`scale_${phase}_fresh_mib_rank${r}`] as number) >= 0);
      }
    t.deepEqual(Object.keys(result.seconds), [
      "fixture",
      "spawn",
      "load",
      "generate",
      "old_log_prob",
      "ref_log_prob",
      "update_actor",
    ]);
    // the step trained: a finite, positive gradient norm and the KL loss the probe turns on
    t.true(result.update_metrics!["actor/grad_norm"]! > 0, JSON.stringify(result.update_metrics));
    t.true(Number.isFinite(result.update_metrics!["actor/kl_loss"]));
    t.is(result.peak_rss_bytes_per_rank.length, 2);
    for (const rss of result.peak_rss_bytes_per_rank) t.true(rss > 10e6);
    // each rank's reference shard in /dev/shm, which its footprint adds to its peak
    t.deepEqual(
      result.shm_bytes_per_rank,
      result.memory.update_actor!.map((m) => m.publishedShardBytes),
    );
    // between phases the actor holds only its FSDP shard (sharded at rest: float32 parameters and the two
    // AdamW moments, 12 bytes per parameter over 2 ranks), the reference only its shard (bf16: 1 byte per
    // parameter over 2 ranks)
    for (const m of result.memory.update_actor!) {
      t.is(m.actorWeightTensorBytes, 0);
      t.is(m.refWeightTensorBytes, 0);
      t.is(m.actorWeightBytes, 0);
      t.is(m.refWeightBytes, 0);
      t.true(Math.abs(m.refShardBytes - result.parameters) < 0.01 * result.parameters, `${m.refShardBytes}`);
      t.true(
        Math.abs(m.actorShardBytes - 6 * result.parameters) < 0.01 * 6 * result.parameters,
        `${m.actorShardBytes}`,
      );
    }
  },
);

test.serial(
  "the probe with LoRA: the ranks hold the adapters' AdamW state and the frozen base's bf16 shard, no reference copy",
  async (t) => {
    const result = await runScaleProbe({ config: tiny, tokenizer, ranks: 2, loraRank: 2 });
    t.is(result.failed, undefined, JSON.stringify(result.failed));
    t.is(result.lora_rank, 2);
    t.true(result.update_metrics!["actor/grad_norm"]! > 0, JSON.stringify(result.update_metrics));
    const rest = result.memory.update_actor!;
    const adapters = rest[0]!.adapterParameters;
    // per layer: A and B of 7 linear layers at rank 2
    const h = 16;
    const q = 4 * 4;
    const kv = 2 * 4;
    const inter = 32;
    const perLayer = 2 * (h + q + (h + kv) * 2 + (q + h) + (h + inter) * 2 + (inter + h));
    t.is(adapters, 2 * perLayer);
    t.is(rest[0]!.actorShardBytes + rest[1]!.actorShardBytes, 12 * adapters);
    t.is(rest[0]!.actorBaseShardBytes + rest[1]!.actorBaseShardBytes, 2 * result.parameters);
    for (const m of rest) {
      t.true(m.refIsActorBase);
      t.is(m.refShardBytes + m.refWeightBytes + m.actorWeightBytes, 0);
    }
  },
);

/** A probe's result with these seconds and usage figures (the rest placeholders). */
function fakeProbe(seconds: Record<string, number>, usage: Record<string, PhaseUsage[]>): ScaleProbeResult {
  return {
    parameters: 1,
    ranks: 2,
    lora_rank: 0,
    keep_ref: false,
    keep_actor_layers: false,
    compute_dtype: "float32",
    layers: 2,
    weight_file_bytes: 1,
    largest_tensor: { name: "x", shape: [1], fp32Bytes: 4, bf16Bytes: 2 },
    steps: 1,
    seconds,
    step_grad_norms: [],
    step_seconds: [],
    memory: {},
    usage,
    peak_rss_bytes_per_rank: [],
    shm_bytes_per_rank: [],
  };
}

test("--json carries the largest rank's footprint: its peak resident set plus its shards in /dev/shm", (t) => {
  const probe = fakeProbe({ generate: 1 }, {});
  t.false("scale_memory_bytes_torl" in scaleJson(probe), "no figure without a measured rank");
  probe.peak_rss_bytes_per_rank = [4e9, 4.2e9];
  probe.shm_bytes_per_rank = [0.5e9, 0.2e9];
  // rank 0: 4.5 GB in all, rank 1: 4.4 (its peak alone is the larger)
  t.is(scaleJson(probe).scale_memory_bytes_torl, 4.5e9);
});

test("--json carries each rank's CPU seconds and fresh memory (MiB of page faults) per phase", (t) => {
  // fresh memory: 256 page faults of 4 KiB (1 MiB) per CPU second
  const used = (cpu: number[]) => cpu.map((c) => ({ cpuSeconds: c, minorPageFaults: c * 256 }));
  const probe = fakeProbe(
    { spawn: 1, load: 1, generate: 1, old_log_prob: 1, ref_log_prob: 1, update_actor: 1 },
    {
      load: used([2.5, 1.75]),
      generate: used([7, 7.5]),
      old_log_prob: used([2, 1.5]),
      ref_log_prob: used([1, 1.5]),
      update_actor: used([40, 39.5]),
    },
  );
  const out = scaleJson(probe);
  t.is(out.scale_generate_cpu_seconds_rank0, 7);
  t.is(out.scale_generate_cpu_seconds_rank1, 7.5);
  t.is(out.scale_old_log_prob_cpu_seconds_rank1, 1.5);
  t.is(out.scale_update_actor_cpu_seconds_rank0, 40);
  t.is(out.scale_update_actor_cpu_seconds_rank1, 39.5);
  t.is(out.scale_update_actor_fresh_mib_rank0, 40);
  t.is(out.scale_generate_fresh_mib_rank1, 7.5);
  t.false("scale_load_cpu_seconds_rank0" in out, "only the side-by-side phases");
  t.false("scale_load_fresh_mib_rank0" in out, "only the side-by-side phases");
  t.regex(benchScaleCommand.usage, /scale_<phase>_cpu_seconds_rank<r>/);
  t.regex(benchScaleCommand.usage, /scale_<phase>_fresh_mib_rank<r>/);
  // faults count pages of the kernel's size, which the JSON names
  t.is(out.scale_page_bytes, systemPageBytes());
  t.is(typeof systemPageBytes(), "number", "getconf PAGESIZE reads on Linux");
  const big = scaleTorlFigures(probe, 65536);
  t.is(big.scale_page_bytes, 65536);
  t.is(big.scale_update_actor_fresh_mib_rank0, (40 * 256 * 65536) / 2 ** 20, "64 KiB pages: 16x the MiB");
  const unknown = scaleTorlFigures(probe, "getconf PAGESIZE failed: ENOENT");
  t.regex(String(unknown.scale_page_bytes), /^unknown \(getconf PAGESIZE failed: ENOENT\)$/);
  t.false(
    Object.keys(unknown).some((k) => k.includes("fresh_mib")),
    "no fresh memory figure in a guessed unit",
  );
  t.is(unknown.scale_update_actor_cpu_seconds_rank0, 40);
});

test("--json carries scale_<phase>_seconds_torl of the full fine-tuning run and says why no torch figures (the installed command)", (t) => {
  const probe = (seconds: Record<string, number>) => fakeProbe(seconds, {});
  const full = probe({ load: 9, generate: 2.123456, old_log_prob: 1, ref_log_prob: 1, update_actor: 4 });
  const out = scaleJson({ ...full, lora: { ...probe({ generate: 3 }), lora_rank: 8 } });
  t.deepEqual(
    SCALE_PHASES.map((p) => out[`scale_${p}_seconds_torl`]),
    [2.123, 1, 1, 4],
  );
  t.is(out.scale_fine_tuning, "full");
  t.regex(String(out.torch), /^not run: this bench scale has no PyTorch side/);
  t.false(
    Object.keys(out).some((k) => k.includes("torch_")),
    "no torch figures",
  );
  // a probe that stopped early carries the phases it reached
  const early = scaleJson(probe({ generate: 5 }));
  t.is(early.scale_generate_seconds_torl, 5);
  t.false("scale_update_actor_seconds_torl" in early);
  t.regex(benchScaleCommand.usage, /--json adds scale_<phase>_seconds_torl/);
});
