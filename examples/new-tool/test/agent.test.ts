import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readMetrics, selectBackend } from "@torl-ts/verl";
import test from "ava";
import { trainAgent } from "../src/train-agent.js";
import { agentHabitModel } from "./agent-model.js";
import { undocumented } from "./metrics-doc.js";

test.serial(
  "the stock trainer trains two steps of the multi-turn agent loop, calling both tools of one tool config",
  async (t) => {
    // A tiny chat model taught one conversation (calculator, then code interpreter, then the answer), so
    // both tools are really called while training; the tools are built in the worker from the tool config.
    await selectBackend({ backend: "wasm", log: null });
    const { dir, finalLoss } = await agentHabitModel();
    t.true(finalLoss < 0.05, `the hermes habit was learned (loss ${finalLoss})`);
    const runsDir = mkdtempSync(join(tmpdir(), "agent-runs-"));
    const ckpt = mkdtempSync(join(tmpdir(), "agent-ckpt-"));
    const lines: string[] = [];
    const summary = await trainAgent({
      overrides: [`actor_rollout_ref.model.path=${dir}`, `trainer.default_local_dir=${ckpt}`],
      runsDir,
      workerEnv: { TORL_BACKEND: "cpu" },
      log: (l) => lines.push(l),
    });
    t.log(lines.slice(-4).join("\n"));
    t.is(summary.steps, 2);
    const metrics = readMetrics(join(summary.run_dir, "metrics.jsonl"));
    for (const m of metrics)
      for (const key of ["actor/pg_loss", "critic/score/mean", "num_turns/mean", "tool/malformed_call_ratio"])
        t.true(Number.isFinite(m[key]), `step ${m.step}: ${key} = ${m[key]}`);
    const called = (name: string) => metrics.some((m) => (m[`tool/${name}/calls_per_response`] ?? 0) > 0);
    t.true(called("calculator"), "the calculator was called");
    t.true(called("code_interpreter"), "the sandbox code interpreter was called");
    t.true(
      metrics.some((m) => m["tool/pass_ratio"]! > 0 && m["num_turns/max"]! >= 4),
      "calls ran and their responses came back as tool turns",
    );
    const emitted = new Set(metrics.flatMap((m) => Object.keys(m)));
    t.deepEqual(undocumented(emitted), [], "every metric the trainer wrote is listed in docs/metrics.md");
  },
);
