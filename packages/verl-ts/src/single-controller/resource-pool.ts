import { type PlacementGroup, placementGroup, removePlacementGroup } from "@torl-ts/actors";

export interface ResourcePoolOptions {
  /** Worker processes per node, e.g. [n_gpus_per_node] * nnodes. */
  processOnNodes: number[];
  /** Bundles hold one GPU each (default true); false makes CPU-only bundles. */
  useGpu?: boolean;
  /** How many worker groups may share one bundle (each worker takes 1/maxColocateCount GPU). Default 1. */
  maxColocateCount?: number;
  /** Prefix of the placement group names. */
  namePrefix?: string;
}

/** One bundle of the pool: its placement group, index there, node rank and rank within the node. */
export interface PoolBundle {
  pg: PlacementGroup;
  bundleIndex: number;
  nodeRank: number;
  localRank: number;
  localWorldSize: number;
}

/**
 * veRL's RayResourcePool: one placement group per node (STRICT_PACK), each with one bundle
 * {CPU: maxColocateCount, GPU: 1} per worker process. Placement groups are created on first use.
 */
export class ResourcePool {
  readonly processOnNodes: number[];
  readonly useGpu: boolean;
  readonly maxColocateCount: number;
  readonly namePrefix: string;
  private pgs: PlacementGroup[] | undefined;

  constructor(opts: ResourcePoolOptions) {
    if (!opts.processOnNodes.length || opts.processOnNodes.some((n) => !Number.isInteger(n) || n <= 0)) {
      throw new RangeError(
        `processOnNodes must be positive integers, got [${opts.processOnNodes.join(", ")}]`,
      );
    }
    this.processOnNodes = [...opts.processOnNodes];
    this.useGpu = opts.useGpu ?? true;
    this.maxColocateCount = opts.maxColocateCount ?? 1;
    this.namePrefix = opts.namePrefix ?? `pool-${Math.random().toString(36).slice(2, 8)}`;
  }

  get worldSize(): number {
    return this.processOnNodes.reduce((a, b) => a + b, 0);
  }

  /** The placement groups (one per node), created and awaited on first call. */
  async placementGroups(): Promise<PlacementGroup[]> {
    if (!this.pgs) {
      const bundle: Record<string, number> = this.useGpu
        ? { CPU: this.maxColocateCount, GPU: 1 }
        : { CPU: this.maxColocateCount };
      this.pgs = this.processOnNodes.map((n, node) =>
        placementGroup(
          Array.from({ length: n }, () => ({ ...bundle })),
          { strategy: "STRICT_PACK", name: `${this.namePrefix}-node${node}` },
        ),
      );
      await Promise.all(this.pgs.map((pg) => pg.ready()));
    }
    return this.pgs;
  }

  /** Every bundle in rank order (node by node). */
  async bundles(): Promise<PoolBundle[]> {
    const pgs = await this.placementGroups();
    return pgs.flatMap((pg, nodeRank) =>
      Array.from({ length: this.processOnNodes[nodeRank]! }, (_, i) => ({
        pg,
        bundleIndex: i,
        nodeRank,
        localRank: i,
        localWorldSize: this.processOnNodes[nodeRank]!,
      })),
    );
  }

  /** Removes the placement groups (kill the workers first). */
  async release(): Promise<void> {
    const pgs = this.pgs ?? [];
    this.pgs = undefined;
    await Promise.all(pgs.map((pg) => removePlacementGroup(pg)));
  }
}
