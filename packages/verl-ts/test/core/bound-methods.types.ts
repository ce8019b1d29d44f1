/**
 * Type-level checks of worker-group bound methods, run by `pnpm typecheck` (tsc), not by ava: each
 * registered method keeps its parameter and result types with its dispatch mode's effect, and a
 * mistake (an unregistered method, a wrong argument, a registration naming no method) does not compile.
 * If a bound method lost its types (became `(...args: any[]) => Promise<any>`), the equality checks
 * below fail and the `@ts-expect-error` lines become unused errors.
 */
import type { DataProto } from "../../src/protocol/index.js";
import {
  type BoundGroup,
  Dispatch,
  type Registrations,
  Worker,
  type WorkerGroup,
} from "../../src/single-controller/index.js";
import type { ActorRolloutRefWorker } from "../../src/workers/actor-rollout-ref.js";
import type { CriticWorker } from "../../src/workers/critic.js";
import type { DoublerWorker, ShouterWorker, ToyActorRole, ToyRolloutRole } from "../fixtures/core/workers.js";

type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
function expectType<_ extends true>(): void {}

declare const doublers: BoundGroup<typeof DoublerWorker>;
declare const shouters: BoundGroup<typeof ShouterWorker>;
declare const actor: BoundGroup<typeof ActorRolloutRefWorker>;
declare const critic: BoundGroup<typeof CriticWorker>;
declare const colocated: WorkerGroup<{ actor: typeof ToyActorRole; rollout: typeof ToyRolloutRole }>;

// DP_COMPUTE_PROTO: the same arguments and result.
expectType<Equal<typeof doublers.double, (batch: DataProto) => Promise<DataProto>>>();
expectType<Equal<typeof actor.generateSequences, (prompts: DataProto) => Promise<DataProto>>>();
expectType<Equal<typeof critic.computeValues, (data: DataProto) => Promise<DataProto>>>();
// ONE_TO_ALL and DP_COMPUTE_METRIC: one (awaited) result per rank.
expectType<Equal<typeof doublers.rowCount, (batch: DataProto) => Promise<number[]>>>();
expectType<Equal<typeof actor.updateActor, (data: DataProto) => Promise<Record<string, number>[]>>>();
expectType<Equal<typeof doublers.allReduceRank, () => Promise<number[][]>>>();
expectType<Equal<ReturnType<typeof doublers.describe>, Promise<ReturnType<DoublerWorker["describe"]>[]>>>();
// a registration by name, and one inherited from the base class
expectType<Equal<typeof shouters.pid, () => Promise<number[]>>>();
expectType<
  Equal<typeof critic.saveCheckpoint, (dir: string) => Promise<{ rank: number; bytes: number }[]>>
>();
// ALL_TO_ALL: each argument as a list with one entry per rank.
expectType<Equal<typeof doublers.addRank, (v: number[]) => Promise<number[]>>>();
// RANK_ZERO, or execute mode rank_zero: rank 0's result.
expectType<Equal<typeof doublers.onlyRankZero, (v: string) => Promise<string>>>();
expectType<Equal<typeof doublers.saveCheckpoint, (path: string) => Promise<string>>>();
// ONE_TO_ALL: every rank's result (every rank takes part in gathering the parameters)
expectType<Equal<typeof actor.gatheredParameters, () => Promise<Float32Array[]>>>();
// a custom mode's collect decides the result: nothing is promised
expectType<Equal<typeof shouters.shout, (...args: unknown[]) => Promise<unknown>>>();
// the roles of a colocated group are bound groups of their own class
expectType<
  Equal<
    ReturnType<typeof colocated.spawnRoles>["rollout"]["generateSequences"],
    (prompts: DataProto) => Promise<DataProto>
  >
>();

export async function mistakesDoNotCompile(batch: DataProto): Promise<void> {
  // @ts-expect-error a method that is not registered is not bound
  await doublers.notRegistered();
  // @ts-expect-error DP_COMPUTE_PROTO takes the DataProto, not a string
  await doublers.double("rows");
  // @ts-expect-error ALL_TO_ALL takes a list per rank, not one value
  await doublers.addRank(1);
  // @ts-expect-error the result of a ONE_TO_ALL method is a list, not one value
  const one: number = await doublers.rowCount(batch);
  void one;
}

export class MisnamedWorker extends Worker {
  static readonly registered = {
    run: Dispatch.ONE_TO_ALL,
    // @ts-expect-error a registration must name a method of the class
    rnu: Dispatch.ONE_TO_ALL,
  } satisfies Registrations<MisnamedWorker>;
  run(): number {
    return 1;
  }
}
