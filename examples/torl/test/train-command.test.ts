/** The recipe's `train` is the trainer's train command with the recipe's config and run. */
import { fileURLToPath } from "node:url";
import { UsageError } from "@torl-ts/core";
import { trainCommand as trainerTrainCommand } from "@torl-ts/verl";
import test from "ava";
import { TINY_CONFIG, trainCommand } from "../src/recipe.js";

test("the recipe's train reads the trainer's command line: the same --tool check, then its own refusal", async (t) => {
  for (const command of [trainerTrainCommand, trainCommand])
    await t.throwsAsync(command.run([TINY_CONFIG, "--tool", "nohash"]), {
      instanceOf: UsageError,
      message: /MODULE#EXPORT/,
    });
  // a module that exists (a missing one is refused first, by the trainer's flag check)
  await t.throwsAsync(trainCommand.run([TINY_CONFIG, "--tool", `${fileURLToPath(import.meta.url)}#MyTool`]), {
    instanceOf: UsageError,
    message: /sandboxed Python interpreter/,
  });
});
