import type { BatchTensor } from "../protocol/tensor.js";
import { AlgorithmInputError } from "./masked.js";

/**
 * Entropy of the categorical distribution softmax(z) for every row of logits [..., V]:
 *   H = logsumexp(z) - sum_v softmax(z)_v z_v
 * Returns a tensor of shape [...] (the vocab dim removed). Computed stably with the row max.
 */
export function entropyFromLogits(logits: BatchTensor<Float32Array>): BatchTensor<Float32Array> {
  const V = logits.shape[logits.shape.length - 1];
  if (!V)
    throw new AlgorithmInputError(
      `logits need a non-empty last (vocab) dim, got [${logits.shape.join(", ")}]`,
    );
  const rows = logits.data.length / V;
  const out = new Float32Array(rows);
  const z = logits.data;
  for (let r = 0; r < rows; r++) {
    const o = r * V;
    let m = -Infinity;
    for (let v = 0; v < V; v++) if (z[o + v]! > m) m = z[o + v]!;
    let s = 0;
    let sz = 0;
    for (let v = 0; v < V; v++) {
      const e = Math.exp(z[o + v]! - m);
      s += e;
      sz += e * z[o + v]!;
    }
    out[r] = m + Math.log(s) - sz / s;
  }
  return { data: out, shape: logits.shape.slice(0, -1) };
}
