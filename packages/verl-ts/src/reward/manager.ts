/**
 * The reward manager (veRL's NaiveRewardManager, ToRL flavour): scores a batch of responses, puts each
 * response's score on its last valid token (a token-level score tensor, veRL's `token_level_scores`),
 * and reports per-sample scores and batch metrics.
 *
 * Metrics (fractions in [0, 1] unless named otherwise):
 *   reward/score/mean, reward/acc, reward/no_answer_rate,
 *   reward/<data_source>/acc, reward/<data_source>/count,
 *   reward/verifier_errors (comparator failures in this batch, each graded unequal; expected 0)
 *
 * Math samples of a large batch are graded on a pool of worker threads; samples whose data source has a
 * registered custom scorer run in this thread (they may be async, e.g. call a sandbox). With a custom
 * reward function (veRL's custom_reward_function) every row is scored by it instead.
 */

import { DataProto, type DataProtoWire, isDataProtoWire, type TypedArray } from "../protocol/index.js";
import { settleWithin } from "../settle-within.js";
import {
  type CustomRewardFunctionSpec,
  customRewardScorer,
  loadCustomRewardFunction,
} from "./custom-function.js";
import { verifierErrors } from "./equivalence.js";
import {
  checkRewardScorerResult,
  describeRewardScorerMatch,
  mathRewardScorer,
  type RewardScorer,
  type RewardScorerInput,
  type RewardScorerOptions,
  rewardScorerEntryFor,
} from "./registry.js";
import {
  checkRewardType,
  type ExecutionInfo,
  executionInfoFromRollout,
  type MathRewardType,
  type MathScoreResult,
} from "./score.js";
import { MathScorePool } from "./score-pool.js";

/** A batch given as plain per-row arrays. */
export interface RewardBatch {
  /** Decoded response text per row. */
  responses: string[];
  groundTruths: string[];
  /** Per-row data source; "math" when omitted. */
  dataSources?: string[];
  /** Per-row tool-execution facts for the execution penalty. */
  execution?: (ExecutionInfo | undefined)[];
  /** Valid (unpadded) response length per row; with responseWidth, yields the token-level tensor. */
  responseLengths?: number[];
  /** Padded response width L of the token-level tensor (B x L). */
  responseWidth?: number;
  extraInfos?: unknown[];
}

export interface RewardBatchResult {
  scores: number[];
  correct: boolean[];
  extracted: (string | null)[];
  /** B x L scores, zero except at each row's last valid response token; present when lengths were given. */
  tokenLevelScores?: { data: Float32Array; shape: [number, number] };
  metrics: Record<string, number>;
}

export interface RewardManagerOptions {
  /** `default` | `v2.wformat` | `accuracy` (veRL config `reward_model.reward_type` in ToRL). */
  rewardType?: MathRewardType | string;
  /** veRL `data.execution_error_penalty`; default false as in the released script. */
  executionErrorPenalty?: boolean;
  executionPenaltyValue?: number;
  /** Worker threads for math grading; default 2. 0 or 1 grades in this thread. */
  numThreads?: number;
  /** Batches with fewer math rows than this are graded in this thread (thread hand-off costs more). */
  parallelThreshold?: number;
  /**
   * Module URLs imported before the first batch; each registers its scorers (registerRewardScorer) on
   * import. This is how custom scorers reach a manager running as an actor in another process.
   */
  scorerModules?: string[];
  /**
   * veRL's custom_reward_function (path, name): a module's scoring function that scores every row in
   * place of the built-in scorers. Loaded by this manager (in its own process when it runs as an actor).
   */
  customRewardFunction?: CustomRewardFunctionSpec | null;
  /**
   * Seconds one row's scoring by a registered scorer or the custom reward function may take before
   * score() fails naming the scorer and the data source (reward_model.score_timeout); default 300.
   */
  scoreTimeout?: number;
}

/** Where `scoreDataProto` looks for its inputs (veRL's names; ToRL's execution_passes). */
export interface RewardDataProtoOptions {
  /** Decodes response token ids when the batch has no response text column. */
  decode?: (ids: number[]) => string;
}

/** Non-tensor columns that may hold the decoded response text, first match wins. */
export const RESPONSE_TEXT_KEYS = ["response_text", "responses_str", "response_str"];

/** Thrown for a malformed batch (ragged arrays, bad lengths); names the field and row. */
export class RewardBatchError extends Error {
  override name = "RewardBatchError";
}

