// Thread actors (`.options({ thread: true })`): the same body of tests runs against a process actor
// and a thread actor, then what only a thread actor does (or refuses).
import { threadId } from "node:worker_threads";
import {
  ActorDiedError,
  get,
  init,
  invokeInActor,
  kill,
  ObjectRef,
  put,
  RemoteError,
  SerializationError,
  shutdown,
  ThreadActorOptionError,
  ThreadActorUnsupportedError,
} from "@torl-ts/actors";
import test from "ava";
import { BrokenActor, CounterActor, GateActor, PromiseCtorActor } from "./fixtures/classes.js";

test.before(async () => {
  await init({ numCpus: 4 });
});
test.after.always(async () => {
  await shutdown();
});

type Kind = "process" | "thread";
const KINDS: Kind[] = ["process", "thread"];
const counter = (kind: Kind, n: number) =>
  (kind === "thread" ? CounterActor.options({ thread: true }) : CounterActor).remote(n);

for (const kind of KINDS) {
  test(`${kind} actor: a call returns an ObjectRef of the result; constructor args arrive; ready() is null`, async (t) => {
    const c = counter(kind, 10);
    const r = c.inc(5);
    t.true(r instanceof ObjectRef);
    t.is(await r, 15);
    t.deepEqual(await get([c.get(), c.inc(2)]), [15, 17]);
    t.is(await c.ready(), null);
    t.deepEqual(await c.scale(new Float64Array([1, 2]), 3), new Float64Array([3, 6]));
    t.deepEqual(await c.echo(new Map([["k", new Set([1])]])), new Map([["k", new Set([1])]]));
    kill(c);
  });

  test(`${kind} actor: async methods resolve; calls run in order, one at a time by default`, async (t) => {
    const c = counter(kind, 0);
    const slow = c.sleep(50);
    for (let i = 0; i < 200; i++) c.append(i % 2 === 0 ? i : put(i));
    t.is(await slow, 50);
    t.deepEqual(
      await c.history(),
      Array.from({ length: 200 }, (_, i) => i),
    );
    const g = (kind === "thread" ? GateActor.options({ thread: true }) : GateActor)
      .options({ maxConcurrency: 2 })
      .remote();
    t.deepEqual(await get([g.enter(2), g.enter(2)]), [2, 2]);
    kill(c);
    kill(g);
  });

  test(`${kind} actor: a thrown error rejects with RemoteError carrying the remote name and stack`, async (t) => {
    const c = counter(kind, 0);
    const err = await t.throwsAsync(c.fail("bad input"), { instanceOf: RemoteError });
    t.is(err?.remoteName, "TypeError");
    t.regex(err?.message ?? "", /TypeError in actor .*\.fail: bad input/);
    t.regex(err?.remoteStack ?? "", /fixtures\/classes\.ts/);
    t.regex(err?.stack ?? "", /--- remote stack ---/);
    // the actor goes on serving
    t.is(await c.inc(1), 1);
    kill(c);
  });

  test(`${kind} actor: what cannot travel is refused with SerializationError (arguments at the call site)`, async (t) => {
    const c = counter(kind, 0);
    t.throws(() => c.echo((() => 1) as never), { instanceOf: SerializationError, message: /args\[0\]/ });
    await t.throwsAsync(c.fn(), { instanceOf: SerializationError, message: /result/ });
    kill(c);
  });

  test(`${kind} actor: kill rejects calls in flight and later calls with ActorDiedError (killed)`, async (t) => {
    const c = counter(kind, 0);
    await c.ready();
    const pending = c.sleep(60_000);
    kill(c);
    const err = await t.throwsAsync(pending, { instanceOf: ActorDiedError });
    t.is(err?.cause.kind, "killed");
    await t.throwsAsync(c.inc(1), { instanceOf: ActorDiedError });
  });

  test(`${kind} actor: ObjectRef arguments are resolved; results are ObjectRefs other actors take`, async (t) => {
    const a = counter(kind, 1);
    const b = counter(kind, 100);
    const stored = put(new Float32Array([1, 2, 3]));
    t.is(await a.sum(stored), 6);
    // a's result, still in flight, as b's argument
    t.is(await b.inc(a.inc(41)), 142);
    kill(a);
    kill(b);
  });

  test(`${kind} actor: a constructor that throws makes ready() and calls fail with ActorDiedError (creation_failed)`, async (t) => {
    const b = (kind === "thread" ? BrokenActor.options({ thread: true }) : BrokenActor).remote();
    const err = await t.throwsAsync(b.ready(), { instanceOf: ActorDiedError });
    t.is(err?.cause.kind, "creation_failed");
    t.regex(err?.message ?? "", /RangeError: constructor refused/);
    await t.throwsAsync(b.hello(), { instanceOf: ActorDiedError });
  });

  test(`${kind} actor: a constructor that returns a Promise fails creation (creation_failed), not taken as the instance`, async (t) => {
    const a = (kind === "thread" ? PromiseCtorActor.options({ thread: true }) : PromiseCtorActor).remote();
    const err = await t.throwsAsync(a.ready(), { instanceOf: ActorDiedError });
    t.is(err?.cause.kind, "creation_failed");
    t.regex(
      err?.message ?? "",
      /the constructor of PromiseCtor returned a Promise \(a thenable\), not the instance: .*async set-up belongs in a method/,
    );
    await t.throwsAsync(a.ping(), { instanceOf: ActorDiedError });
  });
}

