/**
 * The control-plane protocol: every message the head, node agents and client runtimes (drivers and
 * workers) send each other, as discriminated unions on `t`. msgpack maps on a DEALER/ROUTER link; a
 * request carries `rid` and is answered with a `re` message of the same rid, a notification has none.
 * Both ends are the same version of this package (the wire format may change between versions).
 */
import type { ProcessesReport, ProcessReport } from "../observe/process-report.js";
import type { OwnerAddress } from "../runtime/object-ref.js";
import type { ActorSpec, ActorState, ActorUpdate, PlacementStrategy } from "../runtime/protocol.js";
import type { WireError } from "../wire/codec.js";
import type { Resources } from "./resources.js";
import type { LogBatch } from "./worker-logs.js";

// ---- to the head -----------------------------------------------------------------------------

/** From a client runtime (a driver, or the runtime inside a worker). */
export type ClientToHead =
  | {
      t: "hello";
      clientId: string;
      /** Where the client's object server answers fetches. */
      address: OwnerAddress;
      nodeIp: string;
      pid: number;
      actorId?: string;
      /** Drivers send clientHeartbeat and are taken for dead without it; workers live with their process. */
      heartbeats: boolean;
      /** A driver that wants its actors' and tasks' output (`init({ logToDriver })`, default true). */
      logs?: boolean;
    }
  | { t: "clientHeartbeat"; clientId: string }
  /** A driver leaves: it called shutdown(), or (`exited`) its process is exiting without it. */
  | { t: "bye"; clientId: string; exited?: boolean }
  | { t: "clientAlive"; clientId: string }
  | { t: "createActor"; spec: ActorSpec }
  | { t: "subscribe"; actorId: string }
  | { t: "getActor"; name: string }
  | { t: "kill"; actorId: string; noRestart?: boolean }
  | {
      t: "createPg";
      pgId?: string;
      bundles: Resources[];
      strategy?: PlacementStrategy;
      name?: string;
      clientId: string;
    }
  | { t: "waitPg"; pgId: string }
  | { t: "removePg"; pgId: string }
  | { t: "status" }
  | { t: "clusterResources" }
  /** A worker's log files: `target` is an actor id or name, or a node id (then all its workers). */
  | { t: "readLogs"; target: string; tailBytes: number }
  /** Every process's report; with a window, its timeline events that ended in it (microseconds since the epoch). */
  | { t: "processes"; traceFromUs?: number; traceToUs?: number }
  /** Records the timeline everywhere for `seconds`, then answers every process's events of that window. */
  | { t: "timeline"; seconds: number }
  /** Holds recording on (or lets go of it) for `holder` (a client id: let go of when it is gone too). */
  | { t: "record"; holder: string; on: boolean }
  /** A client's answer to the head's probe of `qid`. */
  | { t: "processReport"; qid: number; report: ProcessReport };

/** What the head answers each client request with (the others are notifications: no answer). */
export interface HeadReplies {
  /** `recordingEpoch`: the count of recording changes so far (a probe of a later one overrides this answer). */
  hello: { nodes: number; nodeId: string | undefined; recording: boolean; recordingEpoch: number };
  clientAlive: boolean;
  bye: null;
  createActor: { actorId: string };
  getActor: { actorId: string; name: string };
  kill: null;
  createPg: PlacementGroupStatus;
  waitPg: PlacementGroupStatus;
  removePg: null;
  status: ClusterStatus;
  clusterResources: { total: Resources; available: Resources; nodes: number };
  readLogs: LogsRead;
  processes: ProcessesReport;
  timeline: ProcessesReport;
  /**
   * Whether the cluster records now, and the head's clock (microseconds since the epoch), once every
   * process heard it; `silent`: the processes that had not within RECORD_TIMEOUT_MS.
   */
  record: { recording: boolean; nowUs: number; silent: ProcessesReport["silent"] };
}

/** A node's answer to readLogs: the last `tailBytes` of each matching file (oldest first). */
export interface LogsRead {
  nodeId: string;
  dir: string;
  files: { name: string; bytes: number; text: string }[];
}

/** From a node agent. */
export type NodeToHead =
  | {
      t: "registerNode";
      nodeId: string;
      ip: string;
      resources: Resources;
      gpuIds: number[];
      pid: number;
      labels?: Record<string, string>;
    }
  | { t: "nodeHeartbeat"; nodeId: string }
  | {
      t: "actorReady";
      actorId: string;
      incarnation: number;
      endpoint: ActorUpdate["endpoint"];
      pid: number | undefined;
    }
  | { t: "actorFailed"; actorId: string; incarnation: number; error: WireError }
  | {
      t: "workerExit";
      actorId: string;
      incarnation: number;
      code: number | null;
      signal: string | null;
      pid: number | undefined;
    }
  /** Lines worker processes printed (notification, sent in batches). */
  | { t: "workerLog"; batches: LogBatch[] }
  /** The answer to the head's readLogs of `qid`. */
  | { t: "logsRead"; qid: number; ok: true; v: LogsRead }
  | { t: "logsRead"; qid: number; ok: false; e: WireError };

