export {
  type CollatePromptsOptions,
  collatePrompts,
  epochOrder,
  filterOverlongPrompts,
  LoaderStateError,
  type OverlongFilterOptions,
  PromptLoader,
  type PromptLoaderOptions,
  type PromptLoaderState,
  seededRandom,
  type TokenizeFn,
} from "./loader.js";
export {
  encodeParquet,
  inferParquetSchema,
  type ParquetField,
  ParquetWriteError,
  writeParquetRows,
} from "./parquet-writer.js";
export {
  type ChatMessage,
  DatasetFileError,
  type ReadRlDatasetOptions,
  type RlDatasetRow,
  readJsonlRows,
  readParquetRows,
  readRlDataset,
  toRlDatasetRow,
} from "./rows.js";
export {
  chatMlTemplate,
  getPromptTemplate,
  listPromptTemplates,
  type PromptTemplate,
  PromptTemplateError,
  questionOf,
  registerPromptTemplate,
  renderPrompt,
  TIR_BASE_0309_PREFIX,
  tirBase0309Template,
} from "./templates.js";
export {
  HELD_OUT_RESERVE,
  heldOutProblems,
  pretrainExclusions,
  problemRow,
  RECIPE_SPLIT_SEED,
  TINY_SOURCE_PREFIX,
  type TinyDatasetOptions,
  tinyDataset,
} from "./tiny-dataset.js";
export {
  easyKinds,
  generateProblems,
  hardKinds,
  type Problem,
  type ProblemKind,
  type ProblemSetOptions,
  problemKinds,
  TinyDatasetError,
  trainTestSplit,
} from "./tiny-problems.js";
