/**
 * HF tokenizer.json through @lenml/tokenizers, plus what RL needs on top: token bytes for streaming
 * decode, character offsets, a per-token mask from character ranges, and a small byte-level BPE
 * tokenizer for the tiny models, built and saved in the same tokenizer.json format.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { TokenizerLoader } from "@lenml/tokenizers";
import { ModelFormatError } from "./errors.js";
import { PackedStringMap, PackedStrings } from "./packed-strings.js";

/** GPT-2's byte <-> printable-character table used by byte-level BPE. */
function bytesToUnicode(): string[] {
  const table: string[] = new Array(256);
  const keep = (b: number) => (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  let n = 0;
  for (let b = 0; b < 256; b++) table[b] = keep(b) ? String.fromCharCode(b) : String.fromCharCode(256 + n++);
  return table;
}
const BYTE_TO_CHAR = bytesToUnicode();
const CHAR_TO_BYTE = new Map(BYTE_TO_CHAR.map((c, b) => [c, b]));

export interface AddedTokenSpec {
  id: number;
  content: string;
  special: boolean;
}

export interface EncodingWithOffsets {
  ids: number[];
  /** [start, end) in UTF-16 code units of the text, per token. */
  offsets: [number, number][];
}

const encoder = new TextEncoder();

/** The fields of a Hugging Face tokenizer.json read here (the rest goes to the tokenizer library as is). */
export interface TokenizerJson {
  model?: { vocab?: Record<string, number>; [key: string]: unknown };
  added_tokens?: { id: number; content: string; special?: boolean }[];
  decoder?: { type?: string; [key: string]: unknown } | null;
  [key: string]: unknown;
}

export class Tokenizer {
  private readonly impl: any;
  private readonly idToToken: PackedStrings;
  private readonly added: Map<number, AddedTokenSpec>;
  private readonly byteLevel: boolean;
  private readonly bytesCache = new Map<number, Uint8Array>();
  /** tokenizer.json as UTF-8 (see `json`). */
  private readonly jsonBytes: Uint8Array;
  readonly vocabSize: number;
  readonly eosTokenId: number | undefined;
  readonly padTokenId: number;

  constructor(
    json: TokenizerJson,
    readonly config: Record<string, unknown> = {},
    readonly source = "<memory>",
  ) {
    try {
      this.impl = TokenizerLoader.fromPreTrained({
        tokenizerJSON: json,
        tokenizerConfig: { ...config },
      } as any);
    } catch (e) {
      throw new ModelFormatError(`cannot build tokenizer (${(e as Error).message})`, source);
    }
    const model = json.model ?? {};
    const vocab: Record<string, number> = model.vocab ?? {};
    this.added = new Map();
    for (const t of json.added_tokens ?? [])
      this.added.set(t.id, { id: t.id, content: t.content, special: !!t.special });
    let max = -1;
    for (const id of Object.values(vocab)) max = Math.max(max, id);
    for (const id of this.added.keys()) max = Math.max(max, id);
    this.vocabSize = max + 1;
    const idToToken: (string | undefined)[] = new Array(this.vocabSize);
    for (const [tok, id] of Object.entries(vocab)) idToToken[id] = tok;
    for (const t of this.added.values()) idToToken[t.id] = t.content;
    this.idToToken = new PackedStrings(idToToken);
    this.byteLevel = json.decoder?.type === "ByteLevel";
    const tokenId = (v: unknown): number | undefined => {
      const s = typeof v === "string" ? v : (v as { content?: string })?.content;
      if (!s) return undefined;
      for (const t of this.added.values()) if (t.content === s) return t.id;
      return vocab[s];
    };
    this.eosTokenId = tokenId(config.eos_token) ?? tokenId("<|endoftext|>");
    this.padTokenId = tokenId(config.pad_token) ?? this.eosTokenId ?? 0;
    // neither the parsed file nor the library's tables stay as one object per token (packed-strings.ts)
    this.jsonBytes = encoder.encode(JSON.stringify(json));
    packBpeTables(this.impl.model, this.idToToken);
  }

  /** The tokenizer.json this tokenizer was built from: a new copy on each call (changing it changes nothing here). */
  get json(): TokenizerJson {
    return JSON.parse(new TextDecoder().decode(this.jsonBytes)) as TokenizerJson;
  }

  /** Token ids of text. Special tokens written in the text are recognised as such. */
  encode(text: string, addSpecialTokens = false): number[] {
    return this.impl.encode(text, { add_special_tokens: addSpecialTokens });
  }

  decode(ids: ArrayLike<number>, skipSpecialTokens = false): string {
    if (ids.length === 0) return "";
    return this.impl.decode(Array.from(ids), {
      skip_special_tokens: skipSpecialTokens,
      clean_up_tokenization_spaces: false,
    });
  }

  /** The token's string in the vocabulary (byte-level form for BPE pieces). */
  idToTokenString(id: number): string | undefined {
    return this.idToToken.at(id);
  }

  isSpecial(id: number): boolean {
    return this.added.get(id)?.special ?? false;
  }

  specialTokenIds(): number[] {
    return [...this.added.values()].filter((t) => t.special).map((t) => t.id);
  }

  /** Id of a token string (added tokens included). */
  tokenToId(token: string): number | undefined {
    // the library's table holds the added tokens too, set over the vocabulary's entries of the same text
    return this.impl.model.tokens_to_ids.get(token);
  }

  /** The UTF-8 bytes a token stands for (added tokens: their content). */
  tokenBytes(id: number): Uint8Array {
    let b = this.bytesCache.get(id);
    if (b) return b;
    const added = this.added.get(id);
    const tok = this.idToToken.at(id);
    if (added || tok === undefined) b = encoder.encode(added?.content ?? "");
    else if (this.byteLevel) {
      b = new Uint8Array(tok.length);
      let n = 0;
      for (const ch of tok) {
        const v = CHAR_TO_BYTE.get(ch);
        if (v !== undefined) b[n++] = v;
      }
      b = b.subarray(0, n);
    } else b = encoder.encode(this.decode([id]));
    this.bytesCache.set(id, b);
    return b;
  }

  /**
   * Token ids with each token's [start, end) character range in `text`. Byte-level tokenizers map token
   * bytes back onto the text's UTF-8; a token that ends inside a multi-byte character covers that
   * character. Text is NFC-normalised first, as the tokenizer does.
   */
  encodeWithOffsets(text: string): EncodingWithOffsets {
    const norm = text.normalize("NFC");
    const ids = this.encode(norm);
    const utf8 = encoder.encode(norm);
    // byte index -> char index (UTF-16 units)
    const charAt = new Int32Array(utf8.length + 1);
    let bi = 0;
    for (let ci = 0; ci < norm.length; ci++) {
      const cp = norm.codePointAt(ci)!;
      const len = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
      for (let k = 0; k < len; k++) charAt[bi + k] = ci;
      bi += len;
      if (cp >= 0x10000) ci++;
    }
    charAt[utf8.length] = norm.length;
    const offsets: [number, number][] = [];
    let pos = 0;
    let consistent = true;
    for (const id of ids) {
      const b = this.tokenBytes(id);
      for (let k = 0; k < b.length && consistent; k++) if (utf8[pos + k] !== b[k]) consistent = false;
      if (!consistent) break;
      const start = charAt[pos]!;
      pos += b.length;
      const end =
        pos >= utf8.length
          ? norm.length
          : charAt[pos - 1]! + (norm.codePointAt(charAt[pos - 1]!)! >= 0x10000 ? 2 : 1);
      offsets.push([start, b.length === 0 ? start : end]);
    }
    if (consistent && pos === utf8.length) return { ids, offsets };
    // Fallback for tokenizers whose pieces do not map to bytes: grow the decoded prefix.
    const out: [number, number][] = [];
    let prev = 0;
    for (let i = 0; i < ids.length; i++) {
      const cur = this.decode(ids.slice(0, i + 1)).length;
      out.push([Math.min(prev, norm.length), Math.min(cur, norm.length)]);
      prev = cur;
    }
    return { ids, offsets: out };
  }

  /**
   * Saves tokenizer.json, tokenizer_config.json and the module that makes transformers read the first
   * as it is (writeHfTokenizerConfig) into dir.
   */
  save(dir: string): void {
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, "tokenizer.json"), this.jsonBytes);
    writeHfTokenizerConfig(dir, this.config);
  }
}

