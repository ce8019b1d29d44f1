/**
 * The call an actor method or task is running for, across its awaits (AsyncLocalStorage): its
 * AbortSignal, aborted when the caller cancels the call. Process actors (executor.ts) and thread
 * actors (thread-actor-host.ts) run each call, and each step of a generator, inside `runInCall`.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { TorlError } from "../errors.js";

const current = new AsyncLocalStorage<AbortSignal>();

/** `getCallSignal()` was called outside an actor method or task. */
export class NoCurrentCallError extends TorlError {
  constructor() {
    super(
      "getCallSignal() has no call to answer for: call it inside an actor method or a task (a driver runs no call)",
    );
  }
}

/** Runs `f` as part of the call whose signal is `signal`. */
export function runInCall<T>(signal: AbortSignal, f: () => T): T {
  return current.run(signal, f);
}

/**
 * The AbortSignal of the actor method or task running now: aborted (its `reason` a
 * TaskCancelledError) when the caller cancels the call with `cancel(ref)`. A method that awaits can
 * pass it on (`fetch(url, { signal })`) or check `signal.aborted`; a synchronous method cannot be
 * interrupted, and its result is discarded. Throws NoCurrentCallError outside a call.
 */
export function getCallSignal(): AbortSignal {
  const signal = current.getStore();
  if (!signal) throw new NoCurrentCallError();
  return signal;
}
