/**
 * Type-level checks of actor handles, run by `pnpm typecheck` (tsc), not by ava: `ActorHandle<T>`
 * turns each method of T into a call returning an ObjectRef of its awaited result, every constructor
 * of handles gives that type (not `any`), and a mistake (an unknown method, a wrong argument, reading
 * a field, calling a name the handle never forwards) does not compile. If handles became `any` again,
 * the equality checks below fail and the `@ts-expect-error` lines become unused errors.
 */
import { type ActorHandle, type createActor, type getActor, type ObjectRef, put } from "../src/index.js";
import type { handleFor, makeHandle, methodProxy } from "../src/runtime/actor-handle.js";
import type { createThreadActor } from "../src/runtime/thread-actor.js";
import type { Counter } from "./fixtures/counter.js";

type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
function expectType<_ extends true>(): void {}

/** A class with members a handle cannot call: a field, a getter, and names the handle keeps for itself. */
declare class Mixed {
  count: number;
  get doubled(): number;
  // biome-ignore lint/suspicious/noThenProperty: a thenable class, to check its handle never forwards `then`
  then(onDone: () => void): void;
  ready(): number;
  name(prefix: string): Promise<string>;
}

declare const c: ActorHandle<Counter>;
declare const m: ActorHandle<Mixed>;

// Every constructor of handles is typed by T.
expectType<Equal<ReturnType<typeof createActor<Counter>>, ActorHandle<Counter>>>();
expectType<Equal<ReturnType<typeof getActor<Counter>>, Promise<ActorHandle<Counter>>>>();
expectType<Equal<ReturnType<typeof handleFor<Counter>>, ActorHandle<Counter>>>();
expectType<Equal<ReturnType<typeof makeHandle<Counter>>, ActorHandle<Counter>>>();
expectType<Equal<ReturnType<typeof methodProxy<Counter>>, ActorHandle<Counter>>>();
expectType<Equal<ReturnType<typeof createThreadActor<Counter>>, ActorHandle<Counter>>>();

// A method returns an ObjectRef of its result, a promise's result unwrapped.
expectType<Equal<ReturnType<typeof c.inc>, ObjectRef<number>>>();
expectType<Equal<ReturnType<typeof c.slowInc>, ObjectRef<number>>>();
expectType<Equal<ReturnType<typeof c.double>, ObjectRef<Float32Array>>>();
expectType<Equal<ReturnType<typeof m.name>, ObjectRef<string>>>();
expectType<Equal<Awaited<ReturnType<typeof c.env>>, string | undefined>>();
// The handle's own members.
expectType<Equal<typeof c.actorId, string>>();
expectType<Equal<ReturnType<typeof c.ready>, ObjectRef<null>>>();
expectType<Equal<ReturnType<typeof m.ready>, ObjectRef<null>>>();

// Arguments: values or refs to values, optional ones optional.
c.inc();
c.inc(1);
c.inc(put(1));
c.slowInc(1, c.get());
// @ts-expect-error an argument of the wrong type
c.inc("1");
// @ts-expect-error a ref to a value of the wrong type
c.slowInc(1, put("10"));
// @ts-expect-error a missing argument
c.slowInc(1);
// @ts-expect-error an argument too many
c.get(1);

// @ts-expect-error a method the class does not have
c.reset();
// @ts-expect-error a private field is no method
c.n;
// @ts-expect-error a public field is no method
m.count;
// @ts-expect-error nor is a getter
m.doubled;
// @ts-expect-error `then` is never forwarded (a handle is not a promise): the handle reads it as undefined
m.then;

// @ts-expect-error a handle of unknown class has no methods
({}) as ActorHandle<unknown> satisfies { get(): unknown };
