export {
  type AdvantageEstimator,
  type AdvantageInput,
  type AdvantageOutput,
  advantageEstimatorRequirements,
  computeAdvantage,
  computeGaeAdvantageReturn,
  computeGpgOutcomeAdvantage,
  computeGrpoOutcomeAdvantage,
  computeGrpoPassKOutcomeAdvantage,
  computeOpoOutcomeAdvantage,
  computeReinforcePlusPlusBaselineOutcomeAdvantage,
  computeReinforcePlusPlusOutcomeAdvantage,
  computeRemaxOutcomeAdvantage,
  computeRlooOutcomeAdvantage,
  getAdvantageEstimator,
  listAdvantageEstimators,
  registerAdvantageEstimator,
  tokenLevelScoresFromFinal,
} from "./advantage.js";
export { entropyFromLogits } from "./entropy.js";
export {
  AdaptiveKlController,
  applyKlPenalty,
  checkKlPenaltyType,
  createKlController,
  FixedKlController,
  KL_PENALTY_TYPES,
  type KlController,
  type KlPenaltyType,
  klPenalty,
  klPenaltyValue,
} from "./kl.js";
export {
  aggLoss,
  checkLossAggMode,
  LOSS_AGG_MODES,
  LOSS_AGGREGATION,
  type LossAggDivisor,
  type LossAggMode,
  type LossAggregation,
  lossAggDivisor,
  lossAggWeights,
} from "./loss-aggregation.js";
export {
  AlgorithmInputError,
  type MaskMatrix,
  maskedMeanRows,
  maskedMeanScalar,
  maskedSum,
  maskedVar,
  maskedWhiten,
  type ScoreMatrix,
} from "./masked.js";
export {
  computePolicyLoss,
  computeValueLoss,
  type PolicyLossOptions,
  type PolicyLossResult,
} from "./policy-loss.js";
export {
  getPolicyLoss,
  listPolicyLosses,
  type PolicyLossDefinition,
  type PolicyLossFnTf,
  type PolicyLossInputTf,
  type PolicyLossOutputTf,
  policyLossInput,
  policyLossRequirements,
  registerPolicyLoss,
  runPolicyLoss,
} from "./policy-loss-registry.js";
export {
  clipCovPolicyLossTf,
  gpgPolicyLossTf,
  gspoPolicyLossTf,
  klCovPolicyLossTf,
  type PolicyLossTf,
  type PpoTokenLossTf,
  policyLossTf,
  ppoTokenLossTf,
  vanillaPolicyLossTf,
} from "./policy-losses-tf.js";
export { type AlgorithmRequirements, mergeRequirements } from "./requirements.js";
export {
  computeRolloutIsWeights,
  ROLLOUT_IS_LEVELS,
  ROLLOUT_IS_MODES,
  type RolloutIsLevel,
  type RolloutIsMode,
  type RolloutIsOptions,
  type RolloutIsResult,
} from "./rollout-is.js";
export {
  aggLossTf,
  asTfTensor,
  entropyFromLogitsTf,
  klLossTf,
  klPenaltyTf,
  maskedMeanTf,
  type TensorLike,
  valueLossTf,
} from "./tf-ops.js";
