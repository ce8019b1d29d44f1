// Streams: a generator method or task returns a ref read with `for await` as items are produced,
// with backpressure, errors at the item where they happened, and an early break that stops the
// producer. Process actors, thread actors and tasks.
import {
  get,
  init,
  kill,
  ObjectRef,
  RemoteError,
  SerializationError,
  StreamUsageError,
  shutdown,
} from "@torl-ts/actors";
import test from "ava";
import { ProducerActor, squaresTask } from "./fixtures/streams.js";
import { until } from "./fixtures/until.js";

test.before(async () => {
  await init({ numCpus: 4 });
});
test.after.always(async () => {
  await shutdown();
});

const KINDS = ["process", "thread"] as const;
const producer = (kind: (typeof KINDS)[number], window?: number) =>
  (kind === "thread" ? ProducerActor.options({ thread: true }) : ProducerActor)
    .options({ maxConcurrency: 2, ...(window ? { streamBackpressure: window } : {}) })
    .remote();

for (const kind of KINDS) {
  test(`${kind} actor: a generator method streams its items in order; the producer never runs more than the window ahead`, async (t) => {
    const window = 4;
    const p = producer(kind, window);
    await p.ready();
    const stream = p.count(40);
    t.true(stream instanceof ObjectRef);
    // nothing consumed: the producer fills the window and stops there
    const ahead = await until(
      () => p.producedCount(),
      (n) => n >= window,
    );
    t.is(ahead, window, "produced before anything was consumed");
    const seen: number[] = [];
    for await (const x of stream) {
      seen.push(x);
      const produced = await p.producedCount();
      t.true(produced <= seen.length + window, `${produced} produced with ${seen.length} consumed`);
    }
    t.deepEqual(
      seen,
      Array.from({ length: 40 }, (_, i) => i),
    );
    t.is(await p.producedCount(), 40);
    kill(p);
  });

  test(`${kind} actor: an error at item k arrives after items 0..k-1, as the error the generator threw`, async (t) => {
    const p = producer(kind);
    const seen: number[] = [];
    const err = await t.throwsAsync(async () => {
      for await (const x of p.failAt(3)) seen.push(x);
    });
    t.deepEqual(seen, [0, 1, 2]);
    t.true(err instanceof RemoteError, String(err));
    t.is((err as RemoteError).remoteName, "RangeError");
    t.regex(err!.message, /item 3 failed/);
    t.is(await p.value(), 42, "the actor serves calls after the failed stream");
    kill(p);
  });

  test(`${kind} actor: break in for await stops the producer (its finally block runs) and frees its slot`, async (t) => {
    const window = 3;
    const p = (kind === "thread" ? ProducerActor.options({ thread: true }) : ProducerActor)
      .options({ streamBackpressure: window })
      .remote();
    const seen: number[] = [];
    for await (const x of p.endless()) {
      seen.push(x);
      if (x === 5) break;
    }
    t.deepEqual(seen, [0, 1, 2, 3, 4, 5]);
    // maxConcurrency 1: these calls run only once the generator has ended
    t.is(await get(p.finallyCount(), { timeoutMs: 30_000 }), 1);
    const produced = await p.producedCount();
    t.true(produced <= seen.length + window, `produced ${produced}`);
    t.is(await p.producedCount(), produced, "nothing produced after the stop");
    kill(p);
  });

  test(`${kind} actor: a sync generator streams too; a generator of zero items ends at once`, async (t) => {
    const p = producer(kind);
    const tens: number[] = [];
    for await (const x of p.tens(4)) tens.push(x);
    t.deepEqual(tens, [0, 10, 20, 30]);
    const none: number[] = [];
    for await (const x of p.count(0)) none.push(x);
    t.deepEqual(none, []);
    kill(p);
  });

  test(`${kind} actor: an item that cannot travel ends the stream with SerializationError after the items before it`, async (t) => {
    const p = producer(kind);
    const seen: unknown[] = [];
    const err = await t.throwsAsync(async () => {
      for await (const x of p.badItem()) seen.push(x);
    });
    t.deepEqual(seen, [1]);
    t.true(err instanceof SerializationError, String(err));
    t.regex(err!.message, /item 1/);
    kill(p);
  });

  test(`${kind} actor: a stream awaited, a value iterated, a stream read twice: StreamUsageError`, async (t) => {
    const p = producer(kind);
    const stream = p.count(2);
    await t.throwsAsync(async () => stream, { instanceOf: StreamUsageError, message: /for await/ });
    const items: number[] = [];
    for await (const x of stream) items.push(x);
    t.deepEqual(items, [0, 1]);
    t.throws(() => stream[Symbol.asyncIterator](), { instanceOf: StreamUsageError, message: /already/ });
    const value = p.value();
    await t.throwsAsync(
      async () => {
        for await (const _ of value as unknown as AsyncIterable<unknown>) t.fail("a value has no items");
      },
      { instanceOf: StreamUsageError, message: /not a stream/ },
    );
    t.is(await value, 42);
    kill(p);
  });
}

test("a generator task streams its items to the caller", async (t) => {
  const seen: number[] = [];
  for await (const x of squaresTask.remote(5)) seen.push(x);
  t.deepEqual(seen, [1, 4, 9, 16, 25]);
  // a second one reuses the executor
  const again: number[] = [];
  for await (const x of squaresTask.options({ streamBackpressure: 1 }).remote(3)) again.push(x);
  t.deepEqual(again, [1, 4, 9]);
});

test("streamBackpressure outside 1..1024 is refused at the call site", (t) => {
  t.throws(() => ProducerActor.options({ streamBackpressure: 0 }).remote(), {
    instanceOf: RangeError,
    message: /streamBackpressure must be a whole number from 1 to 1024, got 0/,
  });
  t.throws(() => squaresTask.options({ streamBackpressure: 2.5 }).remote(1), {
    instanceOf: RangeError,
    message: /task squares: streamBackpressure/,
  });
});
