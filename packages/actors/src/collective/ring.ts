/**
 * One member of a ring: a ZeroMQ PULL socket bound by this process (its ring predecessor pushes to
 * it) and a PUSH socket connected to its ring successor. Every collective is a sequence of steps in
 * which each rank sends a chunk to its successor and receives one from its predecessor; chunks are
 * cut into slices of at most `sliceBytes` so that reducing a slice overlaps with receiving the
 * next, and slices travel as raw frames next to a 24-byte header (no JSON, no msgpack).
 *
 * Message = [header, data?]; header = six little-endian uint32:
 *   0 seq          collective number in this group (checked, so mismatched calls fail loudly)
 *   1 op|dtype|step op << 24 | dtype << 16 | step
 *   2 a            total length (allReduce, reduceScatter, broadcast) or origin rank (allGather)
 *   3 chunkLen     elements in the chunk the slice belongs to
 *   4 offset       offset of the slice in its chunk (elements)
 *   5 sliceLen     elements in this slice
 *
 * Abort = [header with op ABORT and a = the rank that found the mismatch, its message as UTF-8]. A
 * rank that finds the ranks disagree (another call, type or length) sends one to its successor; a
 * rank that receives one fails the collective it is in (or its next) with CollectiveMismatchError
 * and passes it on until it reaches the rank before the origin, so every rank of the ring fails
 * promptly, not only the ones whose predecessor happened to send them something unexpected.
 *
 * Buffers: received slices are reduced in place in the receive buffer and forwarded as they are,
 * so a ring step costs no copies beyond the one into the caller's array. Data read from the
 * caller's arrays is sent zero-copy only where the algorithm guarantees the successor has consumed
 * it before the call returns (allReduce, broadcast); elsewhere it is copied once before sending.
 */

import { randomBytes } from "node:crypto";
import { closeSync, readFileSync } from "node:fs";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import {
  MAX_WIRE_FRAME_BYTES,
  requireKeysToListen,
  secureClientSocket,
  secureServerSocket,
} from "@torl-ts/core";
import { Pull, Push } from "zeromq";
import {
  accumulate,
  type CollectiveArray,
  ctorOf,
  dtypeCode,
  dtypeName,
  finalize,
  REDUCE_OPS,
  type ReduceOp,
} from "./dtype.js";
import {
  CollectiveArgumentError,
  CollectiveError,
  CollectiveGroupBrokenError,
  CollectiveGroupDestroyedError,
  CollectiveMismatchError,
  CollectiveTimeoutError,
} from "./errors.js";
import { PublishedArrays } from "./published.js";
import { shardBounds } from "./shard.js";
import {
  createSharedFile,
  openPeerFile,
  SharedGather,
  type SharedRegions,
  writeAllAt,
} from "./shared-memory.js";

const OP_HELLO = 1;
const OP_ALLREDUCE = 2;
const OP_BROADCAST = 3;
const OP_ALLGATHER = 4;
const OP_REDUCESCATTER = 5;
const OP_BARRIER = 6;
const OP_ABORT = 7;
/** From the group's creator, not a rank: forming the group failed elsewhere; stop waiting in hello. */
const OP_CANCEL = 8;
const OP_PUBLISH = 9;
const OP_NAMES = [
  "?",
  "hello",
  "allReduce",
  "broadcast",
  "allGather",
  "reduceScatter",
  "barrier",
  "abort",
  "cancel",
  "publish",
];

const HEADER_BYTES = 24;
/** reduceScatter through shared memory reads the others' values in pieces of this size (cache-sized). */
const SHARED_PIECE_BYTES = 1 << 20;
/** The step of a broadcast's announcement ([n, src] in a, chunkLen), sent by every rank but the source. */
const ANNOUNCE_STEP = 2;
/** The bytes of a typed array (a view). */
function bytesOfArray(a: CollectiveArray): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}

/** The step of an abort that tells of a rank's own failure (announceFailure), not of a mismatch. */
const ABORT_FAILED = 1;
/** The dtype code of Float64Array (the lengths a shared-memory allGather exchanges). */
const FLOAT64 = dtypeCode(new Float64Array(0));
/** Larger staged copies are not kept for reuse. */
const MAX_STAGING_BYTES = 64 << 20;

/** How a member can be reached; the group creator picks `ipc` when both ends share a host. */
export interface MemberAddress {
  /** Identifies the machine (hostname and boot id). */
  hostId: string;
  tcp?: string;
  ipc?: string;
  /** The member's files for allGather and reduceScatter through shared memory (shared-memory.ts), where it could make them. */
  shared?: SharedRegions;
}

export type CollectiveTransport = "auto" | "tcp" | "ipc";

export interface RingOptions {
  /** Largest slice sent as one message (bytes). */
  sliceBytes: number;
  /** How long a receive may wait for the ring predecessor before the call fails (0 = forever). */
  timeoutMs: number;
}

interface Received {
  dtype: number;
  step: number;
  a: number;
  chunkLen: number;
  offset: number;
  sliceLen: number;
  data: Buffer | undefined;
}

let cachedHostId: string | undefined;

/** hostname plus the kernel boot id, so two containers named alike are not taken for one host. */
export function localHostId(): string {
  if (cachedHostId === undefined) {
    let boot = "";
    try {
      boot = readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim();
    } catch {
      boot = "";
    }
    cachedHostId = `${hostname()}/${boot}`;
  }
  return cachedHostId;
}

const mod = (a: number, n: number): number => ((a % n) + n) % n;

/**
 * [offset, length] of each slice a chunk of `len` elements travels in, `max` elements at most; an
 * empty chunk is one empty slice (its header still goes, so the receiver's step completes).
 */
function* slices(len: number, max: number): Generator<[number, number]> {
  let off = 0;
  do {
    const sl = Math.min(max, len - off);
    yield [off, sl];
    off += sl;
  } while (off < len);
}

function header(
  seq: number,
  op: number,
  dtype: number,
  step: number,
  a: number,
  chunkLen: number,
  offset: number,
  sliceLen: number,
): Buffer {
  const h = Buffer.allocUnsafe(HEADER_BYTES);
  h.writeUInt32LE(seq >>> 0, 0);
  h.writeUInt32LE(((op << 24) | (dtype << 16) | step) >>> 0, 4);
  h.writeUInt32LE(a >>> 0, 8);
  h.writeUInt32LE(chunkLen >>> 0, 12);
  h.writeUInt32LE(offset >>> 0, 16);
  h.writeUInt32LE(sliceLen >>> 0, 20);
  return h;
}

