import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import { loadSftConfig } from "../../src/config/index.js";
import {
  DatasetFileError,
  readSftDataset,
  SftTokenizeError,
  sftBatch,
  tokenizeConversation,
  writeParquetRows,
} from "../../src/data/index.js";
import { ChatTemplate, QWEN2_5_CHAT_TEMPLATE } from "../../src/rollout/index.js";
import { chatTokenizer, toolConversations } from "./sft-helpers.js";

const tok = chatTokenizer();
const template = new ChatTemplate("Qwen2.5", QWEN2_5_CHAT_TEMPLATE);
const tmp = () => mkdtempSync(join(tmpdir(), "torl-sft-data-"));

/** The trained tokens, as one string per maximal run of 1s in the mask. */
function trainedSpans(ids: number[], mask: number[]): string[] {
  const spans: string[] = [];
  let cur: number[] = [];
  ids.forEach((id, i) => {
    if (mask[i]) cur.push(id);
    else if (cur.length) {
      spans.push(tok.decode(cur));
      cur = [];
    }
  });
  if (cur.length) spans.push(tok.decode(cur));
  return spans;
}

test("single-turn: the loss mask covers exactly the response and its end-of-turn token", (t) => {
  const conv = {
    messages: [
      { role: "user" as const, content: "What is 6*7?" },
      { role: "assistant" as const, content: "It is \\boxed{42}." },
    ],
    file: "f",
    row: 0,
  };
  const ex = tokenizeConversation(conv, template, tok);
  // the whole text is the template's rendering of the conversation
  t.is(tok.decode(ex.ids), template.render(conv.messages));
  t.deepEqual(trainedSpans(ex.ids, ex.lossMask), ["It is \\boxed{42}.<|im_end|>"]);
  // the prompt part is exactly what the rollout is given (the generation prompt), untrained
  const prompt = template.render(conv.messages.slice(0, 1), { addGenerationPrompt: true });
  const first = ex.lossMask.indexOf(1);
  t.is(tok.decode(ex.ids.slice(0, first)), prompt);
  t.deepEqual(ex.ids.slice(0, first), tok.encode(prompt));
});

test("multi-turn: the loss mask covers every assistant turn and nothing of the system, user or tool turns", (t) => {
  const [conv] = toolConversations(1);
  const tools = [
    {
      type: "function" as const,
      function: { name: "calc", description: "d", parameters: { type: "object" } },
    },
  ];
  for (const c of [conv!, { ...conv!, tools }]) {
    const ex = tokenizeConversation(c, template, tok);
    t.is(tok.decode(ex.ids), template.render(c.messages, { tools: c.tools }));
    t.deepEqual(trainedSpans(ex.ids, ex.lossMask), [
      `${c.messages[1]!.content}<|im_end|>`,
      `${c.messages[3]!.content}<|im_end|>`,
    ]);
  }
  // sftBatch: loss_mask column t is token t + 1's mask
  const ex = tokenizeConversation(conv!, template, tok);
  const b = sftBatch([ex, { ids: ex.ids.slice(0, 5), lossMask: [0, 0, 0, 1, 1] }], tok.padTokenId);
  const R = b.tensor("responses").shape[1]!;
  t.is(R, ex.ids.length - 1);
  t.deepEqual(Array.from(b.tensor("loss_mask").data.slice(0, R)), ex.lossMask.slice(1));
  t.deepEqual(Array.from(b.tensor("loss_mask").data.slice(R, R + 6)), [0, 0, 1, 1, 0, 0]);
  t.deepEqual(Array.from(b.tensor("attention_mask").data.slice(R + 1, R + 1 + 6)), [1, 1, 1, 1, 1, 0]);
});

test("a template whose assistant turns do not end with the eos token is refused, naming the row", (t) => {
  const noEnd = new ChatTemplate("t", "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}");
  const [conv] = toolConversations(1, "data.parquet");
  const e = t.throws(() => tokenizeConversation(conv!, noEnd, tok), { instanceOf: SftTokenizeError });
  t.regex(e!.message, /data\.parquet \(row 0\): assistant message 1 does not end with the end-of-turn token/);
});

const opts = (multi: boolean) => ({
  promptKey: "prompt",
  responseKey: "response",
  multiturn: { enable: multi, messages_key: "messages", tools_key: "tools" },
});

test("bad data: missing column, empty file, no assistant turn, bad message each name the file, column and row", async (t) => {
  const dir = tmp();
  const single = join(dir, "single.parquet");
  writeParquetRows(single, [{ prompt: "hi", answer: "x" }]);
  let e = await t.throwsAsync(readSftDataset(single, opts(false)), { instanceOf: DatasetFileError });
  t.regex(e!.message, /single\.parquet: missing column "response" \(has: prompt, answer\)/);

  const empty = join(dir, "empty.jsonl");
  writeFileSync(empty, "\n");
  e = await t.throwsAsync(readSftDataset(empty, opts(true)), { instanceOf: DatasetFileError });
  t.regex(e!.message, /empty\.jsonl: the file holds no rows/);

  const noAssistant = join(dir, "chat.jsonl");
  const rows = [
    {
      messages: [
        { role: "user", content: "a" },
        { role: "assistant", content: "b" },
      ],
    },
    { messages: [{ role: "user", content: "a" }] },
  ];
  writeFileSync(noAssistant, rows.map((r) => JSON.stringify(r)).join("\n"));
  e = await t.throwsAsync(readSftDataset(noAssistant, opts(true)), { instanceOf: DatasetFileError });
  t.regex(e!.message, /chat\.jsonl \(row 1\): the conversation has no assistant turn/);

  const badRole = join(dir, "role.jsonl");
  writeFileSync(badRole, JSON.stringify({ messages: [{ role: "bot", content: "b" }] }));
  e = await t.throwsAsync(readSftDataset(badRole, opts(true)), { instanceOf: DatasetFileError });
  t.regex(e!.message, /role\.jsonl \(row 0\): column "messages" message 0 has role "bot"/);

  // single-turn parquet rows read as prompt + assistant response
  const good = join(dir, "good.parquet");
  writeParquetRows(good, [{ prompt: "hi", response: "there" }]);
  const [c] = await readSftDataset(good, opts(false));
  t.deepEqual(c!.messages, [
    { role: "user", content: "hi" },
    { role: "assistant", content: "there" },
  ]);
});

test("config: an unknown key is refused with a hint; required keys and LoRA without adapters are named", (t) => {
  let e = t.throws(() => loadSftConfig({ overrides: ["data.train_batch_sise=4"] }));
  t.regex(e!.message, /data\.train_batch_sise.*train_batch_size/);
  e = t.throws(() => loadSftConfig({ overrides: [] }));
  t.regex(e!.message, /model\.partial_pretrain is not set/);
  t.regex(e!.message, /data\.train_files is not set/);
  e = t.throws(() =>
    loadSftConfig({
      overrides: ["model.partial_pretrain=m", "data.train_files=f.parquet", "optim.lr_scheduler=wsd"],
    }),
  );
  t.regex(e!.message, /optim\.lr_scheduler/);
});
