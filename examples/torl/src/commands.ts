// The ToRL example's commands, gathered for the CLI dispatcher (cli.ts imports this lazily).

export { evalCommand } from "@torl-ts/verl";
export { dataTinyCommand } from "./data-command.js";
export { newAlgorithmCommand } from "./new-algorithm.js";
export { pretrainCommand } from "./pretrain.js";
export { mainCommand, trainCommand } from "./recipe.js";
export { reportCommand } from "./report.js";
