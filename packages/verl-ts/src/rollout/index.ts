// TIR rollout: a step-wise, tool-overlapping generation engine generic over the Tool interface.

// Multi-turn agent loop (veRL's tool agent): chat template, hermes tool calls, several tools.
export {
  type AgentLoopOptions,
  type AgentLoopResult,
  type AgentSample,
  agentLoopRollout,
  type TruncateSide,
  truncateToolResponse,
} from "./agent-loop.js";
export {
  padRolloutBatch,
  promptsFromDataProto,
  type RolloutBatchArrays,
  RolloutBatchError,
  type RolloutBatchOptions,
  responseOffset,
  rolloutDataProto,
  rolloutMetrics,
  rolloutTrainingBatch,
} from "./batch.js";
export { ChatTemplate, ChatTemplateError, type ChatTurn, type RenderOptions } from "./chat-template.js";
export {
  type CodeInterpreterOptions,
  EMPTY_OBSERVATION,
  extractLastPythonBlock,
  formatObservation,
  OBSERVATION_KEEP,
  OBSERVATION_LIMIT,
  OUTPUT_STOP,
  PythonCodeInterpreter,
  wrapObservation,
} from "./code-interpreter.js";
export {
  CODE_INTERPRETER_TOOL_MODULE,
  type CodeInterpreterSettings,
  type CodeInterpreterStartOptions,
  type CodeInterpreterToolConfig,
  checkCodeInterpreterHost,
  codeInterpreterSettings,
  createCodeInterpreterTool,
} from "./code-interpreter-tool.js";
export {
  type ParsedToolCall,
  parseHermesToolCalls,
  schemaMismatch,
  TOOL_CALL_CLOSE,
  TOOL_CALL_OPEN,
} from "./hermes.js";
export {
  agentTrainingBatch,
  computeMultiTurnMetrics,
  type MultiTurnConfig,
  modelPromptRenderer,
  multiTurnConfig,
  multiTurnSettings,
} from "./multi-turn.js";
export { QWEN2_5_CHAT_TEMPLATE } from "./qwen-chat-template.js";
export { RaggedKVCache } from "./ragged-cache.js";
export {
  buildRolloutTool,
  checkToolArgs,
  checkToolSpec,
  describeRolloutTool,
  rolloutToolSpec,
  toolSpecLabel,
} from "./rollout-tool.js";
export {
  generateSequences,
  type PolicyVersionSource,
  type PromptBatchRollout,
  RolloutInputError,
  releaseFailure,
  rolloutPromptBatch,
  type TirCallRecord,
  type TirEvent,
  type TirRolloutOptions,
  type TirRolloutResult,
  type TirRolloutStats,
  type TirSample,
  ToolExecutionError,
  tirRollout,
} from "./tir.js";
export {
  type CheckToolOptions,
  checkTool,
  checkToolCall,
  checkToolResult,
  executeAll,
  type GuardToolOptions,
  guardTool,
  type JsonSchema,
  newInstanceId,
  type OpenAIFunctionSchema,
  TOOL_CALL_TIMEOUT_KEY,
  type Tool,
  type ToolCall,
  ToolError,
  type ToolResult,
  ToolTimeoutError,
} from "./tool.js";
export {
  type ConfiguredTool,
  importToolExport,
  instantiateTool,
  loadToolConfig,
  readToolConfig,
  resolveToolModule,
  type ToolConfigEntry,
  ToolConfigError,
  type ToolSpec,
} from "./tool-config.js";
export { applyVoidTurnFilter, hasVoidTurn, lastTurn } from "./void-turn.js";
