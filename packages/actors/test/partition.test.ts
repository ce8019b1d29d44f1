/**
 * Partitions, not only deaths: a head and two node agents, each in its own network namespace (see
 * netns/harness.ts), with links cut and healed while a driver works. Figures go to the test log.
 */
import type { ChildProcess } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import test from "ava";
import { NetnsCluster, netnsUnavailable } from "./netns/harness.js";

const CLI = fileURLToPath(new URL("../../../examples/torl/src/cli.ts", import.meta.url));
const DRIVER = fileURLToPath(new URL("./netns/driver.ts", import.meta.url));
const PROXY = fileURLToPath(new URL("./netns/flaky-proxy.ts", import.meta.url));
const NODE_TIMEOUT_MS = 3000;
const HEAD = "198.18.0.1:6380";

const unavailable = netnsUnavailable();

interface Proc {
  child: ChildProcess;
  output: () => string;
  /** The lines of stdout received whole (up to its last newline). */
  wholeStdoutLines: () => string[];
  exited: Promise<number | null>;
}

let cluster: NetnsCluster;
const procs = new Map<string, Proc>();
let keyFile = "";

function envFor(name: string): NodeJS.ProcessEnv {
  return {
    ...process.env,
    TORL_STATE_DIR: path.join(cluster.dir, `state-${name}`),
    TORL_NO_IPC: "1",
    TORL_NODE_TIMEOUT_MS: String(NODE_TIMEOUT_MS),
  };
}

function run(name: string, member: string, args: string[], env: NodeJS.ProcessEnv): Proc {
  const child = cluster.spawn(member, process.execPath, ["--import", "tsx", ...args], env);
  let out = "";
  // stdout alone too: a driver's protocol lines are read from it, and only whole ones (a long result
  // line arrives in several chunks, and stderr's may land between them in `out`)
  let stdout = "";
  child.stdout!.on("data", (d) => {
    out += String(d);
    stdout += String(d);
  });
  child.stderr!.on("data", (d) => {
    out += String(d);
  });
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  const p = {
    child,
    output: () => out,
    wholeStdoutLines: () => stdout.slice(0, stdout.lastIndexOf("\n") + 1).split("\n"),
    exited,
  };
  procs.set(name, p);
  return p;
}

