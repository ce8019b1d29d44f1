/**
 * `pnpm torl bench scale` in the repository: the package's real-size probe (@torl-ts/verl's bench scale),
 * then right after it one rank's share of the same step on PyTorch (scripts/bench_scale_peer.py), one
 * thread, in float32 and in bfloat16, with each phase's seconds side by side and their ratios. Without an
 * importable torch the torl-ts figures come alone, with the reason.
 *
 * Then the footprint FSDP divides: the same step of the whole model in one PyTorch float32 process (AdamW
 * over every parameter, a frozen bfloat16 reference), whose peak over the number of ranks is the memory
 * target a rank's footprint (its peak plus its reference shard in /dev/shm) is held to.
 *
 * The PyTorch side runs full fine-tuning only: the side-by-side figures are the full fine-tuning run's
 * (`scale_fine_tuning: "full"`), and with --lora-rank the LoRA run's figures under `lora` have no PyTorch
 * counterpart (`lora.torch` says so).
 */
import { fileURLToPath } from "node:url";
import { defineBench } from "@torl-ts/core/cli";
import { type Qwen2Config, toHfConfig } from "@torl-ts/verl";
import {
  gigabytes,
  runScaleProbeFor,
  SCALE_FLAGS,
  SCALE_PHASES,
  SCALE_USAGE,
  type ScaleProbeResult,
  scaleConfig,
  scaleRound,
  scaleTorlFigures,
} from "@torl-ts/verl/bench/scale";
import { runTorchScript } from "./peer.js";

const SCALE_PEER_SCRIPT = fileURLToPath(new URL("../../scripts/bench_scale_peer.py", import.meta.url));

export { SCALE_PHASES };

const TORCH_DTYPES = { fp32: "float32", bf16: "bfloat16" } as const;

/** What the PyTorch script prints. */
interface TorchScaleRun {
  torch_version: string;
  threads: number;
  seconds: Record<string, number>;
  /** Every step's seconds by phase (seconds is the last one's); older scripts print none. */
  step_seconds?: Record<string, number>[];
  peak_rss_bytes: number;
}

/**
 * The one-rank workload the PyTorch side runs for a probe's result: its shapes, rows and lengths. With
 * `wholeModel`, the whole model's step in one process (the memory run, see the file comment), on the same
 * rows as one rank's: the target then allows a rank no more activations than its own rows'.
 */
export function torchScaleSpec(
  config: Qwen2Config,
  probe: Pick<ScaleProbeResult, "ranks" | "rows" | "prompt_length" | "response_length" | "steps">,
  dtype: "float32" | "bfloat16",
  wholeModel = false,
): object {
  const { rows, prompt_length, response_length } = probe;
  if (rows === undefined || prompt_length === undefined || response_length === undefined)
    throw new Error("the probe did not generate: no rows or lengths to give the PyTorch side");
  return {
    threads: 1,
    dtype,
    config: toHfConfig(config),
    rows: Math.ceil(rows / probe.ranks),
    prompt_length,
    new_tokens: response_length,
    ranks: probe.ranks,
    steps: probe.steps,
    ...(wholeModel ? { whole_model: true } : {}),
  };
}

/** `lora.torch` of a run with --lora-rank. */
export const SCALE_PEER_NO_LORA =
  "not run: the PyTorch side runs full fine-tuning only (see scale_fine_tuning)";

export type ScalePeerResult = ScaleProbeResult & { lora?: ScaleProbeResult & { torch?: string } } & Record<
    string,
    unknown
  >;

/**
 * The probe's result with the side-by-side keys: `scale_<phase>_seconds_torl`, and where torch ran,
 * `scale_<phase>_seconds_torch_{fp32,bf16}` and `scale_<phase>_ratio_{fp32,bf16}` (torch seconds over
 * torl-ts seconds: above 1, torl-ts is faster), `scale_peak_rss_bytes_torch_{fp32,bf16}`,
 * `scale_step_seconds_torch_{fp32,bf16}` (every step's seconds by phase); with the whole-model run,
 * `scale_peak_rss_bytes_torch_fp32_whole_model`, `scale_memory_target_bytes` (that over the ranks) and
 * `scale_memory_ratio` (the target over `scale_memory_bytes_torl`: 1 or above meets it); `torch` says
 * which torch ran or why none did, and which later run did not (the earlier runs' figures stand); `scale_fine_tuning` names what both sides' figures are (full
 * fine-tuning), and a LoRA run's figures (`lora`) get `torch` saying that PyTorch did not run them.
 */
