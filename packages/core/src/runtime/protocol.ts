/** Message codes of the data plane (caller <-> worker/owner) and shapes of the control plane. */
import type { DeathCause } from "../errors.js";

/** [CALL, seq, target, args, flags]: target is a method name or [moduleUrl, exportName]. */
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

/** How a call ended: the value, an exception, a result that could not be encoded, a call that could not be decoded. */
export const RESULT_OK = 1;
export const RESULT_THREW = 0;
export const RESULT_UNSENDABLE = 2;
export const RESULT_UNDECODABLE = 3;

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
