/**
 * The caller's side of actors: one record per known actor, its direct Dealer link to the worker,
 * calls in flight (rejected with ActorDiedError when the worker dies), calls queued until it is alive.
 */
import os from "node:os";
import {
  ActorDiedError,
  type DeathCause,
  InfeasibleResourceError,
  MessageDecodeError,
  RemoteError,
  SerializationError,
  TaskCancelledError,
} from "../errors.js";
import { logWarn } from "../log.js";
import { traceRecorder } from "../observe/timeline.js";
import { UndecodableMessage } from "../wire/batch.js";
import { type Encoded, encode } from "../wire/codec.js";
import { DealerLink } from "../wire/links.js";
import { prepareValue } from "../wire/sendable.js";
import type { CallStream } from "./call-stream.js";
import { headErrorFromWire } from "./head-client.js";
import type { ObjectRef } from "./object-ref.js";
import { FAILED, READY } from "./object-store.js";
import {
  type ActorState,
  type ActorUpdate,
  CALL,
  CANCEL,
  PROTOCOL_ERROR,
  RESULT,
  RESULT_OK,
  RESULT_STREAM_END,
  RESULT_UNDECODABLE,
  RESULT_UNSENDABLE,
  STREAM_ACK,
  STREAM_ITEM,
  STREAM_OPEN,
  STREAM_WINDOW_DEFAULT,
} from "./protocol.js";
import type { Runtime } from "./runtime.js";

export interface CallInfo {
  seq: number;
  enc: Encoded;
  target: string | [string, string];
  retriesLeft: number;
  /** The items its stream may run ahead of this caller, should its target be a generator. */
  window: number;
  /** Its stream, once the worker said the target is a generator (such a call is never re-run). */
  stream?: CallStream;
  /** Called once the call settles (used by the task pool). */
  done?: (ok: boolean, value: any) => void;
  /** For tasks: resubmit elsewhere instead of failing when the executor dies. */
  onDied?: (info: CallInfo, err: Error) => boolean;
}

export class ActorRecord {
  state: ActorState = "PENDING";
  incarnation = -1;
  link: DealerLink | null = null;
  inflight = new Map<number, CallInfo>();
  queued: CallInfo[] = [];
  death: Error | null = null;
  nodeId: string | undefined;
  /** Set for task executors: the pool to notify. */
  pool: {
    onIdle(rec: ActorRecord): void;
    onState(rec: ActorRecord): void;
    /** cancel(ref, { force: true }) is killing it: no more tasks go to it. */
    retire(rec: ActorRecord): void;
  } | null = null;
  maxTaskRetries = 0;
  /** The items a generator method may run ahead of its consumer (ActorOptions.streamBackpressure). */
  streamWindow = STREAM_WINDOW_DEFAULT;
  readyWaiters: Array<() => void> = [];

  constructor(
    readonly actorId: string,
    public name: string | undefined,
  ) {}
}

const LARGE_INLINE = 1 << 20;

export class ActorCalls {
  readonly records = new Map<string, ActorRecord>();

  constructor(private rt: Runtime) {}

  record(actorId: string, name?: string): ActorRecord {
    let rec = this.records.get(actorId);
    if (!rec) {
      rec = new ActorRecord(actorId, name);
      this.records.set(actorId, rec);
    } else if (name && !rec.name) rec.name = name;
    return rec;
  }

  /** Top-level ObjectRef arguments that are ready here and not huge travel inline as values. */
  private prepareArgs(args: unknown[]): unknown[] {
    let out = args;
    for (let i = 0; i < args.length; i++) {
      const a = args[i] as ObjectRef | undefined;
      if (a && typeof a === "object" && (a as any).constructor === this.rt.ObjectRefClass) {
        const inlined = this.rt.tryInline(a, LARGE_INLINE);
        if (inlined !== NOT_INLINED) {
          if (out === args) out = args.slice();
          // a stored value is sendable; this only boxes the Maps it may hold
          out[i] = prepareValue(inlined, `args[${i}]`, "cannot be sent");
        }
      }
    }
    return out;
  }

  /** Sends a call; throws SerializationError at once for arguments that cannot travel. */
  call(
    rec: ActorRecord,
    target: string | [string, string],
    args: unknown[],
    flags = 0,
    retries?: number,
  ): ObjectRef {
    const sendable = prepareValue(args, "args", `cannot be sent to an actor (${describe(rec, target)})`);
    const seq = this.rt.nextSeq();
    const ref = this.rt.newOwnedRef(seq);
    this.send(rec, seq, target, sendable, flags, retries ?? rec.maxTaskRetries);
    return ref;
  }

