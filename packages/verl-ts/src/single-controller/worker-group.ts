import {
  type ActorHandle,
  actor,
  createCollectiveGroup,
  destroyCollectiveGroup,
  get,
  kill,
  type ObjectRef,
} from "@torl-ts/actors";
import { fromWireValue, type HostedRoleSpec, toWireValue, WorkerHost } from "./host.js";
import {
  type BoundMethods,
  DispatchError,
  type ResolvedRegistration,
  registeredMethods,
  type WorkerClass,
} from "./registration.js";
import type { ResourcePool } from "./resource-pool.js";

/** A worker role: its class (for the registered methods), the module workers import it from, its args. */
export interface WorkerRole<C extends WorkerClass = WorkerClass> {
  cls: C;
  module: string;
  exportName: string;
  args: unknown[];
}

/**
 * Describes a worker role (veRL's RayClassWithInitArgs). `module` is the URL of the module exporting
 * the class (pass `import.meta.url` there); the export is looked up by the class name.
 */
export function workerRole<C extends WorkerClass>(
  cls: C,
  where: { module: string; exportName?: string },
  ...args: ConstructorParameters<C>
): WorkerRole<C> {
  if (!where?.module) throw new TypeError(`workerRole(${cls?.name}): pass { module: import.meta.url }`);
  return { cls, module: where.module, exportName: where.exportName ?? cls.name, args };
}

/** A group of worker class C with its registered methods bound (typed by the class's `registered`). */
export type BoundGroup<C extends WorkerClass> = WorkerGroup<C> & BoundMethods<C>;

/** The classes of colocated roles, by role name. */
export type RoleClasses<M extends Record<string, WorkerRole>> = { [R in keyof M]: M[R]["cls"] };

export interface WorkerGroupOptions {
  /** Name of the group (WG_PREFIX in the workers, and the collective group's name). */
  name?: string;
  /** Make all ranks a collective group (allReduce etc. inside the workers). Default false. */
  collective?: boolean;
  /**
   * With `collective`: whether the group's allGather, reduceScatter and publish may go through /dev/shm
   * where the ranks share a host (createCollectiveGroup's `sharedMemory`). Default true; false keeps
   * the ring, and the frozen shards (reference, LoRA base) are then gathered by allGather on every pass.
   */
  collectiveSharedMemory?: boolean;
  /** CPUs each worker reserves from its bundle. Default 1. */
  numCpusPerWorker?: number;
  /**
   * Extra environment for every worker process. Setting MALLOC_MMAP_THRESHOLD_,
   * MALLOC_TRIM_THRESHOLD_ or GLIBC_TUNABLES here (or in the driver's environment) replaces
   * KEEP_FREED_MEMORY_ENV. Workers on other nodes start from their node agent's environment, not the
   * driver's: to give them your own malloc settings, set them here.
   */
  env?: Record<string, string>;
  /** Calls that may run at once in a worker (async methods). Default 1. */
  maxConcurrency?: number;
  /**
   * Milliseconds to wait for every worker process to start (veRL's ray_wait_register_center_timeout);
   * past it the workers are killed and WorkerStartTimeoutError is thrown. Default: no limit.
   */
  readyTimeoutMs?: number;
}

/**
 * What every worker process gets unless the group's `env` or the driver's environment sets its own
 * malloc settings (an empty GLIBC_TUNABLES keeps glibc's defaults): glibc returns
 * each freed block past its mmap threshold (at most 32 MiB by default) to the kernel, so every phase of
 * a model worker wrote its gather, weight and gradient buffers into fresh pages, and on virtual machines
 * a first write to a page costs 30-80x a rewrite. With the thresholds raised, freed memory stays in the
 * process for the next phase; the resident set then stays at its high-water mark between phases. C
 * libraries other than glibc ignore these names.
 */
export const KEEP_FREED_MEMORY_ENV: Readonly<Record<string, string>> = Object.freeze({
  MALLOC_MMAP_THRESHOLD_: String(2 ** 32),
  MALLOC_TRIM_THRESHOLD_: String(2 ** 32),
});

function mallocEnv(env: Record<string, string> | undefined): Record<string, string> {
  const own = ["MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"];
  const set = (e: Record<string, string | undefined> | undefined) => own.some((k) => e?.[k] !== undefined);
  return set(env) || set(process.env) ? {} : KEEP_FREED_MEMORY_ENV;
}

/** The workers of a group did not all start in time. */
export class WorkerStartTimeoutError extends Error {
  override name = "WorkerStartTimeoutError";
  constructor(
    readonly group: string,
    readonly timeoutMs: number,
  ) {
    super(
      `the ${group} workers did not all start within ${timeoutMs / 1000} s: check that the cluster has the ` +
        "resources they ask for, or raise trainer.ray_wait_register_center_timeout",
    );
  }
}

let groupCounter = 0;

interface BoundMethod {
  reg: ResolvedRegistration;
  role: string;
  method: string;
}

/**
 * veRL's RayWorkerGroup: one actor per bundle of a ResourcePool, each hosting one role or several
 * colocated roles. Registered methods are bound on the group: `await wg.generateSequences(batch)`
 * dispatches (per the method's dispatch mode), runs on the ranks (execute mode) and collects.
 */
