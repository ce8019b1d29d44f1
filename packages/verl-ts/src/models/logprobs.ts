/**
 * Log-probs and entropy of given token sequences, in micro-batches, with and without gradients. Column t
 * of a result scores token t given tokens before it (column 0 is 0), so masks line up with token ids.
 */
import * as tf from "@tensorflow/tfjs";
import { sharedBlockGroups } from "./decoder-block.js";
import { HalfArray } from "./half-precision.js";
import { linear, linearTransposed, rowsIndependentPast } from "./linear.js";
import { nativeLogSoftmaxPick } from "./native-log-prob.js";
import { Bf16Weight } from "./native-matmul-bf16.js";
import { nativeMatmulActive } from "./native-state.js";
import type { LmHead, Qwen2Model } from "./qwen2.js";
import type { TokenBatch } from "./token-batch.js";

export interface LogProbOptions {
  /** Divide logits by this before the softmax (the rollout's sampling temperature). Default 1. */
  temperature?: number;
  withEntropy?: boolean;
  /**
   * Score only columns [from, to) (the response's): the LM head then runs on the positions that predict
   * them alone, and the other columns are 0. Default every column.
   */
  scoreColumns?: { from: number; to: number };
  /**
   * The LM head read `rows` of its vocabulary rows at a time, `after(from, to)` called once each block's
   * product is done, so the caller can let that block's memory go (a reference's mapped pages): where the
   * head is bfloat16 bits read transposed in place, on AMX tiles past their few-row threshold
   * (rowsIndependentPast: the same logits, bit for bit) and in one chunk of positions. Elsewhere the head
   * is read whole and `after` is never called.
   */
  headBlock?: HeadBlocks;
}

/** LogProbOptions.headBlock. */
export interface HeadBlocks {
  rows: number;
  after: (from: number, to: number) => void;
}

/**
 * The positions [from, to) of a row of length L that predict the scored columns (column t is predicted by
 * position t - 1; column 0 by none), or null when nothing is scored. Without scoreColumns every position
 * runs (the last one predicts nothing), so the whole-sequence pass slices nothing out of the hidden states.
 */
function scoredRange(
  L: number,
  columns: LogProbOptions["scoreColumns"],
): { from: number; to: number } | null {
  if (!columns) return L < 2 ? null : { from: 0, to: L };
  const { from, to } = columns;
  if (!Number.isInteger(from) || !Number.isInteger(to) || from < 0 || to > L || from > to)
    throw new RangeError(`scoreColumns [${from}, ${to}) must be a range of whole numbers from 0 to ${L}`);
  const first = Math.max(from, 1);
  return first >= to ? null : { from: first - 1, to: to - 1 };
}

/**
 * scoredRange's positions and each one's target: the token after it (-1 for a row's last position,
 * which predicts nothing).
 */
function scoredPositions(
  ids: Int32Array,
  B: number,
  L: number,
  columns: LogProbOptions["scoreColumns"],
): { from: number; to: number; targets: Int32Array } | null {
  const range = scoredRange(L, columns);
  if (!range) return null;
  const { from, to } = range;
  const S = to - from;
  const targets = new Int32Array(B * S);
  for (let b = 0; b < B; b++) {
    const known = Math.min(S, L - 1 - from);
    targets.set(ids.subarray(b * L + from + 1, b * L + from + 1 + known), b * S);
    if (known < S) targets[b * S + S - 1] = -1;
  }
  return { from, to, targets };
}

/**
 * [B * S] per-position values of positions [from, from + S) as columns [from + 1, from + 1 + S) of [B, L];
 * a row's last position, which scores nothing, is dropped.
 */
function asColumns(values: tf.Tensor, B: number, L: number, from: number): tf.Tensor2D {
  const S = values.size / B;
  const kept = Math.min(S, L - from - 1);
  const rows = tf.reshape(values, [B, S]);
  return tf.pad(kept === S ? rows : tf.slice(rows, [0, 0], [B, kept]), [
    [0, 0],
    [from + 1, L - from - 1 - kept],
  ]) as tf.Tensor2D;
}

