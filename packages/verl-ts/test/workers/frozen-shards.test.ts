/**
 * FrozenShards' tile layout: matrices named in `tiles` are kept in the AMX tiles' layout; a caller that
 * takes them so gets that layout, every other caller the matrix row-major, bit for bit; a matrix the
 * layout cannot hold is refused by name.
 */
import test from "ava";
import { HalfArray, type StoredValues } from "../../src/models/half-precision.js";
import { nativeBlas } from "../../src/models/native-blas.js";
import { FrozenShards } from "../../src/workers/frozen-shards.js";

const UP = "model.layers.0.mlp.up_proj.weight";
const NORM = "model.layers.0.input_layernorm.weight";
const SMALL = "model.layers.0.self_attn.k_proj.weight";

function bf16(n: number, seed: number): HalfArray {
  return HalfArray.fromFloat32(
    Float32Array.from({ length: n }, (_, i) => Math.sin(seed + i * 0.37)),
    "bfloat16",
  );
}

function model(): Map<string, StoredValues> {
  return new Map<string, StoredValues>([
    ["model.embed_tokens.weight", bf16(40 * 32, 1)],
    [NORM, bf16(32, 2)],
    [SMALL, bf16(32 * 16, 3)],
    [UP, bf16(32 * 64, 4)],
    ["model.norm.weight", bf16(32, 5)],
  ]);
}

const ctx = { rank: 0, worldSize: 1 };

test("a matrix in the tile layout: the layout to a caller that takes it, row-major to every other", async (t) => {
  const blas = nativeBlas();
  if (!blas) return t.pass("skipped: the OpenBLAS addon is not loaded here");
  const values = model();
  const shards = new FrozenShards(values, ctx, "bfloat16", new Map([[UP, [32, 64] as const]]));
  const u = shards.units.findIndex((unit) => unit.key === "layer 0");
  t.true(u >= 0);
  const laid = new Uint16Array(32 * 64);
  blas.packBf16Tiles((values.get(UP) as HalfArray).bits, 32, 64, 0, laid);

  const taken = await shards.unitParameters(u, undefined, { tiles: true });
  t.deepEqual([...taken.tiled], [UP]);
  t.deepEqual((taken.values.get(UP) as HalfArray).bits, laid, "the tiles' layout");
  for (const name of [NORM, SMALL])
    t.deepEqual((taken.values.get(name) as HalfArray).bits, (values.get(name) as HalfArray).bits);

  const plain = await shards.unitParameters(u);
  t.is(plain.tiled.size, 0);
  for (const name of [NORM, SMALL, UP])
    t.deepEqual((plain.values.get(name) as HalfArray).bits, (values.get(name) as HalfArray).bits, name);

  const gathered = (await shards.gatherUnit(u)) as HalfArray;
  const start = shards.units[u]!.entries.find((e) => e.name === UP)!.offset - shards.units[u]!.start;
  t.deepEqual(gathered.bits.subarray(start, start + 32 * 64), (values.get(UP) as HalfArray).bits);
  const gatheredLaid = (await shards.gatherUnit(u, undefined, { tiles: true })) as HalfArray;
  t.deepEqual(gatheredLaid.bits.subarray(start, start + 32 * 64), laid);
});

test("tiles the layout cannot hold are refused, naming the matrix", (t) => {
  if (!nativeBlas()) return t.pass("skipped: the OpenBLAS addon is not loaded here");
  t.throws(() => new FrozenShards(model(), ctx, "bfloat16", new Map([[SMALL, [32, 16] as const]])), {
    message: /k_proj\.weight: the tile layout holds a bfloat16 \[k, n\] matrix .*shape \[32, 16\]/,
  });
  t.throws(() => new FrozenShards(model(), ctx, "float32", new Map([[UP, [32, 64] as const]])), {
    message: /up_proj\.weight: .*dtype float32/,
  });
  t.throws(() => new FrozenShards(model(), ctx, "bfloat16", new Map([[UP, [64, 64] as const]])), {
    message: /up_proj\.weight: .*2048 values/,
  });
});
