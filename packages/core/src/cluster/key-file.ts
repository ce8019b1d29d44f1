/**
 * The cluster's key file: JSON `{ publicKey, secretKey, address? }`, readable by its owner only.
 * The head writes it (by default `cluster-keys.json` in the state directory); node agents, drivers
 * and `torl status` read it from a flag, from TORL_CLUSTER_KEYS, or from the state directory when
 * it names the head they join.
 */
import { existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import path from "node:path";
import { stateDir } from "../cli/state.js";
import { KeyFileError } from "../errors.js";
import { type ClusterKeys, checkKeyShape } from "../wire/security.js";

export interface KeyFile extends ClusterKeys {
  /** The head these keys belong to ("host:port"), when the head wrote the file. */
  address?: string;
}

export function defaultKeyFile(): string {
  return path.join(stateDir(), "cluster-keys.json");
}

export function readKeyFile(file: string): KeyFile {
  let mode: number;
  try {
    mode = statSync(file).mode;
  } catch {
    throw new KeyFileError(file, "does not exist");
  }
  if ((mode & 0o077) !== 0) {
    throw new KeyFileError(
      file,
      `is readable by other users (mode ${(mode & 0o777).toString(8)}); run chmod 600 ${file}`,
    );
  }
  let parsed: KeyFile;
  try {
    parsed = JSON.parse(readFileSync(file, "utf8"));
  } catch (e) {
    throw new KeyFileError(file, `is not JSON (${(e as Error).message})`);
  }
  try {
    checkKeyShape(parsed, file);
  } catch (e) {
    throw new KeyFileError(file, (e as Error).message);
  }
  return parsed;
}

/** Writes keys with mode 0600 (its folder 0700 when created here). */
export function writeKeyFile(file: string, keys: KeyFile): void {
  mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
  rmSync(file, { force: true });
  writeFileSync(file, `${JSON.stringify(keys)}\n`, { mode: 0o600, flag: "wx" });
}

export function keyFileExists(file: string): boolean {
  return existsSync(file);
}

/**
 * The keys a process joining the head at `address` should use: given ones (keys or a file path),
 * else the file TORL_CLUSTER_KEYS names, else the state directory's file if it belongs to that
 * head; null when none apply (the cluster is then expected to be plaintext, on loopback).
 */
export function resolveJoinKeys(
  given: ClusterKeys | string | undefined,
  address: string,
): ClusterKeys | null {
  if (typeof given === "object") {
    checkKeyShape(given, "init({ keys })");
    return { publicKey: given.publicKey, secretKey: given.secretKey };
  }
  const file = given ?? process.env.TORL_CLUSTER_KEYS;
  if (file) return pick(readKeyFile(file));
  const local = defaultKeyFile();
  if (!existsSync(local)) return null;
  const k = readKeyFile(local);
  return k.address === address ? pick(k) : null;
}

function pick(k: KeyFile): ClusterKeys {
  return { publicKey: k.publicKey, secretKey: k.secretKey };
}
