import { DataProto } from "../protocol/data-proto.js";
import { mulberry32 as seededRandom } from "../random.js";
import type { RlDatasetRow } from "./rows.js";
import { type PromptTemplate, renderPrompt } from "./templates.js";

/** Text -> token ids (a tokenizer's encode without special tokens added). */
export type TokenizeFn = (text: string) => ArrayLike<number>;

export interface OverlongFilterOptions {
  tokenize: TokenizeFn;
  maxPromptLength: number;
  /** Prompts longer than maxPromptLength - margin tokens are dropped. Default 10 (ToRL). */
  margin?: number;
  /** data.template_type used to render the prompt before counting. Default "tir_base_0309". */
  templateType?: string;
  /** Renders the prompt instead of templateType (the model's chat template, with tools). */
  render?: PromptTemplate;
}

/**
 * ToRL's prompt-length filter: keeps rows whose rendered prompt has at most maxPromptLength - margin
 * tokens. Returns the kept rows and how many were dropped.
 */
export function filterOverlongPrompts<R extends RlDatasetRow>(
  rows: readonly R[],
  opts: OverlongFilterOptions,
): { kept: R[]; dropped: number } {
  const limit = opts.maxPromptLength - (opts.margin ?? 10);
  const template = opts.templateType ?? "tir_base_0309";
  const render = opts.render ?? ((m) => renderPrompt(template, m));
  const kept = rows.filter((r) => opts.tokenize(render(r.prompt)).length <= limit);
  return { kept, dropped: rows.length - kept.length };
}

/** Where a loader stands: the next row of `epoch`'s order is at `position`. */
export interface PromptLoaderState {
  epoch: number;
  position: number;
  seed: number;
  /** Dataset size, checked on resume. */
  size: number;
}

/** A loader state that does not fit the loader (dataset changed, bad numbers). */
export class LoaderStateError extends Error {
  override name = "LoaderStateError";
}

export interface PromptLoaderOptions {
  batchSize: number;
  shuffle?: boolean;
  seed?: number;
  /** Drop a last batch shorter than batchSize (veRL does for training). Default true. */
  dropLast?: boolean;
}

export { mulberry32 as seededRandom } from "../random.js";

/** The row order of one epoch: a Fisher-Yates shuffle seeded by (seed, epoch), or 0..n-1. */
export function epochOrder(size: number, seed: number, epoch: number, shuffle = true): Uint32Array {
  const order = new Uint32Array(size);
  for (let i = 0; i < size; i++) order[i] = i;
  if (!shuffle) return order;
  const rand = seededRandom((Math.imul(seed >>> 0, 0x9e3779b1) ^ Math.imul(epoch + 1, 0x85ebca77)) >>> 0);
  for (let i = size - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    const t = order[i]!;
    order[i] = order[j]!;
    order[j] = t;
  }
  return order;
}

/**
 * A shuffled, seeded, resumable batch loader over rows. Each epoch has its own order fixed by
 * (seed, epoch); `state()` is {epoch, position, seed, size} and a loader restored from it with
 * `loadState` yields exactly the batches the original would have yielded next.
 */
export class PromptLoader<R> {
  readonly batchSize: number;
  readonly shuffle: boolean;
  readonly dropLast: boolean;
  private seed: number;
  private epoch = 0;
  private position = 0;
  private order: Uint32Array;

  constructor(
    readonly rows: readonly R[],
    opts: PromptLoaderOptions,
  ) {
    if (!Number.isInteger(opts.batchSize) || opts.batchSize <= 0) {
      throw new RangeError(`batchSize must be a positive integer, got ${opts.batchSize}`);
    }
    this.batchSize = opts.batchSize;
    this.shuffle = opts.shuffle ?? true;
    this.dropLast = opts.dropLast ?? true;
    this.seed = opts.seed ?? 1;
    if (this.batchesPerEpoch === 0) {
      throw new RangeError(
        `${rows.length} rows make no batch of ${this.batchSize} (dropLast=${this.dropLast})`,
      );
    }
    this.order = epochOrder(rows.length, this.seed, 0, this.shuffle);
  }

  get batchesPerEpoch(): number {
    return this.dropLast
      ? Math.floor(this.rows.length / this.batchSize)
      : Math.ceil(this.rows.length / this.batchSize);
  }

  get currentEpoch(): number {
    return this.epoch;
  }