/** [B, L] zeros for both scores, where no column is scored. */
function zeroScores(B: number, L: number, withEntropy: boolean): TokenScores {
  const z = () => tf.zeros([B, L]) as tf.Tensor2D;
  return { logProbs: z(), ...(withEntropy ? { entropy: z() } : {}) };
}

/** The scores from [rows, 2 or 3] statistics (log p, entropy, ...) of the scored positions. */
function scoresFromStats(
  stats: tf.Tensor2D,
  B: number,
  L: number,
  from: number,
  withEntropy: boolean,
): TokenScores {
  const rows = stats.shape[0];
  const column = (c: number) => asColumns(tf.slice(stats, [0, c], [rows, 1]), B, L, from);
  return withEntropy ? { logProbs: column(0), entropy: column(1) } : { logProbs: column(0) };
}

/** Float32 logits one chunk of a pass without gradients may hold at once (computeLogProbs): 32 MiB. */
export const HEAD_CHUNK_BYTES = 32 * 2 ** 20;

/** Token positions per LM-head chunk for a vocabulary: as many as HEAD_CHUNK_BYTES of logits hold, at least 1. */
export function headChunkRows(vocab: number): number {
  return Math.max(1, Math.floor(HEAD_CHUNK_BYTES / (4 * vocab)));
}

export interface TokenScores {
  /** `[B, L]`: log p(token t | tokens < t); column 0 is 0. */
  logProbs: tf.Tensor2D;
  /** `[B, L]`: entropy of the distribution that produced token t; column 0 is 0. */
  entropy?: tf.Tensor2D;
}

/** Rows [start, end) of a batch as a batch. */
export function sliceBatch(batch: TokenBatch, start: number, end: number): TokenBatch {
  const L = batch.length;
  return {
    ids: batch.ids.subarray(start * L, end * L),
    mask: batch.mask.subarray(start * L, end * L),
    batch: end - start,
    length: L,
  };
}

/** Differentiable per-token log-probs (and entropy) of one batch. Call inside tf.tidy / variableGrads. */
export function tokenLogProbs(
  model: Qwen2Model,
  batch: TokenBatch,
  options: LogProbOptions = {},
): TokenScores {
  const { batch: B, length: L } = batch;
  const withEntropy = options.withEntropy ?? false;
  const scored = scoredPositions(batch.ids, B, L, options.scoreColumns);
  if (!scored) return zeroScores(B, L, withEntropy);
  const { from, to, targets } = scored;
  let logits = model.forward(batch, { positions: { from, to } }); // [B, S, V]
  if (options.temperature && options.temperature !== 1) logits = tf.div(logits, options.temperature);
  const flat = tf.reshape(logits, [targets.length, model.config.vocabSize]) as tf.Tensor2D;
  // the native kernels score each row straight from the logits, so not even a slice of them is copied
  const stats = nativeMatmulActive(tf.getBackend())
    ? nativeLogSoftmaxPick(flat, targets)
    : opByOpStats(flat, targets);
  return scoresFromStats(stats, B, L, from, withEntropy);
}

/**
 * tokenLogProbs for a pass without gradients, the LM head in chunks of `chunkRows` token positions: per
 * chunk the logits [chunkRows, V], their log-softmax statistics and the targets' entries, then the
 * chunk's logits are freed, so the [B * L, V] float32 logits never exist at once (29 MB per 48 tokens at
 * a 151,936-entry vocabulary). The same numbers as the whole-batch pass within float rounding (each
 * chunk's product is the same rows of the same matrices). Not under a gradient tape: the tape would keep
 * every chunk's logits for the backward anyway.
 */
export function chunkedTokenLogProbs(
  model: Qwen2Model,
  batch: TokenBatch,
  options: LogProbOptions & { chunkRows?: number } = {},
): TokenScores {
  return scoreMicroBatches(model, [{ tokens: batch, options }])[0]!;
}

/** A micro-batch's scored positions after the decoder: their final hidden states [N, h] and targets. */
interface ScoredRows {
  rows: tf.Tensor2D;
  targets: Int32Array;
  from: number;
}

