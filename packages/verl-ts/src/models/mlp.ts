/** The SwiGLU MLP: down(silu(gate(x)) * up(x)). */
import * as tf from "@tensorflow/tfjs";
import { linear } from "./linear.js";

/** A layer's MLP weights, [in, out] each. */
export interface MlpWeights {
  gate: tf.Tensor;
  up: tf.Tensor;
  down: tf.Tensor;
}

export function mlp(x: tf.Tensor2D, w: MlpWeights): tf.Tensor2D {
  const gate = linear(x, w.gate);
  const up = linear(x, w.up);
  return linear(tf.mul(tf.mul(gate, tf.sigmoid(gate)), up), w.down);
}
