import { readFileSync } from "node:fs";
import { join } from "node:path";
import * as tf from "@tensorflow/tfjs";
import test from "ava";
import { checkTrainerConfig, loadTrainerConfig, selectBackend, tokenLogProbs } from "../../src/index.js";
import {
  adapterSpecs,
  initialAdapterValues,
  LORA_TARGET_MODULES,
  type LoraConfig,
  loraConfigOf,
  PEFT_PREFIX,
  readPeftAdapterConfig,
  readPeftAdapterValues,
} from "../../src/models/lora.js";
import { loadModelValues } from "../../src/models/pretrained.js";
import { Qwen2Model } from "../../src/models/qwen2.js";
import { fixtureBatch } from "./helpers.js";
import { threeLayerTestConfig } from "./tiny-config.js";

const FIX = join(import.meta.dirname, "..", "fixtures", "models");
const ADAPTER_DIR = join(FIX, "qwen2-tiny-lora");
const expected = JSON.parse(readFileSync(join(ADAPTER_DIR, "expected.json"), "utf8"));

test.before(async () => {
  await selectBackend({ backend: "wasm", log: null });
});

const batch = fixtureBatch(expected);
const { batch: B, length: L } = batch;

function maxRelErr(got: ArrayLike<number>, want: ArrayLike<number>): number {
  let err = 0;
  let ref = 0;
  for (let i = 0; i < want.length; i++) {
    err = Math.max(err, Math.abs(got[i]! - want[i]!));
    ref = Math.max(ref, Math.abs(want[i]!));
  }
  return err / Math.max(ref, 1e-12);
}

const ALL: LoraConfig = { rank: 4, alpha: 8, targetModules: [...LORA_TARGET_MODULES] };

test("LoRA with zero-initialised B computes the base model exactly (forward and greedy log-probs)", (t) => {
  const config = threeLayerTestConfig();
  const values = Qwen2Model.randomParameters(config, { seed: 3 });
  const base = new Qwen2Model(config, values);
  const adapted = new Qwen2Model(config, values, { lora: { config: ALL } });
  const ids = Int32Array.from({ length: 2 * 6 }, (_, i) => (i * 7 + 3) % 40);
  const b = { ids, mask: Uint8Array.from([1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1]), batch: 2, length: 6 };
  const want = tf.tidy(() => base.forward(b)).dataSync();
  const got = tf.tidy(() => adapted.forward(b)).dataSync();
  t.deepEqual(Array.from(got), Array.from(want));
  // the A matrices are not zero: the equality is B's doing
  const a = adapted.lora!.specs.find((s) => s.kind === "A")!;
  t.true(
    initialAdapterValues(config, ALL)
      .get(a.name)!
      .some((v) => v !== 0),
  );
  base.dispose();
  adapted.dispose();
});

test("LoRA adapters only are trained: the base's variables are not trainable, the adapters' are", (t) => {
  const config = threeLayerTestConfig();
  const m = new Qwen2Model(config, Qwen2Model.randomParameters(config), {
    lora: { config: { rank: 2, alpha: 4, targetModules: ["q_proj", "v_proj"] } },
  });
  t.deepEqual(m.trainedSpecs.map((s) => s.name).slice(0, 4), [
    "model.layers.0.self_attn.q_proj.lora_A.weight",
    "model.layers.0.self_attn.q_proj.lora_B.weight",
    "model.layers.0.self_attn.v_proj.lora_A.weight",
    "model.layers.0.self_attn.v_proj.lora_B.weight",
  ]);
  t.is(m.trainedSpecs.length, 3 * 2 * 2);
  t.true(m.variables().every((v) => !v.trainable));
  t.true(m.variables(m.trainedSpecs.map((s) => s.name)).every((v) => v.trainable));
  m.dispose();
});

