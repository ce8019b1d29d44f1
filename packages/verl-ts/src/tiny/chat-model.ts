/**
 * The tiny chat model and its cold-start data: the tiny base model with a chat template (ChatML turns
 * with hermes tool calls, as Qwen2.5's, but a system turn that only names the tools, so that prompts
 * stay short for a two-layer model) whose end-of-turn token `<|im_end|>` is the tokenizer's eos, and tool-using
 * conversations from the tiny task generator: the question, a `code_interpreter` call with the
 * problem's program, the tool's output, and the boxed answer.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Problem } from "../data/tiny-problems.js";
import type { ChatTurn } from "../rollout/chat-template.js";
import type { OpenAIFunctionSchema } from "../rollout/tool.js";
import { writeTinyBase } from "./write-base.js";

/** The tiny chat model's template (Jinja, as tokenizer_config.json's chat_template). */
export const TINY_CHAT_TEMPLATE = `{%- if tools %}
    {{- '<|im_start|>system\\nTools:' }}
    {%- for tool in tools %}
        {{- ' ' + tool.function.name }}
    {%- endfor %}
    {{- '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == "tool" %}
        {{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
`;

/**
 * Writes the tiny chat model into `out`: the tiny base's files, with tokenizer_config.json carrying
 * TINY_CHAT_TEMPLATE and `<|im_end|>` as the eos (an assistant turn ends there) and generation_config.json
 * stopping at both `<|im_end|>` and `<|endoftext|>`.
 */
export function writeTinyChatModel(out: string, options: { force?: boolean } = {}): string[] {
  const files = writeTinyBase(out, options);
  const tcFile = join(out, "tokenizer_config.json");
  const tc = JSON.parse(readFileSync(tcFile, "utf8")) as Record<string, unknown>;
  writeFileSync(
    tcFile,
    `${JSON.stringify({ ...tc, eos_token: "<|im_end|>", pad_token: "<|endoftext|>", chat_template: TINY_CHAT_TEMPLATE }, null, 2)}\n`,
  );
  const tok = JSON.parse(readFileSync(join(out, "tokenizer.json"), "utf8")) as {
    added_tokens?: { id: number; content: string }[];
  };
  const id = (s: string) => tok.added_tokens?.find((t) => t.content === s)?.id;
  const gcFile = join(out, "generation_config.json");
  const gc = JSON.parse(readFileSync(gcFile, "utf8")) as Record<string, unknown>;
  writeFileSync(
    gcFile,
    `${JSON.stringify({ ...gc, eos_token_id: [id("<|im_end|>"), id("<|endoftext|>")] }, null, 2)}\n`,
  );
  return files;
}

/** The code interpreter's schema as the tiny chat model's conversations list it. */
export const TINY_CODE_TOOL: OpenAIFunctionSchema = {
  type: "function",
  function: {
    name: "code_interpreter",
    description: "Runs Python code and returns what it printed.",
    parameters: {
      type: "object",
      properties: { code: { type: "string", description: "The Python code to run." } },
      required: ["code"],
    },
  },
};

/** One tool-using conversation of a problem (see the file comment). */
export function tinyToolConversation(problem: Problem): ChatTurn[] {
  const call = JSON.stringify({ name: "code_interpreter", arguments: { code: problem.code } });
  return [
    { role: "user", content: problem.question },
    { role: "assistant", content: `<tool_call>\n${call}\n</tool_call>` },
    { role: "tool", content: problem.answer },
    { role: "assistant", content: `The answer is \\boxed{${problem.answer}}.` },
  ];
}

/** Parquet rows of tool-using conversations (veRL's multi-turn SFT schema: messages, tools as JSON). */
export function tinySftRows(problems: readonly Problem[]): { messages: ChatTurn[]; tools: string }[] {
  const tools = JSON.stringify([TINY_CODE_TOOL]);
  return problems.map((p) => ({ messages: tinyToolConversation(p), tools }));
}
