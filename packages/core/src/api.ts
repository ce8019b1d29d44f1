/**
 * The public cluster API: init/shutdown, actors, tasks, objects, placement groups.
 * Names and semantics follow Ray.
 */
import os from "node:os";
import { Head } from "./cluster/head.js";
import { readKeyFile, resolveJoinKeys } from "./cluster/key-file.js";
import type { ClusterStatus, LogsRead, PlacementGroupStatus } from "./cluster/messages.js";
import { NodeAgent } from "./cluster/node-agent.js";
import { validateRequest } from "./cluster/resources.js";
import { GetTimeoutError, ResourceRequestError } from "./errors.js";
import type { ActorHandle } from "./handle-types.js";
import { logWarn } from "./log.js";
import {
  checkAddress,
  checkBoolean,
  checkEnv,
  checkedOptions,
  checkInteger,
  checkName,
  optionsObject,
  refuseUnknownKeys,
  shown,
} from "./options.js";
import { ActorHandleBase, handleFor } from "./runtime/actor-handle.js";
import { streamWindowOf } from "./runtime/call-stream.js";
import { currentRuntime, maybeRuntime } from "./runtime/current.js";
import { randomId } from "./runtime/ids.js";
import { ObjectRef } from "./runtime/object-ref.js";
import { type ActorSpec, FLAG_IMMEDIATE, type PlacementStrategy } from "./runtime/protocol.js";
import { Runtime, type RuntimeContext } from "./runtime/runtime.js";
import { TaskPool } from "./runtime/tasks.js";
import {
  checkThreadActorOptions,
  createThreadActor,
  isThreadActorHandle,
  ThreadActorUnsupportedError,
} from "./runtime/thread-actor.js";
import { affinityOf, type SchedulingStrategy } from "./scheduling-strategy.js";
import { encode, errorToWire } from "./wire/codec.js";
import { type ClusterKeys, checkKeyShape, setClusterKeys } from "./wire/security.js";
import { prepareValue } from "./wire/sendable.js";

export interface InitOptions {
  /** "host:port" of a head started with `torl start --head`; omitted: start an embedded cluster here. */
  address?: string;
  /** Embedded cluster: CPUs of the local node (default: the machine's cores). */
  numCpus?: number;
  /** Embedded cluster: GPUs of the local node (default: detected with nvidia-smi, none without it). */
  numGpus?: number;
  /** Embedded cluster: custom resources of the local node. */
  resources?: Record<string, number>;
  /** IP this process binds its object server to (default 127.0.0.1). */
  nodeIp?: string;
  /**
   * The cluster's CURVE keys, or the path of its key file. Joining: default the file named by
   * TORL_CLUSTER_KEYS, else the state directory's file when it belongs to `address`. Embedded: given
   * keys make the embedded cluster authenticated and encrypted too.
   */
  keys?: ClusterKeys | string;
  /**
   * Print what this driver's actors and tasks print, each line after `(Class pid=N)` (Ray's
   * log_to_driver). Default true, or TORL_LOG_TO_DRIVER=0. Either way every line is kept in the
   * worker's log file on its node (`torl logs`).
   */
  logToDriver?: boolean;
}

export interface ClusterInfo {
  address: string;
  clientId: string;
  nodeId?: string;
  embedded: boolean;
}

let embedded: { head: Head; node: NodeAgent } | null = null;
const pools = new Map<string, TaskPool>();
let clusterCpus = 1;

const INIT_KEYS = ["address", "numCpus", "numGpus", "resources", "nodeIp", "keys", "logToDriver"] as const;

/**
 * Starts an embedded head and node (default) or joins the cluster at `address`. Every option is
 * checked before anything starts; an init that fails part-way closes what it opened (sockets,
 * threads, the embedded head), so the process can still exit or call init() again.
 */
