// Every wait is bounded and every message answered: get with timeoutMs 0, refs whose owner died
// before the reader joined, calls whose arguments the receiver cannot decode.
import {
  ActorDiedError,
  actor,
  GetTimeoutError,
  get,
  init,
  kill,
  MessageDecodeError,
  type ObjectRef,
  OwnerDiedError,
  put,
  RemoteError,
  registerSerializer,
  shutdown,
} from "@torl-ts/actors";
import test from "ava";
import { CounterActor } from "./fixtures/classes.js";
import { Holder } from "./fixtures/plain-holder.js";
import { ProbeActor } from "./fixtures/values.js";

// generous: this machine is shared and loaded; a fixed code path answers in milliseconds
const BOUND_MS = 60_000;

test.before(async () => {
  await init({ numCpus: 2 });
});
test.after.always(async () => {
  await shutdown();
});

test("get(ref, { timeoutMs: 0 }) rejects at once with GetTimeoutError when the value is not ready", async (t) => {
  const p = ProbeActor.remote();
  const slow = p.sleep(BOUND_MS);
  await t.throwsAsync(get(slow, { timeoutMs: 0 }), { instanceOf: GetTimeoutError, message: /not ready/ });
  await t.throwsAsync(get([put(1), slow], { timeoutMs: 0 }), { instanceOf: GetTimeoutError });
  t.is(await get(put(5), { timeoutMs: 0 }), 5, "a value already here is returned");
  const c = CounterActor.remote(1);
  const done = c.inc(1);
  await done;
  t.is(await get(done, { timeoutMs: 0 }), 2);
  t.throws(() => get(done, { timeoutMs: -1 }), { instanceOf: RangeError, message: /timeoutMs/ });
  kill(p);
});

test("get of a ref whose owner died rejects with OwnerDiedError, also in a process that joined after the death", async (t) => {
  const owner = ProbeActor.remote();
  const [mine] = await owner.ownRef(1);
  const [forLater] = await owner.ownRef(2);
  const running = owner.sleep(BOUND_MS);
  kill(owner);
  await t.throwsAsync(running, { instanceOf: ActorDiedError });
  // the driver was connected when the owner died and heard of it
  const lost = await t.throwsAsync(get(mine!, { timeoutMs: BOUND_MS }), { instanceOf: OwnerDiedError });
  t.regex(lost!.message, /died/);
  // a worker started now never got that news: its fetch must not wait on the dead endpoint
  const reader = ProbeActor.remote();
  const err = await t.throwsAsync(get(reader.readRef([forLater!]), { timeoutMs: BOUND_MS }), {
    instanceOf: RemoteError,
  });
  t.is(err!.remoteName, "OwnerDiedError");
  t.is(await reader.echo("alive"), "alive");
});

/** Registered in this process only: a worker that receives one cannot decode it. */
class OnlyInTheDriver {
  v = 1;
}
registerSerializer(OnlyInTheDriver);

test("a call the worker cannot decode is answered with MessageDecodeError naming the cause", async (t) => {
  const p = ProbeActor.remote();
  const err = await t.throwsAsync(get(p.echo(new OnlyInTheDriver()), { timeoutMs: BOUND_MS }), {
    instanceOf: MessageDecodeError,
  });
  t.regex(err!.message, /\.echo: .*OnlyInTheDriver/s);
  t.is(await p.echo(3), 3, "later calls on the same link still work");
});

test("a result or fetched object the caller cannot decode fails that ref with MessageDecodeError", async (t) => {
  const p = ProbeActor.remote();
  const result = await t.throwsAsync(get(p.returnsWorkerOnly(false), { timeoutMs: BOUND_MS }), {
    instanceOf: MessageDecodeError,
  });
  t.regex(result!.message, /returnsWorkerOnly.*WorkerOnly/s);
  const [ref] = (await p.returnsWorkerOnly(true)) as [ObjectRef<unknown>];
  const fetched = await t.throwsAsync(get(ref, { timeoutMs: BOUND_MS }), { instanceOf: MessageDecodeError });
  t.regex(fetched!.message, /could not be decoded.*WorkerOnly/s);
  t.is(await p.echo(4), 4, "the link keeps working");
});

// The holder's module imports nothing of the runtime; a fresh process (own env, so not a prewarmed
// one) gets an actor handle in its very first call.
const HolderActor = actor(Holder, { module: new URL("./fixtures/plain-holder.ts", import.meta.url).href });

test("a worker whose module does not import the runtime decodes an actor handle from its first message", async (t) => {
  const target = CounterActor.remote(0);
  await target.ready();
  const holder = HolderActor.options({ env: { TORL_TEST_FRESH_PROCESS: "1" } }).remote();
  t.is(await get(holder.callThrough(target, 7), { timeoutMs: BOUND_MS }), 7);
});