/** A scorer took longer than reward_model.score_timeout: names the scorer, the data source and the key. */
export class RewardScoreTimeoutError extends Error {
  override name = "RewardScoreTimeoutError";
}

/** Token-level scores: row i gets `scores[i]` at index `lengths[i] - 1` (nothing when the length is 0). */
export function tokenLevelScores(
  scores: number[],
  lengths: number[],
  width: number,
): { data: Float32Array; shape: [number, number] } {
  if (lengths.length !== scores.length) {
    throw new RewardBatchError(
      `responseLengths has ${lengths.length} rows but there are ${scores.length} scores`,
    );
  }
  const data = new Float32Array(scores.length * width);
  for (let i = 0; i < scores.length; i++) {
    const len = lengths[i]!;
    if (!Number.isInteger(len) || len < 0 || len > width) {
      throw new RewardBatchError(`responseLengths[${i}] = ${len} is not an integer in [0, ${width}]`);
    }
    if (len > 0) data[i * width + len - 1] = scores[i]!;
  }
  return { data, shape: [scores.length, width] };
}

/** Batch metrics from per-row verdicts. */
export function rewardMetrics(results: MathScoreResult[], dataSources: string[]): Record<string, number> {
  const n = results.length;
  const metrics: Record<string, number> = {};
  if (n === 0) return metrics;
  let sum = 0;
  let correct = 0;
  let none = 0;
  const bySource = new Map<string, { n: number; correct: number }>();
  results.forEach((r, i) => {
    sum += r.score;
    if (r.correct) correct++;
    if (r.extracted === null) none++;
    const s = dataSources[i] ?? "math";
    const e = bySource.get(s) ?? { n: 0, correct: 0 };
    e.n++;
    if (r.correct) e.correct++;
    bySource.set(s, e);
  });
  metrics["reward/score/mean"] = sum / n;
  metrics["reward/acc"] = correct / n;
  metrics["reward/no_answer_rate"] = none / n;
  for (const [s, e] of [...bySource].sort(([a], [b]) => a.localeCompare(b))) {
    metrics[`reward/${s}/acc`] = e.correct / e.n;
    metrics[`reward/${s}/count`] = e.n;
  }
  return metrics;
}

export class RewardManager {
  private readonly options: RewardScorerOptions;
  private readonly numThreads: number;
  private readonly parallelThreshold: number;
  private pool: MathScorePool | null = null;
  private readonly modulesLoaded: Promise<unknown>;
  private readonly customScorer: Promise<RewardScorer> | null;
  private readonly customName: string | null;
  private readonly scoreTimeout: number;

  constructor(options: RewardManagerOptions = {}) {
    this.options = {
      rewardType: checkRewardType(options.rewardType ?? "default"),
      executionErrorPenalty: options.executionErrorPenalty ?? false,
      executionPenaltyValue: options.executionPenaltyValue ?? 0.5,
    };
    this.scoreTimeout = options.scoreTimeout ?? 300;
    if (
      typeof this.scoreTimeout !== "number" ||
      !(this.scoreTimeout > 0) ||
      !Number.isFinite(this.scoreTimeout)
    )
      throw new RewardBatchError(
        `RewardManager: scoreTimeout (reward_model.score_timeout) must be a number of seconds > 0, got ${String(options.scoreTimeout)}`,
      );
    this.numThreads = options.numThreads ?? 2;
    this.parallelThreshold = options.parallelThreshold ?? 1024;
    this.modulesLoaded = Promise.all((options.scorerModules ?? []).map((m) => import(m)));
    this.modulesLoaded.catch(() => {}); // reported by score()
    const custom = options.customRewardFunction;
    this.customScorer = custom
      ? loadCustomRewardFunction(custom).then((fn) => customRewardScorer(fn, custom))
      : null;
    this.customScorer?.catch(() => {}); // reported by score() and loaded()
    this.customName = custom ? `custom_reward_function ${custom.name} in ${custom.path}` : null;
  }

  /** Resolves once the scorer modules and the custom reward function are loaded; rejects if one cannot be. */
  async loaded(): Promise<void> {
    await this.modulesLoaded;
    await this.customScorer;
  }

