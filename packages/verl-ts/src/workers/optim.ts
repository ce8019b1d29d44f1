/**
 * The actor's optimizer, FSDP-style: AdamW over this rank's shard of the flat parameter vector, with
 * its exp_avg / exp_avg_sq shards, global gradient-norm clipping and veRL's learning-rate schedules.
 */
import { nativeBlas } from "../models/native-blas.js";

/** The optimizer keys of actor_rollout_ref.actor.optim (veRL's names). */
export interface OptimSettings {
  lr: number;
  lr_warmup_steps: number;
  lr_warmup_steps_ratio: number;
  min_lr_ratio: number | null;
  warmup_style: "constant" | "cosine" | string;
  total_training_steps: number;
  weight_decay: number;
  betas?: number[];
  eps?: number;
}

/** A setting the optimizer cannot use (names the key). */
export class OptimConfigError extends Error {
  override name = "OptimConfigError";
}

/** Warmup steps: lr_warmup_steps when > 0, else floor(lr_warmup_steps_ratio x total_training_steps). */
export function warmupSteps(o: OptimSettings): number {
  if (o.lr_warmup_steps > 0) return o.lr_warmup_steps;
  return Math.floor(o.lr_warmup_steps_ratio * Math.max(0, o.total_training_steps));
}

/**
 * The learning-rate multiplier at scheduler step `step` (0 for the first update), as veRL's schedules:
 * - constant: step / warmup during warmup, then 1;
 * - cosine: step / warmup during warmup, then with p = (step - warmup) / max(1, total - warmup) and
 *   m = min_lr_ratio: max(0, (1 - m)/2 cos(pi p) + (1 + m)/2).
 */
export function lrMultiplier(o: OptimSettings, step: number): number {
  const warm = warmupSteps(o);
  if (step < warm) return step / Math.max(1, warm);
  if (o.warmup_style === "constant") return 1;
  if (o.warmup_style === "cosine") {
    const total = o.total_training_steps;
    if (!(total > 0)) {
      throw new OptimConfigError(
        "actor_rollout_ref.actor.optim.total_training_steps must be > 0 for warmup_style=cosine",
      );
    }
    const m = o.min_lr_ratio ?? 0;
    const p = (step - warm) / Math.max(1, total - warm);
    return Math.max(0, ((1 - m) / 2) * Math.cos(Math.PI * p) + (1 + m) / 2);
  }
  throw new OptimConfigError(
    `actor_rollout_ref.actor.optim.warmup_style "${o.warmup_style}" is not one of constant, cosine`,
  );
}

/** The learning rate at scheduler step `step`. */
export function learningRate(o: OptimSettings, step: number): number {
  return o.lr * lrMultiplier(o, step);
}

/**
 * One AdamW update with the native addon's signature (NativeBlas.adamw): moments in place, the new
 * parameters into `out` (which may be `param`), each value computed in double and stored as float; each
 * gradient value is first scaled by `gradScale` and stored as float (clipping, without a pass of its own).
 */
export function adamwLoop(
  param: Float32Array,
  grad: Float32Array,
  m: Float32Array,
  v: Float32Array,
  out: Float32Array,
  lr: number,
  b1: number,
  b2: number,
  eps: number,
  weightDecay: number,
  step: number,
  gradScale = 1,
): void {
  const c1 = 1 - b1 ** step;
  const c2 = Math.sqrt(1 - b2 ** step);
  const decay = 1 - lr * weightDecay;
  const stepSize = lr / c1;
  for (let i = 0; i < param.length; i++) {
    const g = Math.fround(grad[i]! * gradScale);
    m[i] = b1 * m[i]! + (1 - b1) * g;
    v[i] = b2 * v[i]! + (1 - b2) * g * g;
    out[i] = param[i]! * decay - (stepSize * m[i]!) / (Math.sqrt(v[i]!) / c2 + eps);
  }
}

/** State of a ShardedAdamW, for checkpoints. */
export interface AdamState {
  /** Updates applied so far (bias correction uses step + 1). */
  step: number;
  expAvg: Float32Array;
  expAvgSq: Float32Array;
}

/**
 * AdamW (decoupled weight decay, as torch.optim.AdamW) over one shard:
 *   p <- p (1 - lr wd);  m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2
 *   p <- p - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
 */
export class ShardedAdamW {
  readonly beta1: number;
  readonly beta2: number;
  readonly eps: number;
  readonly weightDecay: number;
  step = 0;
  readonly expAvg: Float32Array;
  readonly expAvgSq: Float32Array;

  constructor(shardSize: number, o: OptimSettings) {
    const betas = o.betas ?? [0.9, 0.999];
    this.beta1 = betas[0] ?? 0.9;
    this.beta2 = betas[1] ?? 0.999;
    this.eps = o.eps ?? 1e-8;
    this.weightDecay = o.weight_decay;
    this.expAvg = new Float32Array(shardSize);
    this.expAvgSq = new Float32Array(shardSize);
  }

  /** Bytes of optimizer state this rank holds. */
  get stateBytes(): number {
    return this.expAvg.byteLength + this.expAvgSq.byteLength;
  }

  /**
   * One update of `params` (this rank's shard, in place) with gradient shard `grad` times `gradScale`
   * (clipping's coefficient, applied as each value is read: `grad` is left as it is) and rate `lr`.
   */
  update(params: Float32Array, grad: Float32Array, lr: number, gradScale = 1): void {
    if (params.length !== this.expAvg.length || grad.length !== this.expAvg.length) {
      throw new RangeError(
        `AdamW shard holds ${this.expAvg.length} values, got params ${params.length} / grad ${grad.length}`,
      );
    }
    this.step += 1;
    // One native pass where the addon loads; the same arithmetic in JS otherwise (identical bits).
    const update = nativeBlas()?.adamw ?? adamwLoop;
    update(
      params,
      grad,
      this.expAvg,
      this.expAvgSq,
      params,
      lr,
      this.beta1,
      this.beta2,
      this.eps,
      this.weightDecay,
      this.step,
      gradScale,
    );
  }

  state(): AdamState {
    return { step: this.step, expAvg: this.expAvg, expAvgSq: this.expAvgSq };
  }

  loadState(s: AdamState): void {
    if (s.expAvg.length !== this.expAvg.length || s.expAvgSq.length !== this.expAvgSq.length) {
      throw new RangeError(
        `optimizer state holds ${s.expAvg.length} values, this shard has ${this.expAvg.length}`,
      );
    }
    this.step = s.step;
    this.expAvg.set(s.expAvg);
    this.expAvgSq.set(s.expAvgSq);
  }
}

/**
 * Clip coefficient of torch.nn.utils.clip_grad_norm_: min(1, maxNorm / (norm + 1e-6)); 1 when clipping is
 * off (maxNorm <= 0).
 */
export function clipCoefficient(norm: number, maxNorm: number): number {
  if (!(maxNorm > 0)) return 1;
  return Math.min(1, maxNorm / (norm + 1e-6));
}
