/**
 * What a worker knows about its place in its group. Set by the WorkerGroup through the worker process's
 * environment (veRL's names): RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, WG_PREFIX,
 * TORL_COLLECTIVE_GROUP (the rendezvous: the collective group all ranks of the group belong to) and
 * CUDA_VISIBLE_DEVICES (set by the runtime to exactly the GPUs of the worker's bundle).
 */
export interface WorkerEnv {
  rank: number;
  worldSize: number;
  localRank: number;
  localWorldSize: number;
  nodeRank: number;
  /** Name of the worker group (WG_PREFIX). */
  groupName: string;
  /** Collective group joined by all ranks (usable once WorkerGroup.create resolved), if any. */
  collectiveGroup: string | undefined;
  /** GPU ids this process sees, as the runtime set them. */
  cudaVisibleDevices: string | undefined;
}

function intEnv(env: NodeJS.ProcessEnv, key: string, fallback: number): number {
  const v = env[key];
  if (v === undefined || v === "") return fallback;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0)
    throw new RangeError(`environment ${key}=${JSON.stringify(v)} is not a rank/size`);
  return n;
}

/** Reads the worker environment (a process outside any group is rank 0 of 1). */
export function readWorkerEnv(env: NodeJS.ProcessEnv = process.env): WorkerEnv {
  const worldSize = intEnv(env, "WORLD_SIZE", 1);
  return {
    rank: intEnv(env, "RANK", 0),
    worldSize,
    localRank: intEnv(env, "LOCAL_RANK", 0),
    localWorldSize: intEnv(env, "LOCAL_WORLD_SIZE", worldSize),
    nodeRank: intEnv(env, "NODE_RANK", 0),
    groupName: env.WG_PREFIX ?? "",
    collectiveGroup: env.TORL_COLLECTIVE_GROUP || undefined,
    cudaVisibleDevices: env.CUDA_VISIBLE_DEVICES,
  };
}

/**
 * Base class of worker roles (veRL's Worker): subclasses name their methods in a static `registered` and a
 * WorkerGroup spawns one per bundle. `rank`, `worldSize` and `env` describe the worker's place.
 */
export class Worker {
  readonly env: WorkerEnv;
  constructor() {
    this.env = readWorkerEnv();
  }
  get rank(): number {
    return this.env.rank;
  }
  get worldSize(): number {
    return this.env.worldSize;
  }
}