export async function init(opts: InitOptions = {}): Promise<ClusterInfo> {
  if (maybeRuntime()) throw new Error("init() was already called in this process; call shutdown() first");
  refuseUnknownKeys(optionsObject(opts, "init()"), INIT_KEYS, "init()");
  const logs = logToDriver(opts.logToDriver);
  const nodeResources = localNodeResources(opts);
  checkName("init()", "nodeIp", opts.nodeIp);
  const ip = opts.nodeIp ?? process.env.TORL_NODE_IP ?? "127.0.0.1";
  let address = headAddressOf(opts.address);
  let nodeId: string | undefined;
  setClusterKeys(address ? resolveJoinKeys(opts.keys, address) : embeddedKeys(opts.keys));
  const rt = new Runtime();
  let head: Head | null = null;
  let node: NodeAgent | null = null;
  try {
    if (!address) {
      head = new Head({ host: "127.0.0.1", port: 0, nodeTimeoutMs: Number.POSITIVE_INFINITY });
      address = await head.start();
      node = new NodeAgent({ headAddress: address, ip: "127.0.0.1", ...nodeResources });
      await node.start();
      nodeId = node.nodeId;
    }
    await rt.start(address, ip, { nodeId }, logs);
    const res = await rt.head.request("clusterResources", {}, 10000);
    clusterCpus = res.total.CPU ?? 1;
  } catch (e) {
    await rt.shutdown().catch(() => {});
    await node?.stop().catch(() => {});
    head?.stop();
    setClusterKeys(null);
    throw e;
  }
  if (head && node) embedded = { head, node };
  return { address, clientId: rt.clientId, nodeId: rt.context.nodeId, embedded: embedded !== null };
}

/** The head to join: `init({ address })`, else TORL_ADDRESS, checked as HOST:PORT; undefined: embedded. */
function headAddressOf(given: unknown): string | undefined {
  if (given !== undefined) {
    if (typeof given !== "string")
      throw new TypeError(`init({ address }) must be a "HOST:PORT" string, got ${shown(given)}`);
    return checkAddress("init({ address })", given);
  }
  const env = process.env.TORL_ADDRESS;
  return env ? checkAddress("TORL_ADDRESS", env) : undefined;
}

/**
 * The embedded node's resources as init() was given them: CPUs a number >= 0, GPUs a whole number,
 * custom resources numbers >= 0 (the checks `torl start` makes of its flags); else ResourceRequestError.
 */
function localNodeResources(o: InitOptions): Pick<InitOptions, "numCpus" | "numGpus" | "resources"> {
  const gpus: unknown = o.numGpus;
  if (gpus !== undefined && !(Number.isInteger(gpus) && (gpus as number) >= 0))
    throw new ResourceRequestError(`init(): numGpus must be a whole number >= 0, got ${shown(gpus)}`);
  requestOf(o, o.numCpus, "init()");
  return { numCpus: o.numCpus ?? os.cpus().length, numGpus: o.numGpus, resources: o.resources };
}

/** `init({ logToDriver })`, else TORL_LOG_TO_DRIVER (0 or false turns it off), else on. */
function logToDriver(given: boolean | undefined): boolean {
  if (given !== undefined) {
    if (typeof given !== "boolean")
      throw new TypeError(`init({ logToDriver }) must be true or false, got ${JSON.stringify(given)}`);
    return given;
  }
  const env = process.env.TORL_LOG_TO_DRIVER?.trim().toLowerCase();
  if (env === undefined || env === "") return true;
  if (["0", "false", "no", "off"].includes(env)) return false;
  if (["1", "true", "yes", "on"].includes(env)) return true;
  throw new TypeError(
    `TORL_LOG_TO_DRIVER must be 1 or 0 (true or false), got '${process.env.TORL_LOG_TO_DRIVER}'`,
  );
}

function embeddedKeys(given: ClusterKeys | string | undefined): ClusterKeys | null {
  if (given === undefined) return null;
  if (typeof given === "string") return readKeyFile(given);
  checkKeyShape(given, "init({ keys })");
  return given;
}

export function isInitialized(): boolean {
  return maybeRuntime() !== null;
}

/** Kills the actors this process created (not detached ones), and stops an embedded cluster. */
export async function shutdown(): Promise<void> {
  const rt = maybeRuntime();
  // queued tasks fail now; nothing starts an executor once the runtime is going
  for (const pool of pools.values()) pool.close();
  pools.clear();
  if (rt) await rt.shutdown();
  if (embedded) {
    const e = embedded;
    embedded = null;
    await e.node.stop();
    e.head.stop();
  }
  setClusterKeys(null);
}

// ---- actors -----------------------------------------------------------------------------------

