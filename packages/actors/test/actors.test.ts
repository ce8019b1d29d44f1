import {
  GetTimeoutError,
  get,
  init,
  invokeInActor,
  ObjectRef,
  put,
  RemoteError,
  shutdown,
  wait,
} from "@torl-ts/actors";
import test from "ava";
import {
  addTask,
  BrokenActor,
  boomTask,
  CounterActor,
  GateActor,
  slowSquareTask,
} from "./fixtures/classes.js";

const FIXTURES = new URL("./fixtures/classes.ts", import.meta.url).href;

test.before(async () => {
  await init({ numCpus: 2 });
});
test.after.always(async () => {
  await shutdown();
});

test("a method call returns an awaitable ObjectRef of the method's result; constructor args arrive", async (t) => {
  const c = CounterActor.remote(10);
  const r = c.inc(5);
  t.true(r instanceof ObjectRef);
  t.is(await r, 15);
  t.is(await get(c.inc(1)), 16);
  t.deepEqual(await get([c.get(), c.inc(2)]), [16, 18]);
  t.is(await c.ready(), null);
});

test("each actor lives in its own worker process", async (t) => {
  const a = CounterActor.remote(0);
  const b = CounterActor.remote(0);
  const [pa, pb] = await get([a.pid(), b.pid()]);
  t.not(pa, pb);
  t.not(pa, process.pid);
  t.not(pb, process.pid);
});

test("calls from one caller run in order", async (t) => {
  const c = CounterActor.remote(0);
  for (let i = 0; i < 500; i++) c.append(i);
  t.deepEqual(
    await c.history(),
    Array.from({ length: 500 }, (_, i) => i),
  );
});

test("an exception in a method rejects the ref with RemoteError carrying the remote stack", async (t) => {
  const c = CounterActor.remote(0);
  const err = await t.throwsAsync(c.fail("bad input 42"), { instanceOf: RemoteError });
  t.is(err!.remoteName, "TypeError");
  t.regex(err!.message, /bad input 42/);
  t.regex(err!.message, /\.fail/);
  t.regex(err!.remoteStack ?? "", /fixtures\/classes\.ts/);
  t.is(await c.inc(1), 1, "the actor keeps working after an exception");
});

test("typed arrays travel as typed arrays, large ones intact", async (t) => {
  const c = CounterActor.remote(0);
  const big = new Float32Array(1 << 20).fill(0.5);
  t.is(await c.sum(big), (1 << 20) * 0.5);
  const x = Float64Array.from({ length: 1000 }, (_, i) => i);
  const y = await c.scale(x, 3);
  t.true(y instanceof Float64Array);
  t.is(y.length, 1000);
  t.is(y[999], 2997);
  const u = (await c.echo(new Uint8Array([1, 2, 3]))) as Uint8Array;
  t.true(u instanceof Uint8Array);
  t.deepEqual([...u], [1, 2, 3]);
  t.deepEqual(await c.echo({ a: [1, "x", null], b: { c: true } }), { a: [1, "x", null], b: { c: true } });
});

test("refs passed as arguments are resolved before the call (put, and results of other calls)", async (t) => {
  const c = CounterActor.remote(0);
  const d = CounterActor.remote(100);
  const arr = put(new Float32Array([1, 2, 3, 4]));
  t.is(await c.sum(arr), 10);
  const pending = d.sleep(200); // not ready when passed
  t.is(await c.echo(pending), 200);
  t.is(await c.inc(d.inc(1)), 101);
});

test("put snapshots the value: later changes by the caller are not seen", async (t) => {
  const a = new Float32Array([1, 2, 3]);
  const r = put(a);
  a[0] = 100;
  t.is((await get(r))[0], 1);
});

test("async methods overlap up to maxConcurrency; default is one at a time", async (t) => {
  const g = GateActor.options({ maxConcurrency: 4 }).remote();
  const maxes = await get([g.enter(4), g.enter(4), g.enter(4), g.enter(4)]);
  t.is(Math.max(...maxes), 4);
  const serial = GateActor.remote();
  await get([serial.enter(1), serial.enter(1), serial.enter(1)]);
  t.is(await serial.max(), 1);
});

test("wait returns the ready refs first and honours numReturns and timeoutMs", async (t) => {
  const c = CounterActor.options({ maxConcurrency: 2 }).remote(0);
  const slow = c.sleep(5000);
  const fast = c.sleep(1);
  const { ready, notReady } = await wait([slow, fast], { numReturns: 1 });
  t.deepEqual(ready, [fast]);
  t.deepEqual(notReady, [slow]);
  const r2 = await wait([slow, fast], { numReturns: 2, timeoutMs: 50 });
  t.deepEqual(r2.ready, [fast]);
  t.deepEqual(r2.notReady, [slow]);
  await t.throwsAsync(get(slow, { timeoutMs: 50 }), { instanceOf: GetTimeoutError });
});

test("a constructor that throws makes ready() and calls reject with the creation error", async (t) => {
  const b = BrokenActor.remote();
  const err = await t.throwsAsync(b.ready());
  t.is(err!.name, "ActorDiedError");
  t.regex(err!.message, /constructor refused/);
  await t.throwsAsync(b.hello(), { message: /constructor refused/ });
});

test("tasks run remote functions, with refs as arguments", async (t) => {
  t.is(await addTask.remote(1, put(2)), 3);
  const squares = await get([1, 2, 3, 4, 5].map((x) => slowSquareTask.remote(x, 10)));
  t.deepEqual(squares, [1, 4, 9, 16, 25]);
  const err = await t.throwsAsync(boomTask.remote(), { instanceOf: RemoteError });
  t.regex(err!.message, /task exploded/);
  t.regex(err!.message, /task boom/);
});

test("invokeInActor runs an exported function inside the actor's process", async (t) => {
  const c = CounterActor.remote(0);
  const pid = await c.pid();
  t.is(await invokeInActor<number>(c, FIXTURES, "whoAmI"), pid);
  await t.throwsAsync(invokeInActor(c, FIXTURES, "noSuchExport"), {
    message: /no exported function 'noSuchExport'/,
  });
});
