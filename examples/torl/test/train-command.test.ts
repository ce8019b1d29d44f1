/** The recipe's `train` is the trainer's train command with the recipe's config and run. */
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
  await t.throwsAsync(trainCommand.run([TINY_CONFIG, "--tool", "./my-tool.ts#MyTool"]), {
    instanceOf: UsageError,
    message: /sandboxed Python interpreter/,
  });
});
