// What a handle does at run time, for a process actor and a thread actor alike: the behaviour its type
// (ActorHandle<T>, checked in actor-handle.types.ts) describes.
import test from "ava";
import { createActor, init, kill, ObjectRef, put, shutdown } from "../src/index.js";
import type { Counter } from "./fixtures/counter.js";

const FIXTURE = new URL("./fixtures/counter.ts", import.meta.url).href;

test.before(async () => {
  await init({ numCpus: 2 });
});
test.after.always(async () => {
  await shutdown();
});

for (const thread of [false, true]) {
  const kind = thread ? "thread" : "process";
  test(`${kind} actor handle: methods return ObjectRefs of awaited results; refs are accepted as arguments`, async (t) => {
    const c = createActor<Counter>(FIXTURE, "Counter", [1], { thread });
    const r = c.inc(2);
    t.true(r instanceof ObjectRef);
    t.is(await r, 3);
    t.is(await c.slowInc(1, 1), 4);
    t.is(await c.inc(put(5)), 9);
    t.is(await c.inc(), 10);
    t.is(c.inc, c.inc, "one function per method name");
    t.is(await c.ready(), null);
    kill(c);
  });

  test(`${kind} actor handle: the names its type leaves out are not calls`, async (t) => {
    const c = createActor<Counter>(FIXTURE, "Counter", [0], { thread });
    const loose = c as unknown as Record<string, unknown>;
    for (const name of ["then", "catch", "finally", "toJSON", "inspect"]) t.is(loose[name], undefined, name);
    t.true(
      c instanceof (loose.constructor as new () => unknown),
      "`constructor` is the handle's class, not a call",
    );
    t.is(await Promise.resolve(c), c, "a handle is not a promise");
    t.is(typeof c.actorId, "string");
    t.true(String(c).includes(c.actorId));
    kill(c);
  });
}