/** The final hidden states of `batch`'s scored positions (model.forward: the decoder, or withLayerOutput's). */
function scoredRows(model: Qwen2Model, batch: TokenBatch, options: LogProbOptions): ScoredRows | null {
  const { batch: B, length: L } = batch;
  const scored = scoredPositions(batch.ids, B, L, options.scoreColumns);
  if (!scored) return null;
  const { from, to, targets } = scored;
  const hidden = model.forward(batch, { hidden: true, bf16Bits: true });
  const flat = tf.reshape(hidden, [B * L, hidden.shape[2]!]) as tf.Tensor2D;
  // scored position i is position from + i % S of row i / S
  const S = to - from;
  const at = Int32Array.from({ length: targets.length }, (_, i) => Math.floor(i / S) * L + from + (i % S));
  return { rows: tf.gather(flat, tf.tensor1d(at, "int32")) as tf.Tensor2D, targets, from };
}

/** [N, 2] log-softmax statistics of `rows`' targets under the LM head, `chunkRows` rows of logits at a time. */
function headStats(
  head: LmHead,
  rows: tf.Tensor2D,
  targets: Int32Array,
  options: LogProbOptions & { chunkRows?: number },
  vocab: number,
): tf.Tensor2D {
  const chunk = options.chunkRows ?? headChunkRows(vocab);
  if (!Number.isInteger(chunk) || chunk < 1)
    throw new RangeError(`chunkRows must be a positive integer, got ${chunk}`);
  const native = nativeMatmulActive(tf.getBackend());
  const N = targets.length;
  const blocks = headBlocks(head, N, chunk, options.headBlock);
  const parts: tf.Tensor2D[] = [];
  for (let s = 0; s < N; s += chunk) {
    const e = Math.min(N, s + chunk);
    parts.push(
      tf.tidy(() => {
        const x = N <= chunk ? rows : (tf.slice(rows, [s, 0], [e - s, rows.shape[1]]) as tf.Tensor2D);
        let logits = blocks
          ? blockLogits(x, blocks.weight, blocks.rows, blocks.after)
          : head.transposed
            ? linearTransposed(x, head.weight)
            : linear(x, head.weight);
        if (options.temperature && options.temperature !== 1) logits = tf.div(logits, options.temperature);
        const t = targets.subarray(s, e);
        return native
          ? nativeLogSoftmaxPick(logits as tf.Tensor2D, t)
          : opByOpStats(logits as tf.Tensor2D, t);
      }),
    );
  }
  return parts.length === 1 ? parts[0]! : (tf.concat(parts, 0) as tf.Tensor2D);
}

/** The head's blocks (LogProbOptions.headBlock) where they give the whole head's bits, else undefined. */
function headBlocks(head: LmHead, N: number, chunk: number, blocks: HeadBlocks | undefined) {
  if (!blocks) return undefined;
  if (!Number.isInteger(blocks.rows) || blocks.rows < 1)
    throw new RangeError(`headBlock.rows must be a positive integer, got ${blocks.rows}`);
  const past = rowsIndependentPast(head.weight);
  if (!(head.transposed && head.weight instanceof Bf16Weight) || past === undefined || N <= past || N > chunk)
    return undefined;
  return { weight: head.weight, rows: blocks.rows, after: blocks.after };
}

/**
 * x . W^T for W [V, h] held as bfloat16 bits, `rows` of W's rows at a time (each a product of its own:
 * on AMX tiles every logit depends on its row of x and its row of W alone), `after(from, to)` once rows
 * [from, to) are read. [N, V].
 */
function blockLogits(
  x: tf.Tensor2D,
  w: Bf16Weight,
  rows: number,
  after: (from: number, to: number) => void,
): tf.Tensor2D {
  const [V, h] = w.shape;
  const pieces: tf.Tensor2D[] = [];
  for (let from = 0; from < V; from += rows) {
    const to = Math.min(V, from + rows);
    const bits = w.values.bits.subarray(from * h, to * h);
    pieces.push(linearTransposed(x, new Bf16Weight(new HalfArray("bfloat16", bits), [to - from, h])));
    after(from, to);
  }
  return pieces.length === 1 ? pieces[0]! : (tf.concat(pieces, 1) as tf.Tensor2D);
}

