/**
 * Where a run's metrics go (veRL's trainer.logger): console (a line per step), file (the run's
 * metrics.jsonl, which every run writes since the summary and the report read it), tensorboard (event
 * files in the run directory), wandb and mlflow (their Node clients, loaded only when installed).
 */
import { InputError } from "@torl-ts/core";
import type { LoggerName } from "../config/check.js";
import { TensorBoardWriter } from "./tensorboard.js";

/** A destination of step metrics beyond metrics.jsonl and the console. */
export interface MetricsSink {
  log(step: number, metrics: Record<string, number>): void | Promise<void>;
  close(): void | Promise<void>;
}

/** A logger whose client is not installed (or not configured): says what to install or set. */
export class LoggerUnavailableError extends InputError {
  override name = "LoggerUnavailableError";
  constructor(
    readonly logger: LoggerName,
    readonly hint: string,
  ) {
    super(`trainer.logger: ${logger} is not available: ${hint}`);
  }
}

/** Imports an optional client package; absent, stops with the install hint. */
async function importClient(logger: LoggerName, pkg: string): Promise<Record<string, unknown>> {
  try {
    return (await import(pkg)) as Record<string, unknown>;
  } catch (e) {
    if ((e as { code?: string }).code === "ERR_MODULE_NOT_FOUND")
      throw new LoggerUnavailableError(
        logger,
        `its client is not installed: pnpm add ${pkg} (or drop ${logger})`,
      );
    throw e;
  }
}

interface WandbClient {
  init(opts: { project: string; name: string; config?: unknown }): Promise<unknown>;
  log(metrics: Record<string, number>, opts: { step: number }): void;
  finish(): Promise<void>;
}

interface MlflowClient {
  Experiments: {
    list(): Promise<{ experiments?: { experiment_id: string; name: string }[] }>;
    create(opts: { name: string }): Promise<{ experiment_id: string }>;
  };
  Runs: {
    create(opts: {
      experiment_id: string;
      start_time: number;
      tags?: { key: string; value: string }[];
    }): Promise<{
      run: { info: { run_id: string } };
    }>;
    logBatch(opts: {
      run_id: string;
      metrics: { key: string; value: number; timestamp: number; step: number }[];
    }): Promise<unknown>;
    update(opts: { run_id: string; status: string; end_time: number }): Promise<unknown>;
  };
}

export interface MetricSinkOptions {
  runDir: string;
  project: string;
  experiment: string;
  /** The run's config, sent to the clients that keep one. */
  config?: unknown;
}

/** The sinks for `names` (console and file are the run log's own); throws when a client is missing. */
export async function createMetricSinks(
  names: readonly string[],
  o: MetricSinkOptions,
): Promise<MetricsSink[]> {
  const sinks: MetricsSink[] = [];
  for (const name of new Set(names) as Set<LoggerName>) {
    if (name === "tensorboard") {
      const tb = new TensorBoardWriter(o.runDir);
      sinks.push({ log: (step, m) => tb.addScalars(step, m), close: () => tb.close() });
    } else if (name === "wandb") {
      const mod = await importClient("wandb", "@wandb/sdk");
      const wandb = (mod.default ?? mod) as WandbClient;
      await wandb.init({ project: o.project, name: o.experiment, config: o.config });
      sinks.push({ log: (step, m) => wandb.log(m, { step }), close: () => wandb.finish() });
    } else if (name === "mlflow") {
      const mod = await importClient("mlflow", "mlflow");
      const uri = process.env.MLFLOW_TRACKING_URI;
      if (!uri)
        throw new LoggerUnavailableError("mlflow", "set MLFLOW_TRACKING_URI to the tracking server's URL");
      const MLflow = (mod.default ?? mod) as new (o: { endpoint: string }) => MlflowClient;
      const client = new MLflow({ endpoint: uri });
      const known = (await client.Experiments.list()).experiments?.find((e) => e.name === o.project);
      const experimentId =
        known?.experiment_id ?? (await client.Experiments.create({ name: o.project })).experiment_id;
      const { run } = await client.Runs.create({
        experiment_id: experimentId,
        start_time: Date.now(),
        tags: [{ key: "mlflow.runName", value: o.experiment }],
      });
      const runId = run.info.run_id;
      sinks.push({
        log: async (step, m) => {
          const timestamp = Date.now();
          const metrics = Object.entries(m)
            .filter(([, v]) => Number.isFinite(v))
            .map(([key, value]) => ({ key, value, timestamp, step }));
          await client.Runs.logBatch({ run_id: runId, metrics });
        },
        close: async () => {
          await client.Runs.update({ run_id: runId, status: "FINISHED", end_time: Date.now() });
        },
      });
    }
  }
  return sinks;
}
