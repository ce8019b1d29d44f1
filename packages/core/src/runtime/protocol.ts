/** Message codes of the data plane (caller <-> worker/owner) and shapes of the control plane. */
import type { DeathCause } from "../errors.js";

/**
 * [CALL, seq, target, args, flags, window]: target is a method name or [moduleUrl, exportName];
 * `window` bounds the items a generator may send ahead of the caller (see STREAM_ITEM).
 */
export const CALL = 1;
/** [RESULT, seq, status: ResultStatus, value | WireError | [path, found, message] | reason] */
export const RESULT = 2;
/** [FETCH, seq]: ask an owner for an object. */
export const FETCH = 3;
/** [FETCH_REPLY, seq, status: FetchStatus, value | WireError | null] */
export const FETCH_REPLY = 4;
/** [RELEASE, seqs]: a borrower dropped its copies. */
export const RELEASE = 5;
/** [ADDREF, seqs]: a borrower passed a copy on to a third process. */
export const ADDREF = 6;

/** [PROTOCOL_ERROR, reason]: the peer got a message from us that it could not tie to a call or fetch. */
export const PROTOCOL_ERROR = 7;

/**
 * Streams: a call whose target returns a generator answers [STREAM_OPEN, seq] at once, then
 * [STREAM_ITEM, seq, index, value] per item (index from 0, in order), then its RESULT: RESULT_STREAM_END
 * with the item count when the generator returned, or the error of the item that failed. The worker
 * asks the generator for item `index` only while `index - acked < window`, where `acked` is the
 * largest count the caller sent in [STREAM_ACK, seq, consumed] (items it has taken): a slow consumer
 * pauses the producer, and the caller never holds more than `window` items of one stream.
 */
export const STREAM_OPEN = 8;
export const STREAM_ITEM = 9;
export const STREAM_ACK = 10;
/** [CANCEL, seq]: the caller cancelled the call; the worker drops it if queued, else aborts its signal. */
export const CANCEL = 11;

/** The items a generator may run ahead of its consumer unless the caller says otherwise; the most it may say. */
export const STREAM_WINDOW_DEFAULT = 16;
export const STREAM_WINDOW_MAX = 1024;

/** How a call ended: the value, an exception, a result that could not be encoded, a call that could not be decoded, a stream's end. */
export const RESULT_OK = 1;
export const RESULT_THREW = 0;
export const RESULT_UNSENDABLE = 2;
export const RESULT_UNDECODABLE = 3;
export const RESULT_STREAM_END = 4;

/** How an owner answered a fetch: the value, the error the object holds, or no such object (freed). */
export const FETCH_OK = 1;
export const FETCH_ERROR = 2;
export const FETCH_LOST = 3;
/** Statuses a fetch is settled with where it was sent (never on the wire): its reply did not decode, its owner's fate is unknown. */
export const FETCH_UNDECODABLE = 4;
export const FETCH_UNCONFIRMED = 5;
export type FetchStatus =
  | typeof FETCH_OK
  | typeof FETCH_ERROR
  | typeof FETCH_LOST
  | typeof FETCH_UNDECODABLE
  | typeof FETCH_UNCONFIRMED;

/** Call flags. */
export const FLAG_IMMEDIATE = 1;

export type ActorState = "PENDING" | "ALIVE" | "RESTARTING" | "DEAD";

/** An encoded value that the head passes through without decoding. */
export interface OpaqueValue {
  h: Uint8Array;
  f: Uint8Array[];
}

export interface ActorSpec {
  actorId: string;
  /** Module URL the worker imports; className is the export to construct, null for a task executor. */
  module: string;
  className: string | null;
  args: OpaqueValue;
  name?: string;
  resources: Record<string, number>;
  maxRestarts: number;
  maxConcurrency: number;
  placementGroup?: string;
  bundleIndex?: number;
  detached?: boolean;
  env?: Record<string, string>;
  ownerClientId: string;
  nodeAffinity?: NodeAffinity;
}

/** Run on `nodeId`; `soft`: elsewhere when that node is dead or can never fit the request. */
export interface NodeAffinity {
  nodeId: string;
  soft: boolean;
}

/** The head's news about one actor, pushed to subscribers. */
export interface ActorUpdate {
  t: "actor";
  actorId: string;
  name?: string;
  state: ActorState;
  incarnation: number;
  endpoint?: { tcp: string; ipc?: string; host?: string };
  nodeId?: string;
  cause?: DeathCause;
}

export type Bundle = Record<string, number>;
export type PlacementStrategy = "PACK" | "SPREAD" | "STRICT_PACK" | "STRICT_SPREAD";
