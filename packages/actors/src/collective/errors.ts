import { TorlError } from "@torl-ts/core";

/** Base class of every error raised by the collective layer. */
export class CollectiveError extends TorlError {
  constructor(
    message: string,
    /** Group the failing call belonged to. */
    readonly group: string,
    /** Rank of the process that raised the error, when known. */
    readonly rank?: number,
  ) {
    super(message);
  }
}

/** A collective call named a group this process is not a member of. */
export class CollectiveGroupNotFoundError extends CollectiveError {}

/** Ranks called different collectives, or the same one with different lengths / dtypes. */
export class CollectiveMismatchError extends CollectiveError {}

/** No message arrived from the ring neighbour within the group's timeout. */
export class CollectiveTimeoutError extends CollectiveError {
  constructor(
    message: string,
    group: string,
    rank: number,
    readonly timeoutMs: number,
  ) {
    super(message, group, rank);
  }
}

/** A previous call on this group failed mid-way; the ring is out of step and must be recreated. */
export class CollectiveGroupBrokenError extends CollectiveError {
  constructor(
    message: string,
    group: string,
    rank: number,
    override readonly cause: unknown,
  ) {
    super(message, group, rank);
  }
}

/**
 * The group was destroyed (`group.destroy()` in the driver, or `collective.destroyGroup` here) while
 * this call waited or before it started. The driver destroys a group to release the survivors of a
 * member that died.
 */
export class CollectiveGroupDestroyedError extends CollectiveError {}

/** Bad arguments (unsupported array type, bad rank, unknown op...). */
export class CollectiveArgumentError extends CollectiveError {}
