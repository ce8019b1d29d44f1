/** The commands @torl-ts/verl registers with the `torl` dispatcher (each module loads on first use). */
import type { CommandRegistry } from "@torl-ts/core";

export const cliCommands: CommandRegistry = {
  train: async () => (await import("./train.js")).trainCommand,
  sft: async () => (await import("./sft.js")).sftCommand,
  eval: async () => (await import("./eval.js")).evalCommand,
  export: async () => (await import("./export.js")).exportCommand,
  verify: async () => (await import("./verify.js")).verifyCommand,
  report: async () => (await import("./report.js")).reportCommand,
  "data tiny": async () => (await import("./data-tiny.js")).dataTinyCommand,
  "model tiny": async () => (await import("./model-tiny.js")).modelTinyCommand,
  pretrain: async () => (await import("./pretrain.js")).pretrainCommand,
  "new algorithm": async () => (await import("./new-algorithm.js")).newAlgorithmCommand,
  "config print": async () => (await import("./config-print.js")).configPrintCommand,
  "bench reward": async () => (await import("../bench/reward.js")).benchRewardCommand,
  "bench model": async () => (await import("../bench/model.js")).benchModelCommand,
  "bench rollout": async () => (await import("../bench/rollout.js")).benchRolloutCommand,
  "bench memory": async () => (await import("../bench/memory.js")).benchMemoryCommand,
  "bench scale": async () => (await import("../bench/scale.js")).benchScaleCommand,
};