  /** Sends a call whose `args` went through prepareValue. */
  send(
    rec: ActorRecord,
    seq: number,
    target: string | [string, string],
    args: unknown[],
    flags: number,
    retries: number,
    extra?: Partial<CallInfo>,
  ): CallInfo | null {
    if (rec.state === "DEAD") {
      this.rt.store.settle(seq, FAILED, rec.death);
      return null;
    }
    let enc: Encoded;
    try {
      enc = encode([CALL, seq, target, this.prepareArgs(args), flags, extra?.window ?? rec.streamWindow]);
    } catch (e) {
      const err =
        e instanceof SerializationError
          ? e
          : new SerializationError(
              "args",
              "a value",
              `the arguments of ${describe(rec, target)} cannot be encoded: ${(e as Error).message}`,
            );
      this.rt.store.settle(seq, FAILED, err);
      extra?.done?.(false, err);
      return null;
    }
    const info: CallInfo = { seq, enc, target, retriesLeft: retries, window: rec.streamWindow, ...extra };
    traceCall(info, describeCall(rec, target));
    rec.inflight.set(seq, info);
    if (rec.link && rec.state === "ALIVE") rec.link.sendEncoded(enc);
    else rec.queued.push(info);
    return info;
  }

  /** What the worker sent back on this caller's link: results, or news of what it could not decode. */
  onResult(rec: ActorRecord, msg: any): void {
    if (msg instanceof UndecodableMessage) {
      if (msg.kind === RESULT && msg.seq !== undefined) {
        const info = rec.inflight.get(msg.seq);
        if (info) this.fail(rec, info, this.decodeError(rec, info, `its result arrived but ${msg.reason}`));
      } else if (msg.kind === STREAM_ITEM && msg.seq !== undefined) {
        // the stream ends there, after the items before it; its producer is told to stop
        const info = rec.inflight.get(msg.seq);
        if (info)
          this.stop(rec, info, false, this.decodeError(rec, info, `a stream item arrived but ${msg.reason}`));
      } else this.failAll(rec, `a message from the worker could not be decoded (${msg.reason})`);
      return;
    }
    if (Array.isArray(msg) && (msg[0] === STREAM_OPEN || msg[0] === STREAM_ITEM)) {
      this.onStream(rec, msg);
      return;
    }
    if (!Array.isArray(msg) || msg[0] !== RESULT) {
      const why = Array.isArray(msg) && msg[0] === PROTOCOL_ERROR ? msg[1] : "an unexpected message";
      this.failAll(rec, `the worker could not process a message of this caller: ${why}`);
      return;
    }
    const seq = msg[1] as number;
    const info = rec.inflight.get(seq);
    if (!info) return; // a result for a call already failed (its worker restarted): nothing waits for it
    rec.inflight.delete(seq);
    const valueOrEnd = msg[2] === RESULT_OK || msg[2] === RESULT_STREAM_END;
    if (valueOrEnd && (msg[2] === RESULT_STREAM_END) !== (info.stream !== undefined)) {
      const why = info.stream ? "its stream ended with a value" : "a stream ended that was never opened";
      this.fail(rec, info, this.decodeError(rec, info, why));
      return;
    }
    if (msg[2] === RESULT_STREAM_END) {
      info.stream!.end(msg[3]);
      info.done?.(true, null);
    } else if (msg[2] === RESULT_OK) {
      this.rt.store.settle(seq, READY, msg[3]);
      info.done?.(true, msg[3]);
    } else if (msg[2] === RESULT_UNSENDABLE) {
      const [path, found, message] = msg[3] as [string, string, string];
      this.fail(rec, info, new SerializationError(path, found, message));
    } else if (msg[2] === RESULT_UNDECODABLE) {
      this.fail(rec, info, this.decodeError(rec, info, `the worker could not decode it: ${msg[3]}`));
    } else {
      const err = new RemoteError(msg[3] ?? { name: "Error", message: "unknown remote error" }, {
        actorId: rec.pool ? undefined : rec.actorId,
        actorName: rec.name,
        method: rec.pool ? undefined : typeof info.target === "string" ? info.target : info.target[1],
        task: rec.pool && typeof info.target !== "string" ? info.target[1] : undefined,
      });
      this.rt.settleCall(seq, FAILED, err);
      info.done?.(false, err);
    }
    if (rec.pool && rec.inflight.size === 0) rec.pool.onIdle(rec);
  }

