// The options of actors, tasks, kill and get/wait are checked where they are given: a value of the
// wrong type or range, or an unknown key, throws at once naming the option; nothing is accepted and
// then ignored or turned into something else (a maxConcurrency of 0 run as 1, env values as strings).
import {
  actor,
  get,
  getActor,
  init,
  kill,
  ResourceRequestError,
  shutdown,
  task,
  wait,
} from "@torl-ts/actors";
import test from "ava";
import { add, addTask, Counter, CounterActor } from "./fixtures/classes.js";

test.before(async () => {
  await init({ numCpus: 2 });
});
test.after.always(async () => {
  await shutdown();
});

type Case = [options: Record<string, unknown>, error: new (...a: never[]) => Error, message: RegExp];

const ACTOR_CASES: Case[] = [
  [{ maxConcurrency: 0 }, RangeError, /actor Counter: maxConcurrency must be an integer >= 1, got 0$/],
  [{ maxConcurrency: -1 }, RangeError, /maxConcurrency must be an integer >= 1, got -1/],
  [{ maxConcurrency: 1.5 }, RangeError, /maxConcurrency must be an integer >= 1, got 1.5/],
  [{ maxConcurrency: "4" }, RangeError, /maxConcurrency must be an integer >= 1, got "4"/],
  [
    { maxRestarts: Number.NaN },
    RangeError,
    /maxRestarts must be an integer >= -1 \(-1: unlimited\), got NaN/,
  ],
  [{ maxRestarts: -5 }, RangeError, /maxRestarts must be an integer >= -1 \(-1: unlimited\), got -5/],
  [{ maxTaskRetries: -5 }, RangeError, /maxTaskRetries must be an integer >= 0, got -5/],
  [{ lifetime: "forever" }, TypeError, /lifetime must be "detached" \(or left out\), got "forever"/],
  [{ bundleIndex: 3 }, TypeError, /bundleIndex is a bundle of a placement group: give placementGroup too/],
  [{ bundleIndex: 0.5, placementGroup: "pg-x" }, RangeError, /bundleIndex must be an integer >= -1/],
  [{ placementGroup: 5 }, TypeError, /placementGroup must be a PlacementGroup or its id, got 5/],
  [{ name: 123 }, TypeError, /name must be a non-empty string, got 123/],
  [{ name: "" }, TypeError, /name must be a non-empty string, got ""/],
  [{ thread: "false" }, TypeError, /thread must be true or false, got "false"/],
  [{ env: "FOO=1" }, TypeError, /env must be an object of variable name to string value, got "FOO=1"/],
  [{ env: ["A"] }, TypeError, /env must be an object of variable name to string value/],
  [{ env: { FOO: undefined } }, TypeError, /env\.FOO must be a string, got undefined \(leave the key out/],
  [{ env: { FOO: 1 } }, TypeError, /env\.FOO must be a string, got 1/],
  [{ numCPUs: 1 }, TypeError, /actor Counter: unknown option "numCPUs" \(did you mean "numCpus"\?\)/],
  [{ maxRestart: 1 }, TypeError, /unknown option "maxRestart" \(did you mean "maxRestarts"\?\)/],
  [{ colour: "red" }, TypeError, /unknown option "colour"; the options are: name, numCpus/],
  [{ streamBackpressure: 0 }, RangeError, /streamBackpressure must be a whole number from 1 to 1024/],
  [{ numCpus: "1" }, ResourceRequestError, /actor Counter: numCpus must be a finite number >= 0, got "1"/],
  // numCpus / numGpus would silently win over these
  [
    { resources: { CPU: 2 } },
    ResourceRequestError,
    /actor Counter: resources.CPU is not taken: give CPUs as numCpus/,
  ],
  [{ resources: { GPU: 1, x: 1 } }, ResourceRequestError, /resources.GPU is not taken: give GPUs as numGpus/],
];

test("actor options of the wrong type, range or name are refused by .options() and actor()", (t) => {
  for (const [o, error, message] of ACTOR_CASES) {
    const label = JSON.stringify(o) ?? String(o);
    t.throws(() => CounterActor.options(o as never), { instanceOf: error, message }, `options(${label})`);
    t.throws(() => actor(Counter, { module: import.meta.url, ...(o as object) }), {
      instanceOf: error,
      message,
    });
  }
  // the same for a thread actor (checked before the options a thread refuses)
  t.throws(() => CounterActor.options({ thread: true, maxRestarts: Number.NaN }), {
    instanceOf: RangeError,
    message: /maxRestarts must be an integer >= -1/,
  });
  t.throws(() => CounterActor.options(null as never), {
    instanceOf: TypeError,
    message: /options must be an object/,
  });
});

test("what actor options accept still works: env strings arrive, a numeric-looking name is found by getActor", async (t) => {
  const c = CounterActor.options({
    name: "123",
    env: { FOO: "1" },
    maxRestarts: -1,
    bundleIndex: undefined,
  }).remote(0);
  t.is(await c.env("FOO"), "1");
  const found = await getActor<Counter>("123");
  t.is(await found.pid(), await c.pid());
  kill(c);
});

const TASK_CASES: Case[] = [
  [{ maxRetries: -1 }, RangeError, /task add: maxRetries must be an integer >= 0, got -1/],
  [{ maxRetries: "x" }, RangeError, /maxRetries must be an integer >= 0, got "x"/],
  [{ maxRetries: 0.5 }, RangeError, /maxRetries must be an integer >= 0/],
  [{ numCPUs: 1 }, TypeError, /task add: unknown option "numCPUs" \(did you mean "numCpus"\?\)/],
  [{ maxConcurrency: 2 }, TypeError, /task add: unknown option "maxConcurrency"; the options are: numCpus/],
  [{ numCpus: "1" }, ResourceRequestError, /task add: numCpus must be a finite number >= 0, got "1"/],
  [
    { resources: { CPU: 4 } },
    ResourceRequestError,
    /task add: resources.CPU is not taken: give CPUs as numCpus/,
  ],
];

test("task options of the wrong type, range or name are refused by .options() and task()", async (t) => {
  for (const [o, error, message] of TASK_CASES) {
    t.throws(() => addTask.options(o as never), { instanceOf: error, message }, JSON.stringify(o));
    t.throws(() => task(add, { module: import.meta.url, ...(o as object) }), { instanceOf: error, message });
  }
  t.is(await addTask.options({ maxRetries: 0 }).remote(1, 2), 3);
});

test("kill refuses what is not an actor handle, and options it does not know", (t) => {
  for (const bad of [{}, undefined, null, "Counter-abc", { actorId: "Counter-abc" }]) {
    t.throws(() => kill(bad as never), {
      instanceOf: TypeError,
      message: /^kill\(\): expected an actor handle \(from \.remote\(\) or getActor\(\)\), got /,
    });
  }
  const c = CounterActor.remote(0);
  t.throws(() => kill(c, { noRestart: "no" } as never), {
    instanceOf: TypeError,
    message: /kill\(\): noRestart must be true or false, got "no"/,
  });
  t.throws(() => kill(c, { norestart: false } as never), {
    instanceOf: TypeError,
    message: /kill\(\): unknown option "norestart" \(did you mean "noRestart"\?\)/,
  });
  kill(c);
});

test("get and wait refuse option keys they do not know, naming the ones they take", (t) => {
  const p = Promise.resolve(1);
  t.throws(() => get(p, { timeout: 100 } as never), {
    instanceOf: TypeError,
    message: /^get\(\): unknown option "timeout" \(did you mean "timeoutMs"\?\); the options are: timeoutMs$/,
  });
  t.throws(() => wait([p], { timeout: 100 } as never), {
    instanceOf: TypeError,
    message:
      /^wait\(\): unknown option "timeout" \(did you mean "timeoutMs"\?\); the options are: numReturns, timeoutMs$/,
  });
  t.throws(() => get(p, 100 as never), {
    instanceOf: TypeError,
    message: /get\(\): options must be an object/,
  });
});
