/**
 * The weight bytes a model holds between passes in each storage dtype, measured on real models: the
 * float32 model's resident tensors (tf.memory) against the bf16 model's host arrays (16-bit patterns).
 * `bench memory` reports them as weight_bytes_fp32 and weight_bytes_bf16.
 */
import * as tf from "@tensorflow/tfjs";
import type { Qwen2Config } from "./config.js";
import { Qwen2Model } from "./qwen2.js";

export interface WeightBytesFigures {
  parameters: number;
  /** Bytes a float32 model holds between passes (its weight tensors). */
  weight_bytes_fp32: number;
  /** Bytes a bfloat16 model holds between passes (host arrays; no tensor). */
  weight_bytes_bf16: number;
  /**
   * tf.memory() growth when each model is built (its weights plus the small rotary table): the float32
   * weights sit in tensors, the bf16 ones do not.
   */
  model_tensor_bytes_fp32: number;
  model_tensor_bytes_bf16: number;
}

/** Builds the same model (random unless `values` are given) in float32 and in bfloat16; measures what each holds. */
export function measureWeightBytes(
  config: Qwen2Config,
  values: Map<string, Float32Array> = Qwen2Model.randomParameters(config, { seed: 1 }),
): WeightBytesFigures {
  const held = (dtype: "float32" | "bfloat16") => {
    const before = tf.memory().numBytes;
    const model = new Qwen2Model(config, values, { dtype, trainable: false });
    const tensorBytes = tf.memory().numBytes - before;
    const bytes = model.weightBytes();
    const parameters = model.numParameters();
    model.dispose();
    return { bytes, tensorBytes, parameters };
  };
  const fp32 = held("float32");
  const bf16 = held("bfloat16");
  return {
    parameters: fp32.parameters,
    weight_bytes_fp32: fp32.bytes,
    weight_bytes_bf16: bf16.bytes,
    model_tensor_bytes_fp32: fp32.tensorBytes,
    model_tensor_bytes_bf16: bf16.tensorBytes,
  };
}
