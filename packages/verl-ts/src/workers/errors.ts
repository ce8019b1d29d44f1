/** Errors of the trained workers. */
import { TorlError } from "@torl-ts/core";

/** A worker used before its model is loaded, or asked for what its role does not hold. */
export class WorkerStateError extends TorlError {}
