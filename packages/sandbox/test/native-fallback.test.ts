/**
 * Without a C compiler the worker runs the template's loop in Python and says why; nothing else
 * changes. Its own file: the library is built once per process, and this process has none.
 */
import test from "ava";
import { nativeTemplateLoop } from "../src/python.js";
import { normalizeRequest } from "../src/request.js";
import { SandboxWorker } from "../src/worker.js";

test("no C compiler: the worker says why and runs with the loop in Python", async (t) => {
  process.env.CC = "/nonexistent/cc";
  const built = await nativeTemplateLoop();
  t.true("unavailable" in built);
  t.regex(
    (built as { unavailable: string }).unavailable,
    /\/nonexistent\/cc could not build the native loop/,
  );
  const worker = new SandboxWorker({ name: `torl-${process.pid}-no-cc` });
  await worker.start();
  try {
    t.is(worker.templateLoop, "python");
    t.regex(worker.templateLoopWhy ?? "", /^\/nonexistent\/cc could not build the native loop/);
    t.regex(
      worker.protections.warm_pool?.how ?? "",
      /the template's loop in Python \(\/nonexistent\/cc could not/,
    );
    t.deepEqual(worker.warnings, [], "a slower loop is not an isolation warning");
    for (let i = 0; i < 3; i++) {
      const r = await worker.run(
        normalizeRequest({ code: "import os, sys\nprint(os.getuid() >= 10**9)\nsys.exit(3)" }),
      );
      t.is(r.return_code, 3, r.stderr);
      t.is(r.stdout, "True\n");
    }
  } finally {
    await worker.close();
  }
});
