// Models, tokenizers and tensor backends: the Qwen2-architecture causal LM in tfjs.
export {
  BACKEND_NAMES,
  type BackendInfo,
  type BackendName,
  type BackendOptions,
  currentBackend,
  registerWasmFallbacks,
  selectBackend,
} from "./backend.js";
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
export { KVCache } from "./kv-cache.js";
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
export {
  type ForwardOptions,
  type HostTensor,
  linear,
  mulberry32,
  type ParamSpec,
  padBatch,
  parameterSpecs,
  Qwen2Model,
  type TokenBatch,
} from "./qwen2.js";
export {
  type NamedTensor,
  readCheckpointDir,
  readSafetensors,
  readSafetensorsHeader,
  type SafetensorsDtype,
  writeCheckpointDir,
  writeSafetensors,
} from "./safetensors.js";
export {
  type ByteBpeOptions,
  buildByteBpeTokenizer,
  DEFAULT_SPECIAL_TOKENS,
  type EncodingWithOffsets,
  loadTokenizer,
  maskFromCharRanges,
  Tokenizer,
} from "./tokenizer.js";