/**
 * How a tokenizer_config.json torl-ts writes (Tokenizer.save, exports) makes transformers tokenize by
 * tokenizer.json as it is, as torl-ts does. transformers 5 rebuilds the tokenizer of a `qwen2` model from Qwen2's defaults whatever
 * class the file names (its pre-tokenizer takes one digit at a time, so the tiny base's digit groups,
 * "37" one token, came out as two) unless the file has an `auto_map`; then, without trust_remote_code,
 * it takes `tokenizer_class` (PreTrainedTokenizerFast: tokenizer.json alone), and with it the class in
 * HF_TOKENIZER_MODULE (the same, by inheritance). transformers 4 reads tokenizer.json either way.
 */
export const HF_TOKENIZER_CLASS = "PreTrainedTokenizerFast";
export const HF_TOKENIZER_MODULE = "tokenization_torl.py";
const HF_TOKENIZER_MODULE_SOURCE = `"""Tokenizes by tokenizer.json exactly as it is (normalizer, pre-tokenizer, decoder, added tokens),
as torl-ts does; written by torl-ts. transformers 5 would otherwise rebuild a qwen2 model's
tokenizer from Qwen2's defaults. Used with trust_remote_code=True; without it, tokenizer_config.json's
PreTrainedTokenizerFast reads tokenizer.json the same way."""

try:  # transformers >= 5
    from transformers.tokenization_utils_tokenizers import TokenizersBackend as _Base
except ImportError:  # transformers 4
    from transformers import PreTrainedTokenizerFast as _Base


class TorlTokenizer(_Base):
    pass
`;

