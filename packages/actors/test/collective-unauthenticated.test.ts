// A collective member's receiving socket, like every listener of the cluster, takes no frame larger
// than MAX_FRAME_BYTES: a peer that greets it and announces 1 GiB is dropped before it can make the
// member hold the bytes it sends. Slices larger than the bound are refused when the group is made.
import net from "node:net";
import { MAX_FRAME_BYTES } from "@torl-ts/core";
import test from "ava";
import { createCollectiveGroupOn } from "../src/collective/index.js";
import { RingMember } from "../src/collective/ring.js";

test("a ring member drops a peer that announces a frame above the bound", async (t) => {
  const member = new RingMember("flood", 0, 2, { sliceBytes: 1 << 16, timeoutMs: 0 });
  const { tcp } = await member.bind("127.0.0.1", "tcp");
  try {
    const port = Number(tcp!.split(":").pop());
    const before = process.memoryUsage.rss();
    let peak = before;
    const sock = net.connect(port, "127.0.0.1");
    sock.on("error", () => {});
    let closed = false;
    const ended = new Promise<void>((resolve) =>
      sock.on("close", () => {
        closed = true;
        resolve();
      }),
    );
    await new Promise<void>((resolve) => sock.once("connect", () => resolve()));
    const hello = Buffer.alloc(64 + 9);
    hello[0] = 0xff;
    hello[9] = 0x7f;
    hello[10] = 3;
    hello.write("NULL", 12, "ascii");
    hello[64] = 0x06; // long command frame of 1 GiB
    hello.writeBigUInt64BE(1n << 30n, 65);
    sock.write(hello);
    const chunk = Buffer.alloc(1 << 20, 0x41);
    for (let sent = 0; sent < 200 << 20 && !closed; sent += chunk.length) {
      if (!sock.write(chunk))
        await Promise.race([
          new Promise((r) => sock.once("drain", r)),
          ended,
          new Promise((r) => setTimeout(r, 30_000)),
        ]);
      peak = Math.max(peak, process.memoryUsage.rss());
    }
    await new Promise((r) => setTimeout(r, 300));
    peak = Math.max(peak, process.memoryUsage.rss());
    sock.destroy();
    t.true(closed, "the member dropped the connection");
    t.true(peak - before < 64 << 20, `RSS grew by ${((peak - before) / 2 ** 20).toFixed(1)} MiB`);
  } finally {
    member.close();
  }
});

test("a group with slices above the frame bound is refused when made", async (t) => {
  await t.throwsAsync(
    createCollectiveGroupOn([{ invoke: async () => null }], { sliceBytes: MAX_FRAME_BYTES + 1 }),
    { message: /sliceBytes must be an integer from 8 to 1048576/ },
  );
});
