/**
 * The reward manager as an actor on the runtime: `RewardManagerActor.remote(options)` starts it in its
 * own worker process; `score(batch)` / `scoreDataProto(wire)` return ObjectRefs. Custom scorers reach
 * it through `options.scorerModules` (module URLs it imports; each registers its scorers on import).
 */
import { actor } from "@torl-ts/actors";
import { RewardManager } from "./manager.js";

export { RewardManager };

export const RewardManagerActor = actor(RewardManager, { module: import.meta.url, numCpus: 1 });