/**
 * chunkedTokenLogProbs of several micro-batches (`trunk(k, f)` runs f where model.forward gives micro-batch
 * k's decoder output: by default the decoder itself). Where the products give each row from its own row
 * alone (rowsIndependentPast: bfloat16 bits on AMX tiles), micro-batches with more rows than that share
 * them, so each matrix is read once, not once per micro-batch, with the same bits as a pass each: the
 * decoder layers' (the model's own decoder; groups of up to SHARED_BLOCK_ROWS rows,
 * Qwen2Model.decoderOutputs) and the LM head's (the scored positions of every micro-batch, in chunks of
 * `chunkRows`). Call inside tf.tidy.
 */
export function scoreMicroBatches(
  model: Qwen2Model,
  batches: { tokens: TokenBatch; options: LogProbOptions & { chunkRows?: number } }[],
  trunk?: <T>(k: number, f: () => T) => T,
): TokenScores[] {
  const V = model.config.vocabSize;
  const scored: (ScoredRows | null)[] = batches.map(() => null);
  // each group's decoder in a scope of its own: only its scored rows outlive it
  for (const group of trunkGroups(model, batches, trunk === undefined))
    tf.tidy(() => {
      // micro-batches that share the decoder layers' products (Qwen2Model.decoderOutputs)
      const shared =
        group.length > 1 ? model.decoderOutputs(group.map((k) => batches[k]!.tokens)) : undefined;
      for (const [j, k] of group.entries()) {
        const { tokens, options } = batches[k]!;
        const run = () => scoredRows(model, tokens, options);
        const kept = shared ? model.withLayerOutput(shared[j]!, run) : trunk ? trunk(k, run) : run();
        if (kept) tf.keep(kept.rows);
        scored[k] = kept;
      }
    });
  // a bf16 model's matrices are read from their bits (qwen2.ts); the update's products read the same bits
  const head = model.lmHead(true);
  try {
    const stats: (tf.Tensor2D | undefined)[] = batches.map(() => undefined);
    const past = rowsIndependentPast(head.weight);
    const candidates =
      past === undefined ? [] : scored.flatMap((s, k) => (s && s.targets.length > past ? [k] : []));
    // those whose head passes compute alike (temperature, chunk size) with the first of them
    const shared = candidates.filter((k) =>
      sameHeadOptions(batches[k]!.options, batches[candidates[0]!]!.options),
    );
    if (shared.length > 1) {
      const rows = tf.concat(shared.map((k) => scored[k]!.rows)) as tf.Tensor2D;
      const targets = new Int32Array(shared.reduce((n, k) => n + scored[k]!.targets.length, 0));
      let at = 0;
      for (const k of shared) {
        targets.set(scored[k]!.targets, at);
        at += scored[k]!.targets.length;
      }
      const all = headStats(head, rows, targets, batches[shared[0]!]!.options, V);
      at = 0;
      for (const k of shared) {
        const n = scored[k]!.targets.length;
        stats[k] = tf.slice(all, [at, 0], [n, all.shape[1]]) as tf.Tensor2D;
        at += n;
      }
    }
    return batches.map(({ tokens, options }, k) => {
      const { batch: B, length: L } = tokens;
      const s = scored[k];
      if (!s) return zeroScores(B, L, options.withEntropy ?? false);
      const st = stats[k] ?? headStats(head, s.rows, s.targets, options, V);
      return scoresFromStats(st, B, L, s.from, options.withEntropy ?? false);
    });
  } finally {
    head.weight.dispose();
    for (const s of scored) s?.rows.dispose();
  }
}

/**
 * The micro-batches whose decoders run together (Qwen2Model.decoderOutputs), where the decoder is the
 * model's own (`ownTrunk`) and that gives each the bits of its own pass: those with scored positions, in
 * groups of sharedBlockGroups; every other one alone.
 */