export function mergeScalePeer(
  probe: ScaleProbeResult & { lora?: ScaleProbeResult },
  torch:
    | {
        ok: true;
        runs: Partial<Record<keyof typeof TORCH_DTYPES, TorchScaleRun>>;
        wholeModel?: TorchScaleRun;
        /** A later run that could not run (the earlier runs' figures stand): which, and why. */
        notRun?: string;
      }
    | { ok: false; why: string },
): ScalePeerResult {
  const out: ScalePeerResult = { ...probe, ...scaleTorlFigures(probe) };
  if (probe.lora) out.lora = { ...probe.lora, torch: SCALE_PEER_NO_LORA };
  if (!torch.ok) {
    out.torch = `not run: ${torch.why}`;
    return out;
  }
  const first = Object.values(torch.runs)[0];
  if (first) out.torch = `${first.torch_version}, ${first.threads} thread`;
  if (torch.notRun) out.torch = `${first ? `${out.torch}; ` : ""}not run: ${torch.notRun}`;
  for (const [short, run] of Object.entries(torch.runs)) {
    if (!run) continue;
    out[`scale_peak_rss_bytes_torch_${short}`] = run.peak_rss_bytes;
    for (const phase of SCALE_PHASES) {
      const theirs = run.seconds[phase];
      if (theirs === undefined) continue;
      out[`scale_${phase}_seconds_torch_${short}`] = scaleRound(theirs);
      const mine = probe.seconds[phase];
      if (mine !== undefined && mine > 0) out[`scale_${phase}_ratio_${short}`] = scaleRound(theirs / mine);
    }
    for (const part of ["update_forward_backward", "update_adamw"])
      if (run.seconds[part] !== undefined)
        out[`scale_${part}_seconds_torch_${short}`] = scaleRound(run.seconds[part]);
    // every step's, beside the probe's own step_seconds: the first step of each side pays first writes
    if (run.step_seconds)
      out[`scale_step_seconds_torch_${short}`] = run.step_seconds.map((step) =>
        Object.fromEntries(Object.entries(step).map(([k, v]) => [k, scaleRound(v)])),
      );
  }
  if (torch.wholeModel) {
    const whole = torch.wholeModel.peak_rss_bytes;
    out.scale_peak_rss_bytes_torch_fp32_whole_model = whole;
    out.scale_memory_target_bytes = Math.round(whole / probe.ranks);
    const mine = out.scale_memory_bytes_torl;
    if (typeof mine === "number" && mine > 0) out.scale_memory_ratio = scaleRound(whole / probe.ranks / mine);
  }
  return out;
}

