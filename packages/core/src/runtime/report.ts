/** A process's answer to the head's probe (see observe/process-report.ts), read off its runtime. */
import { processActivities } from "../observe/activity.js";
import { CALL_FAMILIES } from "../observe/call-metrics.js";
import { metricFamilies, metricGauge } from "../observe/metrics.js";
import {
  approxBytes,
  BORROWED_LISTED,
  OWNED_OBJECTS_LISTED,
  type OwnedObject,
  type ProcessReport,
} from "../observe/process-report.js";
import { nowUs, traceRecorder } from "../observe/timeline.js";
import { FAILED, PENDING } from "./object-store.js";
import type { Runtime } from "./runtime.js";
import { threadActorReports } from "./thread-actor.js";

const storeBytes = metricGauge(
  "torl_object_store_bytes",
  "Bytes of the objects this process owns (typed arrays exactly, other values estimated).",
);
const storeObjects = metricGauge("torl_object_store_objects", "Objects this process owns.");
const borrowedObjects = metricGauge(
  "torl_borrowed_objects",
  "Objects owned by other processes that this process holds refs to.",
);
const queuedCalls = metricGauge(CALL_FAMILIES.queued.name, CALL_FAMILIES.queued.help);
const runningCalls = metricGauge(CALL_FAMILIES.running.name, CALL_FAMILIES.running.help);
const inFlight = metricGauge(
  "torl_calls_in_flight",
  "Calls this process made (actor calls and tasks) that have no result yet.",
);

export function reportOf(rt: Runtime, probe: { traceFromUs?: number; traceToUs?: number }): ProcessReport {
  const objects: OwnedObject[] = [];
  let bytes = 0;
  for (const [seq, e] of rt.store.entries) {
    const b = e.state === PENDING ? 0 : approxBytes(e.value);
    bytes += b;
    objects.push({
      id: `${rt.clientId}:${seq}`,
      state: e.state === PENDING ? "PENDING" : e.state === FAILED ? "FAILED" : "READY",
      bytes: b,
      localRefs: e.local,
      copiesOut: e.out,
    });
  }
  objects.sort((a, b) => b.bytes - a.bytes);
  const running = rt.calls?.running() ?? [];
  const queued = rt.calls?.queued() ?? 0;
  storeBytes.set({}, bytes);
  storeObjects.set({}, objects.length);
  borrowedObjects.set({}, rt.borrowed.size);
  queuedCalls.set({}, queued);
  runningCalls.set({}, running.length);
  let flying = 0;
  for (const rec of rt.actors.records.values()) flying += rec.inflight.size;
  inFlight.set({}, flying);
  const ctx = rt.context;
  return {
    clientId: rt.clientId,
    pid: process.pid,
    role: ctx.isWorker ? "worker" : "driver",
    ...(ctx.nodeId ? { nodeId: ctx.nodeId } : {}),
    ...(ctx.actorId ? { actorId: ctx.actorId } : {}),
    ...(ctx.actorName ? { actorName: ctx.actorName } : {}),
    ...(rt.calls ? { className: rt.calls.className } : {}),
    running,
    queued,
    threadActors: threadActorReports(rt),
    objects: objects.slice(0, OWNED_OBJECTS_LISTED),
    objectCount: objects.length,
    objectBytes: bytes,
    borrowed: [...rt.borrowed.keys()].slice(0, BORROWED_LISTED),
    metrics: metricFamilies(),
    activity: processActivities(),
    ...(probe.traceFromUs !== undefined && probe.traceToUs !== undefined
      ? {
          trace: {
            events: traceRecorder.endingIn(probe.traceFromUs, probe.traceToUs),
            dropped: traceRecorder.dropped,
            // every event recorded so far ended by this process's now (its clock, not the asker's)
            toUs: Math.min(probe.traceToUs, nowUs()),
          },
        }
      : {}),
  };
}