  /** Scores a batch given as plain arrays. */
  async score(batch: RewardBatch): Promise<RewardBatchResult> {
    await this.modulesLoaded;
    const customScorer = await this.customScorer;
    const n = batch.responses.length;
    const check = (name: string, arr: unknown[] | undefined) => {
      if (arr && arr.length !== n) {
        throw new RewardBatchError(`${name} has ${arr.length} rows but responses has ${n}`);
      }
    };
    check("groundTruths", batch.groundTruths);
    check("dataSources", batch.dataSources);
    check("execution", batch.execution);
    check("responseLengths", batch.responseLengths);
    check("extraInfos", batch.extraInfos);
    const sources = batch.dataSources ?? new Array<string>(n).fill("math");
    const inputs: RewardScorerInput[] = batch.responses.map((solution, i) => {
      if (typeof solution !== "string") throw new RewardBatchError(`responses[${i}] is not a string`);
      const gt = batch.groundTruths[i];
      if (typeof gt !== "string") throw new RewardBatchError(`groundTruths[${i}] is not a string`);
      return {
        solution,
        groundTruth: gt,
        dataSource: sources[i] ?? "math",
        execution: batch.execution?.[i],
        extraInfo: batch.extraInfos?.[i],
      };
    });

    const errorsBefore = verifierErrors.count;
    const results = new Array<MathScoreResult>(n);
    const mathRows: number[] = [];
    const custom: Promise<void>[] = [];
    // when the batch fails, the rows still scoring lose their timers (see settleWithin)
    const batchFailed = new AbortController();
    inputs.forEach((input, i) => {
      const entry = customScorer ? null : rewardScorerEntryFor(input.dataSource);
      const scorer = customScorer ?? entry?.scorer ?? mathRewardScorer;
      if (scorer === mathRewardScorer) mathRows.push(i);
      else {
        const who = entry ? `the reward scorer ${describeRewardScorerMatch(entry.match)}` : this.customName!;
        const source = JSON.stringify(input.dataSource);
        // a scorer that never settles would hang the step: bounded by reward_model.score_timeout
        const work = settleWithin(
          new Promise((resolve) => resolve(scorer(input, this.options))),
          this.scoreTimeout * 1000,
          () =>
            new RewardScoreTimeoutError(
              `${who} did not finish scoring row ${i} (data source ${source}) within ${this.scoreTimeout} s; raise reward_model.score_timeout if it is only slow`,
            ),
          batchFailed.signal,
        );
        custom.push(
          work.then((r) => {
            results[i] = entry
              ? checkRewardScorerResult(
                  r,
                  `the reward scorer ${describeRewardScorerMatch(entry.match)}`,
                  input.dataSource,
                )
              : (r as MathScoreResult);
          }),
        );
      }
    });
    try {
      if (mathRows.length >= this.parallelThreshold && this.numThreads > 1) {
        this.pool ??= new MathScorePool(this.numThreads);
        const scored = await this.pool.score(
          mathRows.map((i) => inputs[i]!),
          this.options,
        );
        mathRows.forEach((row, j) => {
          results[row] = scored[j]!;
        });
      } else {
        for (const i of mathRows) results[i] = mathRewardScorer(inputs[i]!, this.options) as MathScoreResult;
      }
      await Promise.all(custom);
    } catch (err) {
      batchFailed.abort();
      // rows that fail later have nobody to tell: the batch's error is the one reported
      for (const row of custom) row.catch(() => {});
      throw err;
    }

    const scores = results.map((r) => r.score);
    const verifierErrorCount = verifierErrors.count - errorsBefore;
    const out: RewardBatchResult = {
      scores,
      correct: results.map((r) => r.correct),
      extracted: results.map((r) => r.extracted),
      metrics: { ...rewardMetrics(results, sources), "reward/verifier_errors": verifierErrorCount },
    };
    if (batch.responseLengths) {
      const width = batch.responseWidth ?? Math.max(0, ...batch.responseLengths);
      out.tokenLevelScores = tokenLevelScores(scores, batch.responseLengths, width);
    }
    return out;
  }