export interface ActorOptions {
  /** Register under this name for getActor(name). */
  name?: string;
  numCpus?: number;
  /** Whole or fractional GPUs; the worker sees exactly its GPU ids in CUDA_VISIBLE_DEVICES. */
  numGpus?: number;
  resources?: Record<string, number>;
  /** Restarts after the worker dies (the constructor runs again); -1 = unlimited. Default 0. */
  maxRestarts?: number;
  /** Re-send calls in flight when the actor restarts, up to this many times each. Default 0. */
  maxTaskRetries?: number;
  /** Calls that may run at once (async methods). Default 1. */
  maxConcurrency?: number;
  placementGroup?: PlacementGroup | string;
  /** Bundle of the placement group; -1 or omitted = any bundle that fits. */
  bundleIndex?: number;
  /** "detached": outlives the process that created it. */
  lifetime?: "detached";
  /** Extra environment variables for the worker process. */
  env?: Record<string, string>;
  /** Place it on a chosen node (not with placementGroup). */
  schedulingStrategy?: SchedulingStrategy;
  /** Run it in a worker thread of this process instead of a worker process (see runtime/thread-actor.ts). */
  thread?: boolean;
  /**
   * Generator methods: how many items a stream may produce ahead of its consumer before its
   * generator is paused (Ray's `_generator_backpressure_num_objects`). 1 to 1024, default 16.
   */
  streamBackpressure?: number;
}

/**
 * The resources an actor or task asks for, checked at the call site (the head checks again): a
 * malformed request throws ResourceRequestError naming `where` and the option.
 */
function resourcesOf(
  o: { numCpus?: number; numGpus?: number; resources?: Record<string, number> },
  defaultCpus: number,
  where: string,
) {
  return requestOf(o, o.numCpus ?? defaultCpus, where);
}

/** `resources` with CPU and GPU set from numCpus and numGpus, checked (ResourceRequestError). */
function requestOf(
  o: { numGpus?: number; resources?: Record<string, number> },
  cpus: number | undefined,
  where: string,
): Record<string, number> {
  const given: unknown = o.resources ?? {};
  // spread, an array would become resources named "0", "1" ...
  if (given === null || typeof given !== "object" || Array.isArray(given))
    throw new ResourceRequestError(`${where}: resources must be an object of amounts, got ${shown(given)}`);
  // CPU and GPU come from numCpus and numGpus, which would silently win over these
  for (const [key, option] of [
    ["CPU", "numCpus"],
    ["GPU", "numGpus"],
  ] as const)
    if (Object.hasOwn(given, key))
      throw new ResourceRequestError(
        `${where}: resources.${key} is not taken: give ${key === "CPU" ? "CPUs" : "GPUs"} as ${option}`,
      );
  const r: Record<string, number> = { ...(given as Record<string, number>) };
  if (cpus !== undefined) r.CPU = cpus;
  if (o.numGpus !== undefined && o.numGpus !== 0) r.GPU = o.numGpus;
  validateRequest(r, where, optionName);
  return r;
}

/** The option a resource key is given by. */
function optionName(key: string): string {
  return key === "CPU" ? "numCpus" : key === "GPU" ? "numGpus" : `resources.${key}`;
}

/** The keys of ActorOptions, in the order an error lists them. */
const ACTOR_KEYS = [
  "name",
  "numCpus",
  "numGpus",
  "resources",
  "maxRestarts",
  "maxTaskRetries",
  "maxConcurrency",
  "placementGroup",
  "bundleIndex",
  "lifetime",
  "env",
  "schedulingStrategy",
  "thread",
  "streamBackpressure",
] as const satisfies readonly (keyof ActorOptions)[];

/** The keys an actor or task definition takes beside its options (`actor(Class, { module, ... })`). */
const DEFINITION_KEYS = ["module", "exportName"] as const;

/**
 * Checks actor options where they are given (`actor()`, `.options()`, createActor), as the thread
 * path always did: an unknown key (with a did-you-mean), a value of the wrong type or range, or a
 * combination that cannot hold throws at once naming `where` (e.g. "actor Counter") and the option;
 * resources throw ResourceRequestError, integers RangeError, the rest TypeError. `definition`: the
 * options of `actor(Class, { module, exportName, ... })`. Returns the resource request and stream window.
 */
