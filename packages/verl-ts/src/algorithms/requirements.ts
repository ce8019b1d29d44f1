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

const REQUIREMENT_KEYS = ["minGroupSize", "critic", "greedyBaseline"] as const;

/**
 * `requires` as given to a registration, checked: an object (or undefined) of only the known keys, with
 * minGroupSize an integer >= 1 and critic, greedyBaseline booleans. A typo or a wrong type would be
 * ignored by the config checker and the trainer, so it is refused here; `where` names the registration.
 */
export function checkRequirements(requires: unknown, where: string): AlgorithmRequirements {
  if (requires === undefined) return {};
  if (requires === null || typeof requires !== "object" || Array.isArray(requires))
    throw new TypeError(
      `${where}: requires must be an object {minGroupSize?, critic?, greedyBaseline?}, got ${JSON.stringify(requires) ?? String(requires)}`,
    );
  const r = requires as Record<string, unknown>;
  for (const key of Object.keys(r)) {
    if ((REQUIREMENT_KEYS as readonly string[]).includes(key)) continue;
    // min_group_size, mingroupsize: the same key in another spelling
    const flat = key.replace(/[_-]/g, "").toLowerCase();
    const near = REQUIREMENT_KEYS.find((k) => k.toLowerCase() === flat);
    throw new TypeError(
      `${where}: unknown requirement "${key}"${near ? ` (did you mean "${near}"?)` : ""}; the requirements are: ${REQUIREMENT_KEYS.join(", ")}`,
    );
  }
  if (r.minGroupSize !== undefined && !(Number.isInteger(r.minGroupSize) && (r.minGroupSize as number) >= 1))
    throw new TypeError(
      `${where}: requires.minGroupSize must be an integer >= 1, got ${JSON.stringify(r.minGroupSize) ?? String(r.minGroupSize)}`,
    );
  for (const key of ["critic", "greedyBaseline"] as const)
    if (r[key] !== undefined && typeof r[key] !== "boolean")
      throw new TypeError(
        `${where}: requires.${key} must be true or false, got ${JSON.stringify(r[key]) ?? String(r[key])}`,
      );
  return { ...(r as AlgorithmRequirements) };
}

/** A registry name: a non-empty string, else TypeError naming the registration (`where`). */
export function checkRegistryName(name: unknown, where: string): string {
  if (typeof name !== "string" || name === "")
    throw new TypeError(
      `${where}: the name must be a non-empty string, got ${typeof name === "string" ? '""' : (JSON.stringify(name) ?? String(name))}`,
    );
  return name;
}

/** A registered function: a function, else TypeError naming the registration and the name. */
export function checkRegistryFunction(fn: unknown, where: string, what: string): void {
  if (typeof fn !== "function")
    throw new TypeError(
      `${where}: ${what} must be a function, got ${typeof fn === "string" ? JSON.stringify(fn) : fn === null ? "null" : typeof fn}`,
    );
}
