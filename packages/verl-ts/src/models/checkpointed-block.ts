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
import { tensorWeight } from "./linear.js";

/** The weights of a block as a list (customGrad takes tensors only), and back. */
function weightList(w: BlockWeights): tf.Tensor[] {
  const a = w.attention;
  const m = w.mlp;
  const list = [w.inputNorm, a.q, a.k, a.v, a.o, w.postNorm, m.gate, m.up, m.down].map(tensorWeight);
  if (a.qBias && a.kBias && a.vBias) list.push(a.qBias, a.kBias, a.vBias);
  if (a.qkNorm) list.push(a.qkNorm.q, a.qkNorm.k);
  return list;
}

/** The weights of `like` rebuilt from a list in weightList's order. */
function blockWeightsOf(list: tf.Tensor[], like: BlockWeights): BlockWeights {
  const [inputNorm, q, k, v, o, postNorm, gate, up, down, ...rest] = list as [
    tf.Tensor,
    tf.Tensor,
    tf.Tensor,
    tf.Tensor,
    tf.Tensor,
    tf.Tensor,
    tf.Tensor,
    tf.Tensor,
    tf.Tensor,
    ...tf.Tensor[],
  ];
  const a = like.attention;
  const biases = a.qBias ? { qBias: rest.shift(), kBias: rest.shift(), vBias: rest.shift() } : {};
  const qkNorm = a.qkNorm ? { q: rest[0]!, k: rest[1]!, eps: a.qkNorm.eps } : undefined;
  return { inputNorm, attention: { q, k, v, o, ...biases, qkNorm }, postNorm, mlp: { gate, up, down } };
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

/** Whether a gradient tape is recording (inside tf.grads / variableGrads, outside any kernel). */
export function tapeIsRecording(): boolean {
  return (tf.engine() as unknown as { isTapeOn(): boolean }).isTapeOn();
}

/**
 * How many checkpointed layers of a forward still need its shared tensors (mask, rotary tables) for
 * their recompute. They are kept past the forward's scope, not saved: saving copies a tensor on the
 * wasm backend, which would cost a mask per layer; the last layer to recompute frees them.
 */
const sharedUsers = new WeakMap<SequenceAttention, number>();

function sharedTensors(seq: SequenceAttention): Set<tf.Tensor> {
  return new Set([seq.mask, seq.cosQ, seq.sinQ, seq.cosK, seq.sinK]);
}

/**
 * The decoder layer over a full sequence (decoderBlock), its activations recomputed in the backward.
 * Call it under a recording tape only (tapeIsRecording): its backward frees what the forward kept.
 */
export function checkpointedBlock(
  x: tf.Tensor2D,
  w: BlockWeights,
  seq: SequenceAttention,
  eps: number,
): tf.Tensor2D {
  // The model's own weights (variables) outlive the backward, so they are used as they are, not saved;
  // others (LoRA's merged weights, made in the forward's scope) are saved.
  const weights = weightList(w);
  const saves = weights.map((t) => !(t instanceof tf.Variable));
  if (!sharedUsers.has(seq)) for (const t of sharedTensors(seq)) tf.keep(t);
  sharedUsers.set(seq, (sharedUsers.get(seq) ?? 0) + 1);
  const release = () => {
    const left = sharedUsers.get(seq)! - 1;
    sharedUsers.set(seq, left);
    if (left === 0) for (const t of sharedTensors(seq)) t.dispose();
  };
  const again: SequenceAttention = { ...seq, keysValues: undefined };
  const op = tf.customGrad(((...args: unknown[]) => {
    const save = args.pop() as tf.GradSaveFunc;
    const [input] = args as tf.Tensor2D[];
    save([input!, ...weights.filter((_, i) => saves[i])]);
    return {
      value: decoderBlock(input!, w, seq, eps),
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        let k = 1;
        const ws = weights.map((t, i) => (saves[i] ? saved[k++]! : t));
        try {
          return gradsInsideBackward(
            (xi, ...ws) => decoderBlock(xi as tf.Tensor2D, blockWeightsOf(ws, w), again, eps),
            [saved[0]!, ...ws],
            dy,
          );
        } finally {
          release();
        }
      },
    };
  }) as any) as unknown as (...xs: tf.Tensor[]) => tf.Tensor2D;
  return op(x, ...weights);
}