/** Starts a daemon (`torl start ... --block`) and waits for its ready line. */
async function daemon(name: string, member: string, args: string[]): Promise<void> {
  const p = run(name, member, [CLI, "start", "--block", ...args], envFor(name));
  const t0 = Date.now();
  while (!/"t":"ready"/.test(p.output())) {
    if (p.child.exitCode !== null || Date.now() - t0 > 60_000)
      throw new Error(`${name} did not start: ${p.output()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Runs a driver scenario: serves its cut/heal requests, returns its result. */
async function scenario(name: string, extraEnv: NodeJS.ProcessEnv = {}): Promise<any> {
  const work = path.join(cluster.dir, name);
  const { mkdirSync } = await import("node:fs");
  mkdirSync(work, { recursive: true });
  const p = run(name, "driver", [DRIVER, name, HEAD, keyFile, work], {
    ...envFor(name),
    TORL_NODE_IP: "198.18.0.100",
    ...extraEnv,
  });
  let seen = 0;
  const t0 = Date.now();
  for (;;) {
    const text = p.output();
    const lines = p.wholeStdoutLines().filter((l) => l.startsWith("@@ "));
    for (; seen < lines.length; seen++) {
      const msg = JSON.parse(lines[seen]!.slice(3));
      if (msg.result) return { ...msg.result, work, output: text };
      if (msg.error) throw new Error(`driver failed: ${msg.error}\n--- driver output ---\n${text}`);
      if (msg.op === "cut") cluster.cut(msg.member);
      else if (msg.op === "heal") cluster.heal(msg.member);
      p.child.stdin!.write("ok\n");
    }
    if (p.child.exitCode !== null) throw new Error(`driver exited early:\n${text}`);
    if (Date.now() - t0 > 120_000) throw new Error(`driver took over 120 s:\n${text}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

function executions(file: string): Map<number, number> {
  const counts = new Map<number, number>();
  let text = "";
  try {
    text = readFileSync(file, "utf8");
  } catch {}
  for (const line of text.split("\n").filter(Boolean)) {
    const id = Number(line.split(" ")[0]);
    counts.set(id, (counts.get(id) ?? 0) + 1);
  }
  return counts;
}

if (unavailable) {
  test("partition tests (network namespaces)", (t) => {
    // not a silent pass: the reason is printed, and CI (root, Linux) never takes this branch
    console.error(`partition tests skipped: ${unavailable}`);
    t.log(`skipped: ${unavailable}`);
    t.pass();
  });
} else {
  test.before(async () => {
    cluster = new NetnsCluster();
    cluster.add("head", 1);
    cluster.add("n1", 11);
    cluster.add("n2", 12);
    cluster.add("driver", 100);
    keyFile = path.join(cluster.dir, "cluster-keys.json");
    await daemon("head", "head", [
      "--head",
      "--host",
      "198.18.0.1",
      "--port",
      "6380",
      "--num-cpus",
      "0",
      "--keys",
      keyFile,
    ]);
    await Promise.all([
      daemon("n1", "n1", [
        "--address",
        HEAD,
        "--node-ip",
        "198.18.0.11",
        "--num-cpus",
        "4",
        "--keys",
        keyFile,
      ]),
      daemon("n2", "n2", [
        "--address",
        HEAD,
        "--node-ip",
        "198.18.0.12",
        "--num-cpus",
        "2",
        "--keys",
        keyFile,
      ]),
    ]);
  });

  let failed = false;
  test.afterEach.always((t) => {
    if (!t.passed) failed = true;
  });

  test.after.always(() => {
    if (!cluster) return;
    // keep what the processes said when a test failed: it is the only record of a partition
    if (failed)
      writeFileSync(
        path.join(path.dirname(cluster.dir), `${path.basename(cluster.dir)}.log`),
        [...procs].map(([n, p]) => `===== ${n}\n${p.output()}`).join("\n"),
      );
    cluster.destroy();
  });

  test.serial(
    "a node cut off: detected, its calls fail, restartable actors move; healed: refused, nothing runs twice",
    async (t) => {
      const r = await scenario("node-cut");
      t.log(
        `node timeout ${NODE_TIMEOUT_MS} ms; after the cut: declared dead in ${r.detectedMs} ms, in-flight call failed in ${r.inflightError?.ms} ms, restartable actor back on n2 in ${r.recoveredMs} ms, stale workers on n1 gone in ${r.fencedMs} ms`,
      );
      t.true(r.detectedMs < NODE_TIMEOUT_MS + 7000, `detected in ${r.detectedMs} ms`);
      t.is(r.inflightError?.name, "ActorDiedError");
      t.is(r.inflightError?.kind, "node_died");
      t.regex(r.inflightError?.message ?? "", /stopped sending heartbeats/);
      t.is(r.movedTo, "n2");
      // no split brain: the cut-off node killed its copies itself, before the link came back
      t.true(r.fencedMs < NODE_TIMEOUT_MS + 7000, `fenced in ${r.fencedMs} ms`);
      t.false(r.n1AliveAfterHeal, "the head does not take the dead node back");
      t.is(r.restartableAfterHeal, "n2");
      const n1 = procs.get("n1")!;
      const code = await Promise.race([
        n1.exited,
        new Promise((r) => setTimeout(() => r("running"), 10_000)),
      ]);
      t.not(code, "running", "the refused node agent left");
      t.regex(n1.output(), /killing this node's \d+ workers/);
      t.regex(n1.output(), /the head asked this node to stop \(declared dead by the head/);
      t.regex(procs.get("head")!.output(), /refused node .* it was declared dead and may not rejoin/);
      // at most once: a call reported failed may have run once or never; none ran twice, and each
      // call reported done ran exactly once
      const runs = new Map([
        ...executions(path.join(r.work, "r.log")),
        ...executions(path.join(r.work, "s.log")),
      ]);
      const outcomes = Object.entries(r.outcomes as Record<string, string>);
      let ok = 0;
      for (const [id, outcome] of outcomes) {
        const n = runs.get(Number(id)) ?? 0;
        t.true(n <= 1, `call ${id} ran ${n} times`);
        if (outcome === "ok") {
          ok++;
          t.is(n, 1, `call ${id} was reported done but ran ${n} times`);
        } else t.is(outcome, "ActorDiedError", `call ${id} failed with ${outcome}`);
      }
      t.log(
        `${outcomes.length} calls during the scenario: ${ok} done, ${outcomes.length - ok} failed with ActorDiedError, none executed twice`,
      );
    },
  );

  test.serial(
    "the head cut off briefly: calls between driver and workers go on; the control plane resumes",
    async (t) => {
      const r = await scenario("head-cut");
      t.log(
        `head cut for ${r.cutMs} ms: ${r.callsDuringCut} calls completed during the cut, ${r.callErrors} failed; an actor requested during the cut was up ${r.controlBackMs} ms after the heal`,
      );
      t.true(r.callsDuringCut > 0, "the data plane does not pass through the head");
      t.is(r.callErrors, 0);
      t.truthy(r.lateActorNode);
      t.is(r.nodesAlive, 2, "the head's own node and n2 are still alive (n1 was refused earlier)");
    },
  );

  test.serial(
    "a slow link that resets connections: calls and object fetches complete, correctly",
    async (t) => {
      const proxy = run("proxy", "driver", [PROXY], {
        ...process.env,
        DELAY_MS: "100",
        JITTER_MS: "40",
        RESET_MS: "2000",
      });
      const t0 = Date.now();
      while (!/^port (\d+)$/m.test(proxy.output())) {
        if (proxy.child.exitCode !== null || Date.now() - t0 > 30_000)
          throw new Error(`proxy: ${proxy.output()}`);
        await new Promise((r) => setTimeout(r, 50));
      }
      const port = /^port (\d+)$/m.exec(proxy.output())![1]!;
      const r = await scenario("slow-link", { TORL_SOCKS_PROXY: `127.0.0.1:${port}` });
      const stats = JSON.parse(
        proxy
          .output()
          .trim()
          .split("\n")
          .pop()!
          .replace(/^stats /, ""),
      );
      proxy.child.kill("SIGKILL");
      t.log(
        `100 ms +0..40 ms each way, a reset every ~2 s per connection: ${r.syncCalls} rounds (a call, 50 calls in flight, a 1 MiB object fetched): ${r.callsPerS.toFixed(1)} calls/s, ${r.fetches} object fetches of 1 MiB (${r.fetchMBps.toFixed(2)} MB/s) in ${r.elapsedS} s; proxy: ${stats.connections} connections, ${stats.resets} resets, ${stats.upstreamErrors} reset by the server's side`,
      );
      t.deepEqual(r.wrong, []);
      t.true(r.syncCalls > 0 && r.fetches > 0);
      t.true(stats.resets > 0, "the proxy did reset connections");
    },
  );

  // last: it ends every node agent of the harness
  test.serial(
    "the head cut off past the node timeout: nodes fence themselves, calls fail once it is back",
    async (t) => {
      const r = await scenario("head-cut-long");
      t.log(
        `head cut for ${r.cutMs} ms: n2 killed its worker ${r.fencedMs} ms into the cut; the call in flight failed ${r.settledAfterHealMs} ms after the heal (${r.error?.name}, ${r.error?.kind}); n2 alive after the heal: ${r.n2AliveAfterHeal}`,
      );
      t.true(r.fencedMs < NODE_TIMEOUT_MS + 7000, `fenced in ${r.fencedMs} ms`);
      t.false(r.settledDuringCut, "during the cut only the head could declare the worker dead");
      t.is(r.error?.name, "ActorDiedError");
      t.is(r.error?.kind, "node_died");
      t.false(r.n2AliveAfterHeal, "the head refuses the node it declared dead");
      const n2 = procs.get("n2")!;
      const code = await Promise.race([
        n2.exited,
        new Promise((res) => setTimeout(() => res("running"), 10_000)),
      ]);
      t.not(code, "running", "the refused node agent left");
    },
  );
}
