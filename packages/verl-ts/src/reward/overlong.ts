/**
 * DAPO's overlong reward shaping (reward_model.overlong_buffer): a response that runs into the last
 * `len` tokens before data.max_response_length loses reward linearly, up to penalty_factor at the limit:
 *   expected = max_response_length - len
 *   penalty  = min(0, -(length - expected) / len * penalty_factor)
 * added to the sequence score (where it lies on the last response token). Length counts every response
 * token, tool observations included.
 */
import type { DataProto } from "../protocol/data-proto.js";
import type { BatchTensor } from "../protocol/tensor.js";

export interface OverlongBuffer {
  len: number;
  penaltyFactor: number;
  maxResponseLength: number;
}

export class OverlongBufferError extends Error {
  override name = "OverlongBufferError";
}

export function checkOverlongBuffer(b: OverlongBuffer): void {
  if (!(Number.isInteger(b.len) && b.len > 0 && b.len <= b.maxResponseLength))
    throw new OverlongBufferError(
      `reward_model.overlong_buffer.len must be an integer in [1, data.max_response_length=${b.maxResponseLength}], got ${b.len}`,
    );
  if (!(b.penaltyFactor >= 0))
    throw new OverlongBufferError(
      `reward_model.overlong_buffer.penalty_factor must be >= 0, got ${b.penaltyFactor}`,
    );
}

/** The (non-positive) reward added to a response of `length` tokens. */
export function overlongPenalty(length: number, b: OverlongBuffer): number {
  const expected = b.maxResponseLength - b.len;
  // "+ 0" turns Math.min's -0 (a response inside the budget) into 0
  return Math.min(0, (-(length - expected) / b.len) * b.penaltyFactor) + 0;
}

/**
 * Adds each row's penalty to a scored batch in place: to its `score` and to token_level_scores on the
 * row's last response token (where the outcome score lies). `responseMask` [B, R] gives the lengths.
 * Adds reward/overlong_penalty/mean and reward/overlong_ratio (share of penalised rows) to
 * metaInfo.reward_metrics.
 */
export function applyOverlongPenalty(
  responseMask: BatchTensor,
  scored: DataProto,
  buffer: OverlongBuffer,
): void {
  checkOverlongBuffer(buffer);
  const tls = scored.tensor("token_level_scores");
  const [B, R] = responseMask.shape as [number, number];
  const score = [...scored.column<number>("score")];
  let total = 0;
  let hit = 0;
  for (let b = 0; b < B; b++) {
    let length = 0;
    let last = -1;
    for (let t = 0; t < R; t++) {
      if (Number(responseMask.data[b * R + t])) {
        length++;
        last = t;
      }
    }
    const penalty = overlongPenalty(length, buffer);
    if (penalty < 0 && last >= 0) {
      tls.data[b * R + last] = Number(tls.data[b * R + last]) + penalty;
      score[b] = score[b]! + penalty;
      hit++;
      total += penalty;
    }
  }
  scored.nonTensorBatch.score = score;
  scored.metaInfo.reward_metrics = {
    ...((scored.metaInfo.reward_metrics as Record<string, number> | undefined) ?? {}),
    "reward/overlong_penalty/mean": total / Math.max(1, B),
    "reward/overlong_ratio": hit / Math.max(1, B),
  };
}