/**
 * Writes `config` as dir/tokenizer_config.json with tokenizer_class HF_TOKENIZER_CLASS and an auto_map
 * to HF_TOKENIZER_MODULE, and that module; returns the two file names.
 */
export function writeHfTokenizerConfig(dir: string, config: Record<string, unknown>): string[] {
  const hf = {
    ...config,
    tokenizer_class: HF_TOKENIZER_CLASS,
    auto_map: { AutoTokenizer: [null, `${HF_TOKENIZER_MODULE.replace(/\.py$/, "")}.TorlTokenizer`] },
  };
  writeFileSync(join(dir, "tokenizer_config.json"), `${JSON.stringify(hf, null, 2)}\n`);
  writeFileSync(join(dir, HF_TOKENIZER_MODULE), HF_TOKENIZER_MODULE_SOURCE);
  return ["tokenizer_config.json", HF_TOKENIZER_MODULE];
}

/**
 * Per-token mask from character ranges: 1 where the token overlaps any [start, end) range. Observation
 * masks use it to exclude tool output from the policy loss.
 */
export function maskFromCharRanges(offsets: [number, number][], ranges: [number, number][]): Uint8Array {
  const mask = new Uint8Array(offsets.length);
  offsets.forEach(([s, e], i) => {
    for (const [rs, re] of ranges)
      if (s < re && e > rs) {
        mask[i] = 1;
        break;
      }
  });
  return mask;
}

/**
 * Packs the tables of the library's BPE model (its token -> id Map, id -> token array and merge ranks,
 * ~150k entries each for Qwen or Llama 3) into PackedStringMap / PackedStrings, and drops what it keeps
 * only from its construction (the merges and the file's vocab). Other model types stay as built.
 * `idToToken` (the Tokenizer's own) stands in for the library's id -> token array where they agree.
 */
function packBpeTables(model: any, idToToken: PackedStrings): void {
  if (!(model?.bpe_ranks instanceof Map && model.tokens_to_ids instanceof Map && Array.isArray(model.vocab)))
    return;
  const tokensToIds = PackedStringMap.from(model.tokens_to_ids);
  const ranks = PackedStringMap.from(model.bpe_ranks);
  if (!tokensToIds || !ranks) return;
  const vocab = sameEntries(model.vocab, idToToken) ? idToToken : new PackedStrings(model.vocab);
  model.tokens_to_ids = tokensToIds;
  model.bpe_ranks = ranks;
  model.convert_ids_to_tokens = (ids: number[]) => ids.map((id) => vocab.at(id) ?? model.unk_token);
  model.vocab = new Proxy([], {
    get: (target, key) => {
      if (key === "length") return vocab.length;
      if (typeof key === "string" && /^(0|[1-9][0-9]*)$/.test(key)) return vocab.at(Number(key));
      return Reflect.get(target, key);
    },
    set: (_target, key) => {
      throw new TypeError(`the tokenizer's packed vocabulary is read-only (writing ${String(key)})`);
    },
  });
  model.merges = undefined;
  const { vocab: _vocab, merges: _merges, ...config } = model.config ?? {};
  model.config = config;
}

function sameEntries(strings: (string | undefined)[], packed: PackedStrings): boolean {
  if (strings.length !== packed.length) return false;
  for (let i = 0; i < strings.length; i++) {
    const s = strings[i];
    if (s === undefined ? packed.at(i) !== undefined : !packed.equals(i, s)) return false;
  }
  return true;
}

/** Loads tokenizer.json (and tokenizer_config.json if present) from a model directory or a file path. */
export function loadTokenizer(path: string): Tokenizer {
  const file = path.endsWith(".json") ? path : join(path, "tokenizer.json");
  if (!existsSync(file)) throw new ModelFormatError("tokenizer.json not found", file);
  let json: Record<string, any>;
  try {
    json = JSON.parse(readFileSync(file, "utf8"));
  } catch (e) {
    throw new ModelFormatError(`not valid JSON (${(e as Error).message})`, file);
  }
  if (!json?.model?.type)
    throw new ModelFormatError("no model.type: not an HF tokenizer.json", file, "model.type");
  const cfgFile = join(file, "..", "tokenizer_config.json");
  let config: Record<string, any> = {};
  if (existsSync(cfgFile)) {
    try {
      config = JSON.parse(readFileSync(cfgFile, "utf8"));
    } catch (e) {
      throw new ModelFormatError(`not valid JSON (${(e as Error).message})`, cfgFile);
    }
  }
  return new Tokenizer(json, config, file);
}

