/** Shared setup of the SFT tests: a tiny random chat model (Qwen2.5's chat template) and conversations. */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadSftConfig, type SftConfig } from "../../src/config/index.js";
import type { SftConversation } from "../../src/data/index.js";
import { buildByteBpeTokenizer, createRandomPretrained, Tokenizer } from "../../src/models/index.js";
import { QWEN2_5_CHAT_TEMPLATE } from "../../src/rollout/index.js";
import { TINY_TEST_ARCH } from "../models/tiny-config.js";

/** A byte-level tokenizer whose eos is ChatML's end of turn, with Qwen2.5's chat template. */
export function chatTokenizer(): Tokenizer {
  const bytes = buildByteBpeTokenizer();
  return new Tokenizer(bytes.json, {
    ...bytes.config,
    eos_token: "<|im_end|>",
    pad_token: "<|endoftext|>",
    chat_template: QWEN2_5_CHAT_TEMPLATE,
  });
}

/** A random tiny chat model saved in a temporary directory. */
export function chatModelDir(seed = 3): string {
  const dir = mkdtempSync(join(tmpdir(), "torl-sft-model-"));
  createRandomPretrained(dir, chatTokenizer(), TINY_TEST_ARCH, { seed, std: 0.1 });
  return dir;
}

/** n short conversations: a question, a tool call, the tool's answer, the final answer. */
export function toolConversations(n: number, file = "<test>"): SftConversation[] {
  return Array.from({ length: n }, (_, i) => {
    const a = 2 + (i % 7);
    const b = 3 + (i % 5);
    return {
      messages: [
        { role: "user", content: `${a}*${b}?` },
        {
          role: "assistant",
          content: `<tool_call>\n{"name": "calc", "arguments": {"e": "${a}*${b}"}}\n</tool_call>`,
        },
        { role: "tool", content: String(a * b) },
        { role: "assistant", content: `\\boxed{${a * b}}` },
      ],
      file,
      row: i,
    };
  });
}

/** An SFT config for the tiny model: `steps` steps of `batch` rows, micro-batches of `micro`. */
export function tinySftConfig(o: {
  modelPath: string;
  ckptDir: string;
  steps: number;
  batch?: number;
  micro?: number;
  ranks?: number;
  lr?: number;
  saveFreq?: number;
  extra?: string[];
}): SftConfig {
  return loadSftConfig({
    overrides: [
      `model.partial_pretrain=${o.modelPath}`,
      "data.train_files=unused.parquet",
      "data.multiturn.enable=true",
      `data.train_batch_size=${o.batch ?? 8}`,
      `data.micro_batch_size_per_gpu=${o.micro ?? 4}`,
      `optim.lr=${o.lr ?? 1e-2}`,
      "optim.lr_warmup_steps_ratio=0.25",
      "optim.weight_decay=0",
      `trainer.total_training_steps=${o.steps}`,
      `trainer.n_gpus_per_node=${o.ranks ?? 1}`,
      `trainer.save_freq=${o.saveFreq ?? -1}`,
      `trainer.default_local_dir=${o.ckptDir}`,
      "trainer.logger=[console]",
      "trainer.experiment_name=sft-test",
      ...(o.extra ?? []),
    ],
  });
}
