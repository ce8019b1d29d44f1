// The files behind allGather through shared memory (collective/shared-memory.ts), on their own: made
// unlinked, reachable only through the owner's open descriptors, written and read in two slots.
import { existsSync, readdirSync } from "node:fs";
import test from "ava";
import { SharedGather } from "../src/collective/shared-memory.js";

// without /dev/shm no member makes files and groups gather around the ring (collective.test.ts)
const withShm = existsSync("/dev/shm") ? test : test.skip;

withShm("a member's files leave no name behind; a peer reads what the owner wrote, slot by slot", (t) => {
  const owner = SharedGather.create();
  const peer = SharedGather.create();
  if (!owner || !peer) throw new Error("could not make files in /dev/shm");
  try {
    t.deepEqual(
      readdirSync("/dev/shm").filter((f) => f.startsWith(`torl-collective-${process.pid}-`)),
      [],
      "unlinked as soon as made",
    );
    // rank 1 opens rank 0's files through /proc/<pid>/fd
    t.true(peer.openPeers([owner.regions, peer.regions], 1));
    const slots = [owner.nextSlot(), owner.nextSlot(), owner.nextSlot()];
    t.deepEqual(slots, [0, 1, 0], "two files in turn");
    const a = Uint8Array.from({ length: 5000 }, (_, i) => i % 251);
    const b = Uint8Array.from({ length: 300 }, (_, i) => 255 - (i % 7));
    owner.write(0, a);
    owner.write(1, b);
    const gotA = new Uint8Array(a.length);
    const gotB = new Uint8Array(b.length);
    peer.read(0, 0, gotA);
    peer.read(0, 1, gotB);
    t.deepEqual(gotA, a);
    t.deepEqual(gotB, b);
    // reading past what was written is an error that names the rank, not zeros
    t.throws(() => peer.read(0, 1, new Uint8Array(b.length + 1)), {
      message: /rank 0's shared file ended 1 bytes early/,
    });
    t.throws(() => peer.read(1, 0, new Uint8Array(1)), { message: /no shared file of rank 1/ });
  } finally {
    owner.close();
    peer.close();
  }
});

withShm("a peer's files that cannot be opened: false, and nothing kept open", (t) => {
  const m = SharedGather.create()!;
  try {
    // no such process: the group falls back to the ring
    t.false(m.openPeers([m.regions, { pid: 2 ** 22 + 1, fds: [3, 4] }], 0));
    t.throws(() => m.read(1, 0, new Uint8Array(1)), { message: /no shared file of rank 1/ });
  } finally {
    m.close();
  }
});
