/**
 * The model's own chat template (the Jinja `chat_template` of its tokenizer_config.json), rendered with
 * @huggingface/jinja, as Hugging Face's `apply_chat_template` does: variables `messages`, `tools` (OpenAI
 * function schemas), `add_generation_prompt`, `bos_token` and `eos_token` (the library defines `raise_exception` itself).
 *
 * The multi-turn rollout needs one more thing: the text of tool turns to splice after an assistant turn
 * the model ended with its end-of-turn token. `toolTurnsText` renders a short conversation with and
 * without the tool turns and keeps the difference, so the token stream the model sees is the one the
 * template gives for the whole conversation (including what the template writes after the end-of-turn
 * token, e.g. ChatML's newline, which the model itself does not generate).
 */
import { Template } from "@huggingface/jinja";
import { InputError } from "@torl-ts/core";
import type { Tokenizer } from "../models/tokenizer.js";
import type { OpenAIFunctionSchema } from "./tool.js";

/** A chat message as chat templates read it (`tool` turns carry a tool's response). */
export interface ChatTurn {
  role: "system" | "user" | "assistant" | "tool";
  content: string;
}

/** A model directory without a usable chat template, or a template that fails to render. */
export class ChatTemplateError extends InputError {
  override name = "ChatTemplateError";
  constructor(
    readonly source: string,
    message: string,
  ) {
    super(`${source}: ${message}`);
  }
}

export interface RenderOptions {
  /** Function schemas the template lists for the model (hermes templates put them in the system turn). */
  tools?: readonly OpenAIFunctionSchema[];
  /** End with the header of a new assistant turn. */
  addGenerationPrompt?: boolean;
}

/** Stands for an assistant turn's text while measuring what the template writes around it. */
const TURN_PROBE = "\u2063assistant-turn-probe\u2063";

export class ChatTemplate {
  private readonly template: Template;

  constructor(
    readonly source: string,
    text: string,
    private readonly specials: { bosToken?: string; eosToken?: string } = {},
  ) {
    try {
      this.template = new Template(text);
    } catch (e) {
      throw new ChatTemplateError(source, `chat_template does not parse: ${(e as Error).message}`);
    }
  }

  /**
   * The chat template of a tokenizer's tokenizer_config.json (`chat_template`: a string, or a list of
   * `{name, template}`, of which `tool_use` is taken when present, else `default`).
   */
  static fromTokenizer(tokenizer: Tokenizer): ChatTemplate {
    const source = tokenizer.source.replace(/tokenizer\.json$/, "tokenizer_config.json");
    const raw = tokenizer.config.chat_template as unknown;
    let text: string | undefined;
    if (typeof raw === "string") text = raw;
    else if (Array.isArray(raw)) {
      const named = raw as { name?: string; template?: string }[];
      text = (named.find((t) => t.name === "tool_use") ?? named.find((t) => t.name === "default"))?.template;
    }
    if (!text)
      throw new ChatTemplateError(
        source,
        "has no chat_template: the model's chat format is unknown (use an instruct model's tokenizer_config.json, or add its chat_template)",
      );
    const token = (v: unknown) =>
      typeof v === "string" ? v : ((v as { content?: string } | null)?.content ?? undefined);
    return new ChatTemplate(source, text, {
      bosToken: token(tokenizer.config.bos_token),
      eosToken: token(tokenizer.config.eos_token),
    });
  }

  /** The conversation as the model's prompt text. */
  render(messages: readonly ChatTurn[], options: RenderOptions = {}): string {
    try {
      return this.template.render({
        messages: messages.map((m) => ({ ...m })),
        ...(options.tools?.length ? { tools: options.tools.map((t) => structuredClone(t)) } : {}),
        add_generation_prompt: options.addGenerationPrompt ?? false,
        bos_token: this.specials.bosToken ?? "",
        eos_token: this.specials.eosToken ?? "",
      });
    } catch (e) {
      throw new ChatTemplateError(this.source, `chat_template failed to render: ${(e as Error).message}`);
    }
  }

  /**
   * The text that follows an assistant turn ended by the token `endOfTurn` (its text, e.g.
   * "<|im_end|>"): whatever the template writes after that token, the `tool` turns, and the header of
   * the next assistant turn.
   */
  toolTurnsText(toolTurns: readonly ChatTurn[], endOfTurn: string): string {
    const head: ChatTurn[] = [
      { role: "user", content: "?" },
      { role: "assistant", content: TURN_PROBE },
    ];
    const before = this.render(head);
    const after = this.render([...head, ...toolTurns], { addGenerationPrompt: true });
    const end = before.lastIndexOf(TURN_PROBE + endOfTurn);
    if (end < 0)
      throw new ChatTemplateError(
        this.source,
        `chat_template does not end an assistant turn with ${JSON.stringify(endOfTurn)} (the token that ended the model's turn)`,
      );
    if (!after.startsWith(before))
      throw new ChatTemplateError(
        this.source,
        "chat_template renders earlier turns differently once tool turns follow; tool turns cannot be appended",
      );
    return before.slice(end + TURN_PROBE.length + endOfTurn.length) + after.slice(before.length);
  }
}