/** Qwen2's pre-tokenizer pattern (the same string HF writes into tokenizer.json). */
export const QWEN2_SPLIT_PATTERN =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const JS_SPLIT =
  /'s|'t|'re|'ve|'m|'ll|'d|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+/gu;

export interface ByteBpeOptions {
  /** Text to learn merges from; none gives a pure byte-level vocabulary (256 tokens). */
  corpus?: string;
  /** Target size of the BPE vocabulary (bytes + merges), before special tokens. */
  vocabSize?: number;
  /** Special tokens appended after the vocabulary; the first is EOS and padding. */
  specialTokens?: string[];
  /** Merges must occur at least this often. */
  minFrequency?: number;
}

export const DEFAULT_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];

/**
 * Builds a small byte-level BPE tokenizer (Qwen2's pre-tokenizer and decoder, merges learned from
 * `corpus`) in HF tokenizer.json format; every string round-trips.
 */
export function buildByteBpeTokenizer(options: ByteBpeOptions = {}): Tokenizer {
  const target = options.vocabSize ?? 256;
  const specials = options.specialTokens ?? DEFAULT_SPECIAL_TOKENS;
  const minFreq = options.minFrequency ?? 2;
  const vocab: Record<string, number> = {};
  BYTE_TO_CHAR.forEach((c, b) => {
    vocab[c] = b;
  });
  const merges: [string, string][] = [];
  if (options.corpus && target > 256) {
    const words = new Map<string, number>();
    for (const m of options.corpus.normalize("NFC").matchAll(JS_SPLIT)) {
      const w = Array.from(encoder.encode(m[0]), (b) => BYTE_TO_CHAR[b]!).join("\u0000");
      words.set(w, (words.get(w) ?? 0) + 1);
    }
    let seqs = [...words].map(([w, n]) => ({ parts: w.split("\u0000"), n }));
    while (256 + merges.length < target) {
      const counts = new Map<string, number>();
      for (const { parts, n } of seqs)
        for (let i = 0; i + 1 < parts.length; i++) {
          const k = `${parts[i]}\u0000${parts[i + 1]}`;
          counts.set(k, (counts.get(k) ?? 0) + n);
        }
      let best = "";
      let bestN = 0;
      for (const [k, n] of counts) if (n > bestN || (n === bestN && k < best)) [best, bestN] = [k, n];
      if (bestN < minFreq) break;
      const [a, b] = best.split("\u0000") as [string, string];
      merges.push([a, b]);
      vocab[a + b] = 256 + merges.length - 1;
      seqs = seqs.map(({ parts, n }) => {
        const out: string[] = [];
        for (let i = 0; i < parts.length; i++) {
          if (i + 1 < parts.length && parts[i] === a && parts[i + 1] === b) {
            out.push(a + b);
            i++;
          } else out.push(parts[i]!);
        }
        return { parts: out, n };
      });
    }
  }
  const base = 256 + merges.length;
  const added = specials.map((content, i) => ({
    id: base + i,
    content,
    single_word: false,
    lstrip: false,
    rstrip: false,
    normalized: false,
    special: true,
  }));
  const byteLevel = { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false };
  const json = {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: { type: "NFC" },
    pre_tokenizer: {
      type: "Sequence",
      pretokenizers: [
        { type: "Split", pattern: { Regex: QWEN2_SPLIT_PATTERN }, behavior: "Isolated", invert: false },
        byteLevel,
      ],
    },
    post_processor: byteLevel,
    decoder: byteLevel,
    model: {
      type: "BPE",
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: "",
      end_of_word_suffix: "",
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab,
      merges,
    },
  };
  const config = {
    // transformers' class that tokenizes by tokenizer.json as it is (Qwen2Tokenizer would put its own
    // pre-tokenizer in place of a changed one, e.g. examples/torl's digit groups)
    tokenizer_class: "PreTrainedTokenizerFast",
    eos_token: specials[0],
    pad_token: specials[0],
    bos_token: null,
    unk_token: null,
    add_bos_token: false,
    add_prefix_space: false,
    clean_up_tokenization_spaces: false,
    model_max_length: 32768,
    split_special_tokens: false,
    additional_special_tokens: specials.slice(1),
  };
  return new Tokenizer(json, config);
}
