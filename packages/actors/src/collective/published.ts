/**
 * Arrays that every rank of a group published once (collective.publish) and any rank reads from then on
 * without a collective call: each lives in a file of its rank's in /dev/shm (shared-memory.ts), which
 * every member opened. For data that never changes, such as a frozen model's shards, which an allGather
 * would otherwise write to shared memory again on every call.
 */
import { closeSync } from "node:fs";
import { type CollectiveArray, ctorOf, dtypeCode, dtypeName } from "./dtype.js";
import { CollectiveArgumentError, CollectiveError } from "./errors.js";
import { readAllAt } from "./shared-memory.js";

export class PublishedArrays<T extends CollectiveArray> {
  private files: number[] | undefined;

  /** @internal Made by collective.publish: `files[r]` holds rank r's array (this rank's own file included). */
  constructor(
    readonly group: string,
    readonly rank: number,
    files: number[],
    /** Each rank's published length, in elements. */
    readonly lengths: readonly number[],
    private readonly dtype: number,
  ) {
    this.files = files;
  }

  get worldSize(): number {
    return this.lengths.length;
  }

  /**
   * Elements `[start, start + into.length)` of rank `origin`'s array, read into `into` (of the published
   * type); returns `into`. Any rank may read any rank's array, its own included, at any time until close().
   */
  read(origin: number, start: number, into: T): T {
    const fd = this.fileOf(origin, "read");
    if (dtypeCode(into) !== this.dtype)
      throw new CollectiveArgumentError(
        `read: the published arrays are ${dtypeName(this.dtype)}, got ${(into as object)?.constructor?.name}`,
        this.group,
        this.rank,
      );
    const length = this.lengths[origin]!;
    if (!Number.isInteger(start) || start < 0 || start + into.length > length)
      throw new CollectiveArgumentError(
        `read: elements ${start}..${start + into.length} are past rank ${origin}'s published ${length}`,
        this.group,
        this.rank,
      );
    try {
      readAllAt(
        fd,
        new Uint8Array(into.buffer, into.byteOffset, into.byteLength),
        start * ctorOf(this.dtype).BYTES_PER_ELEMENT,
        `rank ${origin}'s published file`,
      );
    } catch (err) {
      throw new CollectiveError(
        `rank ${this.rank} could not read rank ${origin}'s published array in group "${this.group}": ${(err as Error).message}`,
        this.group,
        this.rank,
      );
    }
    return into;
  }

  /**
   * The file descriptor in this process that holds rank `origin`'s array from its first byte (read-only
   * for the other ranks' arrays), for a native module to map (mmap) instead of reading; valid until
   * close().
   */
  descriptor(origin: number): number {
    return this.fileOf(origin, "descriptor");
  }

  /** Rank `origin`'s file; `what` names the call in the error for a closed set or a rank outside the group. */
  private fileOf(origin: number, what: string): number {
    const files = this.files;
    if (!files)
      throw new CollectiveArgumentError(
        `${what}: the arrays published in group "${this.group}" were closed on rank ${this.rank}`,
        this.group,
        this.rank,
      );
    if (!Number.isInteger(origin) || origin < 0 || origin >= this.worldSize)
      throw new CollectiveArgumentError(
        `${what}: rank ${origin} is not a rank of group "${this.group}" (0..${this.worldSize - 1})`,
        this.group,
        this.rank,
      );
    return files[origin]!;
  }

  /** Closes this rank's files; the memory goes once every rank closed its own (or exited). */
  close(): void {
    const files = this.files;
    this.files = undefined;
    for (const fd of files ?? []) closeSync(fd);
  }
}
