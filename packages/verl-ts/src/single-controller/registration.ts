import { DataProto } from "../protocol/data-proto.js";

/** A worker-group call that cannot be dispatched or collected (wrong argument shapes, bad outputs). */
export class DispatchError extends Error {
  override name = "DispatchError";
}

/** How one driver call is split into per-rank calls and how their outputs are put back together. */
export interface DispatchMode {
  name: string;
  /** Per-rank argument lists (length worldSize) plus anything collect needs (e.g. the padding). */
  dispatch(worldSize: number, args: unknown[], method: string): { perRank: unknown[][]; context?: unknown };
  collect(outputs: unknown[], context: unknown, method: string): unknown;
}

/** Which ranks execute: every rank, or rank 0 only (its output is returned as is). */
export type ExecuteMode = "all" | "rank_zero";
export const Execute = { ALL: "all", RANK_ZERO: "rank_zero" } as const satisfies Record<string, ExecuteMode>;

const replicate = (worldSize: number, args: unknown[]) => Array.from({ length: worldSize }, () => args);

function splitAllToAll(worldSize: number, args: unknown[], method: string): unknown[][] {
  return Array.from({ length: worldSize }, (_, r) =>
    args.map((a, i) => {
      if (!Array.isArray(a) || a.length !== worldSize) {
        throw new DispatchError(
          `${method}: argument ${i} must be a list with one entry per rank (${worldSize}), got ${
            Array.isArray(a) ? `a list of ${a.length}` : typeof a
          }`,
        );
      }
      return a[r];
    }),
  );
}

/** Pads every DataProto argument to a multiple of worldSize and chunks it; other arguments are replicated. */
function splitDataProtos(
  worldSize: number,
  args: unknown[],
  method: string,
): { perRank: unknown[][]; context: number } {
  let padSize: number | undefined;
  let length: number | undefined;
  const chunked = args.map((a, i) => {
    if (!(a instanceof DataProto)) return null;
    if (length !== undefined && a.length !== length) {
      throw new DispatchError(
        `${method}: DataProto arguments differ in length (${length} vs ${a.length} at ${i})`,
      );
    }
    length = a.length;
    const padded = a.padToDivisor(worldSize);
    padSize = padded.padSize;
    return padded.data.chunk(worldSize);
  });
  if (length === undefined)
    throw new DispatchError(`${method}: DP_COMPUTE_PROTO needs at least one DataProto argument`);
  const perRank = Array.from({ length: worldSize }, (_, r) =>
    args.map((a, i) => (chunked[i] ? chunked[i]![r] : a)),
  );
  return { perRank, context: padSize ?? 0 };
}

function concatProtos(outputs: unknown[], padSize: number, method: string): DataProto {
  outputs.forEach((o, r) => {
    if (!(o instanceof DataProto)) {
      throw new DispatchError(
        `${method}: rank ${r} returned ${typeof o}, DP_COMPUTE_PROTO needs a DataProto`,
      );
    }
  });
  return DataProto.concat(outputs as DataProto[]).unpad(padSize);
}

/**
 * The predefined dispatch modes (veRL's names):
 * - ONE_TO_ALL: every rank gets the same arguments; the result is the list of outputs.
 * - ALL_TO_ALL: every argument is a list of worldSize entries, rank r gets entry r; the list of outputs.
 * - DP_COMPUTE: same split as ALL_TO_ALL (data-parallel lists); the list of outputs.
 * - DP_COMPUTE_PROTO: DataProto arguments are padded to a multiple of worldSize and chunked, the
 *   outputs (DataProtos) concatenated and the padding rows stripped.
 * - DP_COMPUTE_METRIC: DataProto split as DP_COMPUTE_PROTO; the list of outputs (metrics per rank).
 * - RANK_ZERO: only rank 0 is called, with the arguments as given; its output is the result.
 * Custom modes are any object implementing DispatchMode.
 */
export const Dispatch = {
  ONE_TO_ALL: {
    name: "ONE_TO_ALL",
    dispatch: (w, args) => ({ perRank: replicate(w, args) }),
    collect: (outputs) => outputs,
  },
  ALL_TO_ALL: {
    name: "ALL_TO_ALL",
    dispatch: (w, args, method) => ({ perRank: splitAllToAll(w, args, method) }),
    collect: (outputs) => outputs,
  },
  DP_COMPUTE: {
    name: "DP_COMPUTE",
    dispatch: (w, args, method) => ({ perRank: splitAllToAll(w, args, method) }),
    collect: (outputs) => outputs,
  },
  DP_COMPUTE_PROTO: {
    name: "DP_COMPUTE_PROTO",
    dispatch: (w, args, method) => splitDataProtos(w, args, method),
    collect: (outputs, padSize, method) => concatProtos(outputs, padSize as number, method),
  },
  DP_COMPUTE_METRIC: {
    name: "DP_COMPUTE_METRIC",
    dispatch: (w, args, method) => splitDataProtos(w, args, method),
    collect: (outputs) => outputs,
  },
  RANK_ZERO: {
    name: "RANK_ZERO",
    dispatch: (w, args) => ({ perRank: [args, ...Array.from({ length: w - 1 }, () => [])] }),
    collect: (outputs) => outputs[0],
  },
} as const satisfies Record<string, DispatchMode>;

export type DispatchModeName = keyof typeof Dispatch;

