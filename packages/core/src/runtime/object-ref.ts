/** ObjectRef: a handle to a value owned by some process; awaitable like a promise. */
import { currentRuntime } from "./current.js";

/** Where an object's owner can be reached. */
export interface OwnerAddress {
  tcp: string;
  ipc?: string;
  host?: string;
}

/** What a stream of a generator of T yields (see ObjectRefGenerator); never for other values. */
export type StreamItem<T> =
  T extends AsyncGenerator<infer Y, unknown, unknown>
    ? Y
    : T extends Generator<infer Y, unknown, unknown>
      ? Y
      : never;

/**
 * The ref a call of a generator method or task returns (Ray's ObjectRefGenerator): read its items
 * with `for await (const x of ref)` as they are produced. Awaiting it rejects with StreamUsageError.
 */
export type ObjectRefGenerator<Y> = ObjectRef<AsyncGenerator<Y, unknown, unknown>>;

export class ObjectRef<T = unknown> implements PromiseLike<T>, AsyncIterable<StreamItem<T>> {
  /** @internal cached value once fetched from a remote owner */
  _cached?: { ok: boolean; value: any };

  /** @internal refs are made by the runtime (calls, put, decoding) */
  constructor(
    readonly ownerId: string,
    readonly seq: number,
    readonly owner: OwnerAddress,
  ) {}

  /** Globally unique id: `<owner>:<seq>`. */
  get id(): string {
    return `${this.ownerId}:${this.seq}`;
  }

  // biome-ignore lint/suspicious/noThenProperty: ObjectRef is deliberately awaitable.
  then<R1 = T, R2 = never>(
    onFulfilled?: ((value: T) => R1 | PromiseLike<R1>) | null,
    onRejected?: ((reason: any) => R2 | PromiseLike<R2>) | null,
  ): Promise<R1 | R2> {
    return (currentRuntime().getOne(this) as Promise<T>).then(onFulfilled, onRejected);
  }

  catch<R = never>(onRejected?: ((reason: any) => R | PromiseLike<R>) | null): Promise<T | R> {
    return this.then(undefined, onRejected);
  }

  /**
   * The items of the stream this call returned, when its method or task is a generator (read in the
   * process that made the call, once). A ref of anything else throws StreamUsageError.
   */
  [Symbol.asyncIterator](): AsyncIterator<StreamItem<T>> {
    return currentRuntime().streams.reader(this) as AsyncIterator<StreamItem<T>>;
  }

  toString(): string {
    return `ObjectRef(${this.id})`;
  }
}
