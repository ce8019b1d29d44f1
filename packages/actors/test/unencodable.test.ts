// Every thrown value reaches the caller as RemoteError, whatever it holds (cycles, functions, BigInts
// beyond 64 bits, symbols, getters that throw, Proxies, values whose serializer throws), and a result
// that cannot be encoded fails its call with a named error; the actor or task worker keeps serving.
import { get, init, RemoteError, shutdown } from "@torl-ts/actors";
import test from "ava";
import {
  RETURNED_KINDS,
  returnInTaskTask,
  THROWN_KINDS,
  ThrowerActor,
  type ThrownKind,
  throwInTaskTask,
} from "./fixtures/throwers.js";

test.before(async () => {
  await init({ numCpus: 2 });
});
test.after.always(async () => {
  await shutdown();
});

/** Generous: a call that is never answered fails here instead of hanging the file. */
const SETTLES_WITHIN = { timeoutMs: 60_000 };

/** What of each thrown value must arrive: the Error's message, or the thrown value's string form. */
const MESSAGE: Partial<Record<ThrownKind, RegExp>> = {
  revokedProxy: /./,
  nullProtoObject: /./,
  throwingToString: /./,
  symbol: /Symbol\(thrown\)/,
  function: /thrownFunction/,
  bigint: /1267650600228229401496703205376/,
  throwingMessage: /./,
};

function checkThrown(t: import("ava").ExecutionContext, kind: ThrownKind, err: unknown): void {
  t.true(err instanceof RemoteError, `${kind}: ${String(err)}`);
  const e = err as RemoteError;
  t.regex(e.message, MESSAGE[kind] ?? new RegExp(`bad ${kind}`), kind);
  if (!MESSAGE[kind] && kind !== "proxyError")
    t.is(e.data.code, 7, `${kind}: its sendable own fields arrive`);
}

for (const kind of ["process", "thread"] as const) {
  const make = () => (kind === "thread" ? ThrowerActor.options({ thread: true }) : ThrowerActor).remote();

  test(`${kind} actor: any thrown value arrives as RemoteError and the actor keeps serving`, async (t) => {
    const a = make();
    let expected = 0;
    for (const k of THROWN_KINDS) {
      for (const method of ["throwIt", "throwAsync"] as const) {
        const err = await get(a[method](k), SETTLES_WITHIN).then(
          () => new Error(`${k}: the call succeeded`),
          (e: unknown) => e,
        );
        checkThrown(t, k, err);
        expected++;
        t.is(await get(a.count(), SETTLES_WITHIN), ++expected, `${k}: the actor answers the next call`);
      }
    }
  });

  test(`${kind} actor: a result that cannot be encoded fails its call with a named error`, async (t) => {
    const a = make();
    let expected = 0;
    for (const k of RETURNED_KINDS) {
      const outcome = await get(a.returnIt(k), SETTLES_WITHIN).then(
        (v) => ({ v }),
        (e: unknown) => ({ e }),
      );
      if (k === "unpackable" || k === "throwingGetter") {
        t.true("e" in outcome && outcome.e instanceof RemoteError, `${k}: ${JSON.stringify(outcome)}`);
        const e = (outcome as { e: RemoteError }).e;
        t.is(e.remoteName, "ExecutorError", k);
        t.regex(e.message, /cannot be serialized/, k);
      } else {
        // an Error inside a result arrives with what of it can be sent
        t.true("v" in outcome, `${k}: ${String((outcome as { e: unknown }).e)}`);
        const v = (outcome as { v: unknown }).v;
        const e = (k === "cyclicError" ? (v as { e: Error }).e : (v as Error[])[0]) as Error &
          Record<string, unknown>;
        t.true(e instanceof Error, k);
        if (k === "cyclicError") t.regex(String(e.self), /circular/);
        else t.regex(String(e.u), /Unpackable cannot be serialized/);
      }
      expected += 2;
      t.is(await get(a.count(), SETTLES_WITHIN), expected, `${k}: the actor answers the next call`);
    }
  });
}

test("a task: any thrown value arrives as RemoteError; the workers keep serving", async (t) => {
  for (const k of THROWN_KINDS) {
    const err = await get(throwInTaskTask.remote(k), SETTLES_WITHIN).then(
      () => new Error(`${k}: the task succeeded`),
      (e: unknown) => e,
    );
    checkThrown(t, k, err);
    t.regex((err as Error).message, /task throwInTask/);
  }
  for (const k of RETURNED_KINDS) {
    await t.notThrowsAsync(
      get(returnInTaskTask.remote(k), SETTLES_WITHIN).catch((e: Error) => {
        if (e.name === "GetTimeoutError") throw e;
      }),
      k,
    );
  }
});

test("an Error's cycle is cut where it closes; the rest of it arrives", async (t) => {
  const a = ThrowerActor.remote();
  const err = (await t.throwsAsync(get(a.throwIt("nestedCycle"), SETTLES_WITHIN), {
    instanceOf: RemoteError,
  })) as RemoteError;
  const inner = err.data.inner as Error & { outer?: unknown };
  t.true(inner instanceof Error);
  t.is(inner.message, "inner");
  t.regex(String(inner.outer), /circular/);
  const getter = (await t.throwsAsync(get(a.throwIt("throwingGetter"), SETTLES_WITHIN), {
    instanceOf: RemoteError,
  })) as RemoteError;
  t.regex(String(getter.data.bad), /getter threw/);
  const unpackable = (await t.throwsAsync(get(a.throwIt("unpackableProp"), SETTLES_WITHIN), {
    instanceOf: RemoteError,
  })) as RemoteError;
  t.regex(String(unpackable.data.u), /Unpackable cannot be serialized/);
  t.is(unpackable.data.code, 7);
});
