/**
 * The package's public API: one subpath per concept, the root re-exporting each of them, and no
 * benchmark code in any package's API (benchmarks are reached through the CLI registries).
 */
import * as actors from "@torl-ts/actors";
import * as core from "@torl-ts/core";
import * as sandbox from "@torl-ts/sandbox";
import * as verl from "@torl-ts/verl";
import test from "ava";

const CONCEPTS = [
  "algorithms",
  "config",
  "data",
  "evaluation",
  "models",
  "protocol",
  "reward",
  "rollout",
  "single-controller",
  "trainer",
  "workers",
] as const;

for (const concept of CONCEPTS)
  test(`@torl-ts/verl/${concept} imports on its own, and the root re-exports every name of it`, async (t) => {
    const sub = (await import(`@torl-ts/verl/${concept}`)) as Record<string, unknown>;
    t.is(sub, await import(`../src/${concept}/index.js`), `the subpath is src/${concept}/index.ts`);
    const root = verl as Record<string, unknown>;
    const missing = Object.keys(sub).filter((name) => root[name] !== sub[name]);
    t.deepEqual(missing, [], `the root re-exports ${concept} as it is`);
  });

test("the root exports nothing that no concept subpath holds", async (t) => {
  const held = new Set<string>();
  for (const concept of CONCEPTS)
    for (const name of Object.keys(await import(`@torl-ts/verl/${concept}`))) held.add(name);
  t.deepEqual(
    Object.keys(verl).filter((name) => !held.has(name)),
    [],
  );
});

test("the benchmarks' timing helpers are on @torl-ts/verl/timing alone, not in the root", async (t) => {
  const timing = await import("@torl-ts/verl/timing");
  t.is(typeof timing.decodeTiming, "function");
  t.deepEqual(
    Object.keys(timing).filter((name) => name in verl),
    [],
  );
});

test("no package's public API exports benchmark code", (t) => {
  const apis: Record<string, object> = {
    "@torl-ts/core": core,
    "@torl-ts/actors": actors,
    "@torl-ts/sandbox": sandbox,
    "@torl-ts/verl": verl,
  };
  for (const [pkg, api] of Object.entries(apis))
    t.deepEqual(
      Object.keys(api).filter((name) => /bench/i.test(name)),
      [],
      pkg,
    );
});