test("thread actor: runs in a thread of this process", async (t) => {
  const c = counter("thread", 0);
  t.is(await c.pid(), process.pid);
  t.not(await c.threadId(), threadId);
  kill(c);
});

test("thread actor: a thread that crashes outside a call fails calls in flight with ActorDiedError (exited)", async (t) => {
  const c = counter("thread", 0);
  await c.crashSoon();
  const err = await t.throwsAsync(c.sleep(60_000), { instanceOf: ActorDiedError });
  t.is(err?.cause.kind, "exited");
  t.regex(err?.message ?? "", /uncaught Error: crashed outside a call/);
});

test("thread actor: maxRestarts restarts it (constructor again) after kill with noRestart: false", async (t) => {
  const c = CounterActor.options({ thread: true, maxRestarts: 1 }).remote(7);
  t.is(await c.inc(1), 8);
  kill(c, { noRestart: false });
  t.is(await c.inc(1), 8);
  kill(c, { noRestart: false });
  await t.throwsAsync(c.inc(1), { instanceOf: ActorDiedError });
});

test("thread actor: maxTaskRetries re-sends a call in flight to the restarted thread", async (t) => {
  const c = CounterActor.options({ thread: true, maxRestarts: 1, maxTaskRetries: 1 }).remote(0);
  await c.ready();
  const pending = c.sleep(200);
  kill(c, { noRestart: false });
  t.is(await pending, 200);
  kill(c);
});

test("thread actor: placement and naming options are refused by name", (t) => {
  for (const [key, value] of [
    ["name", "x"],
    ["numCpus", 1],
    ["numGpus", 1],
    ["lifetime", "detached"],
  ] as const) {
    const err = t.throws(() => CounterActor.options({ thread: true, [key]: value }).remote(0), {
      instanceOf: ThreadActorOptionError,
    });
    t.is(err?.option, key);
  }
  t.throws(() => CounterActor.options({ thread: true, maxConcurrency: 0 }).remote(0), {
    instanceOf: RangeError,
    message: /maxConcurrency must be an integer >= 1/,
  });
});

test("thread actor: a ref nested inside an argument is refused at the call site; invokeInActor is refused", async (t) => {
  const c = counter("thread", 0);
  t.throws(() => c.echo({ inner: put(1) }), {
    instanceOf: SerializationError,
    message: /nested inside an argument/,
  });
  t.throws(() => invokeInActor(c, import.meta.url, "x"), { instanceOf: ThreadActorUnsupportedError });
  // the handle of a thread actor cannot leave this process
  const p = counter("process", 0);
  t.throws(() => p.echo(c), { instanceOf: SerializationError });
  kill(c);
  kill(p);
});

test("thread actor: sending leaves the caller's buffers and this process's other messages intact", async (t) => {
  // a call to a process actor that is not up yet waits here, encoded, while the thread actor is used
  const p = counter("process", 1);
  const early = p.inc(1);
  const c = counter("thread", 0);
  const big = Buffer.alloc(4096, 7);
  const back = await c.echo(big);
  t.is(big.length, 4096, "the caller's Buffer is not moved to the thread");
  t.deepEqual(Buffer.from(back as Uint8Array), big);
  for (let i = 0; i < 20; i++) await c.echo({ i, s: "x".repeat(100) });
  t.is(await get(early, { timeoutMs: 120_000 }), 2);
  kill(c);
  kill(p);
});
