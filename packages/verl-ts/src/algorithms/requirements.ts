/**
 * What an advantage estimator or a policy loss needs of the run, declared where it is registered.
 * The config checker refuses a run that cannot give it; the trainer reads it to decide what to start
 * (a critic) and what to generate (a greedy baseline), so no estimator or loss is tested by name.
 */
export interface AlgorithmRequirements {
  /** At least this many responses per prompt (actor_rollout_ref.rollout.n): it compares a prompt's responses. */
  minGroupSize?: number;
  /** A critic (value model) trained alongside the actor, whose values it receives. */
  critic?: boolean;
  /** The greedy response to each prompt generated and scored, its score the row's baseline (rewardBaselines). */
  greedyBaseline?: boolean;
}

/** The requirements of several entries together: the largest group size, and any flag one sets. */
export function mergeRequirements(...all: readonly AlgorithmRequirements[]): Required<AlgorithmRequirements> {
  return {
    minGroupSize: Math.max(1, ...all.map((r) => r.minGroupSize ?? 1)),
    critic: all.some((r) => r.critic === true),
    greedyBaseline: all.some((r) => r.greedyBaseline === true),
  };
}
