/**
 * DAPO's dynamic sampling (algorithm.filter_groups): a group whose responses all got the same metric
 * value (all right or all wrong) has zero advantage under GRPO and teaches nothing, so it is dropped and
 * more prompts are generated until the batch holds data.train_batch_size groups that do teach. A group
 * of a single response is kept (there is nothing to compare it with).
 */

/** The per-response value that decides whether a group is informative (veRL's filter_groups.metric). */
export type FilterGroupsMetric = "acc" | "score";
export const FILTER_GROUPS_METRICS: readonly FilterGroupsMetric[] = ["acc", "score"];

/** max_num_gen_batches generation rounds did not fill the batch with informative groups. */
export class DynamicSamplingError extends Error {
  override name = "DynamicSamplingError";
  constructor(
    readonly facts: { numGenBatches: number; keptPrompts: number; trainBatchSize: number; metric: string },
  ) {
    super(
      `dynamic sampling: ${facts.numGenBatches} generation batches gave ${facts.keptPrompts} of ${facts.trainBatchSize} prompts whose responses differ in ${facts.metric}; ` +
        "raise algorithm.filter_groups.max_num_gen_batches (0 = no limit), use easier/harder data, or turn algorithm.filter_groups.enable off",
    );
  }
}

export interface GroupFilter {
  /** Row indices of the kept groups, in row order. */
  rows: number[];
  /** Group ids kept, in first-seen order. */
  keptGroups: (string | number)[];
  droppedGroups: number;
}

/** Keeps the rows of every group whose values are not all equal (and every group of one row). */
export function filterInformativeGroups(
  groupIds: readonly (string | number)[],
  values: readonly number[],
): GroupFilter {
  if (groupIds.length !== values.length)
    throw new RangeError(`filterInformativeGroups: ${groupIds.length} group ids for ${values.length} values`);
  const groups = new Map<string | number, number[]>();
  groupIds.forEach((id, i) => {
    const g = groups.get(id);
    if (g) g.push(i);
    else groups.set(id, [i]);
  });
  const rows: number[] = [];
  const keptGroups: (string | number)[] = [];
  let droppedGroups = 0;
  for (const [id, members] of groups) {
    const first = values[members[0]!]!;
    const informative = members.length === 1 || members.some((i) => values[i]! !== first);
    if (informative) {
      keptGroups.push(id);
      rows.push(...members);
    } else droppedGroups++;
  }
  rows.sort((a, b) => a - b);
  return { rows, keptGroups, droppedGroups };
}

/** A response's filter metric as a number: acc (true/false or 1/0) or the score. */
export function filterMetricValues(
  metric: FilterGroupsMetric,
  acc: readonly unknown[],
  score: readonly number[],
) {
  return metric === "acc" ? acc.map((a) => (a === true || Number(a) > 0 ? 1 : 0)) : [...score];
}