export function checkActorOptions(
  opts: unknown,
  where: string,
  definition = false,
): { resources: Record<string, number>; window: number } {
  const o = optionsObject(opts, where);
  refuseUnknownKeys(o, definition ? [...ACTOR_KEYS, ...DEFINITION_KEYS] : ACTOR_KEYS, where);
  if (definition) checkDefinition(o, where);
  checkName(where, "name", o.name);
  const resources = resourcesOf(o, 0, where);
  checkInteger(where, "maxRestarts", o.maxRestarts, -1, " (-1: unlimited)");
  checkInteger(where, "maxTaskRetries", o.maxTaskRetries, 0);
  checkInteger(where, "maxConcurrency", o.maxConcurrency, 1);
  checkPlacement(where, o.placementGroup, o.bundleIndex);
  if (o.lifetime !== undefined && o.lifetime !== "detached")
    throw new TypeError(`${where}: lifetime must be "detached" (or left out), got ${shown(o.lifetime)}`);
  checkEnv(where, o.env);
  affinityOf(o.schedulingStrategy as SchedulingStrategy | undefined, o.placementGroup, where);
  checkBoolean(where, "thread", o.thread);
  const window = streamWindowOf(o.streamBackpressure, where);
  if (o.thread) checkThreadActorOptions(o);
  return { resources, window };
}

/** `module` (a URL a worker imports) and `exportName` of an actor or task definition. */
function checkDefinition(o: Record<string, unknown>, where: string): void {
  checkName(where, "module", o.module);
  checkName(where, "exportName", o.exportName);
}

/** placementGroup: a PlacementGroup or its id; bundleIndex: an index of its bundles, or -1 for any. */
function checkPlacement(where: string, pg: unknown, bundleIndex: unknown): void {
  if (pg !== undefined && !(pg instanceof PlacementGroup) && !(typeof pg === "string" && pg !== ""))
    throw new TypeError(`${where}: placementGroup must be a PlacementGroup or its id, got ${shown(pg)}`);
  if (bundleIndex === undefined) return;
  // without a group it would be ignored
  if (pg === undefined)
    throw new TypeError(`${where}: bundleIndex is a bundle of a placement group: give placementGroup too`);
  // an index past the group's bundles is refused by the head, at ready()
  checkInteger(where, "bundleIndex", bundleIndex, -1, " (-1: any bundle)");
}

/**
 * Creates an actor: `module` (a URL the worker can import) exports `className`, of type T. Returns
 * the handle at once; calls queue until the worker is up. (`actor(Class, ...)` of @torl-ts/actors
 * infers T from the class.)
 */
export function createActor<T = unknown>(
  module: string,
  className: string | null,
  args: unknown[],
  opts: ActorOptions = {},
): ActorHandle<T> {
  const where = className ? `actor ${className}` : "task executor";
  const { resources, window } = checkActorOptions(opts, where);
  if (opts.thread && className) return createThreadActor<T>(module, className, args, opts);
  const rt = currentRuntime();
  const actorId = `${className ? className.slice(0, 16) : "exec"}-${randomId(5)}`;
  const site = className ? `constructor of ${className}` : "task executor";
  const enc = encode(prepareValue(args, "args", `cannot be sent to an actor (${site})`));
  const pg = opts.placementGroup;
  const spec: ActorSpec = {
    actorId,
    module,
    className,
    args: { h: enc.head, f: enc.frames },
    name: opts.name,
    resources,
    maxRestarts: opts.maxRestarts ?? 0,
    maxConcurrency: opts.maxConcurrency ?? 1,
    placementGroup: typeof pg === "string" ? pg : pg?.id,
    bundleIndex: opts.bundleIndex,
    detached: opts.lifetime === "detached",
    env: opts.env,
    ownerClientId: rt.clientId,
    nodeAffinity: affinityOf(opts.schedulingStrategy, opts.placementGroup, className ?? "task executor"),
  };
  const rec = rt.actors.record(actorId, opts.name);
  rec.maxTaskRetries = opts.maxTaskRetries ?? 0;
  rec.streamWindow = window;
  rt.head.request("createActor", { spec }).catch((e: Error) => {
    // ready() and every call reject with the refusal's own class (ActorNameTakenError ...)
    rt.actors.onUpdate({
      t: "actor",
      actorId,
      state: "DEAD",
      incarnation: 1e9,
      cause: {
        kind: "rejected",
        message: `the head refused to create it: ${e.name}: ${e.message}`,
        creationError: errorToWire(e),
      },
    });
  });
  return handleFor<T>(rt, actorId, opts.name);
}

/** Looks up a live named actor (of class T). */
export async function getActor<T = unknown>(name: string): Promise<ActorHandle<T>> {
  const rt = currentRuntime();
  const info = await rt.head.request("getActor", { name });
  return handleFor<T>(rt, info.actorId, name);
}

/**
 * Kills an actor's worker at once; with `noRestart: false` it may restart (if maxRestarts allows).
 * While a timeline records, the head first collects the worker's events (up to 3 s).
 */
