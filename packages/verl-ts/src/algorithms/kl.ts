import { AlgorithmInputError, dims2, type MaskMatrix, type ScoreMatrix, sameShape } from "./masked.js";

/** KL estimator names: k1 ("kl"), abs, k2 ("mse"), k3 ("low_var_kl"). */
export type KlPenaltyType = "kl" | "k1" | "abs" | "mse" | "k2" | "low_var_kl" | "k3";
export const KL_PENALTY_TYPES: readonly KlPenaltyType[] = [
  "kl",
  "k1",
  "abs",
  "mse",
  "k2",
  "low_var_kl",
  "k3",
];

export function checkKlPenaltyType(type: string): asserts type is KlPenaltyType {
  if (!(KL_PENALTY_TYPES as readonly string[]).includes(type)) {
    throw new AlgorithmInputError(`unknown KL penalty "${type}" (known: ${KL_PENALTY_TYPES.join(", ")})`);
  }
}

/**
 * Per-token KL estimate between the policy (logp) and the reference (ref):
 * - k1 / kl:         logp - ref
 * - abs:             |logp - ref|
 * - k2 / mse:        0.5 (logp - ref)^2
 * - k3 / low_var_kl: d = clamp(ref - logp, -20, 20); clamp(exp(d) - d - 1, -10, 10)
 */
export function klPenaltyValue(logp: number, ref: number, type: KlPenaltyType): number {
  const diff = logp - ref;
  switch (type) {
    case "kl":
    case "k1":
      return diff;
    case "abs":
      return Math.abs(diff);
    case "mse":
    case "k2":
      return 0.5 * diff * diff;
    case "low_var_kl":
    case "k3": {
      const d = Math.min(20, Math.max(-20, ref - logp));
      return Math.min(10, Math.max(-10, Math.exp(d) - d - 1));
    }
  }
}

/** klPenaltyValue over [batch, seq] matrices. */
export function klPenalty(logProb: ScoreMatrix, refLogProb: ScoreMatrix, type: KlPenaltyType): ScoreMatrix {
  checkKlPenaltyType(type);
  sameShape(logProb, refLogProb, "logProb", "refLogProb");
  const out = new Float32Array(logProb.data.length);
  for (let i = 0; i < out.length; i++) out[i] = klPenaltyValue(logProb.data[i]!, refLogProb.data[i]!, type);
  return { data: out, shape: [...logProb.shape] };
}

/** Holds the in-reward KL coefficient beta (algorithm.kl_ctrl). */
export interface KlController {
  readonly value: number;
  update(currentKl: number, nSteps: number): void;
}

/** beta stays at kl_coef. */
export class FixedKlController implements KlController {
  constructor(public value: number) {}
  update(_currentKl: number, _nSteps: number): void {}
}

/**
 * Adaptive beta (Ziegler et al.): e = clip(current_kl / target_kl - 1, -0.2, 0.2);
 * beta <- beta (1 + e n_steps / horizon).
 */
export class AdaptiveKlController implements KlController {
  constructor(
    public value: number,
    readonly targetKl: number,
    readonly horizon: number,
  ) {
    if (!(targetKl > 0) || !(horizon > 0)) {
      throw new AlgorithmInputError(`adaptive KL controller needs target_kl > 0 and horizon > 0`);
    }
  }
  update(currentKl: number, nSteps: number): void {
    const err = Math.min(0.2, Math.max(-0.2, currentKl / this.targetKl - 1));
    this.value *= 1 + (err * nSteps) / this.horizon;
  }
}

/** Builds a controller from `algorithm.kl_ctrl` ({type: fixed|adaptive, kl_coef, target_kl, horizon}). */
export function createKlController(cfg: {
  type: "fixed" | "adaptive";
  kl_coef: number;
  target_kl?: number;
  horizon?: number;
}): KlController {
  if (cfg.type === "fixed") return new FixedKlController(cfg.kl_coef);
  if (cfg.type === "adaptive")
    return new AdaptiveKlController(cfg.kl_coef, cfg.target_kl ?? 0.1, cfg.horizon ?? 10000);
  throw new AlgorithmInputError(`unknown kl_ctrl.type "${cfg.type}" (known: fixed, adaptive)`);
}

/**
 * KL as an in-reward penalty (veRL's apply_kl_penalty): kld = kl(old_logp, ref) * mask;
 * token_level_rewards = token_level_scores - beta kld; current_kl = mean_b(masked_mean_t(kld));
 * then the controller is updated with (current_kl, batch size). Returns the rewards and the metrics
 * actor/reward_kl_penalty and actor/reward_kl_penalty_coeff (beta before the update).
 */
export function applyKlPenalty(
  tokenLevelScores: ScoreMatrix,
  oldLogProb: ScoreMatrix,
  refLogProb: ScoreMatrix,
  responseMask: MaskMatrix,
  controller: KlController,
  type: KlPenaltyType = "kl",
): { tokenLevelRewards: ScoreMatrix; metrics: Record<string, number> } {
  sameShape(tokenLevelScores, responseMask, "tokenLevelScores", "responseMask");
  const [B, T] = dims2(responseMask, "responseMask");
  const kld = klPenalty(oldLogProb, refLogProb, type);
  const beta = controller.value;
  const rewards = new Float32Array(B * T);
  let klSum = 0;
  for (let b = 0; b < B; b++) {
    let s = 0;
    let m = 0;
    for (let t = 0; t < T; t++) {
      const i = b * T + t;
      const w = responseMask.data[i] as number;
      const k = kld.data[i]! * w;
      rewards[i] = tokenLevelScores.data[i]! - beta * k;
      s += k * w;
      m += w;
    }
    klSum += s / (m + 1e-8);
  }
  const currentKl = klSum / B;
  controller.update(currentKl, B);
  return {
    tokenLevelRewards: { data: rewards, shape: [B, T] },
    metrics: { "actor/reward_kl_penalty": currentKl, "actor/reward_kl_penalty_coeff": beta },
  };
}
