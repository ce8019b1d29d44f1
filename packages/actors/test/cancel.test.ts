// cancel(ref): a queued call never runs, a running async call sees its AbortSignal, a running sync
// call's result is discarded, a stream's producer stops, force kills a task's worker, and a finished
// ref is left as it is. Process and thread actors, and tasks.
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { cancel, get, init, kill, put, RemoteError, shutdown, TaskCancelledError } from "@torl-ts/actors";
import test from "ava";
import { ProducerActor, spinForeverTask, squaresTask } from "./fixtures/streams.js";
import { until } from "./fixtures/until.js";

test.before(async () => {
  await init({ numCpus: 4 });
});
test.after.always(async () => {
  await shutdown();
});

const dir = mkdtempSync(path.join(os.tmpdir(), "torl-cancel-"));
let files = 0;
const file = (name: string) => path.join(dir, `${name}-${++files}`);
const appeared = (f: string) =>
  until(
    () => existsSync(f),
    (ok) => ok,
  );

const KINDS = ["process", "thread"] as const;
const producer = (kind: (typeof KINDS)[number], opts: { maxConcurrency?: number } = {}) =>
  (kind === "thread" ? ProducerActor.options({ thread: true }) : ProducerActor).options(opts).remote();

for (const kind of KINDS) {
  test(`${kind} actor: a cancelled queued call never runs and rejects with TaskCancelledError`, async (t) => {
    const p = producer(kind);
    // sent before the actor is up: queued here (process) or in its thread until it is constructed
    const early = p.mark("early");
    cancel(early);
    await t.throwsAsync(early, { instanceOf: TaskCancelledError });
    await p.ready();
    // the calls and the cancels reach the actor in this order: the first cancel is read while
    // `holding` runs and `queued` waits behind it
    const holding = p.waitForAbort(file("started"));
    const queued = p.mark("queued");
    const after = p.mark("after");
    cancel(queued);
    cancel(holding);
    const err = await t.throwsAsync(queued, { instanceOf: TaskCancelledError });
    t.regex(err!.message, /\.mark was cancelled by cancel\(\)/);
    await t.throwsAsync(holding, { instanceOf: TaskCancelledError });
    t.is(await after, "after");
    t.deepEqual(await p.marks(), ["after"], "the cancelled call never ran");
    kill(p);
  });

  test(`${kind} actor: a running async call sees its AbortSignal aborted with TaskCancelledError`, async (t) => {
    const p = producer(kind);
    const started = file("started");
    const running = p.waitForAbort(started);
    await appeared(started);
    cancel(running);
    await t.throwsAsync(running, { instanceOf: TaskCancelledError });
    // maxConcurrency 1: this runs once the cancelled call has ended
    t.is(await get(p.abortSeen(), { timeoutMs: 30_000 }), "TaskCancelledError");
    kill(p);
  });

  test(`${kind} actor: a running sync call runs to its end; its result is discarded and its ref rejects`, async (t) => {
    const p = producer(kind);
    const started = file("started");
    const release = file("release");
    const running = p.blockUntil(started, release);
    await appeared(started);
    cancel(running);
    // rejected while the method still blocks its actor
    await t.throwsAsync(running, { instanceOf: TaskCancelledError });
    writeFileSync(release, "");
    t.is(await get(p.syncFinished(), { timeoutMs: 30_000 }), 1, "it ran to its end");
    t.is(await p.value(), 42, "the actor serves the next call");
    kill(p);
  });

  test(`${kind} actor: cancelling a stream stops its producer (finally runs) and the reader gets TaskCancelledError`, async (t) => {
    const p = producer(kind);
    const stream = p.oneThenWait();
    const it = stream[Symbol.asyncIterator]();
    t.deepEqual(await it.next(), { done: false, value: "first" });
    cancel(stream);
    await t.throwsAsync(it.next(), { instanceOf: TaskCancelledError });
    t.deepEqual(await it.next(), { done: true, value: undefined });
    t.is(await get(p.finallyCount(), { timeoutMs: 30_000 }), 1);
    t.is(await p.abortSeen(), "TaskCancelledError", "the generator saw its signal");
    kill(p);
  });

  test(`${kind} actor: force is refused for an actor call; cancel of a finished ref is a no-op`, async (t) => {
    const p = producer(kind);
    const v = p.value();
    t.throws(() => cancel(v, { force: true }), { instanceOf: TypeError, message: /actor call/ });
    t.is(await v, 42);
    cancel(v);
    cancel(v, { force: true });
    t.is(await v, 42, "a finished ref keeps its value");
    const bad = p.failAt(0);
    const read = async () => {
      for await (const _ of bad) t.fail("no items");
    };
    await t.throwsAsync(read, { instanceOf: RemoteError });
    cancel(bad);
    const stored = put(7);
    cancel(stored);
    t.is(await stored, 7);
    kill(p);
  });
}

test("force: true kills the worker of a running task, which no plain cancel could stop", async (t) => {
  const pidFile = file("pid");
  const spinning = spinForeverTask.remote(pidFile);
  await appeared(pidFile);
  const pid = Number(readFileSync(pidFile, "utf8"));
  // pid 0 would probe this process group, which is always alive
  t.true(Number.isInteger(pid) && pid > 0, `the task wrote its pid: ${pid}`);
  cancel(spinning, { force: true });
  const err = await t.throwsAsync(spinning, { instanceOf: TaskCancelledError });
  t.regex(err!.message, /task spinForever was cancelled/);
  const alive = () => {
    try {
      process.kill(pid, 0);
      return true;
    } catch {
      return false;
    }
  };
  t.false(await until(alive, (a) => !a), `worker ${pid} was killed`);
  const squares: number[] = [];
  for await (const x of squaresTask.remote(2)) squares.push(x);
  t.deepEqual(squares, [1, 4], "tasks run on after it");
});
