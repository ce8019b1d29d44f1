import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import {
  ActorDiedError,
  get,
  getActor,
  init,
  invokeInActor,
  kill,
  ObjectLostError,
  shutdown,
} from "@torl-ts/actors";
import test from "ava";
import * as zmq from "zeromq";
import { type Counter, CounterActor, dieOnceTask, StoreActor } from "./fixtures/classes.js";

const FIXTURES = new URL("./fixtures/classes.ts", import.meta.url).href;
let headAddress = "";

test.before(async () => {
  headAddress = (await init({ numCpus: 2 })).address;
});
test.after.always(async () => {
  await shutdown();
});

test("a worker killed with SIGKILL mid-call rejects pending and later calls with ActorDiedError", async (t) => {
  const c = CounterActor.options({ name: "victim" }).remote(0);
  const pid = await c.pid();
  const pending = c.sleep(60_000);
  const queued = c.inc(1);
  process.kill(pid, "SIGKILL");
  const err = await t.throwsAsync(pending, { instanceOf: ActorDiedError });
  t.is(err!.actorId, c.actorId);
  t.is(err!.actorName, "victim");
  t.is(err!.signal, "SIGKILL");
  t.is(err!.cause.kind, "exited");
  t.regex(err!.message, /victim/);
  t.regex(err!.message, /SIGKILL/);
  await t.throwsAsync(queued, { instanceOf: ActorDiedError });
  await t.throwsAsync(c.inc(1), { instanceOf: ActorDiedError });
});

test("maxRestarts re-runs the constructor and new calls succeed; then the actor stays dead", async (t) => {
  const c = CounterActor.options({ maxRestarts: 1 }).remote(7);
  t.is(await c.inc(1), 8);
  const pid1 = await c.pid();
  process.kill(pid1, "SIGKILL");
  // calls made after the death wait for the restarted worker (the one in flight may fail)
  let value: number | undefined;
  for (let i = 0; i < 20 && value === undefined; i++) {
    try {
      value = await c.inc(1);
    } catch (e) {
      t.true(e instanceof ActorDiedError);
    }
  }
  t.is(value, 8, "the constructor ran again with its original argument");
  const pid2 = await c.pid();
  t.not(pid2, pid1);
  process.kill(pid2, "SIGKILL");
  const err = await t.throwsAsync(
    (async () => {
      for (;;) await c.inc(1);
    })(),
    { instanceOf: ActorDiedError },
  );
  t.regex(err!.message, /exit|signal/);
});

test("kill() ends an actor: calls reject with ActorDiedError of kind 'killed'", async (t) => {
  const c = CounterActor.options({ maxRestarts: 3 }).remote(0);
  await c.ready();
  kill(c);
  const err = await t.throwsAsync(
    (async () => {
      for (;;) await c.inc(1);
    })(),
    { instanceOf: ActorDiedError },
  );
  t.is(err!.cause.kind, "killed");
});

test("named actors are found by name; a taken name is refused; a dead one is gone", async (t) => {
  const c = CounterActor.options({ name: "registry" }).remote(41);
  await c.ready();
  const h = await getActor<Counter>("registry");
  t.is(await h.inc(1), 42);
  t.is(h.actorId, c.actorId);
  const dup = CounterActor.options({ name: "registry" }).remote(0);
  await t.throwsAsync(dup.ready(), { message: /already exists/ });
  await t.throwsAsync(getActor("nobody"), { message: /no live actor named 'nobody'/ });
  kill(c);
  await t.throwsAsync(
    (async () => {
      for (;;) await c.ready();
    })(),
    { instanceOf: ActorDiedError },
  );
  await t.throwsAsync(getActor("registry"), { message: /no live actor/ });
});

test("a task whose worker dies is retried (maxRetries); without retries it fails with ActorDiedError", async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "torl-retry-"));
  t.is(await dieOnceTask.options({ maxRetries: 1 }).remote(path.join(dir, "a")), "survived");
  await t.throwsAsync(dieOnceTask.options({ maxRetries: 0 }).remote(path.join(dir, "b")), {
    instanceOf: ActorDiedError,
  });
});

test("malformed and foreign ZeroMQ messages are answered with an error, never dropped, and crash nothing", async (t) => {
  const c = CounterActor.remote(0);
  const endpoint = await invokeInActor<string>(c, FIXTURES, "endpointOf");
  const logged: string[] = [];
  const write = process.stderr.write.bind(process.stderr);
  process.stderr.write = ((chunk: any, ...rest: any[]) => {
    logged.push(String(chunk));
    return write(chunk, ...rest);
  }) as any;
  try {
    for (const target of [endpoint, `tcp://${headAddress}`]) {
      const d = new zmq.Dealer();
      d.linger = 0;
      d.receiveTimeout = 30_000;
      d.connect(target);
      const foreign: (string | Buffer[])[] = [
        "hello there",
        [Buffer.from([0xc1, 0xff]), Buffer.from("x")],
        [Buffer.from([0x92, 0xa6, 0x74, 0x6f, 0x72, 0x6c, 0x2f, 0x31, 0x91, 0x05]), Buffer.alloc(2)],
      ];
      // one at a time: answers to messages that arrive together may leave as one batch
      for (const [i, message] of foreign.entries()) {
        await d.send(message);
        const reply = Buffer.concat(await d.receive()).toString("latin1");
        t.regex(reply, /decod/, `${target}: answer ${i} says why`);
      }
      d.close();
    }
    t.is(await c.inc(1), 1, "the worker still serves calls");
    const other = CounterActor.remote(5);
    t.is(await other.inc(1), 6, "the head still creates actors");
    t.true(
      logged.some((l) => /head: a message could not be decoded/.test(l)),
      logged.join(""),
    );
  } finally {
    process.stderr.write = write;
  }
});

test("get of an object whose owner died rejects with ObjectLostError instead of hanging", async (t) => {
  const s = StoreActor.remote();
  const [ref] = await s.makeRef(1000, 1);
  const pid = await invokeInActor<number>(s, FIXTURES, "whoAmI");
  process.kill(pid, "SIGKILL");
  await t.throwsAsync(get(ref!), { instanceOf: ObjectLostError, message: /owner/ });
});