  /**
   * Scores a veRL DataProto (or its wire form, as an actor receives it). Reads:
   *  - response text: non-tensor `response_text` (or `responses_str`), else `responses` ids decoded
   *    with `options.decode`;
   *  - ground truth: non-tensor `reward_model[i].ground_truth` (veRL) or `ground_truth`;
   *  - data source: non-tensor `data_source` ("math" when absent); `extra_info` passed to scorers;
   *  - last response token: last 1 of `response_mask` (B x L), else of the last L columns of
   *    `attention_mask`, where L is the width of `responses`;
   *  - execution: `execution_passes` (1 = every tool call passed, ToRL; the sandbox tool gives 1 to a
   *    response without calls), and `num_tool_calls` when present. Code counts as present when
   *    num_tool_calls > 0, or, without that column, when execution_passes < 1.
   * Returns a DataProto (wire form when given wire form) with batch `token_level_scores` (B x L,
   * float32), non-tensor `score`, `acc`, `extracted_answer`, and metaInfo `reward_metrics`.
   */
  async scoreDataProto(
    input: DataProto | DataProtoWire,
    options: RewardDataProtoOptions = {},
  ): Promise<DataProto | DataProtoWire> {
    const wire = isDataProtoWire(input);
    const data = wire ? DataProto.fromWire(input) : input;
    const n = data.length;
    const nt = data.nonTensorBatch;
    const width = this.responseWidth(data);
    const lengths = this.lastTokenLengths(data, width);

    let responses: string[];
    const textKey = RESPONSE_TEXT_KEYS.find((k) => nt[k]);
    if (textKey) responses = nt[textKey] as string[];
    else if (options.decode && data.batch.responses) {
      const ids = data.batch.responses.data;
      responses = Array.from({ length: n }, (_, i) =>
        options.decode!(
          Array.from(ids.subarray(i * width, i * width + lengths[i]!) as ArrayLike<number>, Number),
        ),
      );
    } else {
      throw new RewardBatchError(
        `no response text: give non-tensor "${RESPONSE_TEXT_KEYS[0]}" or a decode function with a "responses" tensor`,
      );
    }

    let groundTruths: string[];
    if (nt.reward_model) {
      groundTruths = (nt.reward_model as { ground_truth?: unknown }[]).map((rm, i) => {
        if (typeof rm?.ground_truth !== "string") {
          throw new RewardBatchError(`reward_model[${i}].ground_truth is not a string`);
        }
        return rm.ground_truth;
      });
    } else if (nt.ground_truth) groundTruths = (nt.ground_truth as unknown[]).map(String);
    else throw new RewardBatchError('no ground truth: give non-tensor "reward_model" or "ground_truth"');

    const passes = this.rowValues(data, "execution_passes");
    const calls = this.rowValues(data, "num_tool_calls");
    const execution = passes
      ? passes.map((p, i) => executionInfoFromRollout({ executionPasses: p, numToolCalls: calls?.[i] }))
      : undefined;

    const r = await this.score({
      responses,
      groundTruths,
      dataSources: nt.data_source ? (nt.data_source as unknown[]).map(String) : undefined,
      execution,
      extraInfos: nt.extra_info as unknown[] | undefined,
      responseLengths: lengths,
      responseWidth: width,
    });
    const out = DataProto.fromDict(
      { token_level_scores: { data: r.tokenLevelScores!.data, shape: [n, width] } },
      { score: r.scores, acc: r.correct, extracted_answer: r.extracted },
      { reward_metrics: r.metrics },
    );
    return wire ? out.toWire() : out;
  }

  private responseWidth(data: DataProto): number {
    const t = data.batch.response_mask ?? data.batch.responses;
    if (t?.shape.length !== 2) {
      throw new RewardBatchError('need a 2-d "responses" or "response_mask" tensor for the response width');
    }
    return t.shape[1]!;
  }

  /** Per row: index of the last response token + 1 (0 when the response is empty). */
  private lastTokenLengths(data: DataProto, width: number): number[] {
    let mask: TypedArray;
    let stride: number;
    let offset: number;
    if (data.batch.response_mask) {
      mask = data.batch.response_mask.data;
      stride = width;
      offset = 0;
    } else if (data.batch.attention_mask) {
      const t = data.batch.attention_mask;
      stride = t.shape[1]!;
      if (t.shape.length !== 2 || stride < width) {
        throw new RewardBatchError(`attention_mask shape [${t.shape}] cannot hold ${width} response columns`);
      }
      mask = t.data;
      offset = stride - width;
    } else {
      // No mask: every response fills its row.
      return new Array<number>(data.length).fill(width);
    }
    return Array.from({ length: data.length }, (_, i) => {
      for (let j = width - 1; j >= 0; j--) if (Number(mask[i * stride + offset + j]) !== 0) return j + 1;
      return 0;
    });
  }

  /** A per-row number column from the tensors or the non-tensor batch, or null when absent. */
  private rowValues(data: DataProto, key: string): number[] | null {
    const t = data.batch[key];
    if (t) return Array.from(t.data as ArrayLike<number>, Number);
    const c = data.nonTensorBatch[key];
    return c ? c.map(Number) : null;
  }

  /** Stops the worker threads; a later large batch starts them again. */
  async close(): Promise<void> {
    const pool = this.pool;
    this.pool = null;
    await pool?.close();
  }
}
