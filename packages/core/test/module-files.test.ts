import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import test from "ava";
import { childExecArgv, inheritedLoaderArgs, siblingModule, threadEntry } from "../src/module-files.js";

test("a built .js entry under plain node gets no loader flags", (t) => {
  t.deepEqual(childExecArgv("/app/node_modules/@torl-ts/core/dist/runtime/worker-main.js", []), []);
});

test("a .ts entry with no loader in this process gets tsx, resolved to a file", (t) => {
  const args = childExecArgv("/repo/packages/core/src/runtime/worker-main.ts", []);
  t.is(args[0], "--import");
  t.regex(args[1]!, /^file:.*tsx/);
});

test("the parent's loader flags are passed on (a user under node --import tsx has .ts actor modules)", (t) => {
  const parent = ["--inspect=9229", "--import", "tsx", "--conditions=dev", "--max-old-space-size=4096"];
  t.deepEqual(inheritedLoaderArgs(parent), ["--import", "tsx", "--conditions=dev"]);
  t.deepEqual(childExecArgv("/app/dist/worker-main.js", parent), ["--import", "tsx", "--conditions=dev"]);
  t.deepEqual(childExecArgv("/repo/src/worker-main.ts", parent), ["--import", "tsx", "--conditions=dev"]);
});

test("a sibling module keeps the running file's extension", (t) => {
  t.is(siblingModule("file:///repo/src/cli/start.ts", "./daemon").href, "file:///repo/src/cli/daemon.ts");
  t.is(
    siblingModule("file:///app/dist/cli/start.js", "../runtime/worker-main").href,
    "file:///app/dist/runtime/worker-main.js",
  );
});

test("a thread starts a .js entry as it is, and a .ts one (or one that imports .ts) through a tsx bootstrap file", async (t) => {
  t.is(threadEntry("file:///app/dist/heartbeat-thread.js").href, "file:///app/dist/heartbeat-thread.js");
  const entry = new URL("./fixtures/counter.ts", import.meta.url);
  const boot = threadEntry(entry);
  t.regex(boot.href, /^file:.*\.mjs$/);
  const source = readFileSync(fileURLToPath(boot), "utf8");
  t.true(source.includes(JSON.stringify(entry.href)));
  t.is(threadEntry(entry).href, boot.href, "one file per entry, written once");
  t.not(threadEntry("file:///app/dist/host.js", ["file:///app/actor.ts"]).href, "file:///app/dist/host.js");
  // the bootstrap loads TypeScript in a real thread and calls an export by name
  const seen = await new Promise<unknown>((resolve, reject) => {
    const w = new Worker(
      `import(${JSON.stringify(boot.href)}).then((m) => require("node:worker_threads").parentPort.postMessage(m.default({ name: "double", task: 21 })))`,
      { eval: true },
    );
    w.once("message", (m) => {
      resolve(m);
      void w.terminate();
    });
    w.once("error", reject);
  });
  t.is(seen, 42);
});
