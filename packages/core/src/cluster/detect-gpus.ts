/** GPUs of this machine: CUDA_VISIBLE_DEVICES if set, else `nvidia-smi`'s list, else none. */
import { execFileSync } from "node:child_process";

export function detectGpuIds(): number[] {
  const visible = process.env.CUDA_VISIBLE_DEVICES;
  if (visible !== undefined) {
    return visible
      .split(",")
      .map((s) => s.trim())
      .filter((s) => /^\d+$/.test(s))
      .map(Number);
  }
  try {
    const out = execFileSync("nvidia-smi", ["--query-gpu=index", "--format=csv,noheader"], {
      timeout: 3000,
      stdio: ["ignore", "pipe", "ignore"],
    });
    return String(out)
      .split("\n")
      .map((s) => s.trim())
      .filter((s) => /^\d+$/.test(s))
      .map(Number);
  } catch {
    return [];
  }
}