function trunkGroups(
  model: Qwen2Model,
  batches: { tokens: TokenBatch; options: LogProbOptions }[],
  ownTrunk: boolean,
): number[][] {
  // a micro-batch that scores nothing runs no decoder: 0 rows keeps it alone
  const rows = batches.map(({ tokens: { batch: B, length: L }, options }) =>
    scoredRange(L, options.scoreColumns) ? B * L : 0,
  );
  const running = rows.filter((n) => n > 0).length;
  return sharedBlockGroups(rows, ownTrunk && running > 1 ? model.sharedLayersPast() : undefined);
}

/** Whether two micro-batches' head passes compute alike (temperature, chunk size, vocabulary blocks). */
function sameHeadOptions(
  a: LogProbOptions & { chunkRows?: number },
  b: LogProbOptions & { chunkRows?: number },
) {
  return (
    (a.temperature ?? 1) === (b.temperature ?? 1) &&
    a.chunkRows === b.chunkRows &&
    a.headBlock === b.headBlock
  );
}

/** [rows, 2]: log p(target) and the entropy of each row of `logits`, op by op (a target of -1 picks 0). */
function opByOpStats(logits: tf.Tensor2D, targets: Int32Array): tf.Tensor2D {
  const logp = tf.logSoftmax(logits);
  const picked = tf.sum(tf.mul(logp, tf.oneHot(tf.tensor1d(targets, "int32"), logits.shape[1])), -1);
  const ent = tf.neg(tf.sum(tf.mul(tf.exp(logp), logp), -1));
  return tf.stack([picked, ent], 1) as tf.Tensor2D;
}

/**
 * Log-probs (and entropy) without gradients, micro-batched, as host arrays [B * L], the LM head in
 * chunks of `chunkRows` positions (chunkedTokenLogProbs; default headChunkRows of the vocabulary), shared
 * by the micro-batches where that gives the same bits (scoreMicroBatches). With `scoreMask` ([B * L],
 * e.g. the response mask), positions outside it are 0.
 */
export async function computeLogProbs(
  model: Qwen2Model,
  batch: TokenBatch,
  options: LogProbOptions & {
    microBatchSize?: number;
    scoreMask?: ArrayLike<number>;
    chunkRows?: number;
  } = {},
): Promise<{ logProbs: Float32Array; entropy?: Float32Array }> {
  const mb = options.microBatchSize ?? 8;
  const L = batch.length;
  const parts: { tokens: TokenBatch; options: LogProbOptions & { chunkRows?: number } }[] = [];
  for (let s = 0; s < batch.batch; s += mb)
    parts.push({ tokens: sliceBatch(batch, s, Math.min(batch.batch, s + mb)), options });
  const scores = await computeLogProbsOfBatches(model, parts);
  const logProbs = new Float32Array(batch.batch * L);
  const entropy = options.withEntropy ? new Float32Array(batch.batch * L) : undefined;
  for (const [k, r] of scores.entries()) {
    logProbs.set(r.logProbs, k * mb * L);
    if (entropy && r.entropy) entropy.set(r.entropy, k * mb * L);
  }
  const m = options.scoreMask;
  if (m) {
    if (m.length !== logProbs.length)
      throw new RangeError(`scoreMask has ${m.length} entries for ${logProbs.length} tokens`);
    for (let i = 0; i < m.length; i++)
      if (!m[i]) {
        logProbs[i] = 0;
        if (entropy) entropy[i] = 0;
      }
  }
  return { logProbs, ...(entropy ? { entropy } : {}) };
}

/**
 * Log-probs (and entropy, where asked) without gradients of each of several batches, as host arrays
 * [B * L] each: scoreMicroBatches over them (`trunk` as there), then read to the host together.
 */
