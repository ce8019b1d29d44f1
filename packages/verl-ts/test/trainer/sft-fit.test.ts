import { mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import { FSDPSFTTrainer, readMetrics } from "../../src/trainer/index.js";
import { readAllShards } from "../../src/workers/index.js";
import { chatModelDir, tinySftConfig, toolConversations } from "./sft-helpers.js";

// The SFT trainer end to end on the tiny random chat model, worker processes and all: it learns,
// a resumed run continues bit-identically, and accumulated micro-batches equal one larger batch.

const modelPath = chatModelDir(3);
const conversations = toolConversations(16);
const tmp = (what: string) => mkdtempSync(join(tmpdir(), `torl-sft-${what}-`));

/** Metrics less the wall-clock ones. */
const strip = (m: Record<string, number>) =>
  Object.fromEntries(
    Object.entries(m).filter(([k]) => !/^(timing_s|perf\/(time_per_step|throughput))/.test(k)),
  );

async function run(o: {
  extra?: string[];
  micro?: number;
  ranks?: number;
  saveFreq?: number;
  stopAfter?: number;
  ckptDir?: string;
  runsDir?: string;
}) {
  const ckptDir = o.ckptDir ?? tmp("ckpt");
  const runsDir = o.runsDir ?? tmp("runs");
  const lines: string[] = [];
  const cfg = tinySftConfig({
    modelPath,
    ckptDir,
    steps: 4,
    batch: 8,
    micro: o.micro ?? 4,
    ranks: o.ranks ?? 1,
    saveFreq: o.saveFreq ?? 4,
    extra: o.extra,
  });
  const trainer = new FSDPSFTTrainer(cfg, {
    trainConversations: conversations,
    // the training conversations themselves: val/loss says how well they are learned
    valConversations: conversations,
    runsDir,
    log: (l) => lines.push(l),
    workerEnv: { TORL_BACKEND: "cpu" },
    onStep: (step) => {
      if (step === o.stopAfter) throw new Error(`stopped after step ${step}`);
    },
  });
  const summary = await trainer.fit();
  return {
    summary,
    ckptDir,
    runsDir,
    lines,
    metrics: readMetrics(join(runsDir, "sft-test", "metrics.jsonl")),
  };
}

// One uninterrupted run (4 micro-batches of 2 rows per step, a checkpoint every step) that the tests share.
let uninterrupted: ReturnType<typeof run> | undefined;
const runA = () => {
  uninterrupted ??= run({ micro: 2, saveFreq: 1 });
  return uninterrupted;
};
// worker processes start for every run: minutes on a loaded 2-core machine
const LOADED = "a trainer run starts its worker processes; minutes on a loaded machine";

test.serial("a few SFT steps lower the loss on the training conversations; a line per step", async (t) => {
  t.timeout(10 * 60_000, LOADED);
  const r = await runA();
  t.is(r.summary.steps, 4);
  t.is(r.metrics.length, 4);
  const first = r.metrics[0]!["train/loss"]!;
  const final = r.metrics[3]!["val/loss"]!;
  t.true(final < 0.9 * first, `loss ${first} -> ${final}`);
  t.true(r.metrics[3]!["train/loss"]! < first);
  for (const m of r.metrics) t.true(m["train/loss_tokens"]! > 0 && Number.isFinite(m["train/grad_norm"]!));
  // warmup (25% of 4 steps: 1 step) then cosine: 0, then the peak, then down
  t.deepEqual(
    r.metrics.map((m) => Number(m["train/lr"]!.toPrecision(6))),
    [0, 0.01, 0.0075, 0.0025],
  );
  t.is(r.lines.filter((l) => /^step \d\/4 .*loss/.test(l)).length, 4);
  t.is(r.lines.at(-1), join(r.runsDir, "sft-test"));
});

test.serial("resume from a checkpoint continues bit-identically to an uninterrupted run", async (t) => {
  t.timeout(20 * 60_000, LOADED);
  const a = await runA();
  const ckptDir = tmp("ckpt-b");
  const runsDir = tmp("runs-b");
  await t.throwsAsync(run({ micro: 2, saveFreq: 1, stopAfter: 2, ckptDir, runsDir }), {
    message: /stopped after step 2/,
  });
  const b = await run({ micro: 2, saveFreq: 1, ckptDir, runsDir });
  t.is(b.summary.resumed_from_step, 2);
  t.true(b.lines.some((l) => /resumed from .*global_step_2 \(step 2\)/.test(l)));
  t.deepEqual(b.metrics.map(strip), a.metrics.map(strip), "identical metrics step by step");
  const dirA = join(a.ckptDir, "global_step_4", "actor");
  const dirB = join(ckptDir, "global_step_4", "actor");
  const files = readdirSync(dirA).filter((f) => f.endsWith(".bin"));
  t.is(files.length, 1);
  for (const f of files)
    t.true(readFileSync(join(dirA, f)).equals(readFileSync(join(dirB, f))), `${f} identical`);
});

test.serial("gradient accumulation (4 micro-batches of 2) equals one micro-batch of 8", async (t) => {
  t.timeout(20 * 60_000, LOADED);
  const acc = await runA();
  const big = await run({ micro: 8 });
  const sa = readAllShards(join(acc.ckptDir, "global_step_4", "actor"));
  const sb = readAllShards(join(big.ckptDir, "global_step_4", "actor"));
  let maxDiff = 0;
  let maxAbs = 0;
  for (let i = 0; i < sa.params.length; i++) {
    maxDiff = Math.max(maxDiff, Math.abs(sa.params[i]! - sb.params[i]!));
    maxAbs = Math.max(maxAbs, Math.abs(sa.params[i]!));
  }
  // the same sums in another order (float32): differences at the rounding level after 4 AdamW steps
  t.true(maxDiff < 1e-4 * maxAbs, `max parameter difference ${maxDiff} (max |p| ${maxAbs})`);
  for (const [i, m] of acc.metrics.entries()) {
    const o = big.metrics[i]!;
    t.true(
      Math.abs(m["train/loss"]! - o["train/loss"]!) < 1e-4 * Math.abs(o["train/loss"]!),
      `step ${i + 1} loss`,
    );
    t.true(Math.abs(m["train/grad_norm"]! - o["train/grad_norm"]!) < 1e-3 * o["train/grad_norm"]!);
  }
});

test.serial(
  "LoRA (model.lora_rank): the adapters train, the loss falls, and the checkpoint holds them with PEFT's adapter config for torl export",
  async (t) => {
    t.timeout(20 * 60_000, LOADED);
    const r = await run({ extra: ["model.lora_rank=4", "model.lora_alpha=16", "optim.lr=5e-2"] });
    const first = r.metrics[0]!["train/loss"]!;
    const final = r.metrics[3]!["val/loss"]!;
    t.log(`LoRA SFT loss ${first} -> ${final}`);
    for (const m of r.metrics) t.true(m["train/grad_norm"]! > 0, "the adapters get gradients");
    t.true(final < 0.9 * first, `loss ${first} -> ${final}`);
    const actor = join(r.ckptDir, "global_step_4", "actor");
    const shards = readAllShards(actor);
    t.true(
      shards.layout.every(([n]) => /\.lora_[AB]\.weight$/.test(n)),
      "the checkpoint holds the adapters only",
    );
    const adapter = JSON.parse(readFileSync(join(actor, "huggingface", "adapter_config.json"), "utf8"));
    t.like(adapter, { peft_type: "LORA", r: 4, lora_alpha: 16 });
  },
);
