import { pathToFileURL } from "node:url";
import test from "ava";
import { loadTrainerConfig, RayPPOTrainer, TrainerConfigError } from "../../src/index.js";
import { ExternalLibError, externalLibSpecifier, importExternalLib } from "../../src/workers/index.js";

test("external_lib: a path becomes an absolute file URL, a URL or a package name is kept", (t) => {
  t.is(externalLibSpecifier("./my/loss.ts", "/home/u/run"), pathToFileURL("/home/u/run/my/loss.ts").href);
  t.is(externalLibSpecifier("/opt/loss.mjs", "/x"), pathToFileURL("/opt/loss.mjs").href);
  t.is(externalLibSpecifier("file:///opt/loss.mjs"), "file:///opt/loss.mjs");
  t.is(externalLibSpecifier("my-losses-package"), "my-losses-package");
});

test("external_lib that cannot be imported fails with the key and the module named", async (t) => {
  await t.notThrowsAsync(importExternalLib(null));
  const e = await t.throwsAsync(importExternalLib("./no/such/module.ts"), { instanceOf: ExternalLibError });
  t.regex(
    e!.message,
    /actor_rollout_ref\.model\.external_lib=\.\/no\/such\/module\.ts could not be imported/,
  );
});

test("an unknown loss_mode without external_lib is refused before any worker starts", (t) => {
  const cfg = loadTrainerConfig({ overrides: ["actor_rollout_ref.actor.policy_loss.loss_mode=nope"] });
  t.throws(() => new RayPPOTrainer(cfg, { trainRows: [] }), {
    instanceOf: TrainerConfigError,
    message:
      /actor_rollout_ref\.actor\.policy_loss\.loss_mode "nope" is not a registered policy loss .*external_lib/,
  });
});