export function kill(handle: { readonly actorId: string }, opts: { noRestart?: boolean } = {}): void {
  if (!(handle instanceof ActorHandleBase) && !isThreadActorHandle(handle))
    throw new TypeError(
      `kill(): expected an actor handle (from .remote() or getActor()), got ${handle === null || typeof handle !== "object" ? shown(handle) : "an object that is none"}`,
    );
  checkBoolean("kill()", "noRestart", checkedOptions(opts, ["noRestart"], "kill()").noRestart);
  if (isThreadActorHandle(handle)) {
    handle._actor.kill(opts.noRestart !== false);
    return;
  }
  const rt = currentRuntime();
  // a request, not a one-way note: the head link re-sends unanswered requests after a broken connection
  rt.head
    .request("kill", { actorId: handle.actorId, noRestart: opts.noRestart !== false })
    .catch((e: Error) => logWarn(`kill(${handle.actorId}) did not reach the head: ${e.message}`));
}

/**
 * Advanced: runs `exportName` of `moduleUrl` inside the actor's process and returns its result.
 * It runs as soon as it arrives (not queued behind running calls, not counted in maxConcurrency),
 * so it can set up state (e.g. collective rings) while methods wait.
 */
export function invokeInActor<R = unknown>(
  handle: ActorHandle<unknown>,
  moduleUrl: string,
  exportName: string,
  args: unknown[] = [],
): ObjectRef<R> {
  if (isThreadActorHandle(handle)) throw new ThreadActorUnsupportedError("invokeInActor()");
  const base = handle as unknown as ActorHandleBase;
  return base._rt.actors.call(base._rec, [moduleUrl, exportName], args, FLAG_IMMEDIATE) as ObjectRef<R>;
}

// ---- tasks ------------------------------------------------------------------------------------

export interface TaskOptions {
  numCpus?: number;
  numGpus?: number;
  resources?: Record<string, number>;
  /** Re-runs after the executing worker died (not after exceptions). Default 3, like Ray. */
  maxRetries?: number;
  /** Run on a chosen node. */
  schedulingStrategy?: SchedulingStrategy;
  /** Generator tasks: items produced ahead of the consumer before the generator pauses (1 to 1024, default 16). */
  streamBackpressure?: number;
}

/** The keys of TaskOptions, in the order an error lists them. */
const TASK_KEYS = [
  "numCpus",
  "numGpus",
  "resources",
  "maxRetries",
  "schedulingStrategy",
  "streamBackpressure",
] as const satisfies readonly (keyof TaskOptions)[];

/**
 * Checks task options where they are given (`task()`, `.options()`, submitTask), as checkActorOptions
 * does actor options. Returns the resource request and stream window.
 */
export function checkTaskOptions(
  opts: unknown,
  where: string,
  definition = false,
): { resources: Record<string, number>; window: number } {
  const o = optionsObject(opts, where);
  refuseUnknownKeys(o, definition ? [...TASK_KEYS, ...DEFINITION_KEYS] : TASK_KEYS, where);
  if (definition) checkDefinition(o, where);
  const resources = resourcesOf(o, 1, where);
  // -1 (Ray's "retry forever") is not supported: a task retried without end would hide a crash loop
  checkInteger(where, "maxRetries", o.maxRetries, 0);
  affinityOf(o.schedulingStrategy as SchedulingStrategy | undefined, undefined, where);
  return { resources, window: streamWindowOf(o.streamBackpressure, where) };
}

/** Submits `exportName` of `moduleUrl` as a task. */
export function submitTask<R = unknown>(
  moduleUrl: string,
  exportName: string,
  args: unknown[],
  opts: TaskOptions = {},
): ObjectRef<R> {
  const { resources, window } = checkTaskOptions(opts, `task ${exportName}`);
  const rt = currentRuntime();
  const strategy = opts.schedulingStrategy;
  // executors are leased per resource shape and per target node
  const key = JSON.stringify([Object.entries(resources).sort(), strategy ?? null]);
  let pool = pools.get(key);
  if (!pool) {
    const perTask = resources.CPU ?? 1;
    const maxExecs = perTask > 0 ? Math.max(1, Math.min(16, Math.floor(clusterCpus / perTask))) : 4;
    pool = new TaskPool(rt, resources, maxExecs, (res) => {
      const h = createActor("", null, [], {
        numCpus: res.CPU,
        numGpus: res.GPU,
        // the custom ones: CPU and GPU go by numCpus and numGpus
        resources: Object.fromEntries(Object.entries(res).filter(([k]) => k !== "CPU" && k !== "GPU")),
        schedulingStrategy: strategy,
      });
      return (h as unknown as ActorHandleBase)._rec;
    });
    pools.set(key, pool);
  }
  return pool.submit([moduleUrl, exportName], args, opts.maxRetries ?? 3, window) as ObjectRef<R>;
}

