// Reward: answer extraction, math answer equivalence, compute_score, the reward manager, CLI commands.

export { verifyCommand } from "../cli/verify.js";
export { baselineEquivalent } from "./baseline.js";
export { loadRewardCorpus, REWARD_CORPUS_PATH, RewardCorpusError, type RewardCorpusPair } from "./corpus.js";
export {
  type CustomRewardFunction,
  CustomRewardFunctionError,
  type CustomRewardFunctionSpec,
  type CustomRewardResult,
  customRewardModuleExists,
  customRewardModuleUrl,
  customRewardScorer,
  loadCustomRewardFunction,
} from "./custom-function.js";
export {
  clearAnswerParseCache,
  isEquivalentAnswer,
  type ParsedAnswer,
  parseMathAnswer,
  type ScalarStage,
  verifierErrors,
} from "./equivalence.js";
export { extractBoxedAnswer, groundTruthAnswer } from "./extract.js";
export { AnswerParseError, type MathNode, normalizeAnswerText, parseAnswer } from "./latex.js";
export {
  RESPONSE_TEXT_KEYS,
  type RewardBatch,
  RewardBatchError,
  type RewardBatchResult,
  type RewardDataProtoOptions,
  RewardManager,
  type RewardManagerOptions,
  RewardScoreTimeoutError,
  rewardMetrics,
  tokenLevelScores,
} from "./manager.js";
export { RewardManagerActor } from "./manager-actor.js";
export {
  applyOverlongPenalty,
  checkOverlongBuffer,
  type OverlongBuffer,
  OverlongBufferError,
  overlongPenalty,
} from "./overlong.js";
export {
  mathRewardScorer,
  type RewardScorer,
  RewardScorerError,
  type RewardScorerInput,
  type RewardScorerOptions,
  type RewardScorerResult,
  registerRewardScorer,
  rewardScorerFor,
} from "./registry.js";
export {
  answerReward,
  checkRewardType,
  computeMathScore,
  type ExecutionInfo,
  executionInfoFromRollout,
  MATH_REWARD_TYPES,
  type MathRewardType,
  type MathScoreOptions,
  type MathScoreResult,
  RewardTypeError,
  type RolloutExecution,
} from "./score.js";
export { RewardPoolError } from "./score-pool.js";
export { verifyLine } from "./verify-line.js";
