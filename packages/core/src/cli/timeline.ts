/** `torl timeline --out FILE`: a Chrome trace of every process of a live cluster over a window. */
import { writeFileSync } from "node:fs";
import { resolveJoinKeys } from "../cluster/key-file.js";
import { MAX_TIMELINE_SECONDS } from "../cluster/process-probes.js";
import { HeadError, UsageError } from "../errors.js";
import { chromeTrace } from "../observe/chrome-trace.js";
import type { ProcessesReport } from "../observe/process-report.js";
import { HeadClient } from "../runtime/head-client.js";
import { setClusterKeys } from "../wire/security.js";
import { defineCommand } from "./define.js";
import { headAddressFrom } from "./flags.js";

const usage = `usage: pnpm torl timeline --out FILE [--seconds N] [--address HOST:PORT] [--keys PATH]

Records every task, actor call (run and made), object transfer, collective operation, trainer
phase and sandbox run of every process of the cluster for --seconds (default 5), then writes them
to FILE as Chrome trace events: open it in https://ui.perfetto.dev or chrome://tracing. One row per
driver or worker process, named by its actor's class and name, pid and node. A whole training run's
timeline: the trainer.timeline=FILE setting.

  --out       the trace file to write (JSON)
  --seconds   how long to record (default 5, at most ${MAX_TIMELINE_SECONDS})
  --address   the head (default: TORL_ADDRESS, else the head last started on this machine)
  --keys      the cluster's key file, for an authenticated cluster (as torl status)`;

export const timelineCommand = defineCommand({
  summary: "record a Chrome trace (Perfetto, chrome://tracing) of every process of the cluster",
  usage,
  flags: {
    out: { type: "string" },
    seconds: { type: "number", min: 0.001, max: MAX_TIMELINE_SECONDS },
    address: { type: "address" },
    keys: { type: "string" },
  },
  async run(f) {
    if (!f.out) throw new UsageError("--out FILE is required: where to write the trace");
    const seconds = f.seconds ?? 5;
    const address = headAddressFrom(f.address);
    setClusterKeys(resolveJoinKeys(f.keys, address));
    const client = new HeadClient(`tcp://${address}`, () => {});
    console.log(`recording the cluster at ${address} for ${seconds} s ...`);
    let report: ProcessesReport;
    try {
      report = await client.request("timeline", { seconds }, seconds * 1000 + 30_000);
    } catch (e) {
      throw new HeadError(`timeline of the head at ${address}: ${(e as Error).message}`, { cause: e });
    } finally {
      client.close();
    }
    const trace = chromeTrace(report);
    writeFileSync(f.out, JSON.stringify(trace));
    const events = trace.traceEvents.filter((e) => e.ph === "X").length;
    console.log(
      `wrote ${events} events of ${report.processes.length} processes to ${f.out}` +
        (report.silent.length
          ? ` (${report.silent.length} did not answer: ${trace.otherData.silent_processes})`
          : "") +
        "; open it in https://ui.perfetto.dev or chrome://tracing",
    );
    return 0;
  },
});