function bytesOf(a: CollectiveArray): Buffer {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength);
}

export class RingMember {
  private pull: Pull | undefined;
  private push: Push | undefined;
  /** Ends this socket's share of the CURVE key check (a no-op without keys). */
  private unsecure: (() => void) | undefined;
  private seq = 0;
  private tail: Promise<unknown> = Promise.resolve();
  private broken: unknown;
  private closed = false;
  private readonly queue: (Buffer[] | undefined)[] = [];
  private qHead = 0;
  private pumping = false;
  private sendError: unknown;
  private ipcPath: string | undefined;
  /** Addresses this member bound (set by bind). */
  address: MemberAddress = { hostId: "" };
  /** Endpoint of the successor (set by connect). */
  nextEndpoint = "";
  /** Reusable copies of caller data being sent; see stage(). */
  private readonly staging: { buf: Uint8Array; seq: number }[] = [];
  /** Seq of the last completed collective whose completion implies every rank entered it. */
  private lastFullSeq = 0;
  /** Mismatch errors that came from a peer's abort (passed on already, not announced again). */
  private readonly fromPeer = new WeakSet<object>();
  /** This member's files for collectives through shared memory (made in bind where the transport allows IPC). */
  private shared: SharedGather | null = null;
  /** Whether allGather and reduceScatter go through them (every member of the group alike; see group.ts). */
  private sharedOn = false;
  /** Makes the file publish writes this rank's array into (a field, so that a test can make it fail as a full /dev/shm would). */
  private createPublishedFile: () => number = createSharedFile;
  /** reduceScatterShared's scratch, kept between calls. */
  private scratch: ArrayBuffer | undefined;

  constructor(
    readonly group: string,
    readonly rank: number,
    readonly worldSize: number,
    readonly options: RingOptions,
  ) {}

  private get prevRank(): number {
    return mod(this.rank - 1, this.worldSize);
  }

  /** Opens the receiving socket; returns the addresses the predecessor may connect to. */
  async bind(host: string, transport: CollectiveTransport): Promise<MemberAddress> {
    const address: MemberAddress = { hostId: localHostId() };
    this.address = address;
    if (this.worldSize === 1) return address;
    const pull = new Pull({
      receiveTimeout: this.options.timeoutMs > 0 ? this.options.timeoutMs : -1,
      linger: 0,
      // slices are at most MAX_FRAME_BYTES (checked at group creation), plus CURVE's wrapping
      maxMessageSize: MAX_WIRE_FRAME_BYTES,
    });
    this.pull = pull;
    // the ring carries tensors from and to actor code: as guarded as every other cluster socket
    this.unsecure = await secureServerSocket(pull, `collective group "${this.group}" rank ${this.rank}`);
    if (transport !== "ipc") {
      requireKeysToListen(host, `collective group "${this.group}" rank ${this.rank}`);
      await pull.bind(`tcp://${host}:*`);
      address.tcp = pull.lastEndpoint ?? undefined;
    }
    if (transport !== "tcp") {
      this.ipcPath = join(tmpdir(), `torl-coll-${process.pid}-${randomBytes(6).toString("hex")}.ipc`);
      await pull.bind(`ipc://${this.ipcPath}`);
      address.ipc = `ipc://${this.ipcPath}`;
      this.shared = SharedGather.create();
      if (this.shared) address.shared = this.shared.regions;
    }
    this.address = address;
    return address;
  }

  /** Connects to the successor and checks the ring end to end (each rank hears its predecessor). */
  async connect(nextEndpoint: string | undefined): Promise<void> {
    if (this.worldSize === 1) return;
    if (!nextEndpoint) {
      throw new CollectiveArgumentError(
        `rank ${this.rank} got no endpoint for its successor`,
        this.group,
        this.rank,
      );
    }
    this.nextEndpoint = nextEndpoint;
    this.push = new Push({ linger: 2000 });
    secureClientSocket(this.push);
    this.push.connect(nextEndpoint);
    this.send([header(0, OP_HELLO, 0, 0, this.rank, 0, 0, 0)]);
    const m = await this.recv(0, OP_HELLO, 0);
    if (m.a !== this.prevRank) {
      throw new CollectiveMismatchError(
        `rank ${this.rank} expected a hello from rank ${this.prevRank}, got one from rank ${m.a}`,
        this.group,
        this.rank,
      );
    }
  }

  /** Opens every peer's shared files (`regions` by rank); whether all of them opened. */
  openShared(regions: SharedRegions[]): boolean {
    return (
      this.shared !== null && regions.length === this.worldSize && this.shared.openPeers(regions, this.rank)
    );
  }

  /** From now on allGather and reduceScatter go through the shared files (every member is told alike). */
  useShared(): void {
    if (!this.shared)
      throw new CollectiveArgumentError("this member made no shared files", this.group, this.rank);
    this.sharedOn = true;
  }

