import test from "ava";
import { benchMemoryCommand, runMemoryBench } from "../../src/bench/memory.js";
import { makeQwen2Config, selectBackend } from "../../src/index.js";

// The memory bench's figures on a tiny config: their names and how they relate (not their size).

test.before(async () => {
  await selectBackend({ backend: "wasm", log: null });
});

test("bench memory reports per-rank state for each N and activation peaks with and without checkpointing", async (t) => {
  const config = makeQwen2Config({
    vocabSize: 64,
    hiddenSize: 32,
    numHiddenLayers: 4,
    numAttentionHeads: 4,
    numKeyValueHeads: 2,
    intermediateSize: 96,
    tieWordEmbeddings: true,
  });
  const r = await runMemoryBench({ config, ranks: [1, 2, 4], rows: 2, length: 16 });
  const f = r.figures;
  for (const key of [
    "state_bytes_per_rank_n1",
    "state_bytes_per_rank_n2",
    "state_bytes_per_rank_n4",
    "activation_peak_bytes",
    "activation_peak_bytes_checkpointed",
    "fwd_bwd_peak_bytes",
    "fwd_bwd_peak_bytes_checkpointed",
  ])
    t.true(Number.isFinite(f[key]) && f[key]! > 0, `${key} = ${f[key]}`);
  // parameters + gradients + AdamW's two moments, fp32: 16 bytes per parameter over N ranks
  const P = r.config.parameters;
  t.is(f.state_bytes_per_rank_n1, 16 * P);
  for (const n of [2, 4]) {
    const perRank = f[`state_bytes_per_rank_n${n}`]!;
    // within one element per unit (6 units: 4 layers and the two runs around them) of 1/N
    t.true(Math.abs(perRank - (16 * P) / n) <= 16 * 6, `N=${n}: ${perRank} vs ${(16 * P) / n}`);
  }
  t.true(f.activation_peak_bytes_checkpointed! < f.activation_peak_bytes!);
  // bf16 storage halves the weight bytes held, and keeps them out of tensors
  t.is(f.weight_bytes_fp32!, 4 * P);
  t.is(f.weight_bytes_bf16! * 2, f.weight_bytes_fp32!);
  t.true(f.model_tensor_bytes_fp32! >= f.weight_bytes_fp32!);
  t.true(f.model_tensor_bytes_bf16! < f.weight_bytes_bf16! / 10);
  t.true(f.fwd_bwd_peak_bytes! > f.activation_peak_bytes!);
  t.deepEqual(
    r.ranks.map((x) => x.ranks),
    [1, 2, 4],
  );
  t.regex(r.method, /data buffers/);
  // LoRA (rank 8, all-linear): the adapters' 16 bytes per adapter parameter, the frozen base's float32
  // shard, and no reference of its own where full fine-tuning holds a shard of the whole model
  t.is(f.lora_rank, 8);
  const perLayer = 8 * (32 + 32 + (32 + 16) * 2 + (32 + 32) + (32 + 96) * 2 + (96 + 32));
  t.is(f.lora_state_bytes_per_rank_n1, 16 * 4 * perLayer);
  t.is(f.lora_base_shard_bytes_per_rank_n1, 4 * P);
  t.is(f.reference_bytes_per_rank_n1, 4 * P);
  for (const n of [1, 2, 4]) t.is(f[`lora_reference_bytes_per_rank_n${n}`], 0);
  t.true(f.lora_state_bytes_per_rank_n2! < f.state_bytes_per_rank_n2! / 2);
});

test("bench memory refuses bad flags before measuring", async (t) => {
  await t.throwsAsync(benchMemoryCommand.run(["--rows=0"]), { message: /^--rows must be an integer >= 1/ });
  await t.throwsAsync(benchMemoryCommand.run(["--length", "x"]), {
    message: /^--length must be an integer >= 2/,
  });
});