export interface CancelOptions {
  /** Kill the worker process running the task (tasks only; an actor call throws TypeError). */
  force?: boolean;
}

/**
 * Cancels the call or task `ref` came from (Ray's `ray.cancel`), in the process that made it. Its ref,
 * and its stream for a generator, reject with TaskCancelledError at once. A call still queued (here
 * or at the worker) never runs. A running one has its AbortSignal aborted (`getCallSignal()`): an
 * async method or a generator that awaits can stop; a generator is returned at its next step (its
 * finally blocks run); a synchronous method cannot be interrupted and its result is discarded.
 * `force: true` kills a task's worker process (its other queued tasks are retried elsewhere, counting
 * against their maxRetries). A ref that has finished, or that no call made, is left as it is.
 */
export function cancel(ref: ObjectRef, opts: CancelOptions = {}): void {
  if (!(ref instanceof ObjectRef))
    throw new TypeError(`cancel(): expected the ObjectRef of a call or task, got ${String(ref)}`);
  const rt = currentRuntime();
  if (ref.ownerId !== rt.clientId)
    throw new TypeError(`cancel(${ref}): only the process that made the call can cancel it`);
  rt.cancel(ref.seq, opts.force === true);
}

// ---- objects ----------------------------------------------------------------------------------

/** Stores a value in this process's object store (typed arrays are copied once) and returns its ref. */
export function put<T>(value: T): ObjectRef<T> {
  return currentRuntime().put(value);
}

export interface GetOptions {
  /** Give up after this long with GetTimeoutError; 0 = only what is ready now; omitted = no limit. */
  timeoutMs?: number;
}

/** The value of a ref, or of each ref in an array. */
export function get<T>(ref: ObjectRef<T> | PromiseLike<T>, opts?: GetOptions): Promise<T>;
export function get<T extends readonly unknown[]>(
  refs: T,
  opts?: GetOptions,
): Promise<{ [K in keyof T]: Awaited<T[K]> }>;
export function get(refs: unknown, opts?: GetOptions): Promise<unknown> {
  // checked only when given: get() is the hottest call of all
  const ms =
    opts === undefined
      ? undefined
      : checkTimeoutMs(
          "get",
          checkedOptions(opts, ["timeoutMs"], "get()").timeoutMs,
          "0 = only if ready now",
        );
  const p = Array.isArray(refs) ? Promise.all(refs.map((r) => resolveOne(r))) : resolveOne(refs);
  if (ms === undefined || ms === Number.POSITIVE_INFINITY) return p;
  // a timer of 0 fires after the microtasks that deliver values already here: 0 means "if ready now"
  const why = ms === 0 ? "the value is not ready (timeoutMs: 0)" : `get() did not finish within ${ms} ms`;
  return withTimeout(p, ms, why);
}

function resolveOne(r: any): Promise<unknown> {
  if (r instanceof ObjectRef) return currentRuntime().getOne(r);
  return Promise.resolve(r);
}

function withTimeout<T>(p: Promise<T>, ms: number, message: string): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const cancel = after(ms, () => reject(new GetTimeoutError(message)));
    p.then(
      (v) => {
        cancel();
        resolve(v);
      },
      (e) => {
        cancel();
        reject(e);
      },
    );
  });
}

/** A timeout option checked at the call site: undefined (no limit) or a number >= 0 (Infinity: no limit). */
function checkTimeoutMs(fn: string, ms: unknown, zero: string): number | undefined {
  if (ms === undefined) return undefined;
  if (typeof ms !== "number" || !(ms >= 0))
    throw new RangeError(`${fn}(): timeoutMs must be a number >= 0 (${zero}), got ${String(ms)}`);
  return ms;
}

/** Node fires a timer longer than this at once; longer waits are made of several. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** Runs `f` after `ms` (any length; Infinity: never); returns the cancel function. */
function after(ms: number, f: () => void): () => void {
  if (ms === Number.POSITIVE_INFINITY) return () => {};
  const due = Date.now() + ms;
  let timer: NodeJS.Timeout;
  const arm = () => {
    const left = due - Date.now();
    timer = left > MAX_TIMER_MS ? setTimeout(arm, MAX_TIMER_MS) : setTimeout(f, Math.max(0, left));
  };
  arm();
  return () => clearTimeout(timer);
}

