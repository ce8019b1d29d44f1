// The ToRL example's commands, gathered for the CLI dispatcher (cli.ts imports this lazily).

export { mainCommand, trainCommand } from "./recipe.js";
