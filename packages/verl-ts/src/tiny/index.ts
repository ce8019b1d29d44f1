// The tiny ToRL recipe's pieces (@torl-ts/verl/tiny): the shipped tiny base model, its architecture and
// tokenizer, its pretraining, and the tiny data splits. The commands (`torl model tiny`, `torl data tiny`,
// `torl pretrain`) are reached through the CLI registry.
export {
  TINY_CHAT_TEMPLATE,
  TINY_CODE_TOOL,
  tinySftRows,
  tinyToolConversation,
  writeTinyChatModel,
} from "./chat-model.js";
export { TINY_DATA_DEFAULTS } from "./data-defaults.js";
export {
  buildTinyTokenizer,
  TINY_ARCHITECTURE,
  TINY_BASE_DIR,
  type TinyArchitecture,
  type TrainingRow,
  tinyPrompt,
  trainingRow,
} from "./tiny-model.js";
export { writeTinyBase } from "./write-base.js";
