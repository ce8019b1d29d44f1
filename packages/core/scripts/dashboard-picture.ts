/**
 * Writes docs/pictures/dashboard.png: the dashboard, in headless Chromium, of a small cluster and a
 * training run directory. The cluster: two named actors (one busy in a long call with another call
 * queued behind it, one holding a ref to a 1 MiB object the driver owns), a thread actor busy in a
 * long call, a third actor killed (DEAD, with its cause), a placement group; the dashboard gets
 * every process's report (`processes`), so it shows the calls, the objects and who holds them.
 * Usage: pnpm tsx packages/core/scripts/dashboard-picture.ts RUN_DIR [OUT.png]
 * (RUN_DIR: a training run's directory, e.g. runs/<name> of `pnpm torl`, for its curves and phases.)
 */
import { existsSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import {
  clusterProcesses,
  clusterStatus,
  createActor,
  init,
  kill,
  placementGroup,
  put,
  shutdown,
  startDashboard,
} from "../src/index.js";
import type { Counter } from "../test/fixtures/counter.js";
import { chromium } from "./headless-chromium.js";

const [runDir, out = "docs/pictures/dashboard.png"] = process.argv.slice(2);
if (!runDir) throw new Error("usage: dashboard-picture.ts RUN_DIR [OUT.png]");
if (!existsSync(join(runDir, "metrics.jsonl"))) throw new Error(`${runDir} has no metrics.jsonl`);
const fixture = new URL("../test/fixtures/counter.ts", import.meta.url).href;
await init({ numCpus: 4, logToDriver: false });
const [rollout0, rollout1, reward] = ["rollout-0", "rollout-1", "reward"].map((name) =>
  createActor<Counter>(fixture, "Counter", [0], { name }),
) as [Counter, Counter, Counter];
const scorer = createActor<Counter>(fixture, "Counter", [0], { thread: true });
await Promise.all([rollout0.inc(), rollout1.inc(), reward.inc(), scorer.inc()]);
kill(reward);
const weights = put(new Float32Array(1 << 18)); // 1 MiB, owned by the driver
await rollout1.hold([weights]); // held by rollout-1 too
const pg = placementGroup([{ CPU: 1 }, { CPU: 1 }], { strategy: "SPREAD", name: "actor-ranks" });
await pg.ready();
// still running when the page is read: a current call, one queued behind it, and a thread actor's
const busy = [rollout0.slowInc(1, 600_000), rollout0.inc(), scorer.slowInc(1, 600_000)];
for (const p of busy) p.catch(() => {}); // they fail when the cluster shuts down
await new Promise((r) => setTimeout(r, 1500));
const dashboard = await startDashboard({
  status: clusterStatus,
  processes: clusterProcesses,
  runDirs: [runDir],
  port: 0,
  refreshMs: 200,
});
console.log(`dashboard at ${dashboard.url}; screenshot...`);
// The page as its script drew it (--dump-dom), then that DOM without the script, screenshotted: a
// page that redraws forever never lets a headless screenshot settle.
const dom = await chromium(["--virtual-time-budget=3000", "--dump-dom", dashboard.url]);
for (const part of [
  'data-current-call="slowInc"',
  "data-thread",
  "data-object-id",
  "data-metric",
  "data-phase",
])
  if (!dom.includes(part)) throw new Error(`the dashboard shows no ${part}: not a picture of it`);
const still = join(mkdtempSync(join(tmpdir(), "torl-pic-")), "dashboard.html");
writeFileSync(still, `<!doctype html>\n${dom.replace(/<script>[\s\S]*?<\/script>/, "")}`);
await chromium([`--screenshot=${resolve(out)}`, "--window-size=1280,1250", pathToFileURL(still).href]);
await dashboard.close();
await shutdown();
console.log(out);
