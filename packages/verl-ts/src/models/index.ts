// Models, tokenizers and tensor backends: the Qwen2 / Qwen3 / Llama 3 causal LM in tfjs.

// The tensorflow.js this package computes with: a program that writes its own losses imports `tf` from
// here, so exactly one copy of tfjs loads (two copies register every kernel twice and warn on each).
export * as tf from "@tensorflow/tfjs";

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
export {
  countParameters,
  type ModelConfig,
  makeQwen2Config,
  parseHfConfig,
  type Qwen2Config,
  toHfConfig,
} from "./config.js";
export { BackendUnavailableError, ModelFormatError, WeightNotHeldError } from "./errors.js";
export { type GenerationOutput, generate, type SamplingParams, sample } from "./generate.js";
export {
  bytesPerValue,
  HalfArray,
  type HalfDtype,
  type StoredValues,
  WEIGHT_DTYPES,
  type WeightDtype,
} from "./half-precision.js";
export { type HostTensor, KVCache } from "./kv-cache.js";
export { linear } from "./linear.js";
export {
  applyGradients,
  chunkedTokenLogProbs,
  computeLogProbs,
  forwardBackward,
  gradientsToArrays,
  type HeadBlocks,
  headChunkRows,
  type LogProbOptions,
  type MicroBatch,
  maskedMean,
  sliceBatch,
  type TokenScores,
  tokenLogProbs,
} from "./logprobs.js";
export {
  type AdapterSpec,
  adapterSpecs,
  initialAdapterValues,
  isPeftAdapterDir,
  LORA_TARGET_MODULES,
  LoraAdapters,
  type LoraConfig,
  type LoraKeys,
  type LoraTargetModule,
  loraConfigOf,
  loraKeyIssues,
  loraScale,
  mergeAdapterValues,
  readPeftAdapterConfig,
  readPeftAdapterValues,
  writePeftAdapterDir,
} from "./lora.js";
export { adamOptimizer, FusedAdamOptimizer } from "./native-adam.js";
export { installNativeMatmul } from "./native-matmul.js";
export type { NativeMatmulState } from "./native-state.js";
export {
  bundledQwenTokenizerDir,
  configDtype,
  createRandomPretrained,
  type LoadOptions,
  loadModel,
  loadModelConfig,
  loadModelValues,
  loadPretrained,
  type SaveOptions,
  saveModel,
} from "./pretrained.js";
export {
  type ForwardOptions,
  type LmHead,
  type ParamSpec,
  parameterSpecs,
  Qwen2Model,
  type Qwen2ModelOptions,
} from "./qwen2.js";
export {
  type NamedTensor,
  readCheckpointDir,
  readCheckpointDirStored,
  readSafetensors,
  readSafetensorsHeader,
  readSafetensorsStored,
  type SafetensorsDtype,
  type StoredTensor,
  writeCheckpointDir,
  writeSafetensors,
  writeSafetensorsFrom,
} from "./safetensors.js";
export {
  LLAMA_3_2_1B_SHAPES,
  QWEN2_5_0_5B_SHAPES,
  QWEN3_0_6B_SHAPES,
  type RandomModelOptions,
  SCALE_SHAPES,
  scaleTokenizer,
  writeRandomModelDir,
} from "./scale-fixture.js";
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
export { measureWeightBytes, type WeightBytesFigures } from "./weight-bytes.js";
export { WeightStore, type WeightStoreOptions } from "./weight-store.js";
