/**
 * A tiny chat model that has learned one conversation in hermes format: call the calculator, then the
 * code interpreter, then answer. A random model never writes a well-formed <tool_call>, so the training
 * test starts from this one to see both tools called. Built in a few dozen supervised steps on whole
 * conversations rendered by the Qwen2.5 chat template, with the loss on the assistant's tokens only;
 * its tokenizer has BPE merges learned on those conversations, so sequences stay short.
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as tf from "@tensorflow/tfjs";
import {
  applyGradients,
  buildByteBpeTokenizer,
  ChatTemplate,
  createRandomPretrained,
  forwardBackward,
  padBatch,
  QWEN2_5_CHAT_TEMPLATE,
  readToolConfig,
  saveModel,
  Tokenizer,
} from "@torl-ts/verl";
import { calculatorRows } from "../src/train.js";
import { AGENT_TOOLS } from "../src/train-agent.js";

const call = (name: string, args: Record<string, string>) =>
  `<tool_call>\n${JSON.stringify({ name, arguments: args })}\n</tool_call>`;

/** The assistant turns the model learns, and what the tools answer between them. */
export const AGENT_HABIT = {
  turns: [
    call("calculator", { expression: "6*7" }),
    call("code_interpreter", { code: "print(6*7)" }),
    "\\boxed{42}",
  ],
  responses: ["42", "42"],
};

export async function agentHabitModel(steps = 40): Promise<{ dir: string; finalLoss: number }> {
  const template = new ChatTemplate("Qwen2.5", QWEN2_5_CHAT_TEMPLATE);
  const tools = readToolConfig(AGENT_TOOLS).map((e) => e.schema);
  // BPE merges learned on the conversations themselves keep the sequences (and the steps) short.
  const corpus = calculatorRows(8, 7)
    .map((r) =>
      template.render(
        [
          ...r.prompt.map((m) => ({ role: "user" as const, content: m.content })),
          ...AGENT_HABIT.turns.flatMap((content, k) => [
            { role: "assistant" as const, content },
            ...(AGENT_HABIT.responses[k]
              ? [{ role: "tool" as const, content: AGENT_HABIT.responses[k]! }]
              : []),
          ]),
        ],
        { tools },
      ),
    )
    .join("\n");
  const bytes = buildByteBpeTokenizer({ corpus, vocabSize: 1024 });
  const tokenizer = new Tokenizer(bytes.json, {
    ...bytes.config,
    eos_token: "<|im_end|>",
    chat_template: QWEN2_5_CHAT_TEMPLATE,
  });
  const imEnd = tokenizer.tokenToId("<|im_end|>")!;
  const dir = mkdtempSync(join(tmpdir(), "agent-habit-model-"));
  const model = createRandomPretrained(
    dir,
    tokenizer,
    { hiddenSize: 32, numHiddenLayers: 2, numAttentionHeads: 4, numKeyValueHeads: 2, intermediateSize: 64 },
    { seed: 9, std: 0.1 },
  );
  // Each conversation: the prompt, then own turns (trained on) and tool turns (context only).
  const rows = calculatorRows(2, 7).map((r) => {
    const messages = r.prompt.map((m) => ({ role: "user" as const, content: m.content }));
    const ids = tokenizer.encode(template.render(messages, { tools, addGenerationPrompt: true }));
    const trained: number[] = ids.map(() => 0);
    AGENT_HABIT.turns.forEach((turn, k) => {
      const own = [...tokenizer.encode(turn), imEnd];
      ids.push(...own);
      trained.push(...own.map(() => 1));
      const response = AGENT_HABIT.responses[k];
      if (response === undefined) return;
      const toolTurn = tokenizer.encode(
        template.toolTurnsText([{ role: "tool", content: response }], "<|im_end|>"),
      );
      ids.push(...toolTurn);
      trained.push(...toolTurn.map(() => 0));
    });
    return { ids, trained };
  });
  const batch = padBatch(
    rows.map((r) => r.ids),
    "right",
    tokenizer.padTokenId,
  );
  const L = batch.length;
  const target = new Float32Array(batch.batch * L);
  rows.forEach((r, b) => {
    target.set(r.trained, b * L);
  });
  const count = target.reduce((a, x) => a + x, 0);
  const optimizer = tf.train.adam(3e-2);
  let finalLoss = Number.NaN;
  for (let step = 0; step < steps; step++) {
    const { loss, grads } = await forwardBackward(model, batch, ({ rows: [s, e], scores }) => {
      const m = tf.tensor2d(target.subarray(s * L, e * L), [e - s, L]);
      return tf.div(tf.neg(tf.sum(tf.mul(scores.logProbs, m))), count) as tf.Scalar;
    });
    applyGradients(model, optimizer, grads);
    finalLoss = loss;
  }
  await saveModel(model, dir, { tokenizer });
  return { dir, finalLoss };
}
