/**
 * The Python code interpreter tool with ToRL's rules (released code, verl/workers/rollout/vllm_rollout):
 *
 * - trigger: generation stops at "```output" (the `stop` option);
 * - the call: the last ```python block of the round: a line starting or ending with "```python" opens
 *   a block (dropping any earlier one), a line starting with "```" closes it, other lines inside are
 *   the code; a block still open at the end means there is no code at all;
 * - observation: stdout when the run succeeded (exit code 0) or printed anything, else stderr
 *   (stripped); if the text contains "Error" only its last line is kept; an empty observation becomes
 *   ToRL's timeout text; 256 characters or more (the `maxObservationChars` option) become the first 128
 *   + "..." + the last 128 (half the limit each);
 * - appended text: "```output\n" + observation + "\n```\n" (the stop string opens it);
 * - execution_pass (ToolResult.success): 1 when the run succeeded or printed anything.
 */

import type { BatchCodeRunner, RunCodeResponse } from "@torl-ts/sandbox";
import {
  newInstanceId,
  type OpenAIFunctionSchema,
  type Tool,
  type ToolCall,
  type ToolResult,
} from "./tool.js";

/** ToRL's text for an empty observation (its sandbox's timeout decorator message). */
export const EMPTY_OBSERVATION = "timeout_decorator.TimeoutError: 'Timed Out'";
/** Observations this long or longer are cut (ToRL: `len(observation) >= 256`). */
export const OBSERVATION_LIMIT = 256;
export const OBSERVATION_KEEP = 128;

/** The last complete ```python block of `text` (ToRL's extraction), or "" when there is none. */
export function extractLastPythonBlock(text: string): string {
  let program = "";
  let open = false;
  for (const line of text.split("\n")) {
    if (line.startsWith("```python") || line.endsWith("```python")) {
      program = "";
      open = true;
    } else if (line.startsWith("```")) {
      open = false;
    } else if (open) {
      program += `${line}\n`;
    }
  }
  return open ? "" : program;
}

/** ToRL's trigger: generation pauses here to run the round's code. */
export const OUTPUT_STOP = "```output";

/**
 * The observation ToRL shows the model for a run, and whether the run passed. Observations of `limit`
 * characters or more keep their first and last limit/2 characters around "...".
 */
export function formatObservation(
  response: RunCodeResponse | undefined,
  limit = OBSERVATION_LIMIT,
): {
  observation: string;
  pass: boolean;
} {
  let observation: string;
  let pass = false;
  const run = response?.run_result;
  if (!run || run.stdout === undefined) {
    observation = "UnknownError";
  } else if (String(run.return_code) === "0" || String(run.stdout ?? "").length !== 0) {
    observation = run.stdout ?? "";
    pass = true;
  } else {
    observation = (run.stderr ?? "").trim();
  }
  if (observation.includes("Error")) observation = observation.trim().split("\n").pop() ?? "";
  if (observation.trim().length === 0) observation = EMPTY_OBSERVATION;
  observation = observation.trim();
  if (observation.length >= limit) {
    const keep = limit === OBSERVATION_LIMIT ? OBSERVATION_KEEP : Math.floor(limit / 2);
    observation = `${observation.slice(0, keep)}...${keep > 0 ? observation.slice(-keep) : ""}`;
  }
  return { observation, pass };
}

/** The text appended to the sequence after a tool call: the stop string opens the output block. */
export function wrapObservation(observation: string, stop = OUTPUT_STOP): string {
  return `${stop}\n${observation}\n\`\`\`\n`;
}

export interface CodeInterpreterOptions {
  /** Seconds per run (ToRL's sandbox calls used 30 in the released scripts; SandboxFusion default 10). */
  runTimeout?: number;
  memoryLimitMb?: number;
  /** The string generation stops at to run the round's code; it opens the appended output. Default "```output". */
  stop?: string;
  /** Observations this long or longer are cut to their first and last half (default 256, ToRL's). */
  maxObservationChars?: number;
}

/** ToRL's Python code interpreter as a Tool, over any SandboxFusion-shaped backend. */
export class PythonCodeInterpreter implements Tool {
  readonly name = "code_interpreter";
  readonly stop: string[];
  readonly schema: OpenAIFunctionSchema = {
    type: "function",
    function: {
      name: "code_interpreter",
      description:
        "Runs Python 3 code (sympy and numpy available) in a sandbox and returns what it printed, or the last line of its error.",
      parameters: {
        type: "object",
        properties: { code: { type: "string", description: "The Python code to run." } },
        required: ["code"],
      },
    },
  };

  constructor(
    readonly runner: BatchCodeRunner,
    readonly options: CodeInterpreterOptions = {},
  ) {
    this.stop = [options.stop ?? OUTPUT_STOP];
  }

  parse(roundText: string): ToolCall | undefined {
    const code = extractLastPythonBlock(roundText);
    return code === "" ? undefined : { name: this.name, arguments: { code } };
  }

  async create(instanceId?: string): Promise<string> {
    // every run is a fresh process: an instance holds no state
    return instanceId ?? newInstanceId(this.name);
  }

  async execute(instanceId: string, call: ToolCall): Promise<ToolResult> {
    const [r] = await this.executeBatch([{ instanceId, call }]);
    return r!;
  }

  async executeBatch(items: { instanceId: string; call: ToolCall }[]): Promise<ToolResult[]> {
    const requests = items.map(({ call }) => ({
      code: String(call.arguments.code ?? ""),
      language: "python",
      run_timeout: this.options.runTimeout ?? 10,
      ...(this.options.memoryLimitMb !== undefined ? { memory_limit_MB: this.options.memoryLimitMb } : {}),
    }));
    let responses: (RunCodeResponse | undefined)[];
    if (this.runner.runBatch) {
      responses = await this.runner.runBatch(requests).catch(() => requests.map(() => undefined));
    } else {
      responses = await Promise.all(requests.map((r) => this.runner.run(r).catch(() => undefined)));
    }
    return items.map((_, i) => {
      const response = responses[i];
      const { observation, pass } = formatObservation(response, this.options.maxObservationChars);
      return {
        observation,
        text: wrapObservation(observation, this.stop[0]),
        success: pass,
        metrics: { execution_time: response?.run_result?.execution_time ?? 0, execution_pass: pass ? 1 : 0 },
      };
    });
  }

  async release(_instanceId: string): Promise<void> {}

  /** Frees the sandbox (its runner's `close()`, when it has one: the sandbox executor or actor pool). */
  async close(): Promise<void> {
    await (this.runner as { close?: () => Promise<void> }).close?.();
  }
}