  /** STREAM_OPEN and STREAM_ITEM of a call in flight (one cancelled or failed already has no reader). */
  private onStream(rec: ActorRecord, msg: any[]): void {
    const info = rec.inflight.get(msg[1]);
    if (!info) return;
    if (msg[0] === STREAM_OPEN) {
      info.stream ??= this.rt.streams.opened(info.seq, describeCall(rec, info.target), info.window, {
        ack: (consumed) => rec.link?.send([STREAM_ACK, info.seq, consumed]),
        cancel: () => this.stop(rec, info, false, new TaskCancelledError(describeCall(rec, info.target))),
      });
    } else if (!info.stream || !Number.isSafeInteger(msg[2])) {
      this.stop(rec, info, false, this.decodeError(rec, info, "a stream item arrived out of protocol"));
    } else info.stream.push(msg[2], msg[3]);
  }

  /**
   * cancel(ref) of call `seq` if it is in flight or queued on some actor or task executor: true if
   * found. `force` (tasks only) kills the executor's process.
   */
  cancel(seq: number, force: boolean): boolean {
    for (const rec of this.records.values()) {
      const info = rec.inflight.get(seq);
      if (!info) continue;
      if (force && !rec.pool)
        throw new TypeError(
          `cancel(ref, { force: true }) kills a task's worker process; ${describeCall(rec, info.target)} is an actor call (killing would end the actor): cancel it without force, or kill(handle)`,
        );
      this.stop(rec, info, force, new TaskCancelledError(describeCall(rec, info.target)));
      return true;
    }
    return false;
  }

  /** Ends a call here with `err` and tells the worker (a queued call was never sent). */
  private stop(rec: ActorRecord, info: CallInfo, force: boolean, err: Error): void {
    if (rec.inflight.get(info.seq) !== info) return;
    rec.inflight.delete(info.seq);
    const queued = rec.queued.indexOf(info);
    if (queued >= 0) rec.queued.splice(queued, 1);
    else if (force) {
      rec.pool?.retire(rec);
      this.rt.head
        .request("kill", { actorId: rec.actorId, noRestart: true })
        .catch((e: Error) => logWarn(`cancel(force) could not reach the head: ${e.message}`));
    } else rec.link?.send([CANCEL, info.seq]);
    this.rt.settleCall(info.seq, FAILED, err);
    info.done?.(false, err);
    if (rec.pool && rec.inflight.size === 0) rec.pool.onIdle(rec);
  }

  private fail(rec: ActorRecord, info: CallInfo, err: Error): void {
    rec.inflight.delete(info.seq);
    this.rt.settleCall(info.seq, FAILED, err);
    info.done?.(false, err);
    if (rec.pool && rec.inflight.size === 0) rec.pool.onIdle(rec);
  }

  /** Fails every call in flight on `rec`'s link: one of them may have been lost, and none can tell which. */
  private failAll(rec: ActorRecord, why: string): void {
    for (const info of [...rec.inflight.values()]) {
      if (rec.queued.includes(info)) continue;
      this.fail(rec, info, this.decodeError(rec, info, why));
    }
  }

  private decodeError(rec: ActorRecord, info: CallInfo, why: string): MessageDecodeError {
    return new MessageDecodeError(`call ${describe(rec, info.target)}: ${why}`);
  }

