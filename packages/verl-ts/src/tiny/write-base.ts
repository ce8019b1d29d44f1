/** The tiny base model this package ships, copied where a user wants it (`torl model tiny`). */
import { copyFileSync, existsSync, mkdirSync, readdirSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { UsageError } from "@torl-ts/core";
import { TINY_BASE_DIR } from "./tiny-model.js";

/** Copies the tiny base model's files into `out` (created; refused if it holds files, unless `force`). */
export function writeTinyBase(out: string, options: { force?: boolean } = {}): string[] {
  const dir = resolve(out);
  if (existsSync(dir)) {
    if (!statSync(dir).isDirectory()) throw new UsageError(`--out ${out} is a file, not a directory`);
    if (readdirSync(dir).length > 0 && !options.force)
      throw new UsageError(`--out ${out} exists and is not empty (pass --force to write into it anyway)`);
  }
  const files = readdirSync(TINY_BASE_DIR).filter((f) => statSync(join(TINY_BASE_DIR, f)).isFile());
  if (!files.includes("config.json"))
    throw new Error(
      `the tiny base model is missing from this installation: ${TINY_BASE_DIR} has no config.json`,
    );
  mkdirSync(dir, { recursive: true });
  for (const f of files) copyFileSync(join(TINY_BASE_DIR, f), join(dir, f));
  return files.sort();
}
