/** The runtime's typed errors take their name from their class, so it cannot drift from it. */
import test from "ava";
import {
  ActorNotFoundError,
  ClusterAuthError,
  HeadError,
  KeyFileError,
  NotInitializedError,
  ObjectLostError,
  OptionalDependencyMissingError,
  OwnerDiedError,
  RemoteError,
  TorlError,
} from "../src/errors.js";
import { errorToWire } from "../src/wire/codec.js";

test("every typed error is named after its class, subclasses and classes defined elsewhere too", (t) => {
  class RecipeStepError extends TorlError {}
  const errors: [Error, string][] = [
    [new ActorNotFoundError("no actor 'x'"), "ActorNotFoundError"],
    [new HeadError("the head closed"), "HeadError"],
    [new NotInitializedError(), "NotInitializedError"],
    [new ObjectLostError("obj1", "freed"), "ObjectLostError"],
    [new OwnerDiedError("obj1", "worker-2"), "OwnerDiedError"],
    [new KeyFileError("/k.json", "missing"), "KeyFileError"],
    [new ClusterAuthError("tcp://10.0.0.1:6380", "no keys"), "ClusterAuthError"],
    [new OptionalDependencyMissingError("mathjs", "the mathjs scorer"), "OptionalDependencyMissingError"],
    [new RemoteError({ name: "TypeError", message: "bad" }, { task: "f" }), "RemoteError"],
    [new RecipeStepError("step 3"), "RecipeStepError"],
  ];
  for (const [error, name] of errors) {
    t.is(error.name, name);
    t.true(error instanceof TorlError, name);
    t.true(String(error.stack).startsWith(`${name}: `), `${name}'s stack starts with its name`);
    t.is(errorToWire(error).name, name, `${name} travels under its own name`);
  }
  t.true(
    new OwnerDiedError("obj1", "w").message.includes("(owner w)"),
    "a subclass keeps its parent's message",
  );
});
