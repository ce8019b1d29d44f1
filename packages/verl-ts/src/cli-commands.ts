/** The commands @torl-ts/verl registers with the `torl` dispatcher (each module loads on first use). */
import type { CommandRegistry } from "@torl-ts/core";

export const cliCommands: CommandRegistry = {
  train: async () => (await import("./trainer/cli.js")).trainCommand,
  eval: async () => (await import("./evaluation/eval.js")).evalCommand,
  export: async () => (await import("./trainer/export-command.js")).exportCommand,
  verify: async () => (await import("./reward/cli.js")).verifyCommand,
  report: async () => (await import("./report/report.js")).reportCommand,
  "data tiny": async () => (await import("./tiny/data-command.js")).dataTinyCommand,
  "model tiny": async () => (await import("./tiny/model-command.js")).modelTinyCommand,
  pretrain: async () => (await import("./tiny/pretrain.js")).pretrainCommand,
  "new algorithm": async () => (await import("./scaffold/new-algorithm.js")).newAlgorithmCommand,
  "config print": async () => (await import("./config/print-command.js")).configPrintCommand,
  "bench reward": async () => (await import("./bench/reward.js")).benchRewardCommand,
  "bench model": async () => (await import("./bench/model.js")).benchModelCommand,
  "bench rollout": async () => (await import("./bench/rollout.js")).benchRolloutCommand,
  "bench memory": async () => (await import("./bench/memory.js")).benchMemoryCommand,
  "bench scale": async () => (await import("./bench/scale.js")).benchScaleCommand,
};
