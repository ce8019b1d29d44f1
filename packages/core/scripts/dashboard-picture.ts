/**
 * Writes docs/pictures/dashboard.png: a small cluster (three actors, one killed, a placement group)
 * and a training run directory, shown by the dashboard in headless Chromium.
 * Usage: pnpm tsx packages/core/scripts/dashboard-picture.ts RUN_DIR [OUT.png]
 */
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import {
  clusterStatus,
  createActor,
  init,
  kill,
  placementGroup,
  shutdown,
  startDashboard,
} from "../src/index.js";
import { chromium } from "./headless-chromium.js";

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
// The page as its script drew it (--dump-dom), then that DOM without the script, screenshotted: a
// page that redraws forever never lets a headless screenshot settle.
const dom = await chromium(["--virtual-time-budget=3000", "--dump-dom", dashboard.url]);
const still = join(mkdtempSync(join(tmpdir(), "torl-pic-")), "dashboard.html");
writeFileSync(still, `<!doctype html>\n${dom.replace(/<script>[\s\S]*?<\/script>/, "")}`);
await chromium([`--screenshot=${resolve(out)}`, "--window-size=1280,1000", pathToFileURL(still).href]);
await dashboard.close();
await shutdown();
console.log(out);
