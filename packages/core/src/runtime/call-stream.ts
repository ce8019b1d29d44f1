/**
 * The caller's side of streams: a call whose method or task is a generator answers with a stream
 * instead of a value (see STREAM_OPEN in protocol.ts), read with `for await (const x of ref)`.
 *
 * A CallStream holds the items that arrived and were not taken yet: at most `window` of them, since
 * the producer is paused until the caller acknowledges what it took (a transport sends the count:
 * a STREAM_ACK message to a process, a pull to a thread). An error ends the stream after the items
 * before it; a consumer that stops early (`break`, `return()`) or `cancel(ref)` stops the producer.
 */
import { MessageDecodeError, StreamUsageError, TaskCancelledError } from "../errors.js";
import type { ObjectRef } from "./object-ref.js";
import { FAILED, PENDING, READY } from "./object-store.js";
import { STREAM_WINDOW_DEFAULT, STREAM_WINDOW_MAX } from "./protocol.js";
import type { Runtime } from "./runtime.js";

/** A `streamBackpressure` option checked at the call site: the stream window it gives. */
export function streamWindowOf(value: unknown, where: string): number {
  if (value === undefined) return STREAM_WINDOW_DEFAULT;
  if (!(Number.isInteger(value) && (value as number) >= 1 && (value as number) <= STREAM_WINDOW_MAX))
    throw new RangeError(
      `${where}: streamBackpressure must be a whole number from 1 to ${STREAM_WINDOW_MAX}, got ${String(value)}`,
    );
  return value as number;
}

/** How a stream talks to its producer. */
export interface StreamTransport {
  /** The caller has taken `consumed` items in all. */
  ack(consumed: number): void;
  /** Stop the producer: its generator's `return()` runs (its finally blocks too). */
  cancel(): void;
}

const DONE: IteratorReturnResult<undefined> = { done: true, value: undefined };

/** The errors that the refs of streams hold (awaiting such a ref rejects with it). */
const streamRefErrors = new WeakSet<Error>();

export class CallStream {
  opened = false;
  reading = false;
  private window = 1;
  private transport: StreamTransport | null = null;
  private buffer: unknown[] = [];
  private received = 0;
  private consumed = 0;
  /** The count last sent to the producer. */
  acked = 0;
  private ended = false;
  private error: Error | null = null;
  /** The reader has seen the end or the error: nothing more comes. */
  private closed = false;
  private waiting: { resolve: (r: IteratorResult<unknown>) => void; reject: (e: unknown) => void } | null =
    null;

  constructor(
    private what: string,
    private onClosed: () => void,
  ) {}

  open(what: string, window: number, transport: StreamTransport): void {
    this.opened = true;
    this.what = what;
    this.window = window;
    this.transport = transport;
  }

  /** Whether the producer may still send (not ended, failed or stopped). */
  get live(): boolean {
    return this.opened && !this.ended && !this.error;
  }

  push(index: number, value: unknown): void {
    if (!this.live) return;
    if (index !== this.received) {
      this.abort(
        new MessageDecodeError(
          `${this.what}: stream item ${index} arrived where item ${this.received} was due (items were lost when a connection broke)`,
        ),
      );
    } else if (this.buffer.length >= this.window) {
      this.abort(
        new MessageDecodeError(
          `${this.what}: the producer sent more than the ${this.window} items it may run ahead of the consumer`,
        ),
      );
    } else {
      this.buffer.push(value);
      this.received++;
      this.wake();
    }
  }

  /** The generator returned after `count` items. */
  end(count: number): void {
    if (!this.live) return;
    if (count !== this.received) {
      this.fail(
        new MessageDecodeError(
          `${this.what}: the stream ended after ${count} items but ${this.received} arrived (items were lost when a connection broke)`,
        ),
      );
      return;
    }
    this.ended = true;
    this.wake();
  }

  /** Ends the stream with `err` after the items already here (the producer has stopped or is gone). */
  fail(err: Error): void {
    if (this.ended || this.error) return;
    this.error = err;
    this.wake();
  }

  /** Ends the stream with `err` and tells the producer to stop. */
  abort(err: Error): void {
    const stop = this.live;
    this.fail(err);
    if (stop) this.transport?.cancel();
  }

  /** cancel(ref): items not taken yet are dropped; the reader gets TaskCancelledError. */
  cancel(): boolean {
    if (this.closed || this.ended || this.error) return false;
    this.buffer = [];
    this.abort(new TaskCancelledError(this.what));
    return true;
  }

  next(): Promise<IteratorResult<unknown>> {
    if (this.waiting)
      return Promise.reject(
        new StreamUsageError(`${this.what}: next() was called before the previous next() settled`),
      );
    if (this.buffer.length > 0) {
      const value = this.buffer.shift();
      this.consumed++;
      // acknowledged in batches: the producer is never blocked while the buffer is empty
      if (this.consumed - this.acked >= Math.ceil(this.window / 2) && this.live) {
        this.acked = this.consumed;
        this.transport?.ack(this.consumed);
      }
      return Promise.resolve({ done: false, value });
    }
    if (this.closed) return Promise.resolve(DONE);
    if (this.error) {
      this.close();
      return Promise.reject(this.error);
    }
    if (this.ended) {
      this.close();
      return Promise.resolve(DONE);
    }
    return new Promise((resolve, reject) => {
      this.waiting = { resolve, reject };
    });
  }

