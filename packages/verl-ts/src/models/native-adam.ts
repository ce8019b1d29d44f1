/**
 * Adam(W) for tfjs variables in one native pass per parameter (the addon's adamw, on the wasm heap in
 * place), where tf.train.adam runs about a dozen whole-tensor kernels per parameter. `adamOptimizer`
 * picks it when the backend runs the native kernels, and tf.train.adam otherwise.
 */
import * as tf from "@tensorflow/tfjs";
import type { NativeBlas } from "@torl-ts/blas";
import { nativeMatmulActive } from "./native-state.js";
import type { WasmHeap } from "./wasm-heap.js";

/** The kernel's name in the tfjs registry (registered on wasm by installNativeMatmul). */
export const ADAMW_KERNEL = "TorlAdamW";

interface AdamWAttrs {
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  /** This update's number, from 1 (bias correction). */
  step: number;
}

/**
 * Inputs param, grad, expAvg, expAvgSq (float32, one shape); output: the updated parameter. The moments
 * are updated IN PLACE: only the optimizer that made them may pass them.
 */
export function wasmAdamWKernel(blas: NativeBlas): tf.KernelFunc {
  return ({ inputs, attrs, backend }) => {
    const { param, grad, expAvg, expAvgSq } = inputs as Record<string, tf.TensorInfo>;
    const a = attrs as unknown as AdamWAttrs;
    for (const t of [param!, grad!, expAvg!, expAvgSq!]) {
      if (t.dtype !== "float32") throw new Error(`${ADAMW_KERNEL} runs on float32 only, got ${t.dtype}`);
      if (!tf.util.arraysEqual(t.shape, param!.shape))
        throw new Error(`${ADAMW_KERNEL}: shapes [${t.shape}] and [${param!.shape}] differ`);
    }
    const wasm = backend as unknown as WasmHeap;
    // Allocate first: growing the wasm heap detaches views taken before it.
    const out = wasm.makeOutput([...param!.shape], "float32");
    blas.adamw(
      wasm.typedArrayFromHeap(param!),
      wasm.typedArrayFromHeap(grad!),
      wasm.typedArrayFromHeap(expAvg!),
      wasm.typedArrayFromHeap(expAvgSq!),
      wasm.typedArrayFromHeap(out),
      a.lr,
      a.beta1,
      a.beta2,
      a.eps,
      a.weightDecay,
      a.step,
    );
    return out;
  };
}

/**
 * Adam (weight decay 0) or AdamW with tf.train.adam's arithmetic: p <- p (1 - lr wd) - lr m^ / (sqrt(v^) + eps),
 * bias-corrected moments. Runs only where the backend has the native kernel (see adamOptimizer).
 */
export class FusedAdamOptimizer extends tf.Optimizer {
  static get className(): string {
    return "TorlFusedAdam";
  }
  private readonly moments = new Map<string, { expAvg: tf.Tensor; expAvgSq: tf.Tensor }>();

  constructor(
    readonly learningRate: number,
    readonly beta1 = 0.9,
    readonly beta2 = 0.999,
    readonly epsilon: number = tf.backend().epsilon(),
    readonly weightDecay = 0,
  ) {
    super();
  }

  override applyGradients(
    variableGradients: tf.NamedTensorMap | Array<{ name: string; tensor: tf.Tensor }>,
  ): void {
    const pairs = Array.isArray(variableGradients)
      ? variableGradients.map((g) => [g.name, g.tensor] as const)
      : Object.entries(variableGradients);
    const attrs: AdamWAttrs = {
      lr: this.learningRate,
      beta1: this.beta1,
      beta2: this.beta2,
      eps: this.epsilon,
      weightDecay: this.weightDecay,
      step: this.iterations + 1,
    };
    tf.tidy(() => {
      for (const [name, grad] of pairs) {
        const variable = tf.engine().registeredVariables[name];
        if (!variable) throw new Error(`FusedAdamOptimizer: no variable named '${name}'`);
        if (!variable.trainable) continue;
        let m = this.moments.get(name);
        if (!m) {
          m = { expAvg: tf.keep(tf.zerosLike(variable)), expAvgSq: tf.keep(tf.zerosLike(variable)) };
          this.moments.set(name, m);
        }
        const inputs = { param: variable, grad, expAvg: m.expAvg, expAvgSq: m.expAvgSq };
        const updated = tf
          .engine()
          .runKernel(
            ADAMW_KERNEL,
            inputs as unknown as tf.NamedTensorMap,
            attrs as unknown as tf.NamedAttrMap,
          );
        variable.assign(updated as tf.Tensor);
      }
    });
    this.incrementIterations();
  }

  override dispose(): void {
    super.dispose();
    for (const m of this.moments.values()) tf.dispose([m.expAvg, m.expAvgSq]);
    this.moments.clear();
  }

  override getConfig(): tf.serialization.ConfigDict {
    return {
      learningRate: this.learningRate,
      beta1: this.beta1,
      beta2: this.beta2,
      epsilon: this.epsilon,
      weightDecay: this.weightDecay,
    };
  }
}

/**
 * Adam with tf.train.adam's arguments: the fused native update where the current backend runs the
 * native kernels, else tf.train.adam itself (same arithmetic).
 */
export function adamOptimizer(
  learningRate: number,
  beta1 = 0.9,
  beta2 = 0.999,
  epsilon?: number,
): tf.Optimizer {
  if (nativeMatmulActive(tf.getBackend()))
    return new FusedAdamOptimizer(learningRate, beta1, beta2, epsilon ?? tf.backend().epsilon());
  return tf.train.adam(learningRate, beta1, beta2, epsilon);
}
