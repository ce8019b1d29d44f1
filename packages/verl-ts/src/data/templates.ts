import { InputError } from "@torl-ts/core";
import type { ChatMessage } from "./rows.js";

/** Turns a prompt's messages into the text the model sees. */
export type PromptTemplate = (messages: readonly ChatMessage[]) => string;

/** An unknown template name or a prompt a template cannot render. */
export class PromptTemplateError extends InputError {
  override name = "PromptTemplateError";
}

const templates = new Map<string, PromptTemplate>();

/** Registers a template under `data.template_type` name `name` (replacing one of that name). */
export function registerPromptTemplate(name: string, fn: PromptTemplate): void {
  if (typeof name !== "string" || name === "")
    throw new PromptTemplateError(
      `registerPromptTemplate: the name must be a non-empty string, got ${typeof name === "string" ? '""' : (JSON.stringify(name) ?? String(name))}`,
    );
  if (typeof fn !== "function")
    throw new PromptTemplateError(
      `registerPromptTemplate(${JSON.stringify(name)}): the template must be a function (messages) => string, got ${typeof fn === "string" ? JSON.stringify(fn) : fn === null ? "null" : typeof fn}`,
    );
  templates.set(name, fn);
}

export function getPromptTemplate(name: string): PromptTemplate {
  const t = templates.get(name);
  if (!t) {
    throw new PromptTemplateError(
      `unknown template_type "${name}" (known: ${[...templates.keys()].sort().join(", ")})`,
    );
  }
  return t;
}

export function listPromptTemplates(): string[] {
  return [...templates.keys()].sort();
}

/** Renders `messages` with the template named `name`; a result that is not a string is refused. */
export function renderPrompt(name: string, messages: readonly ChatMessage[]): string {
  const text = getPromptTemplate(name)(messages) as unknown;
  if (typeof text !== "string") {
    const got =
      text === null || text === undefined
        ? String(text)
        : typeof (text as { then?: unknown }).then === "function"
          ? "a Promise (templates are synchronous)"
          : Array.isArray(text)
            ? "an array"
            : typeof text;
    throw new PromptTemplateError(
      `prompt template "${name}" (data.template_type) returned ${got}; a template must return the prompt text as a string`,
    );
  }
  return text;
}

/** The last user message's content: the question. */
export function questionOf(messages: readonly ChatMessage[]): string {
  for (let i = messages.length - 1; i >= 0; i--)
    if (messages[i]!.role === "user") return messages[i]!.content;
  throw new PromptTemplateError("the prompt has no user message");
}

export const TIR_BASE_0309_PREFIX =
  "A conversation between User and Assistant. The user asks a question, and the Assistant solves it.\n" +
  "User: Please integrate natural language reasoning with programs to solve the problem above, and put your final answer within \\boxed{}.\n";

/**
 * ToRL's tir_base_0309: raw text, no chat template; the question (last user message) fills [PROMPT]:
 * "A conversation between User and Assistant. ... within \boxed{}.\n[PROMPT]\nAssistant:\n".
 * System messages are ignored.
 */
export function tirBase0309Template(messages: readonly ChatMessage[]): string {
  return `${TIR_BASE_0309_PREFIX}${questionOf(messages)}\nAssistant:\n`;
}

/**
 * A plain ChatML chat template (Qwen's format): every message as
 * "<|im_start|>{role}\n{content}<|im_end|>\n", then "<|im_start|>assistant\n".
 */
export function chatMlTemplate(messages: readonly ChatMessage[]): string {
  let s = "";
  for (const m of messages) s += `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`;
  return `${s}<|im_start|>assistant\n`;
}

registerPromptTemplate("tir_base_0309", tirBase0309Template);
registerPromptTemplate("chat", chatMlTemplate);
registerPromptTemplate("chatml", chatMlTemplate);

/**
 * data.template_type=model: the model's own chat template from its tokenizer_config.json. Rendering it
 * needs the tokenizer (and, for the multi-turn agent loop, the tools), so the trainer renders these
 * prompts with `modelPromptRenderer(config, tokenizer)`; the registered entry only reserves the name.
 */
registerPromptTemplate("model", () => {
  throw new PromptTemplateError(
    'template_type "model" renders with the model\'s chat template: use modelPromptRenderer(config, tokenizer) (the trainer does) or ChatTemplate.fromTokenizer(tokenizer).render(messages)',
  );
});
