/**
 * Writes docs/pictures/dashboard.png: a small cluster (three actors, one killed, a placement group)
 * and a training run directory, shown by the dashboard in headless Chromium.
 * Usage: pnpm tsx packages/core/scripts/dashboard-picture.ts RUN_DIR [OUT.png]
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import {
  clusterStatus,
  createActor,
  init,
  kill,
  placementGroup,
  shutdown,
  startDashboard,
} from "../src/index.js";

const [runDir, out = "docs/pictures/dashboard.png"] = process.argv.slice(2);
if (!runDir) throw new Error("usage: dashboard-picture.ts RUN_DIR [OUT.png]");
const fixture = new URL("../test/fixtures/counter.ts", import.meta.url).href;
await init({ numCpus: 4 });
const actors = ["rollout-0", "rollout-1", "reward"].map((name) =>
  createActor(fixture, "Counter", [0], { name }),
);
await Promise.all(actors.map((a) => (a as unknown as { inc(): Promise<number> }).inc()));
kill(actors[2]!);
const pg = placementGroup([{ CPU: 1 }, { CPU: 1 }], { strategy: "SPREAD", name: "actor-ranks" });
await pg.ready();
await new Promise((r) => setTimeout(r, 500));
const dashboard = await startDashboard({ status: clusterStatus, runDirs: [runDir], port: 0, refreshMs: 200 });
console.log(`dashboard at ${dashboard.url}; screenshot...`);
const profile = mkdtempSync(join(tmpdir(), "torl-pic-"));
execFileSync("timeout", [
  "120",
  "chromium",
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--hide-scrollbars",
  `--user-data-dir=${profile}`,
  "--virtual-time-budget=3000",
  `--screenshot=${resolve(out)}`,
  "--window-size=1280,1000",
  dashboard.url,
]);
await dashboard.close();
await shutdown();
console.log(out);
