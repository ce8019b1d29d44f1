/** Typed errors of the runtime, each carrying the facts needed to act on it. */
import type { WireError } from "./wire/codec.js";

/**
 * Base of the runtime's typed errors: `name` is set from the class, so it is always the class's own
 * name (a subclass needs no `name` field) and travels as such between processes.
 */
export class TorlError extends Error {
  constructor(message?: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }
}

/**
 * Bad input from the user: a file, key, line or flag that cannot be used. The message names it. Every
 * CLI prints it as one `error: ...` line and exits 2 (runtime failures exit 1). Packages extend it for
 * their own input errors (a config key, a dataset row, a report file).
 */
export class InputError extends Error {
  override name = "InputError";
}

/** Bad command-line input (an unknown flag, a missing value): exit code 2. */
export class UsageError extends InputError {
  override name = "UsageError";
}

/** An exception thrown inside an actor method or task, with the remote name, message and stack. */
export class RemoteError extends TorlError {
  /** The class name of the error thrown remotely (e.g. "TypeError"). */
  readonly remoteName: string;
  readonly remoteStack: string | undefined;
  /** Own properties of the remote error (e.g. `code`). */
  readonly data: Record<string, unknown>;
  constructor(
    wire: WireError,
    readonly where: { actorId?: string; actorName?: string; method?: string; task?: string },
  ) {
    const site = where.method
      ? `actor ${where.actorName ?? where.actorId}.${where.method}`
      : where.task
        ? `task ${where.task}`
        : "remote call";
    super(`${wire.name} in ${site}: ${wire.message}`);
    this.remoteName = wire.name;
    this.remoteStack = wire.stack;
    this.data = wire.data ?? {};
    this.stack = `${this.name}: ${this.message}\n  --- remote stack ---\n${wire.stack ?? "(none)"}\n  --- local stack ---\n${new Error().stack?.split("\n").slice(1).join("\n")}`;
  }
}

/**
 * Why an actor died: its process exited; kill() killed it; its constructor threw; its node died; no
 * node can ever hold it; its owner died or left; the head refused to create it; the head does not
 * know it (a handle to an actor of another cluster, or one long gone); the runtime that created a thread
 * actor shut down.
 */
export type DeathKind =
  | "exited"
  | "killed"
  | "creation_failed"
  | "node_died"
  | "infeasible"
  | "owner_died"
  | "rejected"
  | "shutdown"
  | "unknown";

export interface DeathCause {
  kind: DeathKind;
  message: string;
  exitCode?: number | null;
  signal?: string | null;
  nodeId?: string;
  creationError?: WireError;
}

/** A call on an actor that died (or was killed, or could never be placed). */
export class ActorDiedError extends TorlError {
  readonly exitCode: number | null;
  readonly signal: string | null;
  constructor(
    readonly actorId: string,
    readonly actorName: string | undefined,
    override readonly cause: DeathCause,
  ) {
    const who = actorName ? `'${actorName}' (${actorId})` : actorId;
    const how =
      cause.exitCode != null || cause.signal
        ? ` [exit code ${cause.exitCode ?? "none"}, signal ${cause.signal ?? "none"}]`
        : "";
    super(`actor ${who} died: ${cause.message}${how}`);
    this.exitCode = cause.exitCode ?? null;
    this.signal = cause.signal ?? null;
  }
}

/** A resource request that no node (or bundle) in the cluster can ever satisfy. */
export class InfeasibleResourceError extends TorlError {}

/** An object whose owner is gone or that was already freed. */
export class ObjectLostError extends TorlError {
  constructor(
    readonly objectId: string,
    why: string,
  ) {
    super(`object ${objectId} is lost: ${why}`);
  }
}

/** An object whose owner process died (Ray's OwnerDiedError): its value can never be fetched. */
export class OwnerDiedError extends ObjectLostError {
  constructor(
    objectId: string,
    readonly ownerId: string,
    why = "the process that owned it died",
  ) {
    super(objectId, `${why} (owner ${ownerId})`);
  }
}

