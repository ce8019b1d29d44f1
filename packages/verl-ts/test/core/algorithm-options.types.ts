/**
 * Type-level checks of the algorithm settings, run by `pnpm typecheck` (tsc), not by ava: the loss
 * aggregation mode and the KL estimators are their union types from the config types to the
 * algorithms, so a name that is not one of them does not compile. If a signature widened back to
 * `string`, the equality checks below fail and the `@ts-expect-error` lines become unused errors.
 */
import {
  aggLoss,
  aggLossTf,
  computePolicyLoss,
  type KlPenaltyType,
  klLossTf,
  klPenalty,
  klPenaltyTf,
  type LossAggMode,
  lossAggWeights,
  type MaskMatrix,
  type PolicyLossOptions,
  type ScoreMatrix,
} from "../../src/algorithms/index.js";
import type { TrainerConfig } from "../../src/config/index.js";
import type { criticSettings } from "../../src/workers/critic.js";

type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
function expectType<_ extends true>(): void {}

declare const cfg: TrainerConfig;
declare const x: ScoreMatrix;
declare const m: MaskMatrix;
declare const t: Parameters<typeof aggLossTf>[0];

expectType<Equal<TrainerConfig["algorithm"]["kl_penalty"], KlPenaltyType>>();
expectType<Equal<TrainerConfig["actor_rollout_ref"]["actor"]["kl_loss_type"], KlPenaltyType>>();
expectType<Equal<TrainerConfig["actor_rollout_ref"]["actor"]["loss_agg_mode"], LossAggMode>>();
expectType<Equal<TrainerConfig["critic"]["loss_agg_mode"], LossAggMode>>();
expectType<Equal<ReturnType<typeof criticSettings>["lossAggMode"], LossAggMode>>();
expectType<Equal<NonNullable<PolicyLossOptions["lossAggMode"]>, LossAggMode>>();

aggLoss(x, m, cfg.actor_rollout_ref.actor.loss_agg_mode);
klPenalty(x, x, cfg.algorithm.kl_penalty);
// @ts-expect-error "token-sum" is not a loss aggregation mode
aggLoss(x, m, "token-sum");
// @ts-expect-error nor here
aggLossTf(t, m, "token-sum");
// @ts-expect-error nor here
lossAggWeights(m, "token-sum", { tokens: 1, rows: 1 });
// @ts-expect-error nor here
computePolicyLoss(x, x, x, m, { lossAggMode: "token-sum" });
// @ts-expect-error "k4" is not a KL estimator
klPenalty(x, x, "k4");
// @ts-expect-error nor here
klPenaltyTf(t, t, "k4");
// @ts-expect-error nor here
klLossTf(t, t, m, "k4");
