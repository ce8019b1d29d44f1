/** ObjectRef: a handle to a value owned by some process; awaitable like a promise. */
import { currentRuntime } from "./current.js";

/** Where an object's owner can be reached. */
export interface OwnerAddress {
  tcp: string;
  ipc?: string;
  host?: string;
}

export class ObjectRef<T = unknown> implements PromiseLike<T> {
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

  toString(): string {
    return `ObjectRef(${this.id})`;
  }
}
