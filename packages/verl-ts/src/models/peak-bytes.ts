/**
 * Peak tensor memory of a computation, counted by data buffer. tf.memory().numBytes counts every tensor
 * handle at its full size, so a clone, a reshape or a tensor a gradient tape saves (all of which share
 * the data of another) would count twice; here a buffer counts once, from the moment a kernel or an
 * upload creates it until the backend frees it.
 */
import * as tf from "@tensorflow/tfjs";
import { tokenLogProbs } from "./logprobs.js";
import type { Qwen2Model } from "./qwen2.js";
import type { TokenBatch } from "./token-batch.js";

/** The two engine methods every data buffer passes through (tfjs-core's Engine). */
interface BufferTrackingEngine {
  state: { tensorInfo: WeakMap<object, unknown> };
  trackTensor(t: tf.Tensor, backend: unknown): void;
  removeDataId(dataId: object, backend: unknown): void;
}

const ELEMENT_BYTES: Partial<Record<tf.DataType, number>> = { float32: 4, int32: 4, bool: 1, complex64: 8 };

/** What peakBytesDuring saw: the buffers created and freed while `f` ran, in order. */
export interface BufferTrace<T> {
  result: T;
  /** The most bytes held at once by buffers created while `f` ran (earlier ones, e.g. the parameters, excluded). */
  peak: number;
  /** The same peak, not counting the buffers in `except` (for instance gradients `f` returned). */
  peakExcept(except: ReadonlySet<object>): number;
}

/** The peak bytes of the data buffers created while `f` runs (see the file comment). */
export async function peakBytesDuring<T>(f: () => T | Promise<T>): Promise<BufferTrace<T>> {
  const engine = tf.engine() as unknown as BufferTrackingEngine;
  const track = engine.trackTensor;
  const remove = engine.removeDataId;
  const sizes = new Map<object, number>();
  // +bytes when a buffer is created, -bytes when it is freed, with its data id
  const events: [object, number][] = [];
  engine.trackTensor = function (t, backend) {
    const known = engine.state.tensorInfo.has(t.dataId);
    track.call(this, t, backend);
    if (!known && !sizes.has(t.dataId)) {
      const bytes = t.size * (ELEMENT_BYTES[t.dtype] ?? 0);
      sizes.set(t.dataId, bytes);
      events.push([t.dataId, bytes]);
    }
  };
  engine.removeDataId = function (dataId, backend) {
    remove.call(this, dataId, backend);
    const bytes = sizes.get(dataId);
    if (bytes !== undefined) {
      sizes.delete(dataId);
      events.push([dataId, -bytes]);
    }
  };
  let result: T;
  try {
    result = await f();
  } finally {
    engine.trackTensor = track;
    engine.removeDataId = remove;
  }
  const peakExcept = (except: ReadonlySet<object>) => {
    let live = 0;
    let peak = 0;
    for (const [id, bytes] of events) {
      if (except.has(id)) continue;
      live += bytes;
      peak = Math.max(peak, live);
    }
    return peak;
  };
  return { result, peak: peakExcept(new Set()), peakExcept };
}

/**
 * Peak bytes of one forward + backward of `batch` (the summed log-probs, gradients of every parameter):
 * `peak` counts every buffer the pass creates, `activations` all but the parameters' gradients it
 * returns (those are training state, not activations).
 */
export async function forwardBackwardPeak(
  model: Qwen2Model,
  batch: TokenBatch,
): Promise<{ peak: number; activations: number }> {
  const vars = model.variables();
  const gradients = new Set<object>();
  const trace = await peakBytesDuring(() => {
    const { value, grads } = tf.variableGrads(
      () => tf.sum(tokenLogProbs(model, batch).logProbs) as tf.Scalar,
      vars,
    );
    value.dispose();
    for (const g of Object.values(grads)) {
      gradients.add(g.dataId);
      g.dispose();
    }
  });
  return { peak: trace.peak, activations: trace.peakExcept(gradients) };
}
