import * as tf from "@tensorflow/tfjs";
import { padBatch, type Qwen2Model, type Tokenizer } from "../../src/models/index.js";
import type { OpenAIFunctionSchema, Tool, ToolCall, ToolResult } from "../../src/rollout/index.js";

/**
 * A second, tiny tool with its own trigger, to show the rollout is generic: it "measures" the round,
 * answering the length of the text the model wrote in it, wrapped in [[...]]. An optional delay per call
 * (ms, by call number) simulates a slow backend.
 */
export class LengthTool implements Tool {
  readonly name = "length";
  readonly schema: OpenAIFunctionSchema = {
    type: "function",
    function: {
      name: "length",
      description: "Counts the characters written in this round.",
      parameters: { type: "object", properties: { n: { type: "number" } }, required: ["n"] },
    },
  };
  readonly stop: string[];
  calls = 0;
  batches: number[] = [];
  created = 0;
  released = 0;

  constructor(
    trigger: string,
    private readonly delayMs: (call: number) => number = () => 0,
  ) {
    this.stop = [trigger];
  }

  parse(roundText: string): ToolCall | undefined {
    return { name: this.name, arguments: { n: roundText.length } };
  }

  async create(): Promise<string> {
    this.created++;
    return `len-${this.created}`;
  }

  async execute(_id: string, call: ToolCall): Promise<ToolResult> {
    const k = this.calls++;
    const ms = this.delayMs(k);
    if (ms > 0) await new Promise((r) => setTimeout(r, ms));
    const n = Number(call.arguments.n);
    return { observation: String(n), text: `[[${n}]]`, success: n % 2 === 0 };
  }

  async executeBatch(items: { instanceId: string; call: ToolCall }[]): Promise<ToolResult[]> {
    this.batches.push(items.length);
    return Promise.all(items.map((it) => this.execute(it.instanceId, it.call)));
  }

  async release(): Promise<void> {
    this.released++;
  }
}

/** Greedy next tokens of a full forward over prompt + response: out[t] = argmax after response[0..t). */
export function greedyTargets(model: Qwen2Model, prompt: number[], response: number[]): number[] {
  const seq = [...prompt, ...response];
  const am = tf.tidy(() => tf.argMax(model.forward(padBatch([seq])), -1));
  const all = Array.from(am.dataSync());
  am.dispose();
  return response.map((_, t) => all[prompt.length + t - 1]!);
}

/**
 * A logits processor that makes a random model write `scripts[k]` in round k (the rounds after each
 * appended observation, found by counting "```output\n" blocks), then EOS after the last script.
 * Outside a script (text that does not follow it) it leaves the logits alone.
 */
export function scriptedProcessor(tokenizer: Tokenizer, scripts: string[], eos: number) {
  return (_index: number, responseIds: readonly number[], logits: Float32Array): void => {
    const text = tokenizer.decode(responseIds as number[], true);
    const k = text.split("```output\n").length - 1;
    const start = k === 0 ? 0 : text.indexOf("\n```\n", text.lastIndexOf("```output\n")) + 5;
    const round = text.slice(start);
    const script = scripts[k];
    if (script === undefined || !script.startsWith(round)) return;
    const next =
      round.length < script.length
        ? tokenizer.encode(script[round.length]!)[0]!
        : k === scripts.length - 1
          ? eos
          : -1;
    if (next < 0) return;
    logits.fill(Number.NEGATIVE_INFINITY);
    logits[next] = 0;
  };
}