export async function computeLogProbsOfBatches(
  model: Qwen2Model,
  batches: { tokens: TokenBatch; options: LogProbOptions & { chunkRows?: number } }[],
  trunk?: <T>(k: number, f: () => T) => T,
): Promise<{ logProbs: Float32Array; entropy?: Float32Array }[]> {
  const tensors = tf.tidy(() =>
    scoreMicroBatches(model, batches, trunk).map((r) => (r.entropy ? [r.logProbs, r.entropy] : [r.logProbs])),
  );
  try {
    // every read in one round trip (a GPU backend maps its buffers together)
    const host = (await Promise.all(
      tensors.map((ts) => Promise.all(ts.map((t) => t.data()))),
    )) as Float32Array[][];
    return host.map(([logProbs, entropy]) => ({ logProbs: logProbs!, ...(entropy ? { entropy } : {}) }));
  } finally {
    for (const ts of tensors) for (const t of ts) t.dispose();
  }
}

export interface MicroBatch {
  /** Rows [start, end) of the full batch this micro-batch holds. */
  rows: [number, number];
  batch: TokenBatch;
  scores: TokenScores;
}

/**
 * The trainer's hook: runs `loss` on each micro-batch's differentiable scores and accumulates gradients of
 * every trainable parameter. The loss function scales its micro-batch's share (e.g. by token counts of
 * the whole batch). Returns the summed loss and gradients by parameter name (caller disposes them, or
 * passes them to applyGradients).
 */
export async function forwardBackward(
  model: Qwen2Model,
  batch: TokenBatch,
  loss: (mb: MicroBatch) => tf.Scalar,
  options: LogProbOptions & { microBatchSize?: number } = {},
): Promise<{ loss: number; grads: Map<string, tf.Tensor> }> {
  const mbSize = options.microBatchSize ?? 8;
  const vars = model.variables();
  const nameOf = new Map(vars.map((v, i) => [v.name, model.specs[i]!.name]));
  const grads = new Map<string, tf.Tensor>();
  // Loss values stay on the device until every micro-batch has run: one read at the end.
  const values: tf.Scalar[] = [];
  for (let s = 0; s < batch.batch; s += mbSize) {
    const e = Math.min(batch.batch, s + mbSize);
    const mb = sliceBatch(batch, s, e);
    const { value, grads: g } = tf.variableGrads(() => {
      const scores = tokenLogProbs(model, mb, options);
      return loss({ rows: [s, e], batch: mb, scores });
    }, vars);
    values.push(value);
    for (const [vname, t] of Object.entries(g)) {
      const name = nameOf.get(vname)!;
      const prev = grads.get(name);
      if (prev) {
        grads.set(name, tf.add(prev, t));
        prev.dispose();
        t.dispose();
      } else grads.set(name, t);
    }
  }
  let total = 0;
  try {
    for (const v of await Promise.all(values.map((v) => v.data()))) total += v[0]!;
  } finally {
    for (const v of values) v.dispose();
  }
  return { loss: total, grads };
}

/** Applies gradients (by parameter name) with a tfjs optimizer and disposes them. */
export function applyGradients(
  model: Qwen2Model,
  optimizer: tf.Optimizer,
  grads: Map<string, tf.Tensor>,
): void {
  const named: tf.NamedTensorMap = {};
  for (const [name, g] of grads) named[model.variable(name).name] = g;
  optimizer.applyGradients(named);
  for (const g of grads.values()) g.dispose();
  grads.clear();
}

/** Gradients as flat host arrays by parameter name (our layout), disposing the tensors. */
export async function gradientsToArrays(grads: Map<string, tf.Tensor>): Promise<Map<string, Float32Array>> {
  const entries = [...grads];
  try {
    const host = await Promise.all(entries.map(([, g]) => g.data() as Promise<Float32Array>));
    return new Map(entries.map(([name], i) => [name, host[i]!]));
  } finally {
    for (const [, g] of entries) g.dispose();
    grads.clear();
  }
}

/** A masked token-mean of a [B, L] tensor: sum(x * mask) / max(1, sum(mask)). */
export function maskedMean(x: tf.Tensor, mask: tf.Tensor): tf.Scalar {
  return tf.div(tf.sum(tf.mul(x, mask)), tf.maximum(tf.sum(mask), 1)) as tf.Scalar;
}
