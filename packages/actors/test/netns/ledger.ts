/** An actor that writes down every call it executes, so a test can count executions afterwards. */
import { appendFileSync } from "node:fs";
import { actor, getRuntimeContext, type ObjectRef, put } from "@torl-ts/actors";

export class Ledger {
  constructor(private file: string) {}
  where(): { nodeId: string | undefined; pid: number } {
    return { nodeId: getRuntimeContext().nodeId, pid: process.pid };
  }
  record(id: number): number {
    appendFileSync(this.file, `${id} ${process.pid}\n`);
    return id;
  }
  async slow(ms: number): Promise<number> {
    await new Promise((r) => setTimeout(r, ms));
    return ms;
  }
  /** A value of `n` floats each equal to `v` (fetched by the caller from this process). */
  make(n: number, v: number): Float32Array {
    return new Float32Array(n).fill(v);
  }
  /** A ref to an object this actor owns (wrapped, so the caller fetches it from here). */
  makeRef(n: number, v: number): [ObjectRef<Float32Array>] {
    return [put(new Float32Array(n).fill(v))];
  }
  sum(a: Float32Array): number {
    let s = 0;
    for (const x of a) s += x;
    return s;
  }
}

export const LedgerActor = actor(Ledger, { module: import.meta.url });
