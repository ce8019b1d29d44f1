/** The bench commands' flags: parsed before any work starts, both spellings alike, bad values named. */
import { UsageError } from "@torl-ts/core";
import test from "ava";
import { benchModelCommand } from "../../src/bench/model.js";
import { benchRewardCommand } from "../../src/bench/reward.js";
import { benchRolloutCommand } from "../../src/bench/rollout.js";

test("bench model/rollout/reward refuse bad flags before measuring, naming the flag and the choices", async (t) => {
  await t.throwsAsync(benchModelCommand.run(["--backend", "gpu"]), {
    instanceOf: UsageError,
    message: "--backend must be one of auto, node-gpu, webgpu, node, wasm, cpu; got 'gpu'",
  });
  await t.throwsAsync(benchModelCommand.run(["--model=huge"]), {
    message: /^--model must be one of tiny, small/,
  });
  await t.throwsAsync(benchRolloutCommand.run(["--batch=x"]), {
    message: "--batch must be an integer >= 1, got 'x'",
  });
  await t.throwsAsync(benchRolloutCommand.run(["--batch", "x"]), {
    message: "--batch must be an integer >= 1, got 'x'",
  });
  await t.throwsAsync(benchRolloutCommand.run(["--backend=metal"]), { message: /^--backend must be one of/ });
  await t.throwsAsync(benchRolloutCommand.run(["--model", "m", "--random"]), {
    message: /exclude each other/,
  });
  await t.throwsAsync(benchRewardCommand.run(["--seconds=0", "--json"]), {
    message: /^--seconds must be a number >= 0\.01/,
  });
  await t.throwsAsync(benchRewardCommand.run(["--json=yes"]), { message: "--json takes no value" });
});
