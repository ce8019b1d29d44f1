/**
 * Entry of a worker process (forked by a node agent): binds its own Router, connects to the head,
 * imports the actor's module, constructs the instance and serves calls until it is told to stop
 * or its node agent goes away.
 */
import { Worker } from "node:worker_threads";
import { logWarn, setLogRole } from "../log.js";
import { decode, errorToWire } from "../wire/codec.js";
import { setClusterKeys } from "../wire/security.js";
import { constructActor, Executor } from "./executor.js";
import { ObjectRef } from "./object-ref.js";
import { Runtime } from "./runtime.js";

let workerContext: any = null;

async function boot(m: any): Promise<void> {
  const spec = m.spec;
  for (const [k, v] of Object.entries((m.env ?? {}) as Record<string, string>)) process.env[k] = v;
  setLogRole(`worker ${spec.name ?? spec.className ?? "task"} ${spec.actorId}`);
  try {
    setClusterKeys(m.keys ?? null);
    const rt = new Runtime();
    await rt.start(m.headAddress, m.nodeIp, {
      actorId: spec.actorId,
      actorName: spec.name,
      nodeId: m.nodeId,
      gpuIds: m.gpuIds,
      resources: m.resources,
      isWorker: true,
      placementGroup: spec.placementGroup,
      bundleIndex: m.bundleIndex,
    });
    workerContext = rt.context;
    let instance: any = null;
    if (spec.className) {
      instance = await constructActor(spec.module, spec.className, () => {
        const args = decode(spec.args.h, spec.args.f) as unknown[];
        return Promise.all(args.map((a) => (a instanceof ObjectRef ? rt.getOne(a) : a)));
      });
    }
    const executor = new Executor(rt, instance, Math.max(1, spec.maxConcurrency ?? 1));
    rt.callHandler = (peer, msg) => executor.onMessage(peer, msg);
    rt.calls = executor;
    process.send!({ t: "ready", endpoint: rt.address });
  } catch (e) {
    process.send!({ t: "failed", error: errorToWire(e) }, () => process.exit(1));
  }
}

process.on("message", (m: any) => {
  if (m?.t === "start") void boot(m);
});
process.on("disconnect", () => process.exit(0));
// Orphan guard that works even while actor code blocks the event loop: a thread that kills this
// process once its node agent (the parent) is gone.
const watchdog = new Worker(
  `const p = process.ppid; setInterval(() => { if (process.ppid !== p) process.kill(process.pid, "SIGKILL"); }, 500);`,
  { eval: true },
);
watchdog.unref();
// warm the rest of the runtime (actor code imports it) while this worker waits for its actor; value
// types are registered by the runtime module itself, so decoding never depends on this finishing
void import("../index.js").catch((e: Error) => logWarn(`warming the runtime failed: ${e.message}`));
process.on("SIGTERM", () => process.exit(0));

export function getWorkerContext(): unknown {
  return workerContext;
}
