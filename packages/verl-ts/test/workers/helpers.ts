/** Shared setup for the worker and trainer tests: a tiny random model directory and configs. */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TrainerConfig } from "../../src/config/index.js";
import { buildByteBpeTokenizer, createRandomPretrained } from "../../src/models/index.js";
import { DataProto } from "../../src/protocol/index.js";
import { type BoundGroup, ResourcePool, WorkerGroup, workerRole } from "../../src/single-controller/index.js";
import { ActorRolloutRefWorker } from "../../src/workers/index.js";
import { TINY_TEST_ARCH } from "../models/tiny-config.js";

export const WORKER_MODULE = new URL("../../src/workers/actor-rollout-ref.ts", import.meta.url).href;

export type ActorGroup = BoundGroup<typeof ActorRolloutRefWorker>;

/** `ranks` actor workers (one process each, a collective group, the cpu backend unless given) named `name`. */
export async function actorGroup(
  name: string,
  ranks: number,
  config: TrainerConfig,
  collectiveSharedMemory?: boolean,
  backend: "cpu" | "wasm" = "cpu",
): Promise<ActorGroup & { release(): Promise<void> }> {
  const pool = new ResourcePool({ processOnNodes: [ranks], useGpu: false, namePrefix: name });
  const group = (await WorkerGroup.create(
    pool,
    workerRole(ActorRolloutRefWorker, { module: WORKER_MODULE }, { config }),
    { name, collective: true, env: { TORL_BACKEND: backend }, collectiveSharedMemory },
  )) as ActorGroup;
  // shutdown ends the workers but, as in Ray, keeps the pool's reservation: release gives the CPUs back
  let released = false;
  const handle = Object.assign(group, {
    async release() {
      if (released) return;
      released = true;
      unreleased.delete(handle);
      await group.shutdown();
      await pool.release();
    },
  });
  unreleased.add(handle);
  return handle;
}

/** The groups actorGroup made whose release has not been called. */
const unreleased = new Set<{ release(): Promise<void> }>();

/**
 * Releases every group a test left unreleased (it failed before its own release), so that the tests
 * after it in the file do not wait for the CPUs its pool holds: for `test.afterEach.always` in a file
 * whose tests run one at a time.
 */
export async function releaseLeftGroups(): Promise<void> {
  for (const g of [...unreleased]) await g.release();
}

/** A byte-level tokenizer (259 tokens) and a random 2-layer Qwen2 model with hidden size 32, saved. */
export function tinyModelDir(seed = 7): string {
  const dir = mkdtempSync(join(tmpdir(), "torl-tiny-model-"));
  const tok = buildByteBpeTokenizer();
  createRandomPretrained(dir, tok, TINY_TEST_ARCH, { seed, std: 0.1 });
  return dir;
}

/**
 * A batch of B rows: prompts of promptLen(b) tokens left-padded to P, responses of responseLen(b)
 * tokens right-padded to R (input_ids, attention_mask, responses, response_mask), token ids from
 * token(b, t) (t < P: prompt position, t >= P: response position P + i), and per row a value
 * rowValue(b) at every response token under the name `valueKey` (advantages, returns, ...).
 */
export function responseBatch(o: {
  B: number;
  P: number;
  R: number;
  promptLen: (b: number) => number;
  responseLen: (b: number) => number;
  token: (b: number, t: number) => number;
  valueKey: string;
  rowValue: (b: number) => number;
}): DataProto {
  const { B, P, R } = o;
  const L = P + R;
  const ids = new Int32Array(B * L);
  const attn = new Uint8Array(B * L);
  const resp = new Int32Array(B * R);
  const mask = new Uint8Array(B * R);
  const values = new Float32Array(B * R);
  for (let b = 0; b < B; b++) {
    for (let t = P - o.promptLen(b); t < P; t++) {
      ids[b * L + t] = o.token(b, t);
      attn[b * L + t] = 1;
    }
    const v = o.rowValue(b);
    for (let i = 0; i < o.responseLen(b); i++) {
      const id = o.token(b, P + i);
      ids[b * L + P + i] = id;
      resp[b * R + i] = id;
      attn[b * L + P + i] = 1;
      mask[b * R + i] = 1;
      values[b * R + i] = v;
    }
  }
  return DataProto.fromDict({
    input_ids: { data: ids, shape: [B, L] },
    attention_mask: { data: attn, shape: [B, L] },
    responses: { data: resp, shape: [B, R] },
    response_mask: { data: mask, shape: [B, R] },
    [o.valueKey]: { data: values, shape: [B, R] },
  });
}

/** `prompts` left-padded prompts of 2-4 tokens (each repeated n times) to width P, seeded for sampling by `step`. */
export function seededPrompts(prompts: number, n: number, P: number, step: number): DataProto {
  const B = prompts * n;
  const ids = new Int32Array(B * P);
  const mask = new Uint8Array(B * P);
  for (let b = 0; b < B; b++) {
    const q = Math.floor(b / n);
    for (let t = P - 2 - (q % 3); t < P; t++) {
      ids[b * P + t] = 97 + ((q * 5 + t * 3 + step) % 26);
      mask[b * P + t] = 1;
    }
  }
  return DataProto.fromDict(
    { input_ids: { data: ids, shape: [B, P] }, attention_mask: { data: mask, shape: [B, P] } },
    {},
    { seed: 100 + step },
  );
}