/** Either side may say that a message it received could not be decoded. */
export interface Undecodable {
  t: "undecodable";
  reason: string;
}

/** Anything the head receives; requests carry `rid`. */
export type ToHead = (ClientToHead | NodeToHead | Undecodable) & { rid?: number };

// ---- from the head ---------------------------------------------------------------------------

/** The answer to a request (the same `rid`). */
export type Reply =
  | { t: "re"; rid: number; ok: true; v: unknown }
  | { t: "re"; rid: number; ok: false; e: WireError };

/** A notification the head could not carry out (no one waited for a reply). */
export interface Refused {
  t: "refused";
  request: string;
  e: WireError;
}

/** What the head sends a node agent. */
export type HeadToNode =
  | Reply
  | Refused
  | Undecodable
  | { t: "nodeHeartbeatAck" }
  | {
      t: "startWorker";
      spec: ActorSpec;
      incarnation: number;
      gpuIds: number[];
      resources: Resources;
      bundleIndex: number | undefined;
    }
  | { t: "killWorker"; actorId: string; incarnation: number }
  /** Reads this node's log files of `actorId` (all its workers' when undefined); answered by logsRead. */
  | { t: "readLogs"; qid: number; actorId: string | undefined; tailBytes: number }
  | { t: "shutdown"; reason?: string };

/**
 * What the head sends a client runtime: replies, the news of the actors it subscribed to, and that
 * another client is gone (the objects it owned can never be fetched).
 */
export type HeadToClient =
  | Reply
  | Refused
  | Undecodable
  | ActorUpdate
  | { t: "clientGone"; clientId: string }
  /** Lines the client's actors and tasks printed (a driver that asked for them in its hello). */
  | { t: "workerLog"; batches: LogBatch[] }
  /**
   * Asks for the client's report (answered by processReport): first turning timeline recording on or
   * off when `recording` is given (unless the client heard a later change: `epoch` counts the changes),
   * then with the events that ended in the window when it is given.
   */
  | {
      t: "probe";
      qid: number;
      recording?: boolean;
      epoch?: number;
      traceFromUs?: number;
      traceToUs?: number;
    };

/** The registration reply a node agent reads (`re` of its registerNode). */
export interface NodeRegistered {
  nodeId: string;
  nodeTimeoutMs: number;
}

// ---- between a node agent and its worker processes (the child-process IPC channel) -----------

/** What a worker process tells its node agent once its actor is constructed, or failed to be. */
export type WorkerToNode =
  | { t: "ready"; endpoint: ActorUpdate["endpoint"] }
  | { t: "failed"; error: WireError };

// ---- what the head answers `status` with ------------------------------------------------------

/** A placement group as the head reports it. */
export interface PlacementGroupStatus {
  pgId: string;
  name?: string;
  state: "PENDING" | "CREATED" | "REMOVED" | "INFEASIBLE";
  strategy: PlacementStrategy;
  bundles: Resources[];
  /** The node of each bundle once placed. */
  bundleNodes: string[] | null;
  /** The GPU ids of each bundle once placed. */
  bundleGpus: number[][] | null;
  error?: string;
}

/** The head's view of the cluster (`clusterStatus()`, `torl status --json`). */
export interface ClusterStatus {
  address: string;
  uptimeS: number;
  nodes: {
    nodeId: string;
    ip: string;
    alive: boolean;
    pid: number;
    total: Resources;
    available: Resources;
    /** Free fraction of each GPU, by id. */
    gpus: Record<string, number>;
  }[];
  actors: {
    actorId: string;
    name: string | undefined;
    className: string;
    state: ActorState;
    nodeId: string | undefined;
    pid: number | undefined;
    resources: Record<string, number>;
    /** Incarnations so far (1 = never restarted). */
    restarts: number;
    nodeAffinity: ActorSpec["nodeAffinity"];
    cause: string | undefined;
  }[];
  placementGroups: PlacementGroupStatus[];
  /** Drivers and workers connected. */
  clients: number;
  bytesReceived: number;
  security: { mode: "curve" | "none"; listen: string; refusedConnections: number };
}
