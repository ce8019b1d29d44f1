// Every error name the runtime's documents mention is a class exported by @torl-ts/actors (or, for
// the CLI's errors, by @torl-ts/core), and
// the errors the head answers with arrive as those classes (usable with instanceof).
import { readFileSync } from "node:fs";
import * as actors from "@torl-ts/actors";
import {
  ActorNotFoundError,
  getActor,
  InfeasibleResourceError,
  init,
  PlacementGroupError,
  placementGroup,
  ResourceRequestError,
  removePlacementGroup,
  shutdown,
} from "@torl-ts/actors";
import * as core from "@torl-ts/core";
import test from "ava";

const DOCS = [
  "docs/ray-users.md",
  "docs/cluster.md",
  "docs/security.md",
  "packages/actors/README.md",
  "packages/core/README.md",
];

function documentedErrorNames(): string[] {
  const names = new Set<string>();
  for (const doc of DOCS) {
    let text: string;
    try {
      text = readFileSync(new URL(`../../../${doc}`, import.meta.url), "utf8");
    } catch {
      continue; // a document not written yet names nothing
    }
    // Ray's own names, in the column that maps them to ours, are not ours to export
    text = text.replace(/ray\.exceptions\.\w+/g, "");
    for (const m of text.matchAll(/\b[A-Z][A-Za-z]*Error\b/g)) names.add(m[0]);
  }
  return [...names].sort();
}

test("every error name in the runtime's documents is an exported Error class", (t) => {
  const names = documentedErrorNames();
  t.true(names.includes("ActorNotFoundError"), `found ${names.join(", ")}`);
  const exported = { ...core, ...actors } as unknown as Record<string, unknown>;
  const builtIn = globalThis as unknown as Record<string, unknown>;
  for (const name of names) {
    if (name in builtIn) continue; // TypeError, RangeError ...: JavaScript's own
    const C = exported[name];
    t.is(typeof C, "function", `${name} is documented but not exported by @torl-ts/actors or @torl-ts/core`);
    t.true((C as { prototype: unknown }).prototype instanceof Error, `${name} is not an Error class`);
  }
});

test.serial("the head's refusals arrive as typed classes", async (t) => {
  await init({ numCpus: 1 });
  try {
    const notFound = await t.throwsAsync(getActor("no-such-actor"), { instanceOf: ActorNotFoundError });
    t.regex(notFound!.message, /no-such-actor/);
    const never = placementGroup([{ CPU: 64 }]);
    await t.throwsAsync(never.ready(), { instanceOf: InfeasibleResourceError });
    const pg = placementGroup([{ CPU: 1 }]);
    await pg.ready();
    await removePlacementGroup(pg);
    await t.throwsAsync(pg.ready(), { instanceOf: PlacementGroupError, message: /removed/ });
    // a malformed request is refused at the call site, by the check the head applies too
    t.throws(() => placementGroup([{ CPU: -1 }]), { instanceOf: ResourceRequestError });
  } finally {
    await shutdown();
  }
});
