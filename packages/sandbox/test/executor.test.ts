/**
 * One worker, so consecutive runs share the warm interpreter: nothing may carry over. Plus the
 * service surviving the death of a worker, and control runs with protections switched off, which
 * show that the attacks in isolation.test.ts do succeed where a protection is missing.
 */
import { randomBytes } from "node:crypto";
import { existsSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import test from "ava";
import { SandboxExecutor } from "../src/index.js";
import { eventually } from "./helpers.js";

let ex: SandboxExecutor;

test.before(async () => {
  ex = await new SandboxExecutor({ workers: 1, log: () => {} }).start();
});

test.after.always(async () => {
  await ex?.close();
});

test.serial(
  "nothing carries from one run to the next (files, module state, processes, /dev/shm)",
  async (t) => {
    const first = await ex.run(`
import os, sys, sympy, subprocess
open("/tmp/left.txt", "w").write("x")
open("left-in-scratch.txt", "w").write("x")
open("/dev/shm/left", "w").write("x")
sympy.LEFT_BEHIND = 1
sys.modules["left_module"] = sys
subprocess.Popen(["sleep", "100"])
print(os.getpid())
`);
    t.is(first.status, "Success", JSON.stringify(first));
    const second = await ex.run(`
import os, sys, sympy
print(os.path.exists("/tmp/left.txt"), os.path.exists("left-in-scratch.txt"), os.path.exists("/dev/shm/left"))
print(hasattr(sympy, "LEFT_BEHIND"), "left_module" in sys.modules)
others = [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, os.getpid())]
print(others)
print(sorted(os.listdir(".")))
`);
    t.is(second.run_result?.stdout, "False False False\nFalse False\n[]\n['main.py']\n");
  },
);

test.serial(
  "a worker killed from outside is replaced; its run answers SandboxError; the service stays up",
  async (t) => {
    const [pid] = ex.workerPids();
    t.truthy(pid);
    const running = ex.run({ code: "import time\ntime.sleep(30)", run_timeout: 60 });
    await new Promise((r) => setTimeout(r, 300));
    process.kill(pid!, "SIGKILL");
    const r = await running;
    t.is(r.status, "SandboxError");
    t.regex(r.message, /died/);
    const next = await ex.run("print('back')");
    t.is(next.run_result?.stdout, "back\n");
    t.is(ex.health().restarts, 1);
    t.false(ex.workerPids().includes(pid!));
  },
);

test.serial(
  "control: with the network and mount namespaces switched off, the same attacks succeed",
  async (t) => {
    const open = await new SandboxExecutor({
      workers: 1,
      disable: ["net_ns", "mount_ns"],
      log: () => {},
    }).start();
    const hostFile = `/tmp/torl-control-${randomBytes(6).toString("hex")}`;
    writeFileSync(hostFile, "visible");
    let connections = 0;
    const server = createServer((s) => {
      connections++;
      s.end();
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const port = (server.address() as { port: number }).port;
    try {
      const h = open.health();
      t.is(h.status, "degraded");
      t.false(h.protections.network_namespace!.active);
      t.true(h.warnings.some((w) => /filesystem isolation off/.test(w)));
      const r = await open.run(`
import socket
print(open("${hostFile}").read())
socket.create_connection(("127.0.0.1", ${port}), timeout=5).close()
print("connected")
`);
      t.is(r.run_result?.stdout, "visible\nconnected\n", JSON.stringify(r));
      // the accept may be handled a loop turn after the run's answer arrives
      t.true(await eventually(() => connections === 1), `connections: ${connections}`);
    } finally {
      server.close();
      rmSync(hostFile, { force: true });
      await open.close();
    }
    t.false(existsSync(hostFile));
  },
);
