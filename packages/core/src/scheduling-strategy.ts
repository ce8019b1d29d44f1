/** Scheduling strategies an actor or task may ask for, beside resources and placement groups. */
import type { NodeAffinity } from "./runtime/protocol.js";

/**
 * Ray's NodeAffinitySchedulingStrategy: run on the node `nodeId` (ids are in `torl status --json`
 * and `getRuntimeContext().nodeId`). Hard (`soft` false, the default): only there; if that node is
 * not alive or can never provide the resources, creation fails at once with InfeasibleResourceError,
 * and an actor whose node dies cannot restart elsewhere. Soft: there when that node is alive and
 * could ever fit the request, anywhere else otherwise. Either way a node that is merely busy is waited for.
 */
export class NodeAffinitySchedulingStrategy {
  constructor(
    readonly nodeId: string,
    readonly soft = false,
  ) {
    if (typeof nodeId !== "string" || nodeId === "") {
      throw new TypeError(
        `NodeAffinitySchedulingStrategy: nodeId must be a node id string, got ${String(nodeId)}`,
      );
    }
  }
}

export type SchedulingStrategy = NodeAffinitySchedulingStrategy;

/** The strategy as the head receives it; refuses combinations that cannot both hold. */
export function affinityOf(
  strategy: SchedulingStrategy | undefined,
  placementGroup: unknown,
  who: string,
): NodeAffinity | undefined {
  if (strategy === undefined) return undefined;
  if (!(strategy instanceof NodeAffinitySchedulingStrategy)) {
    throw new TypeError(`${who}: schedulingStrategy must be a NodeAffinitySchedulingStrategy`);
  }
  if (placementGroup !== undefined) {
    throw new TypeError(
      `${who}: schedulingStrategy (node affinity) and placementGroup cannot be combined; a placement group already chooses the node`,
    );
  }
  return { nodeId: strategy.nodeId, soft: strategy.soft };
}
