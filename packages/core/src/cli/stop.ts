/** `torl stop`: stops the heads and node agents that `torl start` started on this machine. */
import { defineCommand } from "./define.js";
import { forgetDaemon, forgetHeadAddress, listDaemons } from "./state.js";

const usage = `usage: pnpm torl stop [--force]

Stops every head and node agent started on this machine by \`pnpm torl start\` (their workers too):
SIGTERM, then SIGKILL after 5 s (at once with --force).`;

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export const stopCommand = defineCommand({
  summary: "stop the cluster processes started on this machine",
  usage,
  flags: { force: { type: "boolean" } },
  async run(f) {
    const daemons = listDaemons();
    // nodes first, so they report their workers' exits while the head still listens
    daemons.sort((a, b) => (a.role === b.role ? 0 : a.role === "node" ? -1 : 1));
    for (const d of daemons) {
      if (!alive(d.pid)) {
        forgetDaemon(d.pid);
        continue;
      }
      process.kill(d.pid, f.force ? "SIGKILL" : "SIGTERM");
      const deadline = Date.now() + 5000;
      while (alive(d.pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      if (alive(d.pid)) process.kill(d.pid, "SIGKILL");
      forgetDaemon(d.pid);
      console.log(`stopped ${d.role} pid ${d.pid} (${d.address})`);
    }
    forgetHeadAddress();
    if (daemons.length === 0) console.log("nothing to stop");
  },
});
