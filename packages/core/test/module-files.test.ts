import test from "ava";
import { childExecArgv, inheritedLoaderArgs, siblingModule } from "../src/module-files.js";

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
