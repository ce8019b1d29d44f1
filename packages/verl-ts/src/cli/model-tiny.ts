/**
 * `pnpm torl model tiny --out DIR`: writes the tiny base model this package ships (HF format: config.json,
 * model.safetensors, tokenizer.json, ...) into DIR, so a project outside the repository has a model to
 * train, evaluate and scaffold with. Any Hugging Face Qwen2 directory works in its place.
 */
import { resolve } from "node:path";
import { defineCommand, UsageError } from "@torl-ts/core";
import { writeTinyChatModel } from "../tiny/chat-model.js";
import { writeTinyBase } from "../tiny/write-base.js";

export const modelTinyCommand = defineCommand({
  summary: "write the tiny base model (a ~0.2M-parameter Qwen2, HF format) into DIR",
  usage: `usage: pnpm torl model tiny --out DIR [--chat] [--force]

Writes the tiny ToRL base model into DIR: config.json, model.safetensors, tokenizer.json,
tokenizer_config.json, generation_config.json, and how it was made (trainer_state.json,
pretrain_eval.json). It is a Qwen2-architecture causal LM pretrained on tool-integrated solutions to
the tiny recipe's arithmetic problems, small enough to train on a CPU. Use it wherever a model
directory goes; any Hugging Face Qwen2 directory (config.json, model.safetensors, tokenizer.json)
works the same way:
  pnpm torl data tiny --out data
  pnpm torl eval --model DIR --data data/test.parquet
  pnpm torl train my.yaml actor_rollout_ref.model.path=DIR data.train_files=data/train.parquet
  --chat    the tiny chat model: the same weights with a chat template (ChatML turns, hermes
            <tool_call> tool calls) and <|im_end|> as the eos, for \`torl sft\` and the multi-turn
            agent loop (actor_rollout_ref.rollout.multi_turn)
  --force   write into a DIR that already holds files`,
  flags: { out: { type: "string" }, chat: { type: "boolean" }, force: { type: "boolean" } },
  run(flags) {
    if (!flags.out) throw new UsageError("--out DIR is required");
    const write = flags.chat ? writeTinyChatModel : writeTinyBase;
    const files = write(flags.out, { force: flags.force });
    const what = flags.chat ? "tiny chat model" : "tiny base model";
    console.log(`wrote the ${what} to ${resolve(flags.out)} (${files.join(", ")})`);
  },
});
