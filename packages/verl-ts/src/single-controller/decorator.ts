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

export interface ResolvedRegistration {
  dispatch: DispatchMode;
  execute: ExecuteMode;
}

const REGISTERED: unique symbol = Symbol.for("torl-ts.verl.register") as never;

export function resolveRegistration(opts: RegisterOptions = {}): ResolvedRegistration {
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

/**
 * Marks a worker method for worker groups. Usable as a (standard) decorator:
 *   `@register({ dispatchMode: Dispatch.DP_COMPUTE_PROTO }) generateSequences(batch) {...}`
 * or without decorators: `registerMethod(MyWorker, "generateSequences", {...})`.
 */
export function register(opts: RegisterOptions = {}) {
  const reg = resolveRegistration(opts);
  return <F extends (...args: any[]) => any>(fn: F, _context?: unknown): F => {
    (fn as unknown as Record<symbol, ResolvedRegistration>)[REGISTERED] = reg;
    return fn;
  };
}

/** Registers `cls.prototype[method]` (the decorator-free form of `register`). */
export function registerMethod(
  cls: abstract new (...a: any[]) => any,
  method: string,
  opts: RegisterOptions = {},
): void {
  const fn = (cls.prototype as Record<string, unknown>)[method];
  if (typeof fn !== "function") throw new DispatchError(`${cls.name} has no method "${method}" to register`);
  register(opts)(fn as (...args: any[]) => any);
}

/** The registered methods of a class (walking its prototype chain), by name. */
export function registeredMethods(cls: abstract new (...a: any[]) => any): Map<string, ResolvedRegistration> {
  const out = new Map<string, ResolvedRegistration>();
  for (let p = cls.prototype; p && p !== Object.prototype; p = Object.getPrototypeOf(p)) {
    for (const name of Object.getOwnPropertyNames(p)) {
      if (name === "constructor" || out.has(name)) continue;
      const d = Object.getOwnPropertyDescriptor(p, name);
      const reg =
        typeof d?.value === "function"
          ? (d.value as Record<symbol, ResolvedRegistration>)[REGISTERED]
          : undefined;
      if (reg) out.set(name, reg);
    }
  }
  return out;
}
