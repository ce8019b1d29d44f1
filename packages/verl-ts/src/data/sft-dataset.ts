/**
 * The SFT trainer's data, as veRL's SFT datasets read it: single-turn rows (`data.prompt_key` and
 * `data.response_key` columns: the prompt as a string or a list of {role, content} messages, the
 * response as a string) or multi-turn rows (`data.multiturn.messages_key`: a list of messages, and
 * optionally `data.multiturn.tools_key`: the OpenAI function schemas the chat template lists).
 *
 * A conversation becomes tokens through the model's chat template, piece by piece: each assistant turn's
 * header (the template's generation prompt) and everything before it is context, the turn itself (its
 * content up to and including the end-of-turn token, the token the rollout stops at) is trained on, and
 * what the template writes after the end-of-turn token is context again. Each piece is tokenized on its
 * own, as the rollout tokenizes a prompt and then generates: the tokens the model learns are the tokens
 * it would generate in the multi-turn agent loop.
 */
import { InputError } from "@torl-ts/core";
import type { Tokenizer } from "../models/tokenizer.js";
import { DataProto } from "../protocol/data-proto.js";
import type { ChatTemplate, ChatTurn } from "../rollout/chat-template.js";
import type { OpenAIFunctionSchema } from "../rollout/tool.js";
import { DatasetFileError, readJsonlRecords, readParquetRecords } from "./rows.js";

/** One training conversation: its messages and the tools its template lists. */
export interface SftConversation {
  messages: ChatTurn[];
  tools?: OpenAIFunctionSchema[];
  /** Where it came from, for errors: the file and the row. */
  file: string;
  row: number;
}

/** How rows are read (veRL's data.* keys of the SFT trainer). */
export interface SftDataOptions {
  promptKey: string;
  responseKey: string;
  multiturn: { enable: boolean; messages_key: string; tools_key: string };
}

const ROLES = new Set(["system", "user", "assistant", "tool"]);

/** A list of {role, content} messages (roles system, user, assistant, tool), checked. */
function messagesOf(value: unknown, fail: (msg: string) => Error): ChatTurn[] {
  if (!Array.isArray(value) || value.length === 0)
    throw fail("must be a non-empty list of {role, content} messages");
  return value.map((m, i) => {
    const msg = m as { role?: unknown; content?: unknown } | null;
    if (!msg || typeof msg.role !== "string" || typeof msg.content !== "string")
      throw fail(`message ${i} must be {role: string, content: string}, got ${JSON.stringify(m)}`);
    if (!ROLES.has(msg.role))
      throw fail(`message ${i} has role "${msg.role}" (known: ${[...ROLES].join(", ")})`);
    return { role: msg.role as ChatTurn["role"], content: msg.content };
  });
}