export interface RegisterOptions {
  /** A predefined mode (object or name) or a custom DispatchMode. Default ALL_TO_ALL (as veRL). */
  dispatchMode?: DispatchMode | DispatchModeName;
  /** Default "all". RANK_ZERO dispatch implies "rank_zero". */
  executeMode?: ExecuteMode;
}

/** How one method is registered: its dispatch mode (object or predefined name), or the full options. */
export type Registration = DispatchMode | DispatchModeName | RegisterOptions;

type MethodKeys<T> = { [K in keyof T]: T[K] extends (...args: never[]) => unknown ? K : never }[keyof T] &
  string;

/**
 * The registered methods of a worker class (veRL's `@register`), declared on the class itself so the
 * driver's bound methods can be typed from it:
 * `static readonly registered = { generateSequences: Dispatch.DP_COMPUTE_PROTO } satisfies Registrations<MyWorker>;`
 * A subclass spreads its base's: `{ ...Base.registered, ... }`.
 */
export type Registrations<T> = { readonly [K in MethodKeys<T>]?: Registration };

export interface ResolvedRegistration {
  dispatch: DispatchMode;
  execute: ExecuteMode;
}

export function resolveRegistration(registration: Registration = {}): ResolvedRegistration {
  const opts: RegisterOptions =
    typeof registration === "string" || "dispatch" in registration
      ? { dispatchMode: registration }
      : registration;
  const mode = opts.dispatchMode ?? Dispatch.ALL_TO_ALL;
  const dispatch = typeof mode === "string" ? Dispatch[mode] : mode;
  if (!dispatch || typeof dispatch.dispatch !== "function" || typeof dispatch.collect !== "function") {
    throw new DispatchError(
      `unknown dispatch mode ${JSON.stringify(typeof mode === "string" ? mode : (mode as { name?: string })?.name)} (known: ${Object.keys(Dispatch).join(", ")}, or an object with dispatch and collect)`,
    );
  }
  const execute = opts.executeMode ?? (dispatch === Dispatch.RANK_ZERO ? Execute.RANK_ZERO : Execute.ALL);
  if (execute !== "all" && execute !== "rank_zero") {
    throw new DispatchError(`unknown execute mode ${JSON.stringify(execute)} (known: all, rank_zero)`);
  }
  return { dispatch, execute };
}

/** A worker class: its static `registered` names the methods a WorkerGroup binds. */
export type WorkerClass = abstract new (...args: never[]) => unknown;

/** The registered methods of a class (its static `registered`, inherited when not its own), by name. */
export function registeredMethods(cls: WorkerClass): Map<string, ResolvedRegistration> {
  const declared = (cls as { registered?: Record<string, Registration> }).registered ?? {};
  if (typeof declared !== "object" || declared === null) {
    throw new DispatchError(`${cls.name}.registered must be an object of method names to dispatch modes`);
  }
  const out = new Map<string, ResolvedRegistration>();
  for (const [name, registration] of Object.entries(declared)) {
    if (typeof (cls.prototype as Record<string, unknown>)[name] !== "function") {
      throw new DispatchError(`${cls.name}.registered names "${name}", which is not a method of ${cls.name}`);
    }
    out.set(name, resolveRegistration(registration));
  }
  return out;
}

// ---- the driver-side types: what a dispatch mode does to a method's arguments and result ----------

/** The predefined mode a registration names, or `string` for a custom mode. */
type ModeName<E> = E extends DispatchModeName
  ? E
  : E extends DispatchMode
    ? E["name"]
    : E extends { dispatchMode: infer M }
      ? ModeName<M>
      : "ALL_TO_ALL";

/** ALL_TO_ALL and DP_COMPUTE take every argument as a list with one entry per rank. */
type PerRankArgs<P extends readonly unknown[]> = { [I in keyof P]: P[I][] };

/**
 * The driver-side signature of a worker method `F` registered as `E`:
 * - DP_COMPUTE_PROTO: the same arguments and result (the chunks' outputs are concatenated);
 * - ONE_TO_ALL, DP_COMPUTE_METRIC: the same arguments, one result per rank;
 * - ALL_TO_ALL, DP_COMPUTE: each argument as a list per rank, one result per rank;
 * - RANK_ZERO, or executeMode "rank_zero": rank 0's result;
 * - a custom mode: its collect decides, so arguments and result are unknown.
 */
export type BoundMethod<F, E> = F extends (...args: infer P) => infer R
  ? ModeName<E> extends "ALL_TO_ALL" | "DP_COMPUTE"
    ? (...args: PerRankArgs<P>) => Promise<E extends { executeMode: "rank_zero" } ? Awaited<R> : Awaited<R>[]>
    : ModeName<E> extends "ONE_TO_ALL" | "DP_COMPUTE_METRIC"
      ? (...args: P) => Promise<E extends { executeMode: "rank_zero" } ? Awaited<R> : Awaited<R>[]>
      : ModeName<E> extends "DP_COMPUTE_PROTO" | "RANK_ZERO"
        ? (...args: P) => Promise<Awaited<R>>
        : (...args: unknown[]) => Promise<unknown>
  : never;

type RegisteredOf<C> = C extends { readonly registered: infer D } ? D : Record<never, never>;

/** The driver-side methods of a group of worker class C: each registered method fans out and collects. */
export type BoundMethods<C extends WorkerClass> = {
  [K in keyof RegisteredOf<C> & MethodKeys<InstanceType<C>>]: BoundMethod<
    InstanceType<C>[K],
    RegisteredOf<C>[K]
  >;
};
