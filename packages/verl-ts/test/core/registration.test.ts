import test from "ava";
import {
  Dispatch,
  DispatchError,
  Execute,
  type Registrations,
  registeredMethods,
  Worker,
} from "../../src/single-controller/index.js";
import { ActorRolloutRefWorker } from "../../src/workers/actor-rollout-ref.js";
import { CriticWorker } from "../../src/workers/critic.js";

test("a worker class's static registered gives each method its dispatch and execute mode", (t) => {
  class Base extends Worker {
    static readonly registered = { save: Dispatch.ONE_TO_ALL } satisfies Registrations<Base>;
    save(): number {
      return this.rank;
    }
  }
  class Role extends Base {
    static override readonly registered = {
      ...Base.registered,
      step: "DP_COMPUTE_PROTO",
      first: { dispatchMode: Dispatch.ONE_TO_ALL, executeMode: Execute.RANK_ZERO },
      defaulted: {},
    } satisfies Registrations<Role>;
    step(): void {}
    first(): void {}
    defaulted(): void {}
  }
  const regs = registeredMethods(Role);
  t.deepEqual(
    [...regs].map(([m, r]) => [m, r.dispatch.name, r.execute]),
    [
      ["save", "ONE_TO_ALL", "all"],
      ["step", "DP_COMPUTE_PROTO", "all"],
      ["first", "ONE_TO_ALL", "rank_zero"],
      ["defaulted", "ALL_TO_ALL", "all"],
    ],
  );
  t.deepEqual([...registeredMethods(Base).keys()], ["save"], "a base keeps its own registrations");
});

test("a registration that names no method or an unknown mode is refused by name", (t) => {
  class Typo extends Worker {
    static readonly registered: Record<string, unknown> = { saev: Dispatch.ONE_TO_ALL };
    save(): void {}
  }
  t.throws(() => registeredMethods(Typo), {
    instanceOf: DispatchError,
    message: 'Typo.registered names "saev", which is not a method of Typo',
  });
  class Unknown extends Worker {
    static readonly registered: Record<string, unknown> = { save: "DP_EVERYWHERE" };
    save(): void {}
  }
  t.throws(() => registeredMethods(Unknown), {
    instanceOf: DispatchError,
    message: /unknown dispatch mode "DP_EVERYWHERE"/,
  });
});

test("the trainer's workers register veRL's methods, those of the sharded base included", (t) => {
  const modes = (cls: Parameters<typeof registeredMethods>[0]) =>
    Object.fromEntries([...registeredMethods(cls)].map(([m, r]) => [m, r.dispatch.name]));
  t.deepEqual(modes(ActorRolloutRefWorker), {
    shardInfo: "ONE_TO_ALL",
    gatheredParameters: "ONE_TO_ALL",
    saveCheckpoint: "ONE_TO_ALL",
    loadCheckpoint: "ONE_TO_ALL",
    initModel: "ONE_TO_ALL",
    generateSequences: "DP_COMPUTE_PROTO",
    computeLogProb: "DP_COMPUTE_PROTO",
    computeRefLogProb: "DP_COMPUTE_PROTO",
    updateActor: "DP_COMPUTE_METRIC",
    memoryInfo: "ONE_TO_ALL",
    // the weight update of separate rollout workers (one_step_off, fully_async)
    sendWeights: "ONE_TO_ALL",
    receiveWeights: "ONE_TO_ALL",
  });
  t.deepEqual(Object.keys(modes(CriticWorker)), [
    "shardInfo",
    "gatheredParameters",
    "saveCheckpoint",
    "loadCheckpoint",
    "initModel",
    "computeValues",
    "updateCritic",
    "memoryInfo",
  ]);
});