/**
 * A value that cannot travel between processes faithfully (a function, a symbol, an instance of
 * an unregistered class, a cycle ...). `path` names where it sits, e.g. `args[0].f`.
 */
export class SerializationError extends TypeError {
  override name = "SerializationError";
  constructor(
    readonly path: string,
    /** What was found there, e.g. "a function". */
    readonly found: string,
    message: string,
  ) {
    super(message);
  }
}

/** A message that arrived but could not be decoded (answered to its sender with this error). */
export class MessageDecodeError extends TorlError {}

/** `getActor(name)` found no live actor of that name. */
export class ActorNotFoundError extends TorlError {}

/** An actor was created under a name that a live actor already holds. */
export class ActorNameTakenError extends TorlError {}

/** A placement group that was removed (or is otherwise unusable) was waited on. */
export class PlacementGroupError extends TorlError {}

/** A resource request of the wrong shape (negative, not a number, a fractional count above one GPU). */
export class ResourceRequestError extends TorlError {}

/** The head did not answer, or the connection to it closed, or it refused a request for no typed reason. */
export class HeadError extends TorlError {}

/** `get` ran past its timeout (`timeoutMs: 0`: the value was not ready at once). */
export class GetTimeoutError extends TorlError {}

/** The runtime was used before `init()` or after `shutdown()`. */
export class NotInitializedError extends TorlError {
  constructor() {
    super("the torl runtime is not initialised: call init() first");
  }
}

/** A task whose worker died more often than `maxRetries` allows, or that had not started when `shutdown()` ran. */
export class TaskFailedError extends TorlError {}

/**
 * A call or task that `cancel(ref)` cancelled: its ref (and its stream, for a generator) rejects with
 * this. `what` names the call, as in `actor Counter-ab12.inc` or `task add`.
 */
export class TaskCancelledError extends TorlError {
  constructor(readonly what: string) {
    super(`${what} was cancelled by cancel()`);
  }
}

/**
 * A ref used the wrong way round for what its call returned: a generator's stream awaited as a
 * value, a value iterated as a stream, a stream read twice or by a process that did not make the call.
 */
export class StreamUsageError extends TorlError {}

/** A value of a class this process has no serializer for arrived (see registerSerializer). */
export class UnknownClassError extends TorlError {}

/** A listener would be reachable beyond this machine without the cluster's keys. */
export class InsecureListenError extends TorlError {
  constructor(
    readonly host: string,
    readonly what: string,
  ) {
    super(
      `${what} would listen on ${host}, beyond loopback, without authentication: anyone who can reach it could run code here. ` +
        "Give the cluster's keys (torl start --keys PATH, TORL_CLUSTER_KEYS=PATH, or init({ keys })), or listen on 127.0.0.1",
    );
  }
}

/** The secure (CURVE) handshake with a peer failed: missing or wrong cluster keys on one side. */
export class ClusterAuthError extends TorlError {
  constructor(
    readonly endpoint: string,
    readonly reason: string,
  ) {
    super(
      `authentication with ${endpoint} failed: ${reason}. A cluster reachable beyond loopback admits only processes holding its keys: ` +
        "give them with --keys PATH, TORL_CLUSTER_KEYS=PATH or init({ keys }) (a head keeps them in the file its --keys or TORL_CLUSTER_KEYS named, else in cluster-keys.json in its state directory)",
    );
  }
}

/** A cluster key file that is missing, malformed or readable by other users. */
export class KeyFileError extends TorlError {
  constructor(
    readonly file: string,
    why: string,
  ) {
    super(`cluster key file ${file}: ${why}`);
  }
}

/** A feature needs an optional package (a peer dependency) that is not installed. */
export class OptionalDependencyMissingError extends TorlError {
  constructor(
    readonly packageName: string,
    readonly feature: string,
    options?: { cause?: unknown },
  ) {
    super(`${feature} needs the optional package ${packageName}: install it (npm i ${packageName})`, options);
  }
}

/** True for the error Node throws when a package cannot be found (ESM import or require.resolve). */
export function isModuleNotFound(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return code === "ERR_MODULE_NOT_FOUND" || code === "MODULE_NOT_FOUND";
}