export interface WaitOptions {
  /** How many refs must be ready: a whole number from 1 to refs.length (default 1); others throw RangeError. */
  numReturns?: number;
  /** Give up waiting after this long and return what is ready (default: no limit); a number >= 0. */
  timeoutMs?: number;
}

/**
 * Waits until `numReturns` refs are ready (values or errors); keeps the input order in both lists.
 * Plain promises are accepted too.
 */
export function wait<R extends PromiseLike<unknown>>(
  refs: R[],
  opts: WaitOptions = {},
): Promise<{ ready: R[]; notReady: R[] }> {
  if (!Array.isArray(refs)) throw new TypeError(`wait(): refs must be an array of refs, got ${typeof refs}`);
  checkedOptions(opts, ["numReturns", "timeoutMs"], "wait()");
  const timeoutMs = checkTimeoutMs("wait", opts.timeoutMs, "0 = only what is ready now");
  const numReturns = opts.numReturns ?? 1;
  // Ray's rule: 1 <= num_returns <= len(refs); an empty list is answered at once
  if (
    refs.length > 0 &&
    (typeof numReturns !== "number" ||
      !Number.isInteger(numReturns) ||
      numReturns < 1 ||
      numReturns > refs.length)
  ) {
    throw new RangeError(
      `wait(): numReturns must be a whole number from 1 to the number of refs (${refs.length}), got ${String(numReturns)}`,
    );
  }
  const want = Math.min(numReturns, refs.length);
  const done = new Set<number>();
  return new Promise((resolve) => {
    let finished = false;
    let cancel = () => {};
    const finish = () => {
      if (finished) return;
      finished = true;
      cancel();
      const ready: R[] = [];
      const notReady: R[] = [];
      for (let i = 0; i < refs.length; i++) {
        (done.has(i) && ready.length < want ? ready : notReady).push(refs[i]!);
      }
      resolve({ ready, notReady });
    };
    if (want === 0) return finish();
    if (timeoutMs !== undefined) cancel = after(timeoutMs, finish);
    refs.forEach((r, i) => {
      const mark = () => {
        done.add(i);
        if (done.size >= want) finish();
      };
      resolveOne(r).then(mark, mark);
    });
  });
}

/** Counts of this process's object store: objects held now and freed so far. */
export function objectStoreStats(): { held: number; freed: number } {
  const rt = currentRuntime();
  return { held: rt.store.entries.size, freed: rt.store.freed };
}

/** Drops owned objects from the store at once (later gets reject with ObjectLostError). */
export function free(refs: ObjectRef | ObjectRef[]): void {
  const rt = currentRuntime();
  for (const r of Array.isArray(refs) ? refs : [refs]) {
    if (r.ownerId === rt.clientId) rt.store.remove(r.seq);
  }
}

// ---- placement groups -------------------------------------------------------------------------

export interface PlacementGroupOptions {
  strategy?: PlacementStrategy;
  name?: string;
}

/** A placement group as the head reports it (`ready()` resolves to it once every bundle is placed). */
export type PlacementGroupInfo = PlacementGroupStatus;

export class PlacementGroup {
  private created: Promise<unknown>;
  constructor(
    readonly id: string,
    readonly bundles: Record<string, number>[],
    readonly strategy: PlacementStrategy,
    readonly name?: string,
  ) {
    const rt = currentRuntime();
    this.created = rt.head.request("createPg", { pgId: id, bundles, strategy, name, clientId: rt.clientId });
    this.created.catch(() => {});
  }

  get bundleCount(): number {
    return this.bundles.length;
  }

  /**
   * Resolves when every bundle is reserved; rejects at once if the group can never be placed. A group
   * that could be placed but finds the resources taken waits, as in Ray, and says so: a warning every
   * TORL_PENDING_WARN_MS (default 30 s) names the group and what the cluster has free.
   */
  async ready(): Promise<PlacementGroupInfo> {
    await this.created;
    const warnEveryMs = pendingWarnMs(); // a bad setting is refused before anything waits
    const placed = currentRuntime().head.request("waitPg", { pgId: this.id });
    const what = `placement group ${this.name ? `"${this.name}" ` : ""}(${this.id}: ${this.strategy}, bundles ${JSON.stringify(this.bundles)})`;
    return warnWhilePending(placed, what, warnEveryMs);
  }
}

