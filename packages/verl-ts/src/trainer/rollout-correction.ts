/**
 * veRL's rollout IS correction on a step's batch: with algorithm.rollout_is_threshold set and the
 * batch holding rollout_log_probs (the log-probs of the responses under the weights that generated them,
 * which the separate rollout workers of trainer.mode one_step_off / fully_async compute), the mismatch/
 * metrics; with algorithm.rollout_is, also rollout_is_weights for the policy loss and mask mode's (and the
 * veto's) rejections taken out of loss_mask.
 */

import type { MaskMatrix, ScoreMatrix } from "../algorithms/masked.js";
import { computeRolloutIsWeights } from "../algorithms/rollout-is.js";
import type { TrainerConfig } from "../config/types.js";
import type { DataProto } from "../protocol/data-proto.js";

export function applyRolloutCorrection(
  batch: DataProto,
  alg: TrainerConfig["algorithm"],
): Record<string, number> {
  if (alg.rollout_is_threshold === null || !batch.batch.rollout_log_probs) return {};
  const mask = batch.tensor<Uint8Array | Float32Array>("loss_mask");
  const r = computeRolloutIsWeights(
    batch.tensor("old_log_probs") as ScoreMatrix,
    batch.tensor("rollout_log_probs") as ScoreMatrix,
    mask as MaskMatrix,
    {
      level: alg.rollout_is_level,
      mode: alg.rollout_is_mode,
      threshold: alg.rollout_is_threshold,
      thresholdLower: alg.rollout_is_threshold_lower,
      vetoThreshold: alg.rollout_is_veto_threshold,
    },
  );
  if (alg.rollout_is) {
    batch.batch.rollout_is_weights = r.weights;
    for (let i = 0; i < mask.data.length; i++) mask.data[i] = r.responseMask[i]!;
  }
  return r.metrics;
}
