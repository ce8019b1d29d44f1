export type { CliCommand } from "./cli-command.js";
export { UsageError } from "./cli-command.js";
