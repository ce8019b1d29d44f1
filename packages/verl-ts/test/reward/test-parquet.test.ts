import { readFileSync } from "node:fs";
import { extractBoxedAnswer, isEquivalentAnswer } from "@torl-ts/verl";
import test from "ava";
import { parquetReadObjects } from "hyparquet";

/** A copy of ToRL's validation set (its released test.parquet: AIME24, AIME25, MATH500 level 5). */
const PARQUET = new URL("../fixtures/reward/torl-test.parquet", import.meta.url);

/**
 * Ground truths of different problems that are the same answer under the documented rules: "x=5" names
 * the value 5, and "\\$36" is 36 dollars. Everything else must stay apart.
 */
const SAME_VALUE = new Set(["5|x=5", "36|\\$36"]);

test("every test.parquet ground truth matches itself boxed and none of the other distinct answers", async (t) => {
  const buf = readFileSync(PARQUET);
  const rows = await parquetReadObjects({
    file: buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength),
  });
  const truths = [
    ...new Set(rows.map((r) => (r as { reward_model: { ground_truth: string } }).reward_model.ground_truth)),
  ];
  t.true(truths.length > 100);
  const problems: string[] = [];
  for (const g of truths) {
    const boxed = extractBoxedAnswer(`The final answer is $\\boxed{${g}}$.`);
    if (boxed === null || !isEquivalentAnswer(boxed, g)) problems.push(`not equal to itself boxed: ${g}`);
    for (const h of truths) {
      if (h === g || !isEquivalentAnswer(h, g)) continue;
      if (!SAME_VALUE.has([g, h].sort().join("|"))) problems.push(`${h} matched ${g}`);
    }
  }
  t.deepEqual(problems, []);
});
