import { PromptLoader } from "@torl-ts/verl";
import test from "ava";
import { loadRecipeConfig, recipeRows, TINY_CONFIG } from "../src/recipe.js";

test("a seed sweep keeps the data split: trainer.seed and data.seed change the order, not the rows", async (t) => {
  const one = loadRecipeConfig([TINY_CONFIG], ["torl.train_problems=200", "torl.val_problems=40"]);
  const two = loadRecipeConfig(
    [TINY_CONFIG],
    ["torl.train_problems=200", "torl.val_problems=40", "trainer.seed=2", "data.seed=2"],
  );
  t.is(one.trainer.seed, 1);
  t.is(two.trainer.seed, 2);
  t.is(two.data.seed, 2);
  const a = await recipeRows(one);
  const b = await recipeRows(two);
  t.deepEqual(b.train, a.train, "the same training rows");
  t.deepEqual(b.val, a.val, "the same held-out rows");
  // the order the trainer draws them in follows data.seed
  const first = (seed: number) =>
    new PromptLoader(a.train, { batchSize: one.data.train_batch_size, shuffle: true, seed }).next().indices;
  t.notDeepEqual(first(two.data.seed), first(one.data.seed));
  t.deepEqual(first(one.data.seed), first(1), "and is fixed by it");
  // the split itself moves only with torl.split_seed
  const other = await recipeRows(
    loadRecipeConfig([TINY_CONFIG], ["torl.train_problems=200", "torl.val_problems=40", "torl.split_seed=2"]),
  );
  t.notDeepEqual(other.val, a.val);
});
