import type * as tf from "@tensorflow/tfjs";
import { AlgorithmInputError } from "./masked.js";
import type { PolicyLossOptions } from "./policy-loss.js";
import {
  clipCovPolicyLossTf,
  gpgPolicyLossTf,
  gspoPolicyLossTf,
  klCovPolicyLossTf,
  vanillaPolicyLossTf,
} from "./policy-losses-tf.js";
import {
  type AlgorithmRequirements,
  checkRegistryFunction,
  checkRegistryName,
  checkRequirements,
} from "./requirements.js";
import { aggLossTf, type TensorLike } from "./tf-ops.js";

/** What a policy loss (actor.policy_loss.loss_mode) receives. Matrices are [batch, responseLength]. */
export interface PolicyLossInputTf {
  oldLogProb: TensorLike;
  /** The current policy's log-probs: the loss is differentiated with respect to these. */
  logProb: tf.Tensor;
  advantages: TensorLike;
  /** 1 for the tokens in the loss. Metrics are means over these tokens. */
  responseMask: TensorLike;
  /**
   * Reduces a per-token loss to the scalar that is minimised. Standalone it is aggLossTf over the mask
   * with `options.lossAggMode`; the trainer passes one that applies the global token weights of the
   * whole mini-batch, so a loss never aggregates by itself.
   */
  aggregate: (perToken: tf.Tensor) => tf.Scalar;
  options: PolicyLossOptions;
}

export interface PolicyLossOutputTf {
  pgLoss: tf.Scalar;
  /** Token means over the mask, named without the "actor/" prefix (the trainer adds it). No gradient. */
  metrics: Record<string, tf.Scalar>;
}

/** A differentiable policy loss. It must return exactly the metrics named at its registration. */
export type PolicyLossFnTf = (input: PolicyLossInputTf) => PolicyLossOutputTf;

export interface PolicyLossDefinition {
  fn: PolicyLossFnTf;
  /** The metric names the loss reports, in order ("pg_clipfrac" becomes actor/pg_clipfrac). */
  metrics: readonly string[];
  /** What the loss needs of the run (responses per prompt, a critic, a greedy baseline). */
  requires: AlgorithmRequirements;
}

/** The input a standalone call gets: aggregation over the mask with options.lossAggMode (token-mean). */
export function policyLossInput(
  oldLogProb: TensorLike,
  logProb: tf.Tensor,
  advantages: TensorLike,
  responseMask: TensorLike,
  options: PolicyLossOptions = {},
): PolicyLossInputTf {
  const mode = options.lossAggMode ?? "token-mean";
  return {
    oldLogProb,
    logProb,
    advantages,
    responseMask,
    options,
    aggregate: (perToken) => aggLossTf(perToken, responseMask, mode),
  };
}

const policyLosses = new Map<string, PolicyLossDefinition>();
/** The losses this module defines: the workers run these whatever a driver registers, so they are not replaced. */
const builtInLosses = new Set<string>();

/**
 * Registers a policy loss under `name` (actor.policy_loss.loss_mode), replacing one of your own of that
 * name; a built-in name (vanilla, gspo, ...) is refused, since the workers would keep running theirs.
 * `metrics` names what the loss reports; the trainer sums exactly these over micro-batches and ranks.
 * `requires` declares what it needs of the run: the config checker refuses a run without it and the
 * trainer provides it. A loss defined in a user's module reaches the worker processes through
 * actor_rollout_ref.model.external_lib.
 */
export function registerPolicyLoss(
  name: string,
  fn: PolicyLossFnTf,
  metrics: readonly string[] = [],
  requires: AlgorithmRequirements = {},
): void {
  const where = `registerPolicyLoss(${JSON.stringify(name) ?? String(name)})`;
  checkRegistryName(name, "registerPolicyLoss");
  checkRegistryFunction(fn, where, "the loss");
  if (builtInLosses.has(name))
    throw new AlgorithmInputError(
      `${where}: "${name}" is a built-in policy loss and cannot be replaced (the workers run the built-in); register yours under a new name, select it with actor_rollout_ref.actor.policy_loss.loss_mode, and register it in a module the workers import: actor_rollout_ref.model.external_lib`,
    );
  if (!Array.isArray(metrics) || metrics.some((m) => typeof m !== "string" || m === ""))
    throw new TypeError(`${where}: metrics must be an array of metric names, got ${JSON.stringify(metrics)}`);
  policyLosses.set(name, { fn, metrics: [...metrics], requires: checkRequirements(requires, where) });
}

/** The policy loss registered as `name`; an unknown name is an error listing the known ones. */
export function getPolicyLoss(name: string): PolicyLossDefinition {
  const def = policyLosses.get(name);
  if (!def) {
    throw new AlgorithmInputError(
      `unknown policy loss "${name}" (known: ${listPolicyLosses().join(", ")}); a loss of your own is registered with registerPolicyLoss in a module named by actor_rollout_ref.model.external_lib`,
    );
  }
  return def;
}

/** What the loss registered as `name` needs of the run; undefined when no loss has that name (yet). */
export function policyLossRequirements(name: string): AlgorithmRequirements | undefined {
  const def = policyLosses.get(name);
  return def && { ...def.requires };
}

export function listPolicyLosses(): string[] {
  return [...policyLosses.keys()].sort();
}

/** Runs the loss and checks it reported exactly the metrics it registered. */
export function runPolicyLoss(name: string, input: PolicyLossInputTf): PolicyLossOutputTf {
  const def = getPolicyLoss(name);
  const out = def.fn(input);
  const got = Object.keys(out.metrics).sort();
  const want = [...def.metrics].sort();
  if (got.length !== want.length || got.some((k, i) => k !== want[i])) {
    throw new AlgorithmInputError(
      `policy loss "${name}" returned metrics [${got.join(", ")}] but registered [${want.join(", ")}]`,
    );
  }
  return out;
}

registerPolicyLoss("vanilla", vanillaPolicyLossTf, ["pg_clipfrac", "ppo_kl", "pg_clipfrac_lower"]);
registerPolicyLoss("gspo", gspoPolicyLossTf, ["pg_clipfrac", "ppo_kl"]);
registerPolicyLoss("gpg", gpgPolicyLossTf, []);
registerPolicyLoss("clip_cov", clipCovPolicyLossTf, ["pg_clipfrac", "ppo_kl"]);
registerPolicyLoss("kl_cov", klCovPolicyLossTf, ["ppo_kl"]);
for (const name of policyLosses.keys()) builtInLosses.add(name);