export class WorkerGroup<T = unknown> {
  // T: the worker class of a one-role group, or the role classes by name of a colocated one
  private constructor(
    readonly name: string,
    readonly handles: ActorHandle<WorkerHost>[],
    readonly role: string,
    private readonly methods: Map<string, BoundMethod>,
    readonly collectiveGroup: string | undefined,
    private readonly roles: Map<string, Map<string, ResolvedRegistration>>,
  ) {
    for (const [m] of methods) {
      if (m in this) throw new DispatchError(`registered method "${m}" clashes with a WorkerGroup member`);
      Object.defineProperty(this, m, {
        value: (...args: unknown[]) => this.call(m, ...args),
        enumerable: true,
      });
    }
  }

  /** Spawns a group of one role over `pool`. */
  static async create<C extends WorkerClass>(
    pool: ResourcePool,
    role: WorkerRole<C>,
    opts: WorkerGroupOptions = {},
  ): Promise<BoundGroup<C>> {
    const wg = await WorkerGroup.spawnGroup(pool, { default: role }, opts);
    return wg.forRole("default") as BoundGroup<C>;
  }

  /**
   * Spawns a group whose every worker process hosts all `roles` (veRL's create_colocated_worker_cls):
   * e.g. {actor, rollout, ref} sharing one process and GPU per bundle. `spawnRoles()` then gives a
   * group per role over the same processes.
   */
  static async createColocated<M extends Record<string, WorkerRole>>(
    pool: ResourcePool,
    roles: M,
    opts: WorkerGroupOptions = {},
  ): Promise<WorkerGroup<RoleClasses<M>>> {
    return (await WorkerGroup.spawnGroup(pool, roles, opts)) as WorkerGroup<RoleClasses<M>>;
  }

