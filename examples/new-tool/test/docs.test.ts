/**
 * The reference pages in docs/ cannot go stale: the configuration table must be exactly what the schema
 * generates, and every metric name the trainer's metric functions emit must be listed in docs/metrics.md.
 */
import {
  balanceBatch,
  computeDataMetrics,
  computeMultiTurnMetrics,
  computeToolMetrics,
  computeValidationMetrics,
  DataProto,
  rolloutMetrics,
  trainerConfigSchema,
} from "@torl-ts/verl";
import test from "ava";
import { configReference } from "../src/config-reference.js";
import { docs, undocumented } from "./metrics-doc.js";

test("docs/configuration.md is what the schema generates, so it lists every key with its default", (t) => {
  const committed = docs("configuration.md");
  // Compared modulo table padding, so formatting the page with biome keeps it valid.
  const normalize = (md: string) =>
    md
      .split("\n")
      .map((l) => l.replace(/ +/g, " ").replace(/-{3,}/g, "---").trimEnd())
      .join("\n");
  t.is(
    normalize(committed),
    normalize(configReference()),
    "regenerate: pnpm tsx examples/new-tool/src/config-reference.ts > docs/configuration.md && pnpm biome format --write docs",
  );
  const keys = trainerConfigSchema().keys();
  t.true(keys.length > 150);
  for (const key of keys)
    t.regex(committed, new RegExp(`^\\| \`${key.replace(/\./g, "\\.")}\` +\\|`, "m"), key);
});

test("every metric name the trainer's metric functions emit is listed in docs/metrics.md", (t) => {
  const B = 2;
  const R = 3;
  const P = 2;
  const f = (n: number) => ({ data: new Float32Array(n).fill(1), shape: [B, n / B] });
  const batch = DataProto.fromDict(
    {
      token_level_scores: f(B * R),
      token_level_rewards: f(B * R),
      advantages: f(B * R),
      returns: f(B * R),
      values: f(B * R),
      response_mask: f(B * R),
      responses: { data: new Int32Array(B * R), shape: [B, R] },
      prompts: { data: new Int32Array(B * P), shape: [B, P] },
      attention_mask: f(B * (P + R)),
      num_tool_calls: { data: new Int32Array([1, 0]), shape: [B] },
      num_tool_passes: { data: new Int32Array([1, 0]), shape: [B] },
      num_turns: { data: new Int32Array([4, 2]), shape: [B] },
      num_malformed_calls: { data: new Int32Array([0, 0]), shape: [B] },
    },
    {
      tool_observations: [["42"], []],
      extracted_answer: ["42", null],
      tool_call_names: [["calculator"], []],
    },
  );
  const emitted = {
    ...computeDataMetrics(batch),
    ...computeToolMetrics(batch),
    ...computeMultiTurnMetrics(batch),
    ...computeToolMetrics(batch, "val/tool"),
    ...computeValidationMetrics(["aime24", "math500"], [true, false], [1, -1]),
    ...rolloutMetrics([]),
    ...balanceBatch(batch, 2).metrics,
  };
  t.true(Object.keys(emitted).length > 25, Object.keys(emitted).join(" "));
  t.deepEqual(undocumented(Object.keys(emitted)), []);
});

test("the metric check itself rejects a name the page does not list", (t) => {
  t.deepEqual(undocumented(["actor/pg_loss", "reward/aime24/acc", "actor/made_up"]), ["actor/made_up"]);
});
