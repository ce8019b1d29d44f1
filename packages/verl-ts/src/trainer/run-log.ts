/**
 * A run's outputs under `runs/<name>/`: metrics.jsonl (one object per step: {"step": N, ...metrics}),
 * summary.json at the end, config.yaml, a console line per step (trainer.logger "console") and any
 * further metric sinks (tensorboard, wandb, mlflow). On resume the lines of steps after the checkpoint
 * are dropped so the file reads as if the run had never stopped.
 */
import { appendFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { createMetricSinks, type MetricsSink } from "./loggers.js";

export type StepMetrics = Record<string, number>;

/** How a trainer's run is run and where its outputs go (the PPO and SFT trainers' common options). */
export interface RunOptions {
  /** Where runs/<name> goes. Default "runs". */
  runsDir?: string;
  /** Run name; default trainer.experiment_name. */
  runName?: string;
  /** Console output; default console.log. */
  log?: (line: string) => void;
  /** Extra environment for the worker processes (e.g. TORL_BACKEND). */
  workerEnv?: Record<string, string>;
  /** Bundles with GPUs; default: when the cluster has a GPU per worker. */
  useGpu?: boolean;
  /** Called after each logged step (progress hooks, tests). */
  onStep?: (step: number, metrics: StepMetrics) => void | Promise<void>;
}

/**
 * The run's log with the metric sinks trainer.logger names (a logger whose client is missing stops the
 * run here, before any worker) and `configYaml` written as config.yaml.
 */
export async function openRunLog(
  opts: RunOptions,
  trainer: { project_name: string; experiment_name: string; logger: readonly string[] },
  config: unknown,
  configYaml: string,
  print: (line: string) => void,
): Promise<RunLog> {
  const log = new RunLog(
    opts.runsDir ?? "runs",
    opts.runName ?? trainer.experiment_name,
    print,
    trainer.logger.includes("console"),
  );
  log.addSinks(
    await createMetricSinks(trainer.logger, {
      runDir: log.dir,
      project: trainer.project_name,
      experiment: trainer.experiment_name,
      config,
    }),
  );
  log.writeFile("config.yaml", configYaml);
  return log;
}

export class RunLog {
  readonly dir: string;
  readonly metricsFile: string;
  private sinks: MetricsSink[] = [];

  /** `print` receives a line per step when `console` is on (the default). */
  constructor(
    runsDir: string,
    name: string,
    private readonly print: (line: string) => void,
    private readonly console = true,
  ) {
    this.dir = resolve(runsDir, name);
    this.metricsFile = join(this.dir, "metrics.jsonl");
    mkdirSync(this.dir, { recursive: true });
  }

  /** Starts the metrics file: empty for a fresh run, the lines up to `step` when resuming from it. */
  start(resumeStep: number | undefined): void {
    if (resumeStep === undefined || !existsSync(this.metricsFile)) {
      writeFileSync(this.metricsFile, "");
      return;
    }
    const kept = readMetrics(this.metricsFile).filter((m) => m.step <= resumeStep);
    writeFileSync(this.metricsFile, kept.map((m) => `${JSON.stringify(m)}\n`).join(""));
  }

  /** Sends every later step to `sinks` too. */
  addSinks(sinks: MetricsSink[]): void {
    this.sinks.push(...sinks);
  }

  /** Appends one step's metrics, prints its line, and hands it to the sinks. */
  async log(step: number, totalSteps: number, metrics: StepMetrics): Promise<void> {
    appendFileSync(this.metricsFile, `${JSON.stringify({ step, ...metrics })}\n`);
    if (this.console) this.print(formatStepLine(step, totalSteps, metrics));
    for (const sink of this.sinks) await sink.log(step, metrics);
  }

  /** Closes the sinks (event files, remote runs). */
  async close(): Promise<void> {
    const sinks = this.sinks;
    this.sinks = [];
    for (const sink of sinks) await sink.close();
  }

  writeFile(name: string, text: string): void {
    writeFileSync(join(this.dir, name), text);
  }
}

/** Every line of a metrics.jsonl file as objects (a torn last line, from a kill, is skipped). */
export function readMetrics(file: string): ({ step: number } & StepMetrics)[] {
  const out: ({ step: number } & StepMetrics)[] = [];
  for (const line of readFileSync(file, "utf8").split("\n")) {
    if (!line.trim()) continue;
    try {
      out.push(JSON.parse(line));
    } catch {
      // a line cut short by a kill
    }
  }
  return out;
}

const SHOWN: [string, string][] = [
  ["train/loss", "loss"],
  ["val/loss", "val_loss"],
  ["train/lr", "lr"],
  ["critic/score/mean", "score"],
  ["actor/pg_loss", "pg_loss"],
  ["actor/entropy", "entropy"],
  ["actor/grad_norm", "grad_norm"],
  ["train/grad_norm", "grad_norm"],
  ["critic/vf_loss", "vf_loss"],
  ["critic/vf_explained_var", "vf_ev"],
  ["response_length/mean", "resp_len"],
  ["tool/code_ratio", "code"],
  ["tool/pass_ratio", "pass"],
  ["val/acc", "val_acc"],
  ["timing_s/step", "s"],
];

function fmt(v: number): string {
  if (!Number.isFinite(v)) return String(v);
  const a = Math.abs(v);
  return a !== 0 && (a < 1e-3 || a >= 1e5) ? v.toExponential(2) : String(Number(v.toFixed(4)));
}

/** `step 3/10 [=====     ] score 0.25 pg_loss -0.01 ...` */
export function formatStepLine(step: number, total: number, m: StepMetrics): string {
  const width = 20;
  const done = total > 0 ? Math.min(width, Math.round((step / total) * width)) : 0;
  const bar = `[${"=".repeat(done)}${" ".repeat(width - done)}]`;
  const parts = SHOWN.filter(([k]) => k in m).map(([k, short]) => `${short} ${fmt(m[k]!)}`);
  return `step ${step}/${total} ${bar} ${parts.join(" | ")}`;
}
