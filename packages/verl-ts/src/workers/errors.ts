/** Errors of the trained workers. */

/** A worker used before its model is loaded, or asked for what its role does not hold. */
export class WorkerStateError extends Error {
  override name = "WorkerStateError";
}
