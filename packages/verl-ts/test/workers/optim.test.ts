import { spawnSync } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { shardRange } from "@torl-ts/actors";
import test from "ava";
import {
  CheckpointError,
  clipCoefficient,
  FlatLayout,
  learningRate,
  lrMultiplier,
  type OptimSettings,
  readAllShards,
  ShardedAdamW,
  warmupSteps,
  writeShard,
} from "../../src/workers/index.js";
import { adamwLoop } from "../../src/workers/optim.js";
import ref from "./fixtures/adamw-torch.json" with { type: "json" };

const base: OptimSettings = {
  lr: 1e-3,
  lr_warmup_steps: -1,
  lr_warmup_steps_ratio: 0,
  min_lr_ratio: null,
  warmup_style: "constant",
  total_training_steps: 10,
  weight_decay: 0.01,
};

test("constant schedule: linear warmup from 0, then the base lr (lr_warmup_steps wins over the ratio)", (t) => {
  const o = { ...base, lr_warmup_steps: 2, lr_warmup_steps_ratio: 0.5 };
  t.is(warmupSteps(o), 2);
  t.deepEqual(
    [0, 1, 2, 3, 9].map((s) => lrMultiplier(o, s)),
    [0, 0.5, 1, 1, 1],
  );
  t.is(warmupSteps({ ...base, lr_warmup_steps_ratio: 0.3 }), 3, "floor(0.3 x 10 total steps)");
  t.is(learningRate({ ...base, lr_warmup_steps_ratio: 0 }, 0), 1e-3, "no warmup: full lr at the first step");
});

test("cosine schedule: warmup, then from 1 down to min_lr_ratio at total_training_steps", (t) => {
  const o = { ...base, warmup_style: "cosine", lr_warmup_steps: 2, min_lr_ratio: 0.1 };
  t.is(lrMultiplier(o, 1), 0.5);
  t.is(lrMultiplier(o, 2), 1);
  t.true(Math.abs(lrMultiplier(o, 6) - 0.55) < 1e-12, "half way: (1 + 0.1) / 2");
  t.true(Math.abs(lrMultiplier(o, 10) - 0.1) < 1e-12);
  t.true(Math.abs(lrMultiplier({ ...o, min_lr_ratio: null }, 10)) < 1e-12, "min_lr_ratio null is 0");
  t.throws(() => lrMultiplier({ ...o, total_training_steps: -1 }, 5), { message: /total_training_steps/ });
  t.throws(() => lrMultiplier({ ...o, warmup_style: "linear" }, 5), { message: /warmup_style "linear"/ });
});

test("AdamW with global-norm clipping matches torch.optim.AdamW + clip_grad_norm_ (fixture)", (t) => {
  const p = Float32Array.from(ref.p0);
  const opt = new ShardedAdamW(p.length, { ...base, weight_decay: 0.1, betas: [0.9, 0.999], eps: 1e-8 });
  ref.grads.forEach((g, i) => {
    const norm = Math.hypot(...g);
    t.true(Math.abs(norm - ref.norms[i]!) < 1e-5 * norm);
    const c = clipCoefficient(norm, 1.0);
    opt.update(
      p,
      Float32Array.from(g, (x) => x * c),
      ref.lrs[i]!,
    );
  });
  for (let i = 0; i < p.length; i++) {
    t.true(Math.abs(p[i]! - ref.p[i]!) < 1e-6, `param ${i}: ${p[i]} vs ${ref.p[i]}`);
    t.true(Math.abs(opt.expAvg[i]! - ref.exp_avg[i]!) < 1e-6);
    t.true(Math.abs(opt.expAvgSq[i]! - ref.exp_avg_sq[i]!) < 1e-6);
  }
  t.is(opt.step, 3);
  t.is(clipCoefficient(0.5, 1), 1, "no clipping under the bound");
  t.is(clipCoefficient(10, 0), 1, "grad_clip <= 0 turns clipping off");
});

test("the flat layout round-trips parameters; shards written by 3 ranks load back whole", (t) => {
  const values = new Map([
    ["a", Float32Array.from([1, 2, 3])],
    ["b", Float32Array.from([4, 5])],
    ["c", Float32Array.from([6, 7, 8, 9, 10])],
  ]);
  const layout = FlatLayout.of(values);
  const flat = layout.flatten(values);
  t.deepEqual(Array.from(flat), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
  t.deepEqual(Array.from(layout.unflatten(flat).get("b")!), [4, 5]);
  t.throws(() => layout.flatten(new Map([["a", new Float32Array(3)]])), {
    message: /parameter b is missing/,
  });

  const dir = mkdtempSync(join(tmpdir(), "torl-shards-"));
  for (let r = 0; r < 3; r++) {
    const { start, end } = shardRange(flat.length, 3, r);
    const p = flat.slice(start, end);
    writeShard(
      dir,
      {
        rank: r,
        worldSize: 3,
        start,
        end,
        total: flat.length,
        adamStep: 4,
        schedulerStep: 2,
        layout: layout.entries.map((e) => [e.name, e.size]),
      },
      p,
      p.map((x) => x * 10),
      p.map((x) => x * 100),
    );
  }
  const full = readAllShards(dir);
  t.deepEqual(Array.from(full.params), Array.from(flat));
  t.deepEqual(
    Array.from(full.expAvgSq),
    Array.from(flat, (x) => x * 100),
  );
  t.is(full.adamStep, 4);
  t.is(full.schedulerStep, 2);
  t.throws(() => readAllShards(join(dir, "missing")), { instanceOf: CheckpointError });
});

test("a clipped step of a large shard allocates nothing of its size on the JS heap", (t) => {
  // 16M values with a JS heap of 96 MB: the shard's float32 arrays live outside that heap, a JS array of
  // its values (as Float32Array.from(g, f) builds one) does not fit (the real-size probe died of it)
  const code = `import { ShardedParameters } from "./src/workers/sharded-parameters.ts";
    const n = 16 * 1024 * 1024;
    const optim = ${JSON.stringify(base)};
    const s = new ShardedParameters(new Map([["w", new Float32Array(n).fill(0.5)]]), { rank: 0, worldSize: 1 }, optim);
    const g = new Float32Array(n).fill(1);
    const norm = await s.step(g, 1e-3, 1.0);
    console.log(JSON.stringify({ norm, g0: g[0], p0: s.params[0] }));`;
  const r = spawnSync(
    process.execPath,
    ["--max-old-space-size=96", "--import=tsx", "--input-type=module", "-e", code],
    {
      cwd: join(import.meta.dirname, "..", ".."),
      encoding: "utf8",
    },
  );
  t.is(r.status, 0, r.stderr.slice(-2000));
  const out = JSON.parse(r.stdout.trim().split("\n").at(-1)!);
  t.is(out.norm, 4096); // sqrt(16M)
  // clipping is folded into the AdamW pass: the gradient is read, not rescaled in a pass of its own
  t.is(out.g0, 1, "the gradient array is left as it is");
  // the step is AdamW's on the clipped gradient, bit for bit
  const expected = { p: Float32Array.of(0.5), m: new Float32Array(1), v: new Float32Array(1) };
  const clipped = Float32Array.of(1 * clipCoefficient(4096, 1.0));
  const o = new ShardedAdamW(1, base);
  adamwLoop(
    expected.p,
    clipped,
    expected.m,
    expected.v,
    expected.p,
    1e-3,
    o.beta1,
    o.beta2,
    o.eps,
    o.weightDecay,
    1,
  );
  t.is(out.p0, expected.p[0], "the step is AdamW's on the clipped gradient");
});