  onUpdate(u: ActorUpdate): void {
    const rec = this.records.get(u.actorId);
    if (!rec || u.incarnation < rec.incarnation) return;
    if (u.name && !rec.name) rec.name = u.name;
    if (u.state === "ALIVE") {
      if (rec.state === "ALIVE" && rec.incarnation === u.incarnation) return;
      rec.link?.close();
      rec.incarnation = u.incarnation;
      rec.state = "ALIVE";
      rec.nodeId = u.nodeId;
      const ep = u.endpoint!;
      const endpoint = ep.ipc && ep.host === os.hostname() ? ep.ipc : ep.tcp;
      rec.link = new DealerLink(
        endpoint,
        (m) => this.onResult(rec, m),
        `actor ${rec.name ?? rec.actorId}`,
        (err) => this.onRefused(rec, err),
      );
      const link = rec.link;
      // calls sent before the connection broke may be lost: send again what has no answer yet
      // (the worker runs none twice)
      link.onReconnect = () => {
        if (rec.link !== link) return;
        for (const info of rec.inflight.values()) {
          link.sendEncoded(info.enc);
          // an acknowledgement lost with the connection would keep its producer paused
          if (info.stream) link.send([STREAM_ACK, info.seq, info.stream.acked]);
        }
      };
      const q = rec.queued;
      rec.queued = [];
      for (const info of q) if (rec.inflight.has(info.seq)) rec.link.sendEncoded(info.enc);
      for (const w of rec.readyWaiters.splice(0)) w();
      rec.pool?.onState(rec);
    } else if (u.state === "RESTARTING" || u.state === "DEAD") {
      if (rec.state === "DEAD") return;
      rec.incarnation = Math.max(rec.incarnation, u.incarnation);
      rec.link?.close();
      rec.link = null;
      const cause: DeathCause = u.cause ?? { kind: "exited", message: "the worker process exited" };
      const err = makeDeathError(rec, cause);
      rec.state = u.state;
      if (u.state === "DEAD") rec.death = err;
      const failed = [...rec.inflight.values()];
      rec.inflight.clear();
      rec.queued = [];
      for (const info of failed) {
        // a stream that has begun cannot be run again: its reader has its first items
        if (info.stream) {
          this.rt.settleCall(info.seq, FAILED, err);
          info.done?.(false, err);
          continue;
        }
        if (info.onDied?.(info, err)) continue;
        if (u.state === "RESTARTING" && info.retriesLeft > 0) {
          info.retriesLeft--;
          rec.inflight.set(info.seq, info);
          rec.queued.push(info);
          continue;
        }
        this.rt.settleCall(info.seq, FAILED, err);
        info.done?.(false, err);
      }
      if (u.state === "DEAD") for (const w of rec.readyWaiters.splice(0)) w();
      rec.pool?.onState(rec);
    } else if (u.state === "PENDING") {
      rec.state = rec.state === "RESTARTING" ? "RESTARTING" : "PENDING";
    }
  }

  /** The worker refused this process's keys: its calls can never be delivered, so they fail now. */
  private onRefused(rec: ActorRecord, err: Error): void {
    rec.link = null;
    rec.state = "DEAD";
    rec.death = err;
    const failed = [...rec.inflight.values()];
    rec.inflight.clear();
    rec.queued = [];
    for (const info of failed) {
      this.rt.settleCall(info.seq, FAILED, err);
      info.done?.(false, err);
    }
    for (const w of rec.readyWaiters.splice(0)) w();
    rec.pool?.onState(rec);
  }

  closeAll(): void {
    for (const rec of this.records.values()) {
      rec.link?.close();
      rec.link = null;
    }
  }
}

export const NOT_INLINED = Symbol("not inlined");

/** While the timeline records: the call as a span on this process's row, from its sending to its end. */
function traceCall(info: CallInfo, what: string): void {
  const span = traceRecorder.start("call", what);
  if (!span) return;
  const done = info.done;
  info.done = (ok, v) => {
    traceRecorder.end(span, ok ? undefined : { failed: true });
    done?.(ok, v);
  };
  const onDied = info.onDied;
  if (onDied)
    info.onDied = (i, err) => {
      traceRecorder.end(span, { died: true });
      return onDied(i, err);
    };
}

function describe(rec: ActorRecord, target: string | [string, string]): string {
  return typeof target === "string" ? `${rec.name ?? rec.actorId}.${target}` : `${target[1]}`;
}

/** A call as errors name it: `actor Counter-ab12.inc` or `task add`. */
function describeCall(rec: ActorRecord, target: string | [string, string]): string {
  return rec.pool ? `task ${describe(rec, target)}` : `actor ${describe(rec, target)}`;
}

/**
 * The error calls on a dead actor fail with. An actor that could never be created fails with the
 * class that says why (InfeasibleResourceError; a refusal by the head with its own class, such as
 * ActorNameTakenError or ResourceRequestError); one that existed and died, with ActorDiedError.
 */
export function makeDeathError(rec: ActorRecord, cause: DeathCause): Error {
  if (cause.kind === "infeasible") {
    const e = new InfeasibleResourceError(cause.message);
    return e;
  }
  if (cause.kind === "rejected" && cause.creationError) {
    const who = rec.name ? `'${rec.name}' (${rec.actorId})` : rec.actorId;
    const w = cause.creationError;
    return headErrorFromWire({ ...w, message: `actor ${who} was not created: ${w.message}` });
  }
  return new ActorDiedError(rec.actorId, rec.name, cause);
}
