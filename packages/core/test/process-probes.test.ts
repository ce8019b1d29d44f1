// The head's probes of its processes and its hold on timeline recording, without sockets: a change
// of recording is answered only once every process heard it, processes keep the latest change they
// heard, the events of a worker killed while recording are kept for the windows asked for later, and
// a worker's span of a call ends before its reply leaves (so the caller's clock is past its end).

import test from "ava";
import { ClientTable } from "../src/cluster/clients.js";
import { PROBE_TIMEOUT_MS, ProcessProbes } from "../src/cluster/process-probes.js";
import type { ProcessReport } from "../src/observe/process-report.js";
import { nowUs, type TraceEvent, traceRecorder } from "../src/observe/timeline.js";
import { Executor } from "../src/runtime/executor.js";
import { CALL } from "../src/runtime/protocol.js";
import type { Runtime } from "../src/runtime/runtime.js";
import { hello, Recorder } from "./head-parts.fixture.js";

function report(clientId: string, events?: TraceEvent[]): ProcessReport {
  return {
    clientId,
    pid: clientId.length,
    role: "worker",
    running: [],
    queued: 0,
    threadActors: [],
    objects: [],
    objectCount: 0,
    objectBytes: 0,
    borrowed: [],
    metrics: [],
    activity: {},
    ...(events ? { trace: { events, dropped: 0, toUs: nowUs() } } : {}),
  };
}

function cluster() {
  const clients = new ClientTable(1000);
  const out = new Recorder();
  clients.hello(hello("driver"), "k-driver");
  clients.hello(hello("exec", { heartbeats: false, actorId: "E1" }), "k-exec");
  return { clients, out, probes: new ProcessProbes(clients, out) };
}

test("recording on is answered once every process heard it, however long one takes (not at the probe deadline)", async (t) => {
  const { out, probes } = cluster();
  let answered: { recording: boolean; silent: unknown[] } | null = null;
  probes.record("driver/timeline-1", true, (v) => {
    answered = v;
  });
  const sent = out.take("probe");
  t.deepEqual(
    sent.map((s) => [s.to, s.m.recording]),
    [
      ["k-driver", true],
      ["k-exec", true],
    ],
  );
  probes.answered(sent[0]!.m.qid, report("driver"));
  // the executor's event loop is blocked past the deadline of an ordinary probe: still no answer
  await new Promise((r) => setTimeout(r, PROBE_TIMEOUT_MS + 500));
  t.is(answered, null, "answered before the executor heard that recording is on");
  probes.answered(sent[1]!.m.qid, report("exec"));
  t.like(answered, { recording: true, silent: [] });
});

test("a process keeps the latest change of recording it heard: a hello's answer read after a later probe does not undo it", (t) => {
  const { out, probes } = cluster();
  const helloEpoch = probes.epoch; // a joining executor's hello is answered: off
  probes.record("driver/timeline-1", true, () => {});
  const [probe] = out.take("probe");
  t.true(probe!.m.epoch! > helloEpoch);
  traceRecorder.joining();
  // read in one batch: the probe is handled at once, the hello's answer after it (its await)
  traceRecorder.setRecording(true, probe!.m.epoch!);
  traceRecorder.setRecording(false, helloEpoch);
  t.true(traceRecorder.recording);
  traceRecorder.setRecording(false, probe!.m.epoch! + 1);
  t.false(traceRecorder.recording);
});

test("a worker killed while recording has its events collected first, and later windows include them once", (t) => {
  const { clients, out, probes } = cluster();
  probes.record("driver/timeline-1", true, () => {});
  for (const s of out.take("probe")) probes.answered(s.m.qid, report(s.to.slice(2)));
  const task: TraceEvent = { name: "square", cat: "task", ph: "X", ts: 1000, dur: 10, pid: 4, tid: 1 };
  let killed = false;
  probes.beforeKill(clients.clientOfActor("E1"), () => {
    killed = true;
  });
  const [ask, ...more] = out.take("probe");
  t.is(more.length, 0, "only the worker to be killed is asked");
  t.is(ask!.to, "k-exec");
  t.false(killed, "not killed before it answered");
  probes.answered(ask!.m.qid, report("exec", [task]));
  t.true(killed);
  clients.gone("exec", out); // its worker exited: the head forgets it
  probes.gone("exec");
  out.take("clientGone");
  const windows: ProcessReport[][] = [];
  probes.probe({ fromUs: 0, toUs: 2000 }, (v) => windows.push(v.processes));
  probes.probe({ fromUs: 2000, toUs: 3000 }, (v) => windows.push(v.processes));
  for (const s of out.take("probe")) probes.answered(s.m.qid, report("driver", []));
  t.deepEqual(
    windows.map((w) => w.flatMap((p) => (p.trace?.events ?? []).map((e) => `${p.clientId}:${e.name}`))),
    [["exec:square"], []],
  );
  // nobody records any more: nothing is kept
  probes.record("driver/timeline-1", false, () => {});
  for (const s of out.take("probe")) probes.answered(s.m.qid, report("driver"));
  probes.probe({ fromUs: 0, toUs: 2000 }, (v) => windows.push(v.processes));
  for (const s of out.take("probe")) probes.answered(s.m.qid, report("driver", []));
  t.deepEqual(
    windows[2]!.map((p) => p.clientId),
    ["driver"],
  );
});

test("a kill while nobody records is not delayed", (t) => {
  const { clients, out, probes } = cluster();
  let killed = false;
  probes.beforeKill(clients.clientOfActor("E1"), () => {
    killed = true;
  });
  t.true(killed);
  t.deepEqual(out.take("probe"), []);
});

test("a call's span on the worker ends before its reply is sent", (t) => {
  traceRecorder.joining();
  traceRecorder.setRecording(true, 1);
  let sentUs = 0;
  const server = {
    sendEncoded: () => {
      sentUs = nowUs();
      // the send takes a while (the worker descheduled on a loaded machine)
      while (nowUs() < sentUs + 2000);
    },
    send: () => t.fail("no error reply expected"),
  };
  class Sq {
    square(x: number): number {
      return x * x;
    }
  }
  const ex = new Executor({ server } as unknown as Runtime, new Sq(), 1);
  ex.onMessage(Buffer.from("caller"), [CALL, 1, "square", [3], 0]);
  traceRecorder.setRecording(false, 2);
  t.true(sentUs > 0, "replied");
  const [span] = traceRecorder.endingIn(0, Number.MAX_SAFE_INTEGER).filter((e) => e.name === "Sq.square");
  t.truthy(span);
  t.true(
    span!.ts! + span!.dur! <= sentUs,
    `the span ended ${span!.ts! + span!.dur! - sentUs} µs after the reply left`,
  );
});
