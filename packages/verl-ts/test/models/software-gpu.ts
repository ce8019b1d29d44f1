/**
 * The environment that lets Dawn (the `webgpu` package) find SwiftShader, the Vulkan implementation on
 * the CPU that Debian's chromium ships: VK_ICD_FILENAMES names its ICD file, found at run time from the
 * installed packages, and when the system has no Vulkan loader (libvulkan.so.1) the chromium directory,
 * which ships one, goes on LD_LIBRARY_PATH. Both are read at process start: use them for a child process.
 */
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname } from "node:path";

export type SoftwareGpu = { ok: true; env: Record<string, string>; icd: string } | { ok: false; why: string };

function packageFiles(pkg: string): string[] {
  try {
    return execFileSync("dpkg", ["-L", pkg], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).split(
      "\n",
    );
  } catch {
    return [];
  }
}

function hasSystemVulkanLoader(): boolean {
  try {
    return execFileSync("ldconfig", ["-p"], { encoding: "utf8" }).includes("libvulkan.so.1");
  } catch {
    return false;
  }
}

export function softwareGpu(): SoftwareGpu {
  // The ICD lives in chromium-common on Debian 12 and in chromium on some other releases.
  const icd = ["chromium", "chromium-common"]
    .flatMap(packageFiles)
    .find((f) => f.endsWith("/vk_swiftshader_icd.json") && existsSync(f));
  if (!icd)
    return {
      ok: false,
      why: "no SwiftShader ICD (vk_swiftshader_icd.json) in the chromium packages: run .ci/setup.d/chromium.sh",
    };
  const env: Record<string, string> = { VK_ICD_FILENAMES: icd };
  if (!hasSystemVulkanLoader()) {
    const dir = dirname(icd);
    if (!existsSync(`${dir}/libvulkan.so.1`))
      return {
        ok: false,
        why: `no Vulkan loader: neither libvulkan1 nor ${dir}/libvulkan.so.1 is installed`,
      };
    env.LD_LIBRARY_PATH = [dir, process.env.LD_LIBRARY_PATH].filter(Boolean).join(":");
  }
  return { ok: true, env, icd };
}