  /** The consumer stopped (`break` in `for await`): the producer stops too. */
  return(): Promise<IteratorResult<unknown>> {
    if (!this.closed) {
      this.buffer = [];
      if (this.live) this.abort(new StreamUsageError(`${this.what}: the consumer stopped reading`));
      this.close();
    }
    const w = this.waiting;
    this.waiting = null;
    w?.resolve(DONE);
    return Promise.resolve(DONE);
  }

  private wake(): void {
    const w = this.waiting;
    if (!w) return;
    this.waiting = null;
    this.next().then(w.resolve, w.reject);
  }

  private close(): void {
    this.closed = true;
    this.onClosed();
  }
}

/** The streams of this process's calls, by call seq. */
export class Streams {
  private byCall = new Map<number, CallStream>();

  constructor(private rt: Runtime) {}

  get size(): number {
    return this.byCall.size;
  }

  get(seq: number): CallStream | undefined {
    return this.byCall.get(seq);
  }

  private make(seq: number, what: string): CallStream {
    const s = new CallStream(what, () => {
      if (this.byCall.get(seq) === s) this.byCall.delete(seq);
    });
    this.byCall.set(seq, s);
    return s;
  }

  /**
   * The worker said call `seq` is a stream: its items go to the stream, and its ref, awaited, rejects
   * with StreamUsageError (a stream has no single value).
   */
  opened(seq: number, what: string, window: number, transport: StreamTransport): CallStream {
    const s = this.byCall.get(seq) ?? this.make(seq, what);
    s.open(what, window, transport);
    const err = new StreamUsageError(
      `${what} is a generator: its call returned a stream, read it with for await (const x of ref)`,
    );
    streamRefErrors.add(err);
    this.rt.store.settle(seq, FAILED, err);
    return s;
  }

  /** The reader of `ref`'s stream; throws StreamUsageError when it has none for this process. */
  reader(ref: ObjectRef): AsyncIterableIterator<unknown> {
    if (ref.ownerId !== this.rt.clientId)
      throw new StreamUsageError(
        `${ref}: a stream can be read only in the process that made the call (refs to it cannot be passed on)`,
      );
    let s = this.byCall.get(ref.seq);
    if (!s) {
      const e = this.rt.store.entries.get(ref.seq);
      if (!e || e.state === READY)
        throw new StreamUsageError(`${ref} holds a value, not a stream: await it instead of iterating it`);
      if (e.state === FAILED && streamRefErrors.has(e.value))
        throw new StreamUsageError(`${ref}: its stream was read already (a stream is read once)`);
      if (e.state === FAILED) {
        // the call failed before it could stream (no such method, cancelled ...): its error, when read
        const err = e.value as Error;
        return reader(ref, { next: () => Promise.reject(err), return: () => Promise.resolve(DONE) });
      }
      const made = this.make(ref.seq, `call ${ref.id}`);
      s = made;
      if (e.state === PENDING)
        this.rt.store.onSettled(e, (settled) => {
          if (made.opened) return;
          made.fail(
            settled.state === READY
              ? new StreamUsageError(
                  `${ref} holds a value, not a stream (its method is not a generator): await it instead`,
                )
              : (settled.value as Error),
          );
        });
    }
    if (s.reading) throw new StreamUsageError(`${ref}: its stream is already being read`);
    s.reading = true;
    return reader(ref, s);
  }

  /** The call failed or was cancelled (its ref is settled already when it had opened a stream). */
  fail(seq: number, err: Error): void {
    this.byCall.get(seq)?.fail(err);
  }

  /** cancel(ref) of a stream: true if it was still running. */
  cancel(seq: number): boolean {
    return this.byCall.get(seq)?.cancel() ?? false;
  }

  /** Ends every stream still open with the error `why(seq)` makes (shutdown). */
  failAll(why: (seq: number) => Error): void {
    for (const [seq, s] of [...this.byCall]) s.fail(why(seq));
  }

  /**
   * The last ref to the call is gone (a reader holds its ref, so no reader is left either): nobody
   * can read the stream, so its producer stops.
   */
  abandoned(seq: number): void {
    const s = this.byCall.get(seq);
    if (!s) return;
    this.byCall.delete(seq);
    s.abort(new StreamUsageError("no reference to the stream remained"));
  }
}

/** An iterator that keeps `ref` alive while it is read (a dropped ref would stop the producer). */
function reader(
  ref: ObjectRef,
  s: { next(): Promise<IteratorResult<unknown>>; return(): Promise<IteratorResult<unknown>> },
): AsyncIterableIterator<unknown> {
  return {
    next: () => s.next(),
    return: () => s.return(),
    [Symbol.asyncIterator]() {
      void ref;
      return this;
    },
  };
}
