import { readFileSync } from "node:fs";
import { join } from "node:path";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import test from "ava";
import { bundledQwenTokenizerDir, loadTokenizer } from "../../src/index.js";
import { PackedStringMap, PackedStrings } from "../../src/models/packed-strings.js";

test("packed strings read back every entry, undefined where there is none", (t) => {
  const strings = ["Ġthe", undefined, "", "世界", "🙂x", "a".repeat(300), undefined];
  const packed = new PackedStrings(strings);
  t.is(packed.length, strings.length);
  for (const [i, s] of strings.entries()) t.is(packed.at(i), s, `entry ${i}`);
  for (const i of [-1, 7, 1.5, Number.NaN]) t.is(packed.at(i), undefined, `index ${i}`);
  t.true(packed.equals(4, "🙂x"));
  t.false(packed.equals(4, "🙂y"));
  t.false(packed.equals(1, ""), "no entry is not the empty string");
  t.true(packed.equals(2, ""));
  t.throws(() => new PackedStrings([1 as unknown as string]), { instanceOf: TypeError, message: /entry 0/ });
});

test("a packed string map answers as the Map it was packed from, and takes later keys", (t) => {
  const map = new Map<string, number>();
  let seed = 7;
  const rnd = () => {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
    return seed;
  };
  for (let i = 0; i < 5000; i++)
    map.set(`k${rnd().toString(36)}${String.fromCharCode(rnd() % 0x3000)}`, i - 100);
  map.set("", 17);
  const packed = PackedStringMap.from(map)!;
  t.is(packed.size, map.size);
  for (const [k, v] of map) t.is(packed.get(k), v, `key ${JSON.stringify(k)}`);
  for (const k of ["absent", "k", "k0", "\u0000"]) {
    t.is(packed.get(k), map.get(k));
    t.is(packed.has(k), map.has(k));
  }
  t.deepEqual(new Map(packed), map, "iteration yields every entry once");
  packed.set("absent", 5).set("", 18);
  t.is(packed.get("absent"), 5);
  t.is(packed.get(""), 18, "a later set wins over the packed value");
  t.is(packed.size, map.size + 1);
  t.is([...packed].filter(([k]) => k === "").length, 1);
  t.is(PackedStringMap.from([["a", 1.5]]), undefined, "non-integer values are not packed");
  t.is(PackedStringMap.from([["a", 2 ** 31]]), undefined, "values past 32 bits are not packed");
});

/** The JavaScript heap's size after full collections (gc made available to this process). */
function heapAfterGc(): number {
  setFlagsFromString("--expose-gc");
  const gc = runInNewContext("gc") as () => void;
  gc();
  gc();
  return process.memoryUsage().heapUsed;
}

test("Qwen's tokenizer keeps its vocabulary and merges packed: a few MB of heap, the file as loaded", (t) => {
  let dir: string;
  try {
    dir = bundledQwenTokenizerDir();
  } catch (error) {
    t.log(`not checked: ${(error as Error).message}`);
    return t.pass();
  }
  const before = heapAfterGc();
  const tok = loadTokenizer(dir);
  const grown = heapAfterGc() - before;
  // held as one string, array and Map entry per token and merge, the same tables took ~49 MB, every
  // one of them visited by each full collection of a model worker
  t.true(grown < 20e6, `the tokenizer grew the heap by ${(grown / 1e6).toFixed(1)} MB`);
  const file = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8"));
  t.deepEqual(tok.json, file, "json gives the file's contents");
  t.is(tok.idToTokenString(tok.tokenToId("Ġthe")!), "Ġthe");
  t.is(
    tok.tokenToId("<|im_end|>"),
    file.added_tokens.find((a: { content: string }) => a.content === "<|im_end|>").id,
  );
  t.is(tok.tokenToId("no such token"), undefined);
  t.is(tok.idToTokenString(tok.vocabSize), undefined);
  t.is(tok.decode(tok.encode("Ġ the 世界 🙂 1234")), "Ġ the 世界 🙂 1234");
});
