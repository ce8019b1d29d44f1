/**
 * How a trainer (PPO, SFT) starts the runtime and the resource pool its workers run in, and ends them:
 * the same steps in the same order for every trainer.
 */
import { clusterResources, init, isInitialized, shutdown } from "@torl-ts/actors";
import { ResourcePool } from "../single-controller/resource-pool.js";

/** Starts the embedded runtime unless one is running; true when this call started it (and so owns it). */
export async function startRuntime(): Promise<boolean> {
  if (isInitialized()) return false;
  await init();
  return true;
}

/**
 * The pool of trainer.nnodes x trainer.n_gpus_per_node workers; on GPUs when `useGpu` says so, or
 * (undefined) when the cluster has a GPU for each of the `worldSize` workers.
 */
export async function trainerResourcePool(
  trainer: { nnodes: number; n_gpus_per_node: number },
  worldSize: number,
  useGpu: boolean | undefined,
  namePrefix: string,
): Promise<ResourcePool> {
  return new ResourcePool({
    processOnNodes: Array.from({ length: trainer.nnodes }, () => trainer.n_gpus_per_node),
    useGpu: useGpu ?? ((await clusterResources()).GPU ?? 0) >= worldSize,
    namePrefix,
  });
}

/**
 * Ends what a trainer started, in order: its workers, then the pool's reservation (shutdown keeps it, as
 * in Ray), then the runtime when the trainer started it (`runtime`).
 */
export async function endTrainerWorkers(parts: {
  group?: { shutdown(): Promise<unknown> };
  pool?: ResourcePool;
  runtime: boolean;
}): Promise<void> {
  if (parts.group) await parts.group.shutdown();
  if (parts.pool) await parts.pool.release();
  if (parts.runtime) await shutdown();
}
