/**
 * actor_rollout_ref.model.external_lib: a module of the user's, imported in the driver and in every
 * worker process before the model is built, so whatever it registers (a policy loss with
 * registerPolicyLoss, an advantage estimator, a reward scorer) exists where it runs. veRL names a Python
 * module here; we take a module path (relative to the working directory), a file: URL, or a package name.
 */
import { existsSync } from "node:fs";
import { isAbsolute, resolve } from "node:path";
import { pathToFileURL } from "node:url";

export const EXTERNAL_LIB_KEY = "actor_rollout_ref.model.external_lib";

/** The module named by external_lib could not be imported. */
export class ExternalLibError extends Error {
  override name = "ExternalLibError";
  constructor(
    readonly key: string,
    readonly spec: string,
    override readonly cause: unknown,
  ) {
    super(
      `${key}=${spec} could not be imported: ${cause instanceof Error ? cause.message : String(cause)} (give a module path, a file: URL or an installed package name)`,
    );
  }
}

/**
 * The import specifier for `spec`: a path (./x, ../x, /x, or an existing file relative to `cwd`)
 * becomes an absolute file: URL, so worker processes find it whatever their working directory; a URL
 * or a package name is kept.
 */
export function externalLibSpecifier(spec: string, cwd = process.cwd()): string {
  if (/^[a-z][a-z0-9+.-]*:/i.test(spec) && !/^[a-z]:[\\/]/i.test(spec)) return spec;
  const looksLikePath = spec.startsWith(".") || isAbsolute(spec) || existsSync(resolve(cwd, spec));
  return looksLikePath ? pathToFileURL(resolve(cwd, spec)).href : spec;
}

/** Imports the module `spec` names (nothing for null or ""); a failure names the key and the module. */
export async function importExternalLib(
  spec: string | null | undefined,
  key: string = EXTERNAL_LIB_KEY,
): Promise<void> {
  if (!spec) return;
  try {
    await import(externalLibSpecifier(spec));
  } catch (e) {
    throw new ExternalLibError(key, spec, e);
  }
}