  private static async spawnGroup(
    pool: ResourcePool,
    roles: Record<string, WorkerRole>,
    opts: WorkerGroupOptions,
  ): Promise<WorkerGroup<unknown>> {
    const name = opts.name ?? `wg${groupCounter++}-${Math.random().toString(36).slice(2, 7)}`;
    const specs: HostedRoleSpec[] = Object.entries(roles).map(([role, r]) => ({
      role,
      module: r.module,
      exportName: r.exportName,
      args: r.args.map(toWireValue),
    }));
    const bundles = await pool.bundles();
    const worldSize = bundles.length;
    const collectiveGroup = opts.collective ? `${name}-collective` : undefined;
    const Host = actor(WorkerHost, { module: HOST_MODULE });
    const handles = bundles.map((b, rank) =>
      Host.options({
        placementGroup: b.pg,
        bundleIndex: b.bundleIndex,
        numCpus: opts.numCpusPerWorker ?? 1,
        numGpus: pool.useGpu ? 1 / pool.maxColocateCount : 0,
        maxConcurrency: opts.maxConcurrency ?? 1,
        env: {
          ...mallocEnv(opts.env),
          ...(opts.env ?? {}),
          RANK: String(rank),
          WORLD_SIZE: String(worldSize),
          LOCAL_RANK: String(b.localRank),
          LOCAL_WORLD_SIZE: String(b.localWorldSize),
          NODE_RANK: String(b.nodeRank),
          WG_PREFIX: name,
          TORL_COLLECTIVE_GROUP: collectiveGroup ?? "",
        },
      }).remote(specs),
    );
    try {
      const ready = get(handles.map((h) => h.hostReady()));
      ready.catch(() => {}); // after a timeout the killed workers' failures are no news
      const limit = opts.readyTimeoutMs;
      if (limit !== undefined && Number.isFinite(limit)) {
        let timer: NodeJS.Timeout | undefined;
        const late = new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new WorkerStartTimeoutError(name, limit)), limit);
        });
        try {
          await Promise.race([ready, late]);
        } finally {
          clearTimeout(timer);
        }
      } else await ready;
      if (collectiveGroup)
        await createCollectiveGroup(handles, {
          name: collectiveGroup,
          ...(opts.collectiveSharedMemory !== undefined ? { sharedMemory: opts.collectiveSharedMemory } : {}),
        });
    } catch (e) {
      for (const h of handles) kill(h);
      throw e;
    }
    const roleMethods = new Map(Object.entries(roles).map(([role, r]) => [role, registeredMethods(r.cls)]));
    const all = new Map<string, BoundMethod>();
    for (const [role, methods] of roleMethods) {
      for (const [m, reg] of methods) all.set(`${role}_${m}`, { reg, role, method: m });
    }
    return new WorkerGroup(name, handles, "", all, collectiveGroup, roleMethods);
  }

  /** Per-role groups over the same worker processes (veRL's spawn of a colocated group). */
  spawnRoles(): { [R in keyof T]: T[R] extends WorkerClass ? BoundGroup<T[R]> : never } {
    const out: Record<string, unknown> = {};
    for (const role of this.roles.keys()) out[role] = this.forRole(role);
    return out as { [R in keyof T]: T[R] extends WorkerClass ? BoundGroup<T[R]> : never };
  }

  private forRole(role: string): WorkerGroup<unknown> {
    const regs = this.roles.get(role);
    if (!regs) throw new DispatchError(`no role "${role}" in group ${this.name}`);
    const methods = new Map([...regs].map(([m, reg]) => [m, { reg, role, method: m }]));
    return new WorkerGroup(this.name, this.handles, role, methods, this.collectiveGroup, this.roles);
  }

  get worldSize(): number {
    return this.handles.length;
  }

  /** Names of the bound methods. */
  methodNames(): string[] {
    return [...this.methods.keys()];
  }

  /** Calls registered method `method` on the group: dispatch, execute, collect. */
  async call(method: string, ...args: unknown[]): Promise<unknown> {
    const bound = this.methods.get(method);
    if (!bound) {
      throw new DispatchError(
        `"${method}" is not a registered method of group ${this.name} (has: ${this.methodNames().join(", ")})`,
      );
    }
    const { reg, role, method: name } = bound;
    const { perRank, context } = reg.dispatch.dispatch(this.worldSize, args, method);
    if (perRank.length !== this.worldSize) {
      throw new DispatchError(
        `${method}: dispatch ${reg.dispatch.name} made ${perRank.length} calls for ${this.worldSize} ranks`,
      );
    }
    if (reg.execute === "rank_zero" || reg.dispatch.name === "RANK_ZERO") {
      const out = await this.onRank(
        0,
        role,
        name,
        this.handles[0]!.executeRegistered(role, name, perRank[0]!.map(toWireValue)),
      );
      return fromWireValue(out);
    }
    const outputs = await Promise.all(
      this.handles.map((h, r) =>
        this.onRank(r, role, name, h.executeRegistered(role, name, perRank[r]!.map(toWireValue))),
      ),
    );
    return reg.dispatch.collect(outputs.map(fromWireValue), context, method);
  }

  /**
   * Awaits one rank's call; a failure keeps its class (RemoteError, ActorDiedError ...) and gains
   * `workerGroup`, `workerRank`, `workerRole` and `workerMethod`, with "group rank r role.method:" in front
   * of its message, so the driver can say which worker failed and why.
   */
  private async onRank(
    rank: number,
    role: string,
    method: string,
    ref: PromiseLike<unknown>,
  ): Promise<unknown> {
    try {
      return await ref;
    } catch (e) {
      if (e instanceof Error && !(e as { workerGroup?: string }).workerGroup) {
        Object.assign(e, {
          workerGroup: this.name,
          workerRank: rank,
          workerRole: role,
          workerMethod: method,
        });
        e.message = `${this.name} rank ${rank} ${role}.${method}: ${e.message}`;
      }
      throw e;
    }
  }

  /** Runs `method` of the role on every rank with the same arguments (no registration needed). */
  async executeAll(method: string, ...args: unknown[]): Promise<unknown[]> {
    const role = this.role || [...this.roles.keys()][0]!;
    const refs = this.handles.map((h) => h.executeRegistered(role, method, args.map(toWireValue)));
    return (await get(refs)).map(fromWireValue);
  }

  /**
   * Streams the items of the role's async generator method `method` on one rank (no registration, no
   * dispatch: the caller splits the data), as they are produced. The returned ref is what `cancel`
   * takes; a failure is named like `call`'s.
   */
  streamOnRank(
    rank: number,
    method: string,
    ...args: unknown[]
  ): { ref: ObjectRef<unknown>; items: AsyncIterable<unknown> } {
    const role = this.role || [...this.roles.keys()][0]!;
    const ref = this.handles[rank]!.streamRegistered(role, method, args.map(toWireValue));
    const named = (e: unknown) => this.onRank(rank, role, method, Promise.reject(e));
    return {
      ref,
      items: {
        async *[Symbol.asyncIterator]() {
          try {
            for await (const item of ref) yield fromWireValue(item);
          } catch (e) {
            await named(e);
          }
        },
      },
    };
  }

  /** Runs `method` of the role on rank 0 only. */
  async executeRankZero(method: string, ...args: unknown[]): Promise<unknown> {
    const role = this.role || [...this.roles.keys()][0]!;
    return fromWireValue(await this.handles[0]!.executeRegistered(role, method, args.map(toWireValue)));
  }

  /** Facts about each worker process: pid, roles, rank, CUDA_VISIBLE_DEVICES. */
  async workerInfo(): Promise<
    Array<{ pid: number; roles: string[]; rank: number; worldSize: number; cudaVisibleDevices?: string }>
  > {
    return get(this.handles.map((h) => h.hostReady()));
  }

  /** Kills the group's worker processes and removes its collective group, so the name can be reused. */
  async shutdown(): Promise<void> {
    for (const h of this.handles) kill(h);
    if (this.collectiveGroup) await destroyCollectiveGroup(this.collectiveGroup).catch(() => false);
  }
}

// The module worker processes import WorkerHost from (this package runs from its .ts sources under tsx).
const HOST_MODULE = new URL(import.meta.url.endsWith(".ts") ? "./host.ts" : "./host.js", import.meta.url)
  .href;