/** The probe, then (when it generated) the PyTorch side in float32 and bfloat16, merged. */
export async function runScalePeer(flags: {
  arch?: Parameters<typeof scaleConfig>[0]["arch"];
  layers?: number;
  ranks?: number;
  "lora-rank"?: number;
  steps?: number;
  "keep-ref"?: boolean;
  "keep-actor-layers"?: boolean;
  "bf16-compute"?: boolean;
  python?: string;
}): Promise<ScalePeerResult> {
  const probe = await runScaleProbeFor(flags);
  if (probe.rows === undefined)
    return mergeScalePeer(probe, { ok: false, why: "the probe did not generate" });
  const config = scaleConfig(flags);
  const torchRun = (dtype: "float32" | "bfloat16", wholeModel = false) =>
    runTorchScript<TorchScaleRun>(
      flags.python ?? "python3",
      SCALE_PEER_SCRIPT,
      torchScaleSpec(config, probe, dtype, wholeModel),
      1,
    );
  const runs: Partial<Record<keyof typeof TORCH_DTYPES, TorchScaleRun>> = {};
  for (const [short, dtype] of Object.entries(TORCH_DTYPES) as [
    keyof typeof TORCH_DTYPES,
    "float32" | "bfloat16",
  ][]) {
    console.log(`PyTorch ${dtype}, 1 thread: one rank's share of the same step`);
    const r = torchRun(dtype);
    if (!r.ok) {
      console.log(`PyTorch side skipped: ${r.why}`);
      // the runs that came before keep their figures
      if (Object.keys(runs).length === 0) return mergeScalePeer(probe, r);
      return mergeScalePeer(probe, { ok: true, runs, notRun: `PyTorch ${dtype} and the rest: ${r.why}` });
    }
    runs[short] = r.out;
    // each side's figures as they come: a run stopped later keeps them in its log
    console.log(`PyTorch ${dtype}: ${JSON.stringify(r.out.seconds)}, peak ${r.out.peak_rss_bytes} bytes`);
  }
  console.log(
    "PyTorch float32, 1 thread: the whole model's step in one process (AdamW over every parameter, a frozen bfloat16 reference), for its memory",
  );
  const whole = torchRun("float32", true);
  if (!whole.ok) {
    console.log(`PyTorch whole-model run skipped: ${whole.why}`);
    return mergeScalePeer(probe, {
      ok: true,
      runs,
      notRun: `the whole-model run (no memory target): ${whole.why}`,
    });
  }
  const out = mergeScalePeer(probe, { ok: true, runs, wholeModel: whole.out });
  const gb = (bytes: unknown) => gigabytes(Number(bytes));
  console.log(
    `memory: a rank's footprint ${gb(out.scale_memory_bytes_torl)} GB (peak plus its reference shard in /dev/shm) ` +
      `against PyTorch's whole model ${gb(whole.out.peak_rss_bytes)} GB / ${probe.ranks} ranks = ` +
      `${gb(out.scale_memory_target_bytes)} GB: ratio ${out.scale_memory_ratio}`,
  );
  return out;
}

/** 1 when the probe failed, or the LoRA run of --lora-rank did. */
export function scalePeerExitCode(result: ScalePeerResult): number {
  return result.failed || result.lora?.failed ? 1 : 0;
}

export const benchScaleCommand = defineBench({
  summary:
    "real-size probe (Qwen2.5-0.5B shapes, bf16, 2 FSDP ranks, one GRPO step), then the same on PyTorch fp32 and bf16",
  usage: `${SCALE_USAGE}

In the repository, one rank's share of the same step then runs on PyTorch (examples/torl/scripts/
bench_scale_peer.py: the same shapes, layers, rows and lengths, one thread), in float32 and in bfloat16,
when \`python3 -c 'import torch'\` works (--python PATH for another interpreter). Added figures:
  scale_<phase>_seconds_torl, scale_<phase>_seconds_torch_{fp32,bf16}   per phase (generate,
      old_log_prob, ref_log_prob, update_actor)
  scale_<phase>_ratio_{fp32,bf16}      torch seconds / torl-ts seconds (above 1: torl-ts is faster)
  scale_peak_rss_bytes_torch_{fp32,bf16}, torch (the version, or why it did not run; a later run that
  could not run is named there, the earlier runs' figures kept)
  scale_steps                          both sides run --steps GRPO steps; the figures are the last one's
  scale_step_seconds_torch_{fp32,bf16} every PyTorch step's seconds by phase (step_seconds: torl-ts's)
  scale_peak_rss_bytes_torch_fp32_whole_model  the same step of the whole model in one PyTorch float32
      process (AdamW over every parameter, a frozen bfloat16 reference, one rank's rows): the footprint
      FSDP divides
  scale_memory_target_bytes            that over the number of ranks
  scale_memory_ratio                   scale_memory_target_bytes / scale_memory_bytes_torl (a rank's peak
      plus its reference shard in /dev/shm, the largest rank's): 1 or above meets the target
  scale_fine_tuning                    "full": the PyTorch side runs full fine-tuning only, so these
      figures are the full fine-tuning run's on both sides; with --lora-rank the LoRA figures under
      "lora" have no PyTorch counterpart (lora.torch says so)`,
  flags: { ...SCALE_FLAGS, python: { type: "string" } },
  measure: (flags) => runScalePeer(flags),
  show(result, flags) {
    if (!flags.json) console.log(JSON.stringify(result, null, 2));
  },
  exitCode: scalePeerExitCode,
});
