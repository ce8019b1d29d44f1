/** The rollout queue's admission rule (rollout-queue.ts), driven by a producer far faster than its consumer. */
import test from "ava";
import {
  FifoLock,
  RolloutQueue,
  RolloutQueueClosedError,
  rolloutQueueCapacity,
} from "../../src/trainer/rollout-queue.js";

const tick = () => new Promise((resolve) => setImmediate(resolve));

test("capacity is ceil((1 + staleness_threshold) x trigger_parameter_sync_step)", (t) => {
  t.is(rolloutQueueCapacity(0, 1), 1);
  t.is(rolloutQueueCapacity(0.1, 1), 2);
  t.is(rolloutQueueCapacity(1, 2), 4);
  t.is(rolloutQueueCapacity(0.5, 4), 6);
});

for (const [threshold, every] of [
  [0, 1],
  [0.1, 1],
  [0.5, 2],
  [2, 3],
] as const) {
  test(`staleness ${threshold}, sync every ${every}: never over capacity, never staler than capacity - 1`, async (t) => {
    const capacity = rolloutQueueCapacity(threshold, every);
    const q = new RolloutQueue<{ version: number }>(capacity, every);
    const steps = 40;
    let rolloutVersion = 0;
    let updates = 0;
    const producer = (async () => {
      for (let i = 0; i < steps; i++) {
        await q.admit();
        t.true(q.started - updates <= capacity, "queued or in generation");
        q.put({ version: rolloutVersion });
      }
    })();
    let maxStaleness = 0;
    for (let step = 1; step <= steps; step++) {
      const item = await q.take();
      maxStaleness = Math.max(maxStaleness, updates - item.version);
      for (let i = 0; i < 3; i++) await tick(); // the producer runs ahead as far as it may
      updates++;
      if (step % every === 0) {
        rolloutVersion = updates;
        q.synced();
      }
    }
    await producer;
    t.true(q.maxSize <= capacity);
    t.true(maxStaleness <= capacity - 1, `staleness ${maxStaleness}`);
    // the producer did run ahead when allowed to
    if (capacity > 1) t.is(maxStaleness, capacity - 1);
  });
}

test("items streamed one by one: a taker of k waits for k, and the queue never holds more than capacity x itemsPerUnit", async (t) => {
  const q = new RolloutQueue<number>(2, 1, 3);
  t.is(q.bound, 6);
  const got: number[][] = [];
  const taker = q.takeMany(3).then((items) => got.push(items));
  for (const i of [0, 1]) q.put(i);
  await tick();
  t.deepEqual(got, [], "two items are not a step's worth");
  q.put(2);
  await taker;
  t.deepEqual(got, [[0, 1, 2]]);
  for (let i = 3; i < 9; i++) q.put(i);
  t.is(q.maxSize, 6);
  t.throws(() => q.put(9), { message: /holds 6 of 6 items/ });
  t.deepEqual(await q.takeMany(3), [3, 4, 5]);
  await t.throwsAsync(q.takeMany(7), { instanceOf: RangeError });
  q.close();
  t.deepEqual(await q.takeMany(3), [6, 7, 8], "what was queued before the close is still taken");
  await t.throwsAsync(q.takeMany(1), { instanceOf: RolloutQueueClosedError });
});

test("close rejects the waiting taker and producer", async (t) => {
  const q = new RolloutQueue<number>(1, 1);
  await q.admit();
  const admit = q.admit();
  const take = q.take();
  q.close();
  await t.throwsAsync(admit, { instanceOf: RolloutQueueClosedError });
  await t.throwsAsync(take, { instanceOf: RolloutQueueClosedError });
});

test("FifoLock serves holders in call order", async (t) => {
  const lock = new FifoLock();
  const order: number[] = [];
  await Promise.all(
    [3, 1, 2].map((ms, i) =>
      lock.run(async () => {
        order.push(i);
        await new Promise((r) => setTimeout(r, ms));
        order.push(i);
      }),
    ),
  );
  t.deepEqual(order, [0, 0, 1, 1, 2, 2]);
});
