/**
 * The trainer's phases as the cluster sees them while a run goes: each phase a span of the
 * cluster timeline (`torl timeline`, `trainer.timeline`), an observation of the
 * `torl_trainer_phase_duration_seconds` histogram (/metrics), and the step's phases so far as this
 * process's "trainer" activity (the dashboard's current step).
 */
import { metricHistogram, setProcessActivity, traceSpan } from "@torl-ts/core";

const phaseSeconds = metricHistogram(
  "torl_trainer_phase_duration_seconds",
  "Seconds each phase of a training step took in this driver (gen, reward, old_log_prob, ref, adv, update_actor, ...; step: a whole training step, testing: a validation).",
  ["phase"],
);

export class PhaseTracker {
  private step = 0;
  private done: Record<string, number> = {};
  private current: { name: string; sinceMs: number } | undefined;

  /** A new step begins: its phases so far are none. */
  beginStep(step: number): void {
    this.step = step;
    this.done = {};
    this.current = undefined;
    this.publish();
  }

  /** Runs phase `name` of the current step (several runs of one name add up). */
  async run<T>(name: string, f: () => Promise<T>): Promise<T> {
    const outer = this.current;
    this.current = { name, sinceMs: Date.now() };
    this.publish();
    const s = performance.now();
    try {
      return await traceSpan(name, f, { cat: "trainer", args: { step: this.step } });
    } finally {
      const seconds = (performance.now() - s) / 1000;
      phaseSeconds.observe({ phase: name }, seconds);
      this.done[name] = (this.done[name] ?? 0) + seconds;
      this.current = outer;
      this.publish();
    }
  }

  /** The run ended: the trainer is no longer doing anything. */
  end(): void {
    setProcessActivity("trainer", undefined);
  }

  private publish(): void {
    setProcessActivity("trainer", {
      step: this.step,
      ...(this.current ? { phase: this.current.name, phaseSinceMs: this.current.sinceMs } : {}),
      phases: { ...this.done },
    });
  }
}