  /** True when the current epoch has no full batch left (the next call to `next` starts a new epoch). */
  get epochDone(): boolean {
    const left = this.rows.length - this.position;
    return left <= 0 || (this.dropLast && left < this.batchSize);
  }

  /** The next batch, rolling over into the next epoch (with a new order) when this one is used up. */
  next(): { rows: R[]; epoch: number; indices: number[] } {
    if (this.epochDone) this.startEpoch(this.epoch + 1);
    const end = Math.min(this.position + this.batchSize, this.rows.length);
    const indices = Array.from(this.order.subarray(this.position, end));
    this.position = end;
    return { rows: indices.map((i) => this.rows[i]!), epoch: this.epoch, indices };
  }

  /** The batches left in the current epoch. */
  *epochBatches(): Generator<{ rows: R[]; epoch: number; indices: number[] }> {
    while (!this.epochDone) yield this.next();
  }

  state(): PromptLoaderState {
    return { epoch: this.epoch, position: this.position, seed: this.seed, size: this.rows.length };
  }

  loadState(s: PromptLoaderState): void {
    if (s.size !== this.rows.length) {
      throw new LoaderStateError(
        `loader state is for ${s.size} rows but the dataset has ${this.rows.length}`,
      );
    }
    if (!Number.isInteger(s.epoch) || s.epoch < 0 || !Number.isInteger(s.position) || s.position < 0) {
      throw new LoaderStateError(`bad loader state ${JSON.stringify(s)}`);
    }
    this.seed = s.seed;
    this.startEpoch(s.epoch);
    this.position = Math.min(s.position, this.rows.length);
  }

  private startEpoch(epoch: number): void {
    this.epoch = epoch;
    this.position = 0;
    this.order = epochOrder(this.rows.length, this.seed, epoch, this.shuffle);
  }
}

export interface CollatePromptsOptions {
  tokenize: TokenizeFn;
  maxPromptLength: number;
  padTokenId: number;
  templateType?: string;
  /** Renders the prompt instead of templateType (the model's chat template, with tools). */
  render?: PromptTemplate;
  /** What to do with a prompt over maxPromptLength tokens (data.truncation). Default "error". */
  truncation?: "error" | "left" | "right";
}

/**
 * Renders, tokenizes and left-pads a batch of rows into a DataProto, as veRL's RLHFDataset does:
 * batch input_ids / attention_mask / position_ids (Int32Array [B, maxPromptLength]); nonTensorBatch
 * raw_prompt (the rendered text), data_source, ability, reward_model, extra_info, index.
 */
export function collatePrompts(rows: readonly RlDatasetRow[], opts: CollatePromptsOptions): DataProto {
  const B = rows.length;
  const L = opts.maxPromptLength;
  const template = opts.templateType ?? "tir_base_0309";
  const render = opts.render ?? ((m) => renderPrompt(template, m));
  const ids = new Int32Array(B * L).fill(opts.padTokenId);
  const attn = new Int32Array(B * L);
  const pos = new Int32Array(B * L);
  const raw: string[] = [];
  rows.forEach((r, b) => {
    const text = render(r.prompt);
    raw.push(text);
    let toks = Array.from(opts.tokenize(text));
    if (toks.length > L) {
      const mode = opts.truncation ?? "error";
      if (mode === "error") {
        throw new RangeError(`prompt of row ${b} has ${toks.length} tokens, over max_prompt_length ${L}`);
      }
      toks = mode === "left" ? toks.slice(toks.length - L) : toks.slice(0, L);
    }
    const off = b * L + (L - toks.length);
    for (let i = 0; i < toks.length; i++) {
      ids[off + i] = toks[i]!;
      attn[off + i] = 1;
      pos[off + i] = i;
    }
  });
  return DataProto.fromDict(
    {
      input_ids: { data: ids, shape: [B, L] },
      attention_mask: { data: attn, shape: [B, L] },
      position_ids: { data: pos, shape: [B, L] },
    },
    {
      raw_prompt: raw,
      data_source: rows.map((r) => r.data_source),
      ability: rows.map((r) => r.ability),
      reward_model: rows.map((r) => r.reward_model),
      extra_info: rows.map((r) => r.extra_info),
      index: rows.map((r, i) => (r.extra_info.index ?? r.extra_info.id ?? i) as unknown),
    },
  );
}
