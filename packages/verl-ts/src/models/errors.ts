/** A model, weight, config or tokenizer file that cannot be used; names the file and the tensor or key. */
import { InputError, TorlError } from "@torl-ts/core";
export class ModelFormatError extends InputError {
  override name = "ModelFormatError";
  constructor(
    message: string,
    /** The file at fault. */
    readonly file: string,
    /** The tensor name or config key at fault, when there is one. */
    readonly key?: string,
  ) {
    super(`${file}${key ? ` [${key}]` : ""}: ${message}`);
  }
}

/** A tensor backend that was asked for but cannot start here. */
export class BackendUnavailableError extends TorlError {
  constructor(
    readonly backend: string,
    /** What to install or set up to get it. */
    readonly hint: string,
    override readonly cause?: unknown,
  ) {
    super(`tensor backend '${backend}' is not available: ${hint}`);
  }
}

/**
 * A weight was used while the model does not hold it: its weights were evicted (sharded at rest, the
 * owner gathers them from the shards for a pass) and the pass began without gathering them.
 */
export class WeightNotHeldError extends TorlError {
  constructor(readonly weight: string) {
    super(`weight ${weight} is not held: the model's weights were evicted between passes; gather them first`);
  }
}
