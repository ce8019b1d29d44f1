/** Functions the collective benchmark runs inside its member processes. */
import { MAX_WIRE_FRAME_BYTES } from "@torl-ts/core";
import { Pull, Push } from "zeromq";
import { collective } from "../collective/member.js";

export type BenchKind = "allReduce" | "reduceScatter" | "allGather" | "broadcast" | "barrier";

/**
 * Runs `iters` collectives of `kind` on a Float32Array of `n` elements (the full array: for
 * allGather the output, for reduceScatter the input) after one warm-up call; returns the seconds
 * of each call (each call starts after a barrier, so all ranks start it together).
 */
export async function benchCollectiveMember(
  group: string,
  kind: BenchKind,
  n: number,
  iters: number,
): Promise<number[]> {
  const full = new Float32Array(n).fill(1);
  const { start, end } = collective.shardRange(n, group);
  const shard = new Float32Array(end - start).fill(1);
  const once = async () => {
    if (kind === "allReduce") await collective.allReduce(full, "sum", group);
    else if (kind === "reduceScatter") await collective.reduceScatter(full, "sum", group, shard);
    else if (kind === "allGather") await collective.allGather(shard, group, full);
    else if (kind === "broadcast") await collective.broadcast(full, 0, group);
    else await collective.barrier(group);
  };
  // Warm-up: lets the JIT optimise the ring code before timing.
  for (let i = 0; i < 3; i++) await once();
  const times: number[] = [];
  for (let i = 0; i < iters; i++) {
    await collective.barrier(group);
    const t0 = performance.now();
    await once();
    times.push((performance.now() - t0) / 1000);
  }
  return times;
}

let rawPull: Pull | undefined;

/** Baseline, receiving side: binds a PULL socket; returns its endpoint. */
export async function rawBind(endpoint: string): Promise<string> {
  rawPull = new Pull({ linger: 0, maxMessageSize: MAX_WIRE_FRAME_BYTES });
  await rawPull.bind(endpoint);
  return rawPull.lastEndpoint!;
}

/**
 * Baseline, receiving side: takes `iters + 1` payloads of `bytes` (sent in `sliceBytes` messages)
 * and returns the seconds between the end of the first (warm-up) and the end of the last.
 */
export async function rawReceive(bytes: number, sliceBytes: number, iters: number): Promise<number> {
  const pull = rawPull!;
  const perPayload = Math.ceil(bytes / sliceBytes);
  let t0 = 0;
  for (let p = 0; p <= iters; p++) {
    for (let m = 0; m < perPayload; m++) await pull.receive();
    if (p === 0) t0 = performance.now();
  }
  pull.close();
  rawPull = undefined;
  return (performance.now() - t0) / 1000;
}

/** Baseline, sending side: pushes `iters + 1` payloads of `bytes` from one Float32Array. */
export async function rawSend(
  endpoint: string,
  bytes: number,
  sliceBytes: number,
  iters: number,
): Promise<void> {
  const push = new Push({ linger: 5000 });
  push.connect(endpoint);
  const data = Buffer.from(new Float32Array(bytes / 4).fill(1).buffer);
  for (let p = 0; p <= iters; p++) {
    for (let off = 0; off < bytes; off += sliceBytes) {
      await push.send(data.subarray(off, Math.min(bytes, off + sliceBytes)));
    }
  }
  push.close();
}
