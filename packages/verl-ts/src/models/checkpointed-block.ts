/**
 * Gradient checkpointing of a decoder layer: the forward keeps only the layer's input (and the per-batch
 * mask and rotary tables it shares with the other layers); the backward recomputes the layer under a
 * tape of its own and returns the gradients of its input and weights. Activation memory of a forward +
 * backward then holds one hidden state per layer plus one layer's intermediates, instead of every
 * layer's intermediates. The recompute runs the same kernels on the same values, so the gradients are
 * those of the plain forward.
 */
import * as tf from "@tensorflow/tfjs";
import type { SequenceAttention } from "./attention.js";
import { type BlockWeights, decoderBlock } from "./decoder-block.js";

/** The weights of a block as a list (customGrad takes tensors only), and back. */
function weightList(w: BlockWeights): tf.Tensor[] {
  const a = w.attention;
  const list = [w.inputNorm, a.q, a.k, a.v, a.o, w.postNorm, w.mlp.gate, w.mlp.up, w.mlp.down];
  if (a.qBias && a.kBias && a.vBias) list.push(a.qBias, a.kBias, a.vBias);
  return list;
}

function blockWeightsOf(list: tf.Tensor[]): BlockWeights {
  const [inputNorm, q, k, v, o, postNorm, gate, up, down, qBias, kBias, vBias] = list as [
    tf.Tensor,
    tf.Tensor,
    tf.Tensor,
    tf.Tensor,
    tf.Tensor,
    tf.Tensor,
    tf.Tensor,
    tf.Tensor,
    tf.Tensor,
    tf.Tensor?,
    tf.Tensor?,
    tf.Tensor?,
  ];
  return { inputNorm, attention: { q, k, v, o, qBias, kBias, vBias }, postNorm, mlp: { gate, up, down } };
}

/** The engine's tape, as far as recomputing needs it (tfjs keeps one active tape per engine). */
interface EngineTapeState {
  state: { activeTape: unknown };
}

/**
 * tf.grads inside a gradient function: the inner call starts and then clears the engine's active tape,
 * which is the outer backward's, so it is put back afterwards (the outer pass disposes its saved
 * tensors from it at the end).
 */
function gradsInsideBackward(
  f: (...xs: tf.Tensor[]) => tf.Tensor,
  xs: tf.Tensor[],
  dy: tf.Tensor,
): tf.Tensor[] {
  const engine = tf.engine() as unknown as EngineTapeState;
  const outer = engine.state.activeTape;
  try {
    return tf.grads(f)(xs, dy);
  } finally {
    engine.state.activeTape = outer;
  }
}

/** The decoder layer over a full sequence (decoderBlock), its activations recomputed in the backward. */
export function checkpointedBlock(
  x: tf.Tensor2D,
  w: BlockWeights,
  seq: SequenceAttention,
  eps: number,
): tf.Tensor2D {
  const weights = weightList(w);
  const shared = [seq.mask, seq.cosQ, seq.sinQ, seq.cosK, seq.sinK];
  const op = tf.customGrad(((...args: unknown[]) => {
    const save = args.pop() as tf.GradSaveFunc;
    const inputs = args as tf.Tensor[];
    // Saved tensors are references to the same data (no copy); the mask and tables are otherwise
    // disposed with the forward's scope.
    save([...inputs, ...shared]);
    const value = decoderBlock(inputs[0] as tf.Tensor2D, blockWeightsOf(inputs.slice(1)), seq, eps);
    return {
      value,
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const n = inputs.length;
        const [mask, cosQ, sinQ, cosK, sinK] = saved.slice(n) as tf.Tensor4D[];
        const again: SequenceAttention = {
          ...seq,
          mask: mask!,
          cosQ: cosQ!,
          sinQ: sinQ!,
          cosK: cosK!,
          sinK: sinK!,
          keysValues: undefined,
        };
        return gradsInsideBackward(
          (xi, ...ws) => decoderBlock(xi as tf.Tensor2D, blockWeightsOf(ws), again, eps),
          saved.slice(0, n),
          dy,
        );
      },
    };
  }) as any) as unknown as (...xs: tf.Tensor[]) => tf.Tensor2D;
  return op(x, ...weights);
}
