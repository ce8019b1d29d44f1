export {
  assertTrainerConfig,
  type CheckTrainerConfigOptions,
  checkTrainerConfig,
  checkUnsupportedKeys,
} from "./check.js";
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
export type { ActorConfig, OptimConfig, RolloutConfig, TrainerConfig } from "./types.js";