/** How often a wait for resources that are taken says so (TORL_PENDING_WARN_MS, default 30 s). */
function pendingWarnMs(): number {
  const raw = process.env.TORL_PENDING_WARN_MS;
  if (raw === undefined || raw === "") return 30_000;
  const ms = Number(raw);
  if (!Number.isFinite(ms) || ms <= 0)
    throw new RangeError(`TORL_PENDING_WARN_MS must be a positive number of milliseconds, got "${raw}"`);
  return ms;
}

/** Awaits `pending`, warning every `everyMs` that `what` still waits, with the resources free now. */
async function warnWhilePending<T>(pending: Promise<T>, what: string, everyMs: number): Promise<T> {
  const t0 = Date.now();
  let settled = false;
  const timer = setInterval(() => {
    availableResources()
      .then((free) =>
        // an answer that comes after the wait ended says nothing any more
        settled
          ? undefined
          : logWarn(
              `${what} has waited ${((Date.now() - t0) / 1000).toFixed(1)} s for resources; free now: ${JSON.stringify(free)}. ` +
                "It is placed when actors or placement groups holding them end (kill them; removePlacementGroup; " +
                "a WorkerGroup's ResourcePool.release() after its shutdown()) or a node with them joins",
            ),
      )
      .catch(() => {});
  }, everyMs);
  timer.unref();
  try {
    return await pending;
  } finally {
    settled = true;
    clearInterval(timer);
  }
}

/** Reserves bundles of resources across nodes (Ray's placement_group). */
export function placementGroup(
  bundles: Record<string, number>[],
  opts: PlacementGroupOptions = {},
): PlacementGroup {
  if (!Array.isArray(bundles) || bundles.length === 0)
    throw new ResourceRequestError("placementGroup(): bundles must be a non-empty array of resource amounts");
  const normalized = bundles.map((b, i) => {
    validateRequest(b, `placement group bundle ${i}`);
    return normalizeBundle(b);
  });
  return new PlacementGroup(`pg-${randomId(5)}`, normalized, opts.strategy ?? "PACK", opts.name);
}

function normalizeBundle(b: Record<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(b)) {
    const key = k === "numCpus" || k === "cpu" ? "CPU" : k === "numGpus" || k === "gpu" ? "GPU" : k;
    out[key] = v;
  }
  return out;
}

export async function removePlacementGroup(pg: PlacementGroup | string): Promise<void> {
  await currentRuntime().head.request("removePg", { pgId: typeof pg === "string" ? pg : pg.id });
}

// ---- introspection ----------------------------------------------------------------------------

/** Facts about this process: actor id, node, GPU ids (inside an actor), client id. */
export function getRuntimeContext(): RuntimeContext {
  return currentRuntime().context;
}

export async function clusterResources(): Promise<Record<string, number>> {
  return (await currentRuntime().head.request("clusterResources", {})).total;
}

export async function availableResources(): Promise<Record<string, number>> {
  return (await currentRuntime().head.request("clusterResources", {})).available;
}

/** The head's view: nodes, actors, placement groups. */
export async function clusterStatus(): Promise<ClusterStatus> {
  return currentRuntime().head.request("status", {});
}

/** Default and largest tail of each log file `workerLogs` returns. */
export const DEFAULT_LOG_TAIL_BYTES = 64 << 10;
export const MAX_LOG_TAIL_BYTES = 8 << 20;

/**
 * What workers printed, read from the log files on the node that ran them (any machine of the
 * cluster can ask): `target` is an actor id or name (its files) or a node id (all its workers').
 */
export async function workerLogs(target: string, opts: { tailBytes?: number } = {}): Promise<LogsRead> {
  const tailBytes = opts.tailBytes ?? DEFAULT_LOG_TAIL_BYTES;
  if (typeof target !== "string" || target === "")
    throw new TypeError("workerLogs(target): an actor id or name, or a node id");
  if (!Number.isInteger(tailBytes) || tailBytes < 1 || tailBytes > MAX_LOG_TAIL_BYTES)
    throw new RangeError(
      `workerLogs({ tailBytes }) must be an integer from 1 to ${MAX_LOG_TAIL_BYTES}, got ${tailBytes}`,
    );
  return currentRuntime().head.request("readLogs", { target, tailBytes }, 15_000);
}