test("LoRA: log-probs and adapter gradients match PEFT's LoRA in PyTorch (qwen2-tiny, rank 4, all-linear)", (t) => {
  const { lora, baseModel } = readPeftAdapterConfig(ADAPTER_DIR);
  t.deepEqual(lora, { rank: 4, alpha: 8, targetModules: [...LORA_TARGET_MODULES] });
  const { config, values } = loadModelValues(baseModel);
  const adapters = readPeftAdapterValues(ADAPTER_DIR, config, lora);
  for (const checkpointing of [false, true]) {
    const model = new Qwen2Model(config, values, { lora: { config: lora, values: adapters } });
    model.gradientCheckpointing = checkpointing;
    const weights = tf.tensor2d(expected.weights.flat() as number[], [B, L]);
    const names = model.trainedSpecs.map((s) => s.name);
    const vars = model.variables(names);
    let logProbs: Float32Array | undefined;
    const { value, grads } = tf.variableGrads(() => {
      const sc = tokenLogProbs(model, batch);
      logProbs = sc.logProbs.dataSync() as Float32Array;
      return tf.sum(tf.mul(sc.logProbs, weights)) as tf.Scalar;
    }, vars);
    const lpErr = Math.max(
      ...Array.from(logProbs!, (v, i) =>
        // tokens after a real token (one after padding only is scored from nothing)
        batch.mask[i] && i % L > 0 && batch.mask[i - 1]
          ? Math.abs(v - (expected.log_probs.flat()[i] as number))
          : 0,
      ),
    );
    t.true(lpErr < 1e-4, `log-probs max |diff| ${lpErr}`);
    t.true(Math.abs(value.dataSync()[0]! - expected.loss) < 1e-4 * Math.abs(expected.loss));
    const specs = adapterSpecs(config, lora);
    t.is(Object.keys(expected.grads).length, specs.length);
    for (const [k, s] of specs.entries()) {
      const g = tf.transpose(grads[vars[k]!.name]!); // ours [in, r] / [r, out] -> PEFT's [r, in] / [out, r]
      const err = maxRelErr(g.dataSync(), expected.grads[PEFT_PREFIX + s.name]);
      t.true(err < 1e-3, `${s.name} (checkpointing ${checkpointing}): relative error ${err}`);
    }
    model.dispose();
  }
});

test("LoRA keys: rank 0 is full fine-tuning; all-linear and lists name the modules", (t) => {
  t.is(loraConfigOf({ lora_rank: 0, lora_alpha: 16, target_modules: "all-linear" }), null);
  t.deepEqual(loraConfigOf({ lora_rank: 8, lora_alpha: 32, target_modules: ["v_proj", "q_proj"] }), {
    rank: 8,
    alpha: 32,
    targetModules: ["q_proj", "v_proj"],
  });
});

test("LoRA keys: invalid values are refused naming the key", (t) => {
  const issues = (overrides: string[]) =>
    checkTrainerConfig(loadTrainerConfig({ overrides })).map((i) => i.message);
  t.deepEqual(issues(["actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.model.lora_alpha=16"]), []);
  const cases: [string[], RegExp][] = [
    [
      ["actor_rollout_ref.model.lora_rank=-1"],
      /^actor_rollout_ref\.model\.lora_rank must be an integer >= 0/,
    ],
    [
      ["actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.lora_alpha=0"],
      /lora_alpha must be a number > 0/,
    ],
    [["actor_rollout_ref.model.lora_alpha=32"], /lora_alpha is 32 but lora_rank is 0/],
    [["actor_rollout_ref.model.target_modules=[q_proj]"], /target_modules is set but lora_rank is 0/],
    [
      ["actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.target_modules=[q_proj,qkv_proj]"],
      /target_modules names "qkv_proj", not a linear layer/,
    ],
    [
      ["actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.target_modules=all"],
      /must be "all-linear" or a list/,
    ],
    [["actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.target_modules=[]"], /non-empty list/],
    [
      ["actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.ref.fsdp_config.param_offload=true"],
      /^actor_rollout_ref\.ref\.fsdp_config\.param_offload is true but with lora_rank > 0/,
    ],
    [
      [
        "actor_rollout_ref.model.lora_rank=4",
        "actor_rollout_ref.ref.fsdp_config.reshard_after_forward=false",
      ],
      /^actor_rollout_ref\.ref\.fsdp_config\.reshard_after_forward is false but with lora_rank > 0/,
    ],
  ];
  for (const [overrides, want] of cases) {
    const got = issues(overrides);
    t.true(
      got.some((m) => want.test(m)),
      `${overrides.join(" ")}: ${JSON.stringify(got)}`,
    );
  }
  // and the worker's reading of the keys refuses them too
  t.throws(() => loraConfigOf({ lora_rank: 2, lora_alpha: 4, target_modules: ["lm_head"] }), {
    message: /target_modules names "lm_head"/,
  });
});