  /** Whether allGather and reduceScatter go through shared memory. */
  get usesSharedMemory(): boolean {
    return this.sharedOn;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.shared?.close();
    this.shared = null;
    this.sharedOn = false;
    this.pull?.close();
    this.push?.close();
    this.unsecure?.();
    this.pull = undefined;
    this.push = undefined;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  // ---- plumbing -------------------------------------------------------------------------------

  private send(frames: Buffer[]): void {
    this.queue.push(frames);
    if (!this.pumping) void this.pump();
  }

  private async pump(): Promise<void> {
    this.pumping = true;
    try {
      while (this.qHead < this.queue.length) {
        const frames = this.queue[this.qHead]!;
        this.queue[this.qHead++] = undefined;
        const push = this.push;
        if (!push) throw new Error("socket closed");
        await push.send(frames);
      }
      this.queue.length = 0;
      this.qHead = 0;
    } catch (err) {
      this.sendError ??= err;
      this.queue.length = 0;
      this.qHead = 0;
    } finally {
      this.pumping = false;
    }
  }

  private async recv(seq: number, op: number, step: number): Promise<Received> {
    if (this.sendError !== undefined) {
      throw new CollectiveError(
        `rank ${this.rank} could not send to rank ${(this.rank + 1) % this.worldSize}: ${String(this.sendError)}`,
        this.group,
        this.rank,
      );
    }
    const pull = this.pull;
    if (!pull) throw this.destroyedError(op, seq);
    let frames: Buffer[];
    try {
      frames = await pull.receive();
    } catch (err) {
      // Closing the socket (the group was destroyed) rejects a pending receive with EAGAIN too.
      if (this.closed) throw this.destroyedError(op, seq);
      if ((err as { code?: string }).code === "EAGAIN") {
        throw new CollectiveTimeoutError(
          `rank ${this.rank} waited ${this.options.timeoutMs} ms in ${OP_NAMES[op]} #${seq} of group "${this.group}" for rank ${this.prevRank}`,
          this.group,
          this.rank,
          this.options.timeoutMs,
        );
      }
      throw err;
    }
    const h = frames[0];
    if (!h || h.length !== HEADER_BYTES || frames.length > 2) {
      throw new CollectiveMismatchError(
        `rank ${this.rank} got a malformed message from rank ${this.prevRank} (${frames.length} frames)`,
        this.group,
        this.rank,
      );
    }
    const hseq = h.readUInt32LE(0);
    const word = h.readUInt32LE(4);
    const hop = word >>> 24;
    const hstep = word & 0xffff;
    if (hop === OP_ABORT) throw this.onAbort(frames, op, seq);
    if (hop === OP_CANCEL) {
      throw new CollectiveError(
        `rank ${this.rank} in ${OP_NAMES[op]} #${seq} of group "${this.group}": the group's creator gave up forming it: ${frames[1]?.toString("utf8") ?? "(no reason given)"}`,
        this.group,
        this.rank,
      );
    }
    if (hseq !== seq || hop !== op || hstep !== step) {
      throw new CollectiveMismatchError(
        `rank ${this.rank} is in ${OP_NAMES[op]} #${seq} step ${step} of group "${this.group}" but rank ${this.prevRank} sent ${OP_NAMES[hop] ?? hop} #${hseq} step ${hstep}: ranks must call the same collectives in the same order`,
        this.group,
        this.rank,
      );
    }
    return {
      dtype: (word >>> 16) & 0xff,
      step: hstep,
      a: h.readUInt32LE(8),
      chunkLen: h.readUInt32LE(12),
      offset: h.readUInt32LE(16),
      sliceLen: h.readUInt32LE(20),
      data: frames[1],
    };
  }

  /**
   * A peer's abort: passed on to the successor unless it is the origin; the error this rank fails with
   * (a mismatch the peer found, or, with step ABORT_FAILED, a failure of the peer's own: announceFailure).
   */
  private onAbort(
    frames: Buffer[],
    op: number,
    seq: number,
  ): CollectiveMismatchError | CollectiveGroupBrokenError {
    const origin = frames[0]!.readUInt32LE(8);
    const why = frames[1]?.toString("utf8") ?? "(no reason given)";
    if ((this.rank + 1) % this.worldSize !== origin) this.send(frames);
    const where = `rank ${this.rank} in ${OP_NAMES[op]} #${seq} of group "${this.group}"`;
    const err =
      (frames[0]!.readUInt32LE(4) & 0xffff) === ABORT_FAILED
        ? new CollectiveGroupBrokenError(
            `${where}: rank ${origin} failed: ${why}`,
            this.group,
            this.rank,
            why,
          )
        : new CollectiveMismatchError(
            `${where}: rank ${origin} found that the ranks disagree: ${why}`,
            this.group,
            this.rank,
          );
    this.fromPeer.add(err);
    return err;
  }

  /**
   * Tells the rest of the ring that this rank failed a collective on its own (its shared-memory part
   * could not be written or read), so that no rank waits for it until the group's timeout.
   */
  private announceFailure(why: string): void {
    if (this.closed || !this.push) return;
    this.send([header(0, OP_ABORT, 0, ABORT_FAILED, this.rank, 0, 0, 0), Buffer.from(why, "utf8")]);
  }

  /** Runs a shared-memory read or write of `what`; a failure is announced to the ring and thrown as a CollectiveError. */
  private sharedIo(seq: number, opcode: number, what: string, io: () => void): void {
    try {
      io();
    } catch (e) {
      const why = `rank ${this.rank} could not ${what} in ${OP_NAMES[opcode]} #${seq} of group "${this.group}": ${(e as Error).message}`;
      this.announceFailure(why);
      throw new CollectiveError(
        `${why} (the group is broken; with too little space in /dev/shm, recreate it with sharedMemory: false)`,
        this.group,
        this.rank,
      );
    }
  }

  /** Tells the rest of the ring that this rank found a mismatch (see the header comment). */
  private announceMismatch(err: CollectiveMismatchError): void {
    if (this.fromPeer.has(err) || this.closed || !this.push) return;
    this.send([header(0, OP_ABORT, 0, 0, this.rank, 0, 0, 0), Buffer.from(err.message, "utf8")]);
  }

  private destroyedError(op: number, seq: number): CollectiveGroupDestroyedError {
    return new CollectiveGroupDestroyedError(
      `group "${this.group}" was destroyed while rank ${this.rank} waited in ${OP_NAMES[op]} #${seq} for rank ${this.prevRank}`,
      this.group,
      this.rank,
    );
  }

  /** Checks a received slice against what this rank expects and returns it as a typed array. */
  private sliceOf(
    m: Received,
    op: number,
    dtype: number,
    a: number,
    chunkLen: number,
    offset: number,
    sliceLen: number,
  ): CollectiveArray {
    if (
      m.dtype !== dtype ||
      m.a !== a ||
      m.chunkLen !== chunkLen ||
      m.offset !== offset ||
      m.sliceLen !== sliceLen
    ) {
      const what = op === OP_ALLGATHER ? "origin" : "length";
      throw new CollectiveMismatchError(
        `rank ${this.rank} in ${OP_NAMES[op]} of group "${this.group}" expected ${dtypeName(dtype)} ${what} ${a} chunk ${chunkLen} slice ${offset}+${sliceLen}, rank ${this.prevRank} sent ${dtypeName(m.dtype)} ${what} ${m.a} chunk ${m.chunkLen} slice ${m.offset}+${m.sliceLen}: arrays must have the same type and length on every rank`,
        this.group,
        this.rank,
      );
    }
    return this.view(dtype, m.data, sliceLen);
  }

  private view(dtype: number, data: Buffer | undefined, len: number): CollectiveArray {
    const C = ctorOf(dtype);
    if (len === 0) return new C(0);
    const bytes = len * C.BYTES_PER_ELEMENT;
    if (!data || data.length !== bytes) {
      throw new CollectiveMismatchError(
        `rank ${this.rank} expected ${bytes} bytes from rank ${this.prevRank}, got ${data?.length ?? 0}`,
        this.group,
        this.rank,
      );
    }
    if (data.byteOffset % C.BYTES_PER_ELEMENT === 0) return new C(data.buffer, data.byteOffset, len);
    const copy = new C(len);
    new Uint8Array(copy.buffer).set(data);
    return copy;
  }

  /**
   * Sends `chunk` as slices (at least one message, so empty chunks still advance the ring).
   * `copy`: the caller's memory may change once the call returns, so stage the chunk first.
   */
  private sendSlices(
    seq: number,
    op: number,
    dtype: number,
    step: number,
    a: number,
    chunk: CollectiveArray,
    copy: boolean,
  ): void {
    const len = chunk.length;
    const src = copy && len > 0 ? this.stage(chunk, seq) : chunk;
    for (const [off, sl] of slices(len, this.sliceElems(dtype)))
      this.sendSlice(seq, op, dtype, step, a, len, off, src.subarray(off, off + sl));
  }

  /** Sends one slice of a chunk: its header, then its bytes unless it is empty. */
  private sendSlice(
    seq: number,
    op: number,
    dtype: number,
    step: number,
    a: number,
    chunkLen: number,
    off: number,
    slice: CollectiveArray,
  ): void {
    const h = header(seq, op, dtype, step, a, chunkLen, off, slice.length);
    this.send(slice.length === 0 ? [h] : [h, bytesOf(slice)]);
  }

  /**
   * W-1 ring steps over the chunks `bounds` cuts an array of `n` elements into: step `firstStep + s`
   * receives chunk r-s-`lag` slice by slice, and `onSlice` gets each slice with its step index `s`,
   * where the chunk starts in the array, the slice's offset in the chunk and the chunk's length.
   */
  private async receiveChunks(
    seq: number,
    opcode: number,
    dtype: number,
    n: number,
    bounds: number[],
    firstStep: number,
    lag: number,
    onSlice: (slice: CollectiveArray, s: number, start: number, off: number, len: number) => void,
  ): Promise<void> {
    const W = this.worldSize;
    const S = this.sliceElems(dtype);
    for (let s = 0; s < W - 1; s++) {
      const c = mod(this.rank - s - lag, W);
      const start = bounds[c]!;
      const len = bounds[c + 1]! - start;
      for (const [off, sl] of slices(len, S)) {
        const m = await this.recv(seq, opcode, firstStep + s);
        onSlice(this.sliceOf(m, opcode, dtype, n, len, off, sl), s, start, off, len);
      }
    }
  }

  /**
   * The reduce-scatter steps allReduce and reduceScatter share (the caller sent step 0, chunk r-1):
   * step s receives the running result of chunk r-s-2 slice by slice, adds this rank's elements and
   * passes it on. At the last step the chunk is this rank's own (r) and complete: each finalized slice
   * goes to `finished(slice, offsetInChunk)`, and with `forwardFinished` on to the successor as step
   * W-1 (where allReduce's all-gather starts).
   */
  private reduceScatterSteps(
    seq: number,
    opcode: number,
    dtype: number,
    op: ReduceOp,
    arr: CollectiveArray,
    bounds: number[],
    forwardFinished: boolean,
    finished: (slice: CollectiveArray, off: number) => void,
  ): Promise<void> {
    const W = this.worldSize;
    const n = arr.length;
    return this.receiveChunks(seq, opcode, dtype, n, bounds, 0, 2, (acc, s, start, off, len) => {
      accumulate(op, acc, arr.subarray(start + off, start + off + acc.length));
      const last = s === W - 2;
      if (last) {
        finalize(op, acc, W);
        finished(acc, off);
      }
      if (!last || forwardFinished) this.sendSlice(seq, opcode, dtype, s + 1, n, len, off, acc);
    });
  }

  /**
   * Copies `chunk` into a staging buffer of this group. A buffer staged by collective #k is
   * reused only after this rank completed a later "full" collective (one whose completion
   * implies every rank entered it, hence finished #k and consumed what it was sent), so two
   * buffers suffice for alternating reduceScatter / allGather without fresh allocations.
   */
  private stage(chunk: CollectiveArray, seq: number): CollectiveArray {
    const bytes = chunk.byteLength;
    const free = this.staging.filter((s) => s.seq < this.lastFullSeq);
    let slot = free.find((s) => s.buf.byteLength >= bytes);
    if (!slot && bytes <= MAX_STAGING_BYTES) {
      if (free.length > 0) {
        slot = free[0]!;
        slot.buf = new Uint8Array(bytes);
      } else if (this.staging.length < 2) {
        slot = { buf: new Uint8Array(bytes), seq };
        this.staging.push(slot);
      }
    }
    const target = slot ? slot.buf : new Uint8Array(bytes);
    if (slot) slot.seq = seq;
    target.set(new Uint8Array(chunk.buffer, chunk.byteOffset, bytes));
    const C = ctorOf(dtypeCode(chunk));
    return new C(target.buffer, target.byteOffset, chunk.length);
  }

  private sliceElems(dtype: number): number {
    return Math.max(1, Math.floor(this.options.sliceBytes / ctorOf(dtype).BYTES_PER_ELEMENT));
  }

  /** Runs collectives one at a time, in call order; a failure mid-way breaks the group. */
  private enqueue<T>(body: (seq: number) => Promise<T>): Promise<T> {
    const run = async (): Promise<T> => {
      if (this.closed)
        throw new CollectiveGroupDestroyedError(`group "${this.group}" is destroyed`, this.group, this.rank);
      if (this.broken !== undefined) {
        throw new CollectiveGroupBrokenError(
          `group "${this.group}" is broken by an earlier failure on rank ${this.rank}: ${String((this.broken as Error)?.message ?? this.broken)}; destroy and recreate it`,
          this.group,
          this.rank,
          this.broken,
        );
      }
      const seq = ++this.seq;
      try {
        return await body(seq);
      } catch (err) {
        if (this.worldSize > 1) {
          this.broken = err;
          if (err instanceof CollectiveMismatchError) this.announceMismatch(err);
        }
        throw err;
      }
    };
    const p = this.tail.then(run, run);
    this.tail = p.catch(() => undefined);
    return p;
  }

  private checkArray(arr: unknown, what: string): number {
    const code = dtypeCode(arr);
    if (code < 0) {
      const kind = (arr as object | null)?.constructor?.name ?? typeof arr;
      throw new CollectiveArgumentError(
        `${what} needs a Float32Array, Float64Array, Int8/16/32Array or Uint8/16/32Array, got ${kind}`,
        this.group,
        this.rank,
      );
    }
    if ((arr as CollectiveArray).length > 0xffffffff) {
      throw new CollectiveArgumentError(`${what}: arrays over 2^32 elements are not supported`, this.group);
    }
    return code;
  }

  private checkOp(op: string, what: string): asserts op is ReduceOp {
    if (!REDUCE_OPS.includes(op as ReduceOp)) {
      throw new CollectiveArgumentError(
        `${what}: unknown reduce op "${op}" (expected ${REDUCE_OPS.join(", ")})`,
        this.group,
        this.rank,
      );
    }
  }

  // ---- collectives ----------------------------------------------------------------------------

  /** Reduces `arr` element-wise across ranks, in place; every rank ends with identical values. */
  allReduce<T extends CollectiveArray>(arr: T, op: ReduceOp): Promise<T> {
    const dtype = this.checkArray(arr, "allReduce");
    this.checkOp(op, "allReduce");
    return this.enqueue(async (seq) => {
      const W = this.worldSize;
      const r = this.rank;
      if (W === 1) {
        finalize(op, arr, 1);
        return arr;
      }
      const n = arr.length;
      const b = shardBounds(n, W);
      // Reduce-scatter: step s sends chunk r-s-1 and receives chunk r-s-2; rank r ends owning chunk r.
      const c0 = mod(r - 1, W);
      // Zero-copy is safe: chunk c0 comes back reduced (so was consumed) before this call returns,
      // and it is not written before then.
      this.sendSlices(seq, OP_ALLREDUCE, dtype, 0, n, arr.subarray(b[c0]!, b[c0 + 1]!), false);
      // The last reduce-scatter step starts the all-gather (step W-1) with the finished slice.
      await this.reduceScatterSteps(seq, OP_ALLREDUCE, dtype, op, arr, b, true, (acc, off) =>
        arr.set(acc, b[r]! + off),
      );
      // All-gather: step W-1+s receives chunk r-s-1 and forwards it unless its successor owns it.
      await this.receiveChunks(seq, OP_ALLREDUCE, dtype, n, b, W - 1, 1, (got, s, start, off, len) => {
        arr.set(got, start + off);
        if (s < W - 2) this.sendSlice(seq, OP_ALLREDUCE, dtype, W + s, n, len, off, got);
      });
      this.lastFullSeq = seq;
      return arr;
    });
  }

  /** Copies `src`'s `arr` into `arr` on every other rank (in place); pipelined around the ring. */
  broadcast<T extends CollectiveArray>(arr: T, src: number): Promise<T> {
    const dtype = this.checkArray(arr, "broadcast");
    if (!Number.isInteger(src) || src < 0 || src >= this.worldSize) {
      throw new CollectiveArgumentError(
        `broadcast: source rank must be in [0, ${this.worldSize}), got ${src}`,
        this.group,
        this.rank,
      );
    }
    return this.enqueue(async (seq) => {
      const W = this.worldSize;
      if (W === 1) return arr;
      const n = arr.length;
      const d = mod(this.rank - src, W);
      // A rank that only receives announces its call first, so a rank that disagrees (another call,
      // source, type or length) always gets something to check, and no two ranks wait on each other.
      if (d !== 0) this.send([header(seq, OP_BROADCAST, dtype, ANNOUNCE_STEP, n, src, 0, 0)]);
      if (d === 0) {
        // Zero-copy: the call waits for the last rank's acknowledgement, so all data was consumed.
        this.sendSlices(seq, OP_BROADCAST, dtype, 0, n, arr, false);
        await this.checkAnnounce(seq, dtype, n, src);
        const ack = await this.recv(seq, OP_BROADCAST, 1);
        if (ack.a !== n) {
          throw new CollectiveMismatchError(
            `broadcast from rank ${src}: rank ${this.prevRank} acknowledged length ${ack.a}, source has ${n}`,
            this.group,
            this.rank,
          );
        }
        // Every rank received the data, so every rank entered this broadcast.
        this.lastFullSeq = seq;
        return arr;
      }
      if (this.prevRank !== src) await this.checkAnnounce(seq, dtype, n, src);
      for (const [off, sl] of slices(n, this.sliceElems(dtype))) {
        const m = await this.recv(seq, OP_BROADCAST, 0);
        const got = this.sliceOf(m, OP_BROADCAST, dtype, n, n, off, sl);
        arr.set(got, off);
        if (d < W - 1) this.sendSlice(seq, OP_BROADCAST, dtype, 0, n, n, off, got);
      }
      if (d === W - 1) this.send([header(seq, OP_BROADCAST, dtype, 1, n, 0, 0, 0)]);
      return arr;
    });
  }

  /** Receives the predecessor's broadcast announcement and checks it agrees with this rank's call. */
  private async checkAnnounce(seq: number, dtype: number, n: number, src: number): Promise<void> {
    const m = await this.recv(seq, OP_BROADCAST, ANNOUNCE_STEP);
    if (m.dtype !== dtype || m.a !== n || m.chunkLen !== src) {
      throw new CollectiveMismatchError(
        `rank ${this.rank} is in broadcast of ${dtypeName(dtype)}[${n}] from rank ${src}, rank ${this.prevRank} in broadcast of ${dtypeName(m.dtype)}[${m.a}] from rank ${m.chunkLen}: ranks must agree on the source, type and length`,
        this.group,
        this.rank,
      );
    }
  }

  /**
   * Concatenates every rank's `arr` in rank order. Ranks may pass different lengths. With `out`,
   * writes into it instead of allocating: `out.length` is the total and rank i's part must be
   * `shardRange(out.length, worldSize, i)` long (the layout reduceScatter produces). `arr` may be that
   * part of `out` itself (in place: not copied); any other overlap with `out` is refused.
   */
  allGather<T extends CollectiveArray>(arr: T, out?: T, inputUnchanged = false): Promise<T> {
    const dtype = this.checkArray(arr, "allGather");
    const W = this.worldSize;
    const r = this.rank;
    let b: number[] | undefined;
    if (out !== undefined) {
      if (dtypeCode(out) !== dtype) {
        throw new CollectiveArgumentError(
          `allGather: out is ${out.constructor.name}, input is ${arr.constructor.name}`,
          this.group,
          r,
        );
      }
      b = shardBounds(out.length, W);
      if (b[r + 1]! - b[r]! !== arr.length) {
        throw new CollectiveArgumentError(
          `allGather: rank ${r}'s shard of an output of ${out.length} elements holds ${b[r + 1]! - b[r]!}, got ${arr.length}`,
          this.group,
          r,
        );
      }
    }
    if (out !== undefined && overlaps(arr, out) && !inPlace(arr, out, b![r]!))
      throw new CollectiveArgumentError(
        `allGather: the input overlaps out but is not rank ${r}'s part of it (elements ${b![r]}..${b![r + 1]}), which the other parts would overwrite: pass that part itself (an in-place gather) or separate memory`,
        this.group,
        r,
      );
    return this.enqueue(async (seq) => {
      if (W === 1) {
        const res = (out ?? new (ctorOf(dtype))(arr.length)) as T;
        if (!inPlace(arr, res, 0)) res.set(arr);
        return res;
      }
      return this.sharedOn
        ? this.gatherShared(seq, dtype, arr, out, b)
        : this.gatherRing(seq, dtype, arr, out, b, !inputUnchanged);
    });
  }

  /**
   * Every rank's `arr` written once into a file of its own in /dev/shm, and every rank's files opened by
   * every rank: any rank then reads any rank's array (PublishedArrays.read) without a collective call.
   * Needs a group that uses shared memory. Where a rank cannot write its file (no space in /dev/shm) or
   * open another's, every rank rejects alike with a CollectiveError naming it, and the group stays usable.
   */
  async publish<T extends CollectiveArray>(arr: T): Promise<PublishedArrays<T>> {
    const dtype = this.checkArray(arr, "publish");
    if (!this.sharedOn)
      throw new CollectiveArgumentError(
        `publish: group "${this.group}" does not use shared memory (collective.usesSharedMemory): its members are on different hosts, cannot open each other's files, or it was created with sharedMemory: false`,
        this.group,
        this.rank,
      );
    const made = await this.enqueue((seq) => this.publishShared(seq, dtype, arr));
    if (typeof made === "string") throw new CollectiveError(made, this.group, this.rank);
    return made;
  }

  /** publish's steps: a string (the same on every rank) where some rank could not, else the arrays. */
  private async publishShared<T extends CollectiveArray>(
    seq: number,
    dtype: number,
    arr: T,
  ): Promise<PublishedArrays<T> | string> {
    const W = this.worldSize;
    const r = this.rank;
    const FIELDS = 6;
    let own = -1;
    let ownError = "";
    try {
      own = this.createPublishedFile();
      writeAllAt(own, bytesOfArray(arr), 0);
    } catch (err) {
      ownError = (err as Error).message;
      if (own >= 0) closeSync(own);
      own = -1;
    }
    const info = await this.gatherRing(
      seq,
      FLOAT64,
      new Float64Array([arr.length, dtype, OP_PUBLISH, process.pid, own, own >= 0 ? 1 : 0]),
      new Float64Array(FIELDS * W),
      shardBounds(FIELDS * W, W),
      true,
    );
    const row = (origin: number, field: number) => info[FIELDS * origin + field]!;
    const closeAll = (fds: number[]) => {
      for (const fd of fds) if (fd >= 0) closeSync(fd);
    };
    for (let origin = 0; origin < W; origin++)
      if (row(origin, 2) !== OP_PUBLISH || row(origin, 1) !== dtype) {
        closeAll([own]);
        throw new CollectiveMismatchError(
          `rank ${r} is in publish #${seq} of group "${this.group}" with ${dtypeName(dtype)}, rank ${origin} in ${OP_NAMES[row(origin, 2)] ?? row(origin, 2)} with ${dtypeName(row(origin, 1))}: ranks must call the same collectives in the same order, with arrays of the same type`,
          this.group,
          r,
        );
      }
    const failed = Array.from({ length: W }, (_, i) => i).find((i) => row(i, 5) !== 1);
    if (failed !== undefined) {
      closeAll([own]);
      return `publish: rank ${failed} of group "${this.group}" could not write its array to /dev/shm${failed === r ? ` (${ownError})` : ""}; nothing was published`;
    }
    const files = Array.from({ length: W }, (_, i) => (i === r ? own : -1));
    let openError = "";
    try {
      for (let origin = 0; origin < W; origin++)
        if (origin !== r) files[origin] = openPeerFile(row(origin, 3), row(origin, 4));
    } catch (err) {
      openError = (err as Error).message;
    }
    // every rank learns whether every rank opened every file, so that all of them agree
    const opened = await this.gatherRing(
      seq,
      FLOAT64,
      new Float64Array([openError === "" ? 1 : 0]),
      new Float64Array(W),
      shardBounds(W, W),
      true,
    );
    const notOpened = opened.findIndex((ok) => ok !== 1);
    if (notOpened >= 0) {
      closeAll(files);
      return `publish: rank ${notOpened} of group "${this.group}" could not open the other ranks' files${notOpened === r ? ` (${openError})` : ""}; nothing was published`;
    }
    return new PublishedArrays<T>(
      this.group,
      r,
      files,
      Array.from({ length: W }, (_, i) => row(i, 0)),
      dtype,
    );
  }

  /** allGather's steps around the ring (see allGather); `copy`: send a staged copy of `arr`. */
  private async gatherRing<T extends CollectiveArray>(
    seq: number,
    dtype: number,
    arr: T,
    out: T | undefined,
    b: number[] | undefined,
    copy: boolean,
  ): Promise<T> {
    const W = this.worldSize;
    const r = this.rank;
    const C = ctorOf(dtype);
    if (b && !inPlace(arr, out!, b[r]!)) out!.set(arr, b[r]!);
    const pieces: { origin: number; off: number; data: CollectiveArray }[] = [];
    const lengths = new Array<number>(W).fill(0);
    lengths[r] = arr.length;
    // Copied (nothing makes the successor consume it before this call returns), unless the caller
    // leaves it unchanged until a later full collective returns, which implies the successor has it
    this.sendSlices(seq, OP_ALLGATHER, dtype, 0, r, arr, copy);
    for (let s = 0; s < W - 1; s++) {
      const origin = mod(r - s - 1, W);
      let off = 0;
      let chunkLen = 0;
      do {
        const m = await this.recv(seq, OP_ALLGATHER, s);
        if (off === 0) {
          chunkLen = m.chunkLen;
          if (b && chunkLen !== b[origin + 1]! - b[origin]!)
            throw this.gatherLengthError(out!, origin, chunkLen, b);
        }
        const sl = Math.min(this.sliceElems(dtype), chunkLen - off);
        const got = this.sliceOf(m, OP_ALLGATHER, dtype, origin, chunkLen, off, sl);
        if (b) out!.set(got, b[origin]! + off);
        else pieces.push({ origin, off, data: got });
        if (s < W - 2) this.sendSlice(seq, OP_ALLGATHER, dtype, s + 1, origin, chunkLen, off, got);
        off += sl;
      } while (off < chunkLen);
      lengths[origin] = chunkLen;
    }
    this.lastFullSeq = seq;
    if (b) return out!;
    const starts = new Array<number>(W);
    let total = 0;
    for (let i = 0; i < W; i++) {
      starts[i] = total;
      total += lengths[i]!;
    }
    const res = new C(total) as T;
    res.set(arr, starts[r]!);
    for (const p of pieces) res.set(p.data, starts[p.origin]! + p.off);
    return res;
  }

  /**
   * The first step of a collective through the members' shared files (shared-memory.ts), once this rank
   * wrote its part: every rank's (length, dtype, op) around the ring, each rank's leaving once its part is
   * written. Ranks in different collectives, or with arrays of different types, fail with
   * CollectiveMismatchError on every rank (every rank sees every triple). Returns the lengths.
   */
  private async exchangeShared(
    seq: number,
    opcode: number,
    dtype: number,
    length: number,
  ): Promise<number[]> {
    const W = this.worldSize;
    const r = this.rank;
    const info = await this.gatherRing(
      seq,
      FLOAT64,
      new Float64Array([length, dtype, opcode]),
      new Float64Array(3 * W),
      shardBounds(3 * W, W),
      true,
    );
    for (let origin = 0; origin < W; origin++) {
      const [theirType, theirOp] = [info[3 * origin + 1]!, info[3 * origin + 2]!];
      if (theirOp !== opcode || theirType !== dtype)
        throw new CollectiveMismatchError(
          `rank ${r} is in ${OP_NAMES[opcode]} #${seq} of group "${this.group}" with ${dtypeName(dtype)}, rank ${origin} in ${OP_NAMES[theirOp] ?? theirOp} with ${dtypeName(theirType)}: ranks must call the same collectives in the same order, with arrays of the same type`,
          this.group,
          r,
        );
    }
    return Array.from({ length: W }, (_, i) => info[3 * i]!);
  }

  /**
   * allGather through the members' shared files: this rank's piece into its file, the exchange
   * (exchangeShared), then the other pieces read straight into the result.
   */
  private async gatherShared<T extends CollectiveArray>(
    seq: number,
    dtype: number,
    arr: T,
    out: T | undefined,
    b: number[] | undefined,
  ): Promise<T> {
    const W = this.worldSize;
    const r = this.rank;
    const C = ctorOf(dtype);
    const shared = this.shared!;
    const slot = shared.nextSlot();
    this.sharedIo(seq, OP_ALLGATHER, "write its piece to shared memory", () =>
      shared.write(slot, bytesOfArray(arr)),
    );
    const lengths = await this.exchangeShared(seq, OP_ALLGATHER, dtype, arr.length);
    if (b)
      for (let origin = 0; origin < W; origin++)
        if (lengths[origin] !== b[origin + 1]! - b[origin]!)
          throw this.gatherLengthError(out!, origin, lengths[origin]!, b);
    const starts = b ?? [0];
    if (!b) for (let i = 0; i < W; i++) starts.push(starts[i]! + lengths[i]!);
    const res = (out ?? new C(starts[W]!)) as T;
    const B = C.BYTES_PER_ELEMENT;
    if (!inPlace(arr, res, starts[r]!)) res.set(arr, starts[r]!);
    this.sharedIo(seq, OP_ALLGATHER, "read the other pieces from shared memory", () => {
      for (let origin = 0; origin < W; origin++)
        if (origin !== r)
          shared.read(
            origin,
            slot,
            new Uint8Array(res.buffer, res.byteOffset + starts[origin]! * B, lengths[origin]! * B),
          );
    });
    return res;
  }

  /**
   * reduceScatter through the members' shared files: this rank writes every chunk but its own at its
   * place in its file, then, after the exchange, reads the others' values of its own chunk and reduces
   * them in the ring's order (the successor's values first, the others' in ring order, its own last),
   * so the result has the ring's bits. In place (`res` is arr's own chunk) the others' values are read
   * a piece at a time into a small scratch and added onto the own values: each op is commutative, so
   * own + others has the bits of others + own.
   */
  private async reduceScatterShared<T extends CollectiveArray>(
    seq: number,
    dtype: number,
    op: ReduceOp,
    arr: T,
    b: number[],
    res: T,
  ): Promise<void> {
    const W = this.worldSize;
    const r = this.rank;
    const n = arr.length;
    const B = ctorOf(dtype).BYTES_PER_ELEMENT;
    const shared = this.shared!;
    const slot = shared.nextSlot();
    const bytes = bytesOfArray(arr);
    // the own chunk stays a hole in the file
    this.sharedIo(seq, OP_REDUCESCATTER, "write its chunks to shared memory", () => {
      shared.write(slot, bytes.subarray(0, b[r]! * B));
      shared.write(slot, bytes.subarray(b[r + 1]! * B), b[r + 1]! * B);
    });
    const lengths = await this.exchangeShared(seq, OP_REDUCESCATTER, dtype, n);
    for (let origin = 0; origin < W; origin++)
      if (lengths[origin] !== n)
        throw new CollectiveMismatchError(
          `rank ${r} in reduceScatter #${seq} of group "${this.group}" has ${n} elements, rank ${origin} ${lengths[origin]}: arrays must have the same length on every rank`,
          this.group,
          r,
        );
    const at = b[r]! * B;
    const own = arr.subarray(b[r]!, b[r + 1]!);
    const inPlaceResult = inPlace(res, arr, b[r]!);
    this.sharedIo(seq, OP_REDUCESCATTER, "read the others' chunks from shared memory", () => {
      // the others' values, a piece at a time: the successor's, then the rest in ring order
      const piece = Math.max(1, Math.floor(SHARED_PIECE_BYTES / B));
      for (let off = 0; off < res.length; off += piece) {
        const len = Math.min(piece, res.length - off);
        // not in place, the successor's values go straight into the result, the own ones added last
        const sum = inPlaceResult ? this.sharedScratch(dtype, 0, len) : res.subarray(off, off + len);
        shared.read(mod(r + 1, W), slot, bytesOfArray(sum), at + off * B);
        for (let s = 2; s < W; s++) {
          const part = this.sharedScratch(dtype, 1, len);
          shared.read(mod(r + s, W), slot, bytesOfArray(part), at + off * B);
          accumulate(op, sum, part);
        }
        if (inPlaceResult) accumulate(op, res.subarray(off, off + len), sum);
      }
    });
    if (!inPlaceResult) accumulate(op, res, own);
    finalize(op, res, W);
  }

  /**
   * Scratch `which` (0 or 1) of `length` elements of `dtype`, at most SHARED_PIECE_BYTES, kept between
   * calls (reduceScatterShared's pieces of the other ranks' values).
   */
  private sharedScratch(dtype: number, which: 0 | 1, length: number): CollectiveArray {
    const C = ctorOf(dtype);
    if (!this.scratch) this.scratch = new ArrayBuffer(2 * SHARED_PIECE_BYTES);
    return new C(this.scratch, which * SHARED_PIECE_BYTES, length);
  }

  private gatherLengthError(
    out: CollectiveArray,
    origin: number,
    got: number,
    b: number[],
  ): CollectiveMismatchError {
    return new CollectiveMismatchError(
      `allGather into ${out.length} elements: rank ${origin} sent ${got} elements, its shard holds ${b[origin + 1]! - b[origin]!}`,
      this.group,
      this.rank,
    );
  }

  /**
   * Reduces `arr` element-wise across ranks and returns this rank's shard of the result, i.e.
   * elements `shardRange(arr.length, worldSize, rank)`. `arr` is not modified, unless `out` is its own
   * shard's elements: with `out` (of the shard's length) the result is written there instead of a new
   * array, and `out` may be that part of `arr` itself (in place: no memory for the result); any other
   * overlap with `arr` is refused.
   */
  reduceScatter<T extends CollectiveArray>(arr: T, op: ReduceOp, out?: T): Promise<T> {
    const dtype = this.checkArray(arr, "reduceScatter");
    this.checkOp(op, "reduceScatter");
    const W = this.worldSize;
    const r = this.rank;
    const n = arr.length;
    const b = shardBounds(n, W);
    const ownStart = b[r]!;
    const ownLen = b[r + 1]! - ownStart;
    if (out !== undefined && (dtypeCode(out) !== dtype || out.length !== ownLen)) {
      throw new CollectiveArgumentError(
        `reduceScatter: out must be a ${arr.constructor.name} of ${ownLen} elements (rank ${r}'s shard of ${n}), got ${out.constructor.name} of ${out.length}`,
        this.group,
        r,
      );
    }
    if (out !== undefined && overlaps(arr, out) && !inPlace(out, arr, ownStart))
      throw new CollectiveArgumentError(
        `reduceScatter: out overlaps the input but is not rank ${r}'s part of it (elements ${ownStart}..${ownStart + ownLen}), which the reduction still reads: pass that part itself (in place) or separate memory`,
        this.group,
        r,
      );
    return this.enqueue(async (seq) => {
      const res = (out ?? new (ctorOf(dtype))(ownLen)) as T;
      if (W === 1) {
        if (!inPlace(res, arr, 0)) res.set(arr);
        finalize(op, res, 1);
        return res;
      }
      if (this.sharedOn) {
        await this.reduceScatterShared(seq, dtype, op, arr, b, res);
        this.lastFullSeq = seq;
        return res;
      }
      const c0 = mod(r - 1, W);
      this.sendSlices(seq, OP_REDUCESCATTER, dtype, 0, n, arr.subarray(b[c0]!, b[c0 + 1]!), true);
      await this.reduceScatterSteps(seq, OP_REDUCESCATTER, dtype, op, arr, b, false, (acc, off) =>
        res.set(acc, off),
      );
      this.lastFullSeq = seq;
      return res;
    });
  }

  /** Resolves once every rank of the group has entered the barrier. */
  barrier(): Promise<void> {
    return this.enqueue(async (seq) => {
      const W = this.worldSize;
      if (W === 1) return;
      this.send([header(seq, OP_BARRIER, 0, 0, this.rank, 0, 0, 0)]);
      for (let s = 0; s < W - 1; s++) {
        await this.recv(seq, OP_BARRIER, s);
        if (s < W - 2) this.send([header(seq, OP_BARRIER, 0, s + 1, this.rank, 0, 0, 0)]);
      }
      this.lastFullSeq = seq;
    });
  }
}

/**
 * Tells the member listening at `endpoint` (a rank's own receiving address) that forming its group
 * failed elsewhere, so a rank waiting in hello for a predecessor that will never come fails now
 * rather than after the group's whole timeout. Sent by the group's creator; best effort.
 */
export async function cancelFormation(endpoint: string, reason: string): Promise<void> {
  const push = new Push({ linger: 1000, sendTimeout: 1000 });
  secureClientSocket(push);
  try {
    push.connect(endpoint);
    await push.send([header(0, OP_CANCEL, 0, 0, 0, 0, 0, 0), Buffer.from(reason, "utf8")]);
  } finally {
    push.close();
  }
}

/**
 * Whether `part` is `whole`'s elements from `start` on: an in-place gather (the input is out's part) or
 * reduce-scatter (out is the input's part), with nothing of it to copy.
 */
function inPlace(part: CollectiveArray, whole: CollectiveArray, start: number): boolean {
  return (
    part.buffer === whole.buffer && part.byteOffset === whole.byteOffset + start * whole.BYTES_PER_ELEMENT
  );
}

/** Whether two arrays share any byte. */
function overlaps(a: CollectiveArray, b: CollectiveArray): boolean {
  return (
    a.buffer === b.buffer &&
    a.byteOffset < b.byteOffset + b.byteLength &&
    b.byteOffset < a.byteOffset + a.byteLength
  );
}
