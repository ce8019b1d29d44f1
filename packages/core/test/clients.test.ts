import test from "ava";
import { ClientTable } from "../src/cluster/clients.js";
import { hello, Recorder } from "./head-parts.fixture.js";

test("a driver silent past the timeout is listed as silent; a heartbeat resets it; workers never are", (t) => {
  const clients = new ClientTable(1000);
  clients.hello(hello("driver"), "k-driver", 0);
  clients.hello(hello("worker", { heartbeats: false, actorId: "A1" }), "k-worker", 0);
  t.deepEqual(clients.silent(1000), []);
  clients.heartbeat("driver", 600);
  t.deepEqual(clients.silent(1500), []);
  const silent = clients.silent(1601);
  t.deepEqual(
    silent.map((s) => [s.client.clientId, s.silentMs]),
    [["driver", 1001]],
  );
  t.true(clients.has("worker"));
  t.is(clients.size, 2);
});

test("a client that is gone is forgotten, the others are told, and it is named as an owner by its pid", (t) => {
  const clients = new ClientTable(1000);
  const out = new Recorder();
  clients.hello(hello("driver", { pid: 42 }), "k-driver");
  clients.hello(hello("worker", { heartbeats: false, actorId: "A1" }), "k-worker");
  t.is(clients.gone("driver", out), "pid 42");
  t.false(clients.has("driver"));
  t.deepEqual(out.sent, [{ to: "k-worker", m: { t: "clientGone", clientId: "driver" } }]);
  t.is(clients.gone("unknown", out), "unknown", "a client never seen is named by its id");
});

test("the runtime inside an actor's worker is found once, when the worker is gone", (t) => {
  const clients = new ClientTable(1000);
  clients.hello(hello("worker", { heartbeats: false, actorId: "A1" }), "k-worker");
  t.is(clients.takeClientOfActor("A1"), "worker");
  t.is(clients.takeClientOfActor("A1"), undefined);
  t.is(clients.takeClientOfActor("no-such-actor"), undefined);
});
