// Streams and cancel between nodes: the driver on the head's node reads a generator of an actor on a
// second node (127.0.0.2, over TCP) and cancels a call running there.
import { init, RemoteError, shutdown } from "@torl-ts/actors";
import test from "ava";
import { CliCluster } from "./fixtures/cli-cluster.js";
import { ProducerActor } from "./fixtures/streams.js";
import { checkCancelReachesMethod, until } from "./fixtures/until.js";

const cluster = new CliCluster("torl-streams-multinode-");

test.after.always(async () => {
  await shutdown();
  await cluster.stop();
});

test("a generator on a second node streams to the driver with backpressure; an error and a cancel cross nodes", async (t) => {
  const { head, node2 } = await cluster.startTwoNodes(
    { numCpus: 1 },
    { numCpus: 1, resources: { remote: 1 } },
  );
  await init({ address: head.address });
  const window = 3;
  const p = ProducerActor.options({
    resources: { remote: 1 },
    maxConcurrency: 2,
    streamBackpressure: window,
  }).remote();

  const where: Array<string | undefined> = [];
  for await (const x of p.where()) where.push(x);
  t.is(where[0], node2.nodeId, "the producer runs on the second node");

  const stream = p.count(20);
  t.is(
    await until(
      () => p.producedCount(),
      (n) => n >= window,
    ),
    window,
    "paused at the window",
  );
  const seen: number[] = [];
  for await (const x of stream) {
    seen.push(x);
    t.true((await p.producedCount()) <= seen.length + window);
  }
  t.deepEqual(
    seen,
    Array.from({ length: 20 }, (_, i) => i),
  );

  const before: number[] = [];
  const err = await t.throwsAsync(async () => {
    for await (const x of p.failAt(2)) before.push(x);
  });
  t.deepEqual(before, [0, 1]);
  t.true(err instanceof RemoteError, String(err));

  await checkCancelReachesMethod(t, p);
});
