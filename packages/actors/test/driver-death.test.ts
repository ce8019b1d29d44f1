import { execFile, spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { ActorDiedError, getActor, init, shutdown } from "@torl-ts/actors";
import test from "ava";
import { CounterActor } from "./fixtures/classes.js";

// default timeouts on purpose: this is the behaviour a user gets without tuning anything
const run = promisify(execFile);
const CLI = fileURLToPath(new URL("../../../examples/torl/src/cli.ts", import.meta.url));
const DRIVER = fileURLToPath(new URL("./fixtures/busy-driver.ts", import.meta.url));
const env: NodeJS.ProcessEnv = {
  ...process.env,
  TORL_STATE_DIR: mkdtempSync(path.join(os.tmpdir(), "torl-dd-")),
};
delete env.TORL_CLIENT_TIMEOUT_MS;
delete env.TORL_NODE_TIMEOUT_MS;

async function torl(...args: string[]): Promise<string> {
  return (await run(process.execPath, ["--import", "tsx", CLI, ...args], { env })).stdout;
}

function startDriver(address: string, name: string, blockMs: number | "exit" = 0) {
  const child = spawn(process.execPath, ["--import", "tsx", DRIVER, address, name, String(blockMs)], {
    env,
    stdio: ["ignore", "pipe", "inherit"],
  });
  let out = "";
  child.stdout!.on("data", (d) => {
    out += String(d);
  });
  const line = (re: RegExp) =>
    new Promise<string>((resolve, reject) => {
      const check = () => {
        const m = re.exec(out);
        if (m) resolve(m[0]);
      };
      child.stdout!.on("data", check);
      child.once("exit", (code) => {
        check();
        reject(new Error(`driver exited (${code}) before printing ${re}; output: ${out}`));
      });
      check();
    });
  return { child, line };
}

let address = "";

test.before(async () => {
  const out = await torl("start", "--head", "--port", "0", "--num-cpus", "4");
  address = JSON.parse(out.trim().split("\n").pop()!).address;
  await init({ address });
});

test.after.always(async () => {
  await shutdown();
  await torl("stop", "--force");
});

test.serial(
  "a SIGKILLed driver's actors and names are freed within 10 s; status names the owner's death",
  async (t) => {
    const d = startDriver(address, "dd-orphan");
    await d.line(/ready/);
    const orphan = await getActor<any>("dd-orphan");
    t.is(await orphan.inc!(2), 2);
    const killedAt = Date.now();
    d.child.kill("SIGKILL");
    // a rerun takes the name again as soon as the head has cleaned up
    let rerun: any = null;
    while (!rerun && Date.now() - killedAt < 30_000) {
      try {
        rerun = CounterActor.options({ name: "dd-orphan" }).remote(7);
        await rerun.ready();
      } catch (e) {
        t.is((e as Error).name, "ActorNameTakenError", String(e));
        t.regex((e as Error).message, /already exists/);
        rerun = null;
        await new Promise((r) => setTimeout(r, 200));
      }
    }
    const freedMs = Date.now() - killedAt;
    t.log(`name free again ${freedMs} ms after SIGKILL of the driver`);
    t.truthy(rerun, "the name became free");
    // generous margin for a loaded machine; the default timeout is 8 s, checked every 0.6 s
    t.true(freedMs < 10_000 + 5_000, `freed after ${freedMs} ms`);
    t.is(await rerun.inc!(1), 8);
    const err = await t.throwsAsync(orphan.inc!(1), { instanceOf: ActorDiedError });
    t.is(err!.cause.kind, "owner_died");
    t.regex(err!.message, /its owner \(pid \d+\) is gone: it sent no heartbeat for \d+ ms/);
    const status = await torl("status");
    t.regex(status, /DEAD .*its owner \(pid \d+\) is gone: it sent no heartbeat/);
    t.notRegex(status, /killed by kill\(\)/);
  },
);

test.serial(
  "a driver that exits without shutdown() says goodbye: its actors are freed at once, and why",
  async (t) => {
    const d = startDriver(address, "dd-exited", "exit");
    await d.line(/ready/);
    const code = await new Promise<number | null>((resolve) =>
      d.child.exitCode !== null ? resolve(d.child.exitCode) : d.child.once("exit", resolve),
    );
    t.is(code, 0, "exits cleanly (its heartbeat thread closed its socket first)");
    const orphan = await getActor<any>("dd-exited").catch((e: Error) => e);
    if (!(orphan instanceof Error)) {
      // the goodbye reaches the head on the driver's own socket, the test's calls on others: a call
      // may still land in the short while before the head has freed the actor. Well inside the
      // heartbeat timeout (8 s), so what frees it is the goodbye, as the message below says.
      const goodbyeMs = 3_000;
      const since = Date.now();
      let answered = 0;
      while (Date.now() - since < goodbyeMs) {
        const r = await orphan.inc!(1).catch((e: Error) => e);
        if (r instanceof Error) break;
        answered++;
        await new Promise((r) => setTimeout(r, 50));
      }
      t.log(`calls answered after the driver's exit: ${answered} (${Date.now() - since} ms)`);
      const err = await t.throwsAsync(orphan.inc!(1), { instanceOf: ActorDiedError });
      t.is(err!.cause.kind, "owner_died");
      // not "it sent no heartbeat for ...": the head heard the goodbye, not the silence
      t.regex(err!.message, /its owner \(pid \d+\) is gone: it exited without calling shutdown\(\)/);
    } else t.regex(orphan.message, /dd-exited/, "already freed: its name is gone");
    const status = await torl("status");
    t.regex(status, /DEAD .*its owner \(pid \d+\) is gone: it exited without calling shutdown\(\)/);
  },
);

test.serial(
  "a driver blocked in synchronous work for longer than the timeout keeps its actors",
  async (t) => {
    const d = startDriver(address, "dd-busy", 11_000);
    await d.line(/ready/);
    const line = await d.line(/after block: .*/);
    t.is(line, "after block: 5", "its actor survived the blocked event loop");
  },
);
