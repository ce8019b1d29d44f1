export {
  assertTrainerConfig,
  type CheckTrainerConfigOptions,
  checkLoggerNames,
  checkTrainerConfig,
  checkUnsupportedKeys,
  LOGGER_NAMES,
  type LoggerName,
} from "./check.js";
export { miniBatchRows, rolloutWorldSize, trainerWorldSize } from "./derived.js";
export {
  type ConfigOverride,
  configToYaml,
  configValue,
  type LoadTrainerConfigOptions,
  loadTrainerConfig,
  mergeConfig,
  parseConfigOverrides,
  readConfigFile,
  resolveInterpolations,
  splitConfigArgs,
  trainerConfigSchema,
} from "./load.js";
export {
  type ConfigIssue,
  type ConfigKeySpec,
  type ConfigNode,
  ConfigSchema,
  type ConfigTypeSpec,
  formatConfigType,
  parseConfigType,
  TrainerConfigError,
} from "./schema.js";
export {
  checkMultiTurnConfig,
  checkPolicyLossRequirements,
  checkTrainerSetup,
  runRequirements,
  type TrainerSetupOptions,
} from "./setup.js";
export {
  checkSftConfig,
  type LoadSftConfigOptions,
  loadSftConfig,
  type SftConfig,
  sftConfigSchema,
} from "./sft.js";
export type { ActorConfig, OptimConfig, RolloutConfig, TrainerConfig } from "./types.js";
