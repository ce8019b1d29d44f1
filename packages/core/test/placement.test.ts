import test from "ava";
import { placeBundles } from "../src/cluster/placement.js";
import { bundlePool, couldEverFit, makePool, release, tryAllocate } from "../src/cluster/resources.js";

const nodes = () => [
  { nodeId: "a", pool: makePool({ CPU: 4 }, [0, 1]) },
  { nodeId: "b", pool: makePool({ CPU: 4 }, [0, 1]) },
];

test("fractional GPUs pack onto the fullest GPU that fits; whole GPUs need free devices", (t) => {
  const p = makePool({ CPU: 8 }, [0, 1, 2]);
  const x = tryAllocate(p, { GPU: 0.5 })!;
  const y = tryAllocate(p, { GPU: 0.25 })!;
  t.deepEqual(x.gpus, [[0, 0.5]]);
  t.deepEqual(y.gpus, [[0, 0.25]], "best fit: the partly used GPU");
  t.deepEqual(tryAllocate(p, { GPU: 2 })!.gpus, [
    [1, 1],
    [2, 1],
  ]);
  t.is(tryAllocate(p, { GPU: 1 }), null);
  t.is(tryAllocate(p, { GPU: 0.5 }), null, "only 0.25 left on GPU 0");
  release(p, x);
  t.deepEqual(tryAllocate(p, { GPU: 0.5 })!.gpus, [[0, 0.5]]);
  t.false(couldEverFit(p, { GPU: 4 }));
  t.true(couldEverFit(p, { GPU: 3 }));
});

test("a bundle pool hands out exactly the GPU shares it reserved", (t) => {
  const node = makePool({ CPU: 4 }, [0, 1]);
  const b = bundlePool(tryAllocate(node, { CPU: 2, GPU: 1 })!);
  const r1 = tryAllocate(b, { CPU: 1, GPU: 0.5 })!;
  const r2 = tryAllocate(b, { CPU: 1, GPU: 0.5 })!;
  t.is(r1.gpus[0]![0], r2.gpus[0]![0]);
  t.is(tryAllocate(b, { GPU: 0.1 }), null);
  t.false(couldEverFit(b, { GPU: 2 }));
});

test("placement strategies", (t) => {
  const two = [{ CPU: 2 }, { CPU: 2 }];
  const pack = placeBundles(nodes(), two, "PACK")!;
  t.deepEqual(
    pack.map((p) => p.nodeId),
    ["a", "a"],
  );
  const spread = placeBundles(nodes(), two, "SPREAD")!;
  t.deepEqual(
    spread.map((p) => p.nodeId),
    ["a", "b"],
  );
  t.deepEqual(
    placeBundles(nodes(), two, "STRICT_SPREAD")!.map((p) => p.nodeId),
    ["a", "b"],
  );
  t.is(placeBundles(nodes(), [{ CPU: 1 }, { CPU: 1 }, { CPU: 1 }], "STRICT_SPREAD"), null);
  // PACK falls back to several nodes; STRICT_PACK does not, and rolls back what it took
  const n = nodes();
  t.deepEqual(
    placeBundles(n, [{ CPU: 3 }, { CPU: 3 }], "PACK")!.map((p) => p.nodeId),
    ["a", "b"],
  );
  const m = nodes();
  t.is(placeBundles(m, [{ CPU: 3 }, { CPU: 3 }], "STRICT_PACK"), null);
  t.is(m[0]!.pool.avail.CPU, 4);
  t.is(m[1]!.pool.avail.CPU, 4);
});