/** One record as a conversation; errors name the file, row and column. */
export function toSftConversation(
  record: Record<string, unknown>,
  file: string,
  row: number,
  o: SftDataOptions,
): SftConversation {
  const fail = (column: string) => (msg: string) =>
    new DatasetFileError(file, `column "${column}" ${msg}`, column, row);
  let messages: ChatTurn[];
  let tools: OpenAIFunctionSchema[] | undefined;
  if (o.multiturn.enable) {
    const key = o.multiturn.messages_key;
    messages = messagesOf(record[key], fail(key));
    const t = record[o.multiturn.tools_key];
    if (t !== undefined && t !== null) {
      const parsed = typeof t === "string" ? safeJson(t) : t;
      if (!Array.isArray(parsed) || parsed.some((s) => !s || typeof s !== "object"))
        throw fail(o.multiturn.tools_key)("must be a list of function schemas (or its JSON text)");
      tools = parsed as OpenAIFunctionSchema[];
    }
  } else {
    const p = record[o.promptKey];
    messages = typeof p === "string" ? [{ role: "user", content: p }] : messagesOf(p, fail(o.promptKey));
    const r = record[o.responseKey];
    if (typeof r !== "string") throw fail(o.responseKey)(`must be a string, got ${JSON.stringify(r)}`);
    messages.push({ role: "assistant", content: r });
  }
  if (!messages.some((m) => m.role === "assistant"))
    throw new DatasetFileError(
      file,
      "the conversation has no assistant turn: there is nothing to train on",
      o.multiturn.messages_key,
      row,
    );
  return { messages, ...(tools ? { tools } : {}), file, row };
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** The columns a row needs under these options. */
function requiredColumns(o: SftDataOptions): string[] {
  return o.multiturn.enable ? [o.multiturn.messages_key] : [o.promptKey, o.responseKey];
}

/** Reads SFT conversations from parquet or JSONL files (by extension), concatenated in order. */
export async function readSftDataset(
  files: string | readonly string[],
  o: SftDataOptions,
): Promise<SftConversation[]> {
  const list = typeof files === "string" ? [files] : files;
  const out: SftConversation[] = [];
  for (const file of list) {
    let records: Record<string, unknown>[];
    if (/\.parquet$/i.test(file)) {
      const read = await readParquetRecords(file);
      for (const col of requiredColumns(o))
        if (!read.columns.has(col))
          throw new DatasetFileError(
            file,
            `missing column "${col}" (has: ${[...read.columns.keys()].join(", ")})`,
            col,
          );
      records = read.records;
    } else if (/\.jsonl?$/i.test(file)) {
      records = readJsonlRecords(file).map((r) => r.record);
      records.forEach((r, row) => {
        for (const col of requiredColumns(o))
          if (!(col in r)) throw new DatasetFileError(file, `missing column "${col}"`, col, row);
      });
    } else throw new DatasetFileError(file, "unknown dataset format (expected .parquet or .jsonl)");
    if (records.length === 0) throw new DatasetFileError(file, "the file holds no rows");
    out.push(...records.map((r, row) => toSftConversation(r, file, row, o)));
  }
  return out;
}

/** A conversation the chat template cannot turn into training tokens (names file, row and why). */
export class SftTokenizeError extends InputError {
  override name = "SftTokenizeError";
}

/** A conversation's tokens and its loss mask (1 on the tokens the model learns to generate). */
export interface SftExample {
  ids: number[];
  lossMask: number[];
}

/**
 * Tokens and loss mask of a conversation (see the file comment): 1 on every assistant turn's content
 * and its end-of-turn token (`tokenizer.eosTokenId`, which ends an assistant turn in the agent loop),
 * 0 on the rest.
 */
export function tokenizeConversation(
  conv: SftConversation,
  template: ChatTemplate,
  tokenizer: Tokenizer,
): SftExample {
  const where = `${conv.file} (row ${conv.row})`;
  const eos = tokenizer.eosTokenId;
  if (eos === undefined)
    throw new SftTokenizeError(`${tokenizer.source}: the tokenizer has no eos_token to end assistant turns`);
  const render = (k: number, generation: boolean) =>
    k === 0 && !generation
      ? ""
      : template.render(conv.messages.slice(0, k), { tools: conv.tools, addGenerationPrompt: generation });
  const ids: number[] = [];
  const lossMask: number[] = [];
  const pushIds = (t: readonly number[], trained: boolean) => {
    ids.push(...t);
    for (let i = 0; i < t.length; i++) lossMask.push(trained ? 1 : 0);
  };
  const push = (text: string, trained: boolean) => {
    if (text) pushIds(tokenizer.encode(text), trained);
  };
  let done = "";
  const extend = (next: string, what: string): string => {
    if (!next.startsWith(done))
      throw new SftTokenizeError(
        `${where}: the chat template does not render the conversation as a growing text at ${what} ` +
          "(an earlier part changes when later messages are added), so its assistant tokens cannot be found",
      );
    return next.slice(done.length);
  };
  conv.messages.forEach((m, k) => {
    if (m.role !== "assistant") return;
    // context up to the assistant header (the generation prompt), then the turn itself
    const header = render(k, true);
    push(extend(header, `message ${k} (the assistant header)`), false);
    done = header;
    const full = render(k + 1, false);
    const turn = extend(full, `message ${k}`);
    const t = tokenizer.encode(turn);
    const end = t.lastIndexOf(eos);
    if (end < 0)
      throw new SftTokenizeError(
        `${where}: assistant message ${k} does not end with the end-of-turn token ` +
          `${JSON.stringify(tokenizer.decode([eos]))} (the tokenizer's eos_token) in the chat template's text`,
      );
    // trained: the content and the end-of-turn token; what the template writes after it is context
    pushIds(t.slice(0, end + 1), true);
    pushIds(t.slice(end + 1), false);
    done = full;
  });
  if (conv.messages.at(-1)?.role !== "assistant")
    push(extend(render(conv.messages.length, false), "the last message"), false);
  return { ids, lossMask };
}

/** How an over-long conversation is handled (veRL's data.truncation). */
export type SftTruncation = "error" | "left" | "right";

/** An example cut to maxLength tokens, or the error truncation=error asks for. */
export function truncateExample(
  ex: SftExample,
  maxLength: number,
  truncation: SftTruncation,
  where: string,
): SftExample {
  if (ex.ids.length <= maxLength) return ex;
  if (truncation === "error")
    throw new SftTokenizeError(
      `${where}: ${ex.ids.length} tokens, more than data.max_length=${maxLength} ` +
        "(raise data.max_length, or set data.truncation=right or left)",
    );
  const from = truncation === "left" ? ex.ids.length - maxLength : 0;
  return { ids: ex.ids.slice(from, from + maxLength), lossMask: ex.lossMask.slice(from, from + maxLength) };
}

/**
 * A training batch of examples in the update's layout: the first token of each row is the "prompt"
 * (one column, never a target) and the rest the "response", right-padded to the longest row:
 * input_ids / attention_mask [B, L], responses / loss_mask / response_mask [B, L - 1]. Column t of
 * loss_mask says whether token t + 1 is trained on.
 */
export function sftBatch(examples: readonly SftExample[], padTokenId: number): DataProto {
  const B = examples.length;
  const L = Math.max(2, ...examples.map((e) => e.ids.length));
  const R = L - 1;
  const ids = new Int32Array(B * L).fill(padTokenId);
  const attn = new Int32Array(B * L);
  const responses = new Int32Array(B * R).fill(padTokenId);
  const mask = new Int32Array(B * R);
  const real = new Int32Array(B * R);
  examples.forEach((e, b) => {
    e.ids.forEach((id, t) => {
      ids[b * L + t] = id;
      attn[b * L + t] = 1;
      if (t > 0) {
        responses[b * R + t - 1] = id;
        mask[b * R + t - 1] = e.lossMask[t]!;
        real[b * R + t - 1] = 1;
      }
    });
  });
  return DataProto.fromDict({
    input_ids: { data: ids, shape: [B, L] },
    attention_mask: { data: attn, shape: [B, L] },
    responses: { data: responses, shape: [B, R] },
    loss_mask: { data: mask, shape: [B, R] },
    response_mask: { data: real, shape: [B, R] },
  });
}
