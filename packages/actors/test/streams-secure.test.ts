// Streams and cancel in a cluster with CURVE keys: the stream, acknowledgement and cancel messages
// travel on the same authenticated, encrypted links as calls.
import { generateClusterKeys, init, shutdown } from "@torl-ts/actors";
import test from "ava";
import { ProducerActor, squaresTask } from "./fixtures/streams.js";
import { checkCancelReachesMethod, until } from "./fixtures/until.js";

test.after.always(async () => {
  await shutdown();
});

test("a keyed cluster: generator methods and tasks stream with backpressure; cancel reaches a running call", async (t) => {
  process.env.TORL_NO_IPC = "1"; // over TCP, where CURVE applies
  await init({ numCpus: 2, keys: generateClusterKeys() });
  const window = 2;
  const p = ProducerActor.options({ maxConcurrency: 2, streamBackpressure: window }).remote();
  const stream = p.count(10);
  t.is(
    await until(
      () => p.producedCount(),
      (n) => n >= window,
    ),
    window,
  );
  const seen: number[] = [];
  for await (const x of stream) seen.push(x);
  t.deepEqual(
    seen,
    Array.from({ length: 10 }, (_, i) => i),
  );
  const squares: number[] = [];
  for await (const x of squaresTask.remote(3)) squares.push(x);
  t.deepEqual(squares, [1, 4, 9]);

  await checkCancelReachesMethod(t, p);
});
