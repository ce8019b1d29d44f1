/**
 * veRL's custom_reward_function: your own scoring function, loaded from a JS/TS module by path and
 * export name, used in place of the built-in scorers for every row. Its signature is veRL's:
 *
 *   export function compute_score(data_source, solution_str, ground_truth, extra_info)
 *     -> number | { score: number, acc?: boolean | number, pred?: string, ... }   (or a Promise of one)
 *
 * The row counts as correct (reward/acc, val/acc) when the result says so (`acc`), else when the score is
 * above 0; `pred` is the extracted answer when given.
 */
import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { InputError } from "@torl-ts/core";
import type { RewardScorer } from "./registry.js";
import type { MathScoreResult } from "./score.js";

/** The reward function's result: a score, or veRL's dict with a score and extra fields. */
export type CustomRewardResult =
  | number
  | ({ score: number; acc?: boolean | number; pred?: string | null } & {
      [extra: string]: unknown;
    });

export type CustomRewardFunction = (
  dataSource: string,
  solutionStr: string,
  groundTruth: string,
  extraInfo: unknown,
) => CustomRewardResult | Promise<CustomRewardResult>;

/** Where the function is: custom_reward_function.path and .name. */
export interface CustomRewardFunctionSpec {
  path: string;
  name: string;
}

/** The custom reward function cannot be used: names the key, the module and what is wrong. */
export class CustomRewardFunctionError extends InputError {
  override name = "CustomRewardFunctionError";
  constructor(
    readonly key: "custom_reward_function.path" | "custom_reward_function.name",
    message: string,
  ) {
    super(`${key}: ${message}`);
  }
}

/**
 * A module path (relative to the working directory) or URL as an import specifier: a URL that means
 * the same module in any process, whatever its working directory.
 */
export function customRewardModuleUrl(path: string): string {
  return /^[a-z][a-z0-9+.-]*:/i.test(path) && !/^[a-z]:[\\/]/i.test(path)
    ? path
    : pathToFileURL(resolve(path)).href;
}

/** Whether the module file exists (a non-file URL is taken on trust until it is imported). */
export function customRewardModuleExists(path: string): boolean {
  const url = customRewardModuleUrl(path);
  return !url.startsWith("file:") || existsSync(new URL(url));
}

/** Imports the module and returns the export; a missing file, failed import or missing export is refused. */
export async function loadCustomRewardFunction(
  spec: CustomRewardFunctionSpec,
): Promise<CustomRewardFunction> {
  if (!customRewardModuleExists(spec.path))
    throw new CustomRewardFunctionError("custom_reward_function.path", `${spec.path} does not exist`);
  let mod: Record<string, unknown>;
  try {
    mod = (await import(customRewardModuleUrl(spec.path))) as Record<string, unknown>;
  } catch (e) {
    throw new CustomRewardFunctionError(
      "custom_reward_function.path",
      `cannot import ${spec.path}: ${(e as Error).message}`,
    );
  }
  const fn = mod[spec.name];
  if (typeof fn !== "function") {
    const exported = Object.keys(mod).filter((k) => typeof mod[k] === "function");
    throw new CustomRewardFunctionError(
      "custom_reward_function.name",
      `${spec.path} has no function export "${spec.name}"` +
        (exported.length ? ` (its functions: ${exported.join(", ")})` : " (it exports no function)"),
    );
  }
  return fn as CustomRewardFunction;
}

/** The function as a scorer of the reward manager; a result without a finite score is an error. */
export function customRewardScorer(fn: CustomRewardFunction, spec: CustomRewardFunctionSpec): RewardScorer {
  return async (input) => {
    const r = await fn(input.dataSource, input.solution, input.groundTruth, input.extraInfo ?? null);
    const score = typeof r === "number" ? r : r?.score;
    if (typeof score !== "number" || !Number.isFinite(score)) {
      throw new CustomRewardFunctionError(
        "custom_reward_function.name",
        `${spec.name} in ${spec.path} returned ${JSON.stringify(r)}; expected a number or {score: number, ...} (data source ${JSON.stringify(input.dataSource)})`,
      );
    }
    const out: MathScoreResult = {
      score,
      correct: typeof r === "object" && r.acc !== undefined ? Boolean(r.acc) : score > 0,
      extracted: typeof r === "object" && typeof r.pred === "string" ? r.pred : null,
    };
    return out;
  };
}
