// One check of resource requests for tasks, actors and placement groups: a malformed request throws
// ResourceRequestError at the call site; a creation the head refuses fails with the refusal's own
// class; shutdown() returns cleanly with tasks still waiting, and their refs settle.
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import {
  ActorNameTakenError,
  get,
  init,
  placementGroup,
  ResourceRequestError,
  shutdown,
} from "@torl-ts/actors";
import test from "ava";
import { addTask, CounterActor } from "./fixtures/classes.js";

test.before(async () => {
  await init({ numCpus: 2, resources: { custom: 2 } });
});
test.after.always(async () => {
  await shutdown();
});

const MALFORMED: Array<Record<string, unknown>> = [
  { numCpus: -1 },
  { numGpus: 1.5 },
  { numCpus: "two" },
  { numCpus: Number.NaN },
  { numCpus: Number.POSITIVE_INFINITY },
  { numGpus: Number.NaN },
  { numGpus: -0.5 },
  { resources: { custom: -1 } },
  { resources: { custom: "x" } },
  { resources: { custom: Number.NaN } },
  { resources: "custom" },
];

test("a task with malformed resources throws ResourceRequestError at once; good tasks still run", async (t) => {
  for (const o of MALFORMED) {
    const err = t.throws(() => addTask.options(o as never).remote(1, 2), {
      instanceOf: ResourceRequestError,
    });
    t.regex(err!.message, /task add: (numCpus|numGpus|resources)/, JSON.stringify(o));
  }
  t.is(await get(addTask.options({ resources: { custom: 1 } }).remote(1, 2), { timeoutMs: 60_000 }), 3);
});

test("an actor with malformed resources throws ResourceRequestError at once", (t) => {
  for (const o of MALFORMED) {
    const err = t.throws(() => CounterActor.options(o as never).remote(0), {
      instanceOf: ResourceRequestError,
    });
    t.regex(err!.message, /actor Counter: (numCpus|numGpus|resources)/, JSON.stringify(o));
  }
});

test("a placement group with a malformed bundle throws ResourceRequestError at once (the same check)", (t) => {
  for (const b of [{ CPU: -1 }, { GPU: 1.5 }, { CPU: "two" }, { custom: Number.NaN }]) {
    const err = t.throws(() => placementGroup([{ CPU: 1 }, b as never]), {
      instanceOf: ResourceRequestError,
    });
    t.regex(err!.message, /placement group bundle 1: /);
  }
  t.throws(() => placementGroup([]), { instanceOf: ResourceRequestError });
});

test("a creation the head refuses fails with the refusal's own class", async (t) => {
  const first = CounterActor.options({ name: "taken-name" }).remote(0);
  await first.ready();
  const second = CounterActor.options({ name: "taken-name" }).remote(0);
  const err = await t.throwsAsync(get(second.ready(), { timeoutMs: 60_000 }), {
    instanceOf: ActorNameTakenError,
  });
  t.regex(err!.message, /taken-name/);
  await t.throwsAsync(get(second.inc(1), { timeoutMs: 60_000 }), { instanceOf: ActorNameTakenError });
});

test("shutdown() returns cleanly while tasks wait, and their refs settle", async (t) => {
  const driver = spawn(
    process.execPath,
    ["--import", "tsx", fileURLToPath(new URL("./fixtures/pending-shutdown-driver.ts", import.meta.url))],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  let out = "";
  let err = "";
  driver.stdout.on("data", (d: Buffer) => {
    out += d.toString();
  });
  driver.stderr.on("data", (d: Buffer) => {
    err += d.toString();
  });
  const code = await new Promise<number | null>((resolve) => driver.on("exit", resolve));
  t.is(code, 0, `the driver died: ${err.slice(-2000)}`);
  const report = JSON.parse(out.trim().split("\n").pop() ?? "{}");
  t.deepEqual(report, {
    refused: "ResourceRequestError",
    pendingMalformed: false,
    waited: "TaskFailedError",
  });
});
