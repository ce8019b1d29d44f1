/**
 * Handing a phase's transients back to the kernel. Worker processes keep the memory they free
 * (KEEP_FREED_MEMORY_ENV) so the next phase reuses pages instead of faulting in fresh ones; after a
 * phase whose transients do not come again (loading: each rank reads the whole model's values to cut
 * its shard out), that memory would stay in the resident set for the rest of the run.
 */
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { nativeBlas } from "../models/native-blas.js";

let collect: (() => void) | undefined;

/** V8's full collection, reachable without starting node with --expose-gc. */
function fullCollection(): () => void {
  if (!collect) {
    setFlagsFromString("--expose-gc");
    collect = runInNewContext("gc") as () => void;
  }
  return collect;
}

/**
 * Collects unreachable objects (their array buffers' memory goes back to malloc) and then has malloc give
 * every whole free page back to the kernel (the addon's trimHeap; without the addon, only the collection).
 * Returns whether pages went back.
 */
export function releaseTransientMemory(): boolean {
  const gc = fullCollection();
  gc();
  // V8 frees a collection's array buffers on a background thread; the next full collection waits for
  // that sweep to finish before it starts, so after it every buffer the first one found is freed
  gc();
  return nativeBlas()?.trimHeap() ?? false;
}
