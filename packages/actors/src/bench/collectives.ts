/**
 * `pnpm torl bench collectives [--json]`: ring collectives between child processes, next to the
 * floor measured in the same run: a plain in-process copy of the same array and a one-way ZeroMQ
 * transfer of it between two processes (same transport, same slice size).
 *
 * Throughput is "algorithm bandwidth": array bytes / seconds per call (for allGather the gathered
 * output, for reduceScatter the input), from the median call (the slowest rank's time per call), so
 * a busy machine distorts it less than a mean would; `*_best_gbps` use the fastest call. A ring allReduce moves 2(W-1)/W of the array out of every
 * rank, so at W=2 it cannot beat the one-way transfer of the whole array.
 */
import { tmpdir } from "node:os";
import { MAX_FRAME_BYTES, siblingModule } from "@torl-ts/core";
import { defineBench } from "@torl-ts/core/cli";
import { createCollectiveGroupOn } from "../collective/group.js";
import { ProcessMember } from "../collective/process-member.js";
import type { CollectiveTransport } from "../collective/ring.js";
import type { BenchKind } from "./collectives-member.js";

const BENCH_MEMBER = siblingModule(import.meta.url, "./collectives-member").href;

export interface CollectiveBenchOptions {
  /** Array size in MiB (Float32Array). Default 16. */
  mib?: number;
  /** World sizes to run. Default [2, 3, 4]. */
  worldSizes?: number[];
  /** Timed calls per figure. Default 10. */
  iters?: number;
  transport?: CollectiveTransport;
  sliceBytes?: number;
  /** Called with a line per finished figure. */
  progress?: (line: string) => void;
}

export type CollectiveBenchResult = Record<string, number | string>;

const KINDS: BenchKind[] = ["allReduce", "reduceScatter", "allGather", "broadcast", "barrier"];

const round = (x: number, d = 3): number => Number(x.toFixed(d));

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

export async function runCollectiveBench(opts: CollectiveBenchOptions = {}): Promise<CollectiveBenchResult> {
  const mib = opts.mib ?? 16;
  // whole float32 elements: --mib 0.01 is 2621 of them, not 2621.44
  const n = Math.max(1, Math.round((mib * 1024 * 1024) / 4));
  const bytes = n * 4;
  const worldSizes = opts.worldSizes ?? [2, 3, 4];
  const iters = opts.iters ?? 10;
  const sliceBytes = opts.sliceBytes ?? 1 << 20;
  // a larger message would be refused by the receiving socket, and the one-way floor would wait forever
  if (!Number.isInteger(sliceBytes) || sliceBytes < 8 || sliceBytes > MAX_FRAME_BYTES)
    throw new RangeError(
      `sliceBytes must be an integer from 8 to ${MAX_FRAME_BYTES} (the largest frame a member accepts), got ${sliceBytes}`,
    );
  const transport = opts.transport ?? "auto";
  const say = opts.progress ?? (() => {});
  const out: CollectiveBenchResult = { array_mib: mib, iters, transport, slice_bytes: sliceBytes };

  // Floor 1: copying the array inside one process.
  const src = new Float32Array(n).fill(1);
  const dst = new Float32Array(n);
  dst.set(src);
  const t0 = performance.now();
  for (let i = 0; i < iters; i++) dst.set(src);
  out.memcpy_gbps = round((bytes * iters) / ((performance.now() - t0) / 1000) / 1e9);
  say(`memcpy of ${mib} MiB: ${out.memcpy_gbps} GB/s`);

  const maxW = Math.max(2, ...worldSizes);
  const procs = await Promise.all(Array.from({ length: maxW }, () => ProcessMember.spawn()));
  try {
    // Floor 2: one-way transfer of the array between two processes over the same transport.
    const endpoint =
      transport === "tcp" ? "tcp://127.0.0.1:*" : `ipc://${tmpdir()}/torl-bench-${process.pid}.ipc`;
    const bound = (await procs[1]!.invoke(BENCH_MEMBER, "rawBind", [endpoint])) as string;
    const [secs] = (await Promise.all([
      procs[1]!.invoke(BENCH_MEMBER, "rawReceive", [bytes, sliceBytes, iters]),
      procs[0]!.invoke(BENCH_MEMBER, "rawSend", [bound, bytes, sliceBytes, iters]),
    ])) as [number, unknown];
    out.zmq_oneway_gbps = round((bytes * iters) / secs / 1e9);
    say(`one-way ZeroMQ transfer of ${mib} MiB between two processes: ${out.zmq_oneway_gbps} GB/s`);

    for (const W of worldSizes) {
      const members = procs.slice(0, W);
      const name = `bench-w${W}`;
      const group = await createCollectiveGroupOn(members, { name, transport, sliceBytes });
      try {
        for (const kind of KINDS) {
          const times = (await Promise.all(
            members.map((m) => m.invoke(BENCH_MEMBER, "benchCollectiveMember", [name, kind, n, iters])),
          )) as number[][];
          const perCall = times[0]!.map((_, i) => Math.max(...times.map((tr) => tr[i]!)));
          const s = median(perCall);
          if (kind === "barrier") {
            out[`barrier_w${W}_us`] = round(s * 1e6, 1);
            say(`W=${W} barrier: ${out[`barrier_w${W}_us`]} us`);
          } else {
            const key = `${kind.toLowerCase()}_w${W}_gbps`;
            out[key] = round(bytes / s / 1e9);
            out[key.replace("_gbps", "_best_gbps")] = round(bytes / Math.min(...perCall) / 1e9);
            say(`W=${W} ${kind} of ${mib} MiB: ${(s * 1e3).toFixed(1)} ms/call, ${out[key]} GB/s`);
          }
        }
      } finally {
        await group.destroy();
      }
    }
  } finally {
    await Promise.all(procs.map((p) => p.close()));
  }
  if (typeof out.allreduce_w2_gbps === "number" && typeof out.zmq_oneway_gbps === "number") {
    out.allreduce_w2_vs_zmq_oneway = round(out.allreduce_w2_gbps / out.zmq_oneway_gbps);
    out.allreduce_w2_vs_memcpy = round(out.allreduce_w2_gbps / (out.memcpy_gbps as number));
  }
  return out;
}

export const benchCollectivesCommand = defineBench({
  summary: "benchmark ring collectives (allReduce, reduceScatter, allGather, broadcast) between processes",
  usage: [
    "usage: pnpm torl bench collectives [--json] [--mib 16] [--iters 10] [--world-sizes 2,3,4]",
    "                                   [--transport auto|tcp|ipc] [--slice-bytes 1048576]",
    "",
    "Runs each collective on a Float32Array between child processes and prints GB/s (array bytes per",
    "second per call) next to the floor from the same run: memcpy_gbps (in-process copy) and",
    "zmq_oneway_gbps (one-way transfer of the array between two processes). --json prints one JSON object last.",
  ].join("\n"),
  flags: {
    mib: { type: "number", min: 1 / 1024 },
    iters: { type: "integer", min: 1 },
    "world-sizes": { type: "integers", min: 1, max: 16 },
    transport: { type: "string", choices: ["auto", "tcp", "ipc"] },
    "slice-bytes": { type: "integer", min: 8, max: MAX_FRAME_BYTES },
  },
  measure: (flags) =>
    runCollectiveBench({
      mib: flags.mib,
      iters: flags.iters,
      worldSizes: flags["world-sizes"],
      transport: flags.transport,
      sliceBytes: flags["slice-bytes"],
      progress: (l) => console.log(l),
    }),
});
