/** The SwiGLU MLP: down(silu(gate(x)) * up(x)) (the gate one native kernel where they run). */
import * as tf from "@tensorflow/tfjs";
import { type LinearWeight, linear } from "./linear.js";
import { nativeSwiglu } from "./native-layers.js";
import { nativeMatmulActive } from "./native-state.js";

/** A layer's MLP weights, [in, out] each. */
export interface MlpWeights {
  gate: LinearWeight;
  up: LinearWeight;
  down: LinearWeight;
}

export function mlp(x: tf.Tensor2D, w: MlpWeights): tf.Tensor2D {
  const gate = linear(x, w.gate);
  const up = linear(x, w.up);
  const gated = nativeMatmulActive(tf.getBackend())
    ? nativeSwiglu(gate, up)
    : (tf.mul(tf.mul(gate, tf.sigmoid(gate)), up) as tf.Tensor2D);
  return linear(gated, w.down);
}
