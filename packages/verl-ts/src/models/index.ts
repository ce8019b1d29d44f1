// Models, tokenizers and tensor backends: the Qwen2-architecture causal LM in tfjs.

// The seeded generator the models' random initialisation uses, for callers that want the same draws.
export { mulberry32 } from "../random.js";
export {
  BACKEND_NAMES,
  type BackendInfo,
  type BackendName,
  type BackendOptions,
  currentBackend,
  registerWasmFallbacks,
  selectBackend,
} from "./backend.js";
export { benchModelCommand, cpuMs, decodeMsPerToken, decodeTiming, randomBatch } from "./bench.js";
export {
  countParameters,
  type ModelConfig,
  makeQwen2Config,
  parseHfConfig,
  type Qwen2Config,
  toHfConfig,
} from "./config.js";
export { BackendUnavailableError, ModelFormatError } from "./errors.js";
export { type GenerationOutput, generate, type SamplingParams, sample } from "./generate.js";
export { type HostTensor, KVCache } from "./kv-cache.js";
export { linear } from "./linear.js";
export {
  applyGradients,
  computeLogProbs,
  forwardBackward,
  gradientsToArrays,
  type LogProbOptions,
  type MicroBatch,
  maskedMean,
  sliceBatch,
  type TokenScores,
  tokenLogProbs,
} from "./logprobs.js";
export { adamOptimizer, FusedAdamOptimizer } from "./native-adam.js";
export { installNativeMatmul, type NativeMatmulState } from "./native-matmul.js";
export {
  bundledQwenTokenizerDir,
  createRandomPretrained,
  loadModel,
  loadModelConfig,
  loadPretrained,
  type SaveOptions,
  saveModel,
} from "./pretrained.js";
export { type ForwardOptions, type ParamSpec, parameterSpecs, Qwen2Model } from "./qwen2.js";
export {
  type NamedTensor,
  readCheckpointDir,
  readSafetensors,
  readSafetensorsHeader,
  type SafetensorsDtype,
  writeCheckpointDir,
  writeSafetensors,
} from "./safetensors.js";
export { padBatch, type TokenBatch } from "./token-batch.js";
export {
  type ByteBpeOptions,
  buildByteBpeTokenizer,
  DEFAULT_SPECIAL_TOKENS,
  type EncodingWithOffsets,
  loadTokenizer,
  maskFromCharRanges,
  Tokenizer,
} from "./tokenizer.js";
