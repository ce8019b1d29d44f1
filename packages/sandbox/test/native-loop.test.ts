/**
 * The template's loop and each run child's preparation in C (native/template_loop.c) against the
 * same steps in Python: a run must not be able to tell which prepared it, beyond the library's
 * memfd in its memory map. Runs as root (as CI does) with a C compiler on the machine.
 */
import test from "ava";
import { SandboxConfigError, SandboxExecutor } from "../src/index.js";
import { nativeTemplateLoop } from "../src/python.js";
import { normalizeRequest } from "../src/request.js";
import { SandboxWorker } from "../src/worker.js";
import { isRoot } from "./helpers.js";

const PROBE = `
import json, os, resource, signal, sys
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
limits = {name: resource.getrlimit(getattr(resource, name)) for name in
          ("RLIMIT_CORE", "RLIMIT_NOFILE", "RLIMIT_FSIZE", "RLIMIT_CPU", "RLIMIT_NPROC")}
print(json.dumps({
    "ids": [os.getuid(), os.geteuid(), os.getgid(), os.getegid(), os.getgroups()],
    "session_leader": os.getsid(0) == os.getpid(),
    "cwd": os.getcwd(),
    "fds": sorted(os.listdir("/proc/self/fd")),
    "limits": limits,
    "status": {k: status[k].strip() for k in ("NoNewPrivs", "Seccomp", "Seccomp_filters", "CapInh", "CapPrm",
                                              "CapEff", "CapBnd", "CapAmb")},
    "comm": open("/proc/self/comm").read().strip(),
    "cgroup": open("/proc/self/cgroup").read(),
    "env": dict(os.environ),
    "argv": sys.argv,
    "path0": sys.path[0],
    "main_py": open("main.py").read().startswith("\\nimport json, os"),
    "stdin": sys.stdin.read(),
    "signals": [str(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE, signal.SIGCHLD)],
    "native_in_maps": "/memfd:torl-sandbox-native" in open("/proc/self/maps").read(),
}))
sys.exit(7)
`;

async function probe(nativeTemplate: boolean) {
  const name = `torl-${process.pid}-native-${nativeTemplate}`;
  const worker = new SandboxWorker({ name, nativeTemplate });
  await worker.start();
  try {
    const results = [];
    for (let i = 0; i < 3; i++)
      results.push(await worker.run(normalizeRequest({ code: PROBE, stdin: `hello ${i}` })));
    const { templateLoop, templateLoopWhy, warnings } = worker;
    return {
      name,
      results,
      how: worker.protections.warm_pool?.how ?? "",
      warnings,
      templateLoop,
      templateLoopWhy,
    };
  } finally {
    await worker.close();
  }
}

test("a run cannot tell the C loop from the Python one: same ids, limits, fds, filters, cgroups, stdin and exit", async (t) => {
  t.true(isRoot(), "the sandbox's isolation needs root; CI runs as root");
  const built = await nativeTemplateLoop();
  t.true("library" in built, `the machine's C compiler could not build the loop: ${JSON.stringify(built)}`);
  const [native, python] = await Promise.all([probe(true), probe(false)]);
  t.is(native.templateLoop, "native");
  t.is(native.templateLoopWhy, undefined);
  t.regex(native.how, /the template's loop and each run's preparation in C/);
  t.is(python.templateLoop, "python");
  t.is(python.templateLoopWhy, "nativeTemplate is false");
  t.regex(python.how, /the template's loop in Python \(nativeTemplate is false\)/);
  // a speed feature, not a protection: no isolation warning either way
  t.deepEqual(native.warnings, []);
  t.deepEqual(python.warnings, []);
  const seen = (r: { results: Awaited<ReturnType<SandboxWorker["run"]>>[]; name: string }) =>
    r.results.map((res) => {
      t.is(res.return_code, 7, JSON.stringify(res));
      t.is(res.stderr, "");
      const said = JSON.parse(res.stdout.replaceAll(r.name, "WORKER"));
      // each worker has a run uid of its own; the rest must match exactly
      said.ids = said.ids.map((id: number | number[]) => (typeof id === "number" ? id >= 1e9 : id));
      return said;
    });
  const fromNative = seen(native);
  const fromPython = seen(python);
  for (const [i, said] of fromNative.entries()) {
    t.true(said.native_in_maps, "the C loop's library is named by its memfd, not by a host path");
    t.false(fromPython[i].native_in_maps);
    t.is(said.stdin, `hello ${i}`);
    t.deepEqual({ ...said, native_in_maps: null }, { ...fromPython[i], native_in_maps: null });
  }
  t.deepEqual(fromNative[0].ids, [true, true, true, true, []]);
  t.deepEqual(fromNative[0].fds, ["0", "1", "2", "3", "4"]); // 4: the listing's own
  t.is(fromNative[0].status.NoNewPrivs, "1");
  t.is(fromNative[0].status.Seccomp, "2");
  t.is(fromNative[0].status.CapBnd, "0000000000000000");
  t.true(fromNative[0].session_leader);
  t.is(fromNative[0].comm, "sandbox-run");
});

test("a run's memory map names no host path of the C loop", async (t) => {
  const worker = new SandboxWorker({ name: `torl-${process.pid}-native-maps` });
  await worker.start();
  try {
    const r = await worker.run(normalizeRequest({ code: "print(open('/proc/self/maps').read())" }));
    t.is(r.return_code, 0, r.stderr);
    t.regex(r.stdout, /\/memfd:torl-sandbox-native \(deleted\)/);
    t.false(r.stdout.includes("template_loop"), "the library's file name is visible to runs");
    t.false(r.stdout.includes(process.cwd()), "the repository's path is visible to runs");
  } finally {
    await worker.close();
  }
});

test("the C loop ends runs that time out, kills what they leave and answers the next request", async (t) => {
  const worker = new SandboxWorker({ name: `torl-${process.pid}-native-timeout` });
  await worker.start();
  try {
    const slow = await worker.run(
      normalizeRequest({
        code: "import subprocess, time\nsubprocess.Popen(['sleep', '60'], start_new_session=True)\ntime.sleep(60)",
        run_timeout: 1,
      }),
    );
    t.true(slow.timed_out);
    t.is(slow.return_code, null);
    const next = await worker.run(
      normalizeRequest({ code: "import os\nprint(sorted(p for p in os.listdir('/proc') if p.isdigit()))" }),
    );
    t.is(next.return_code, 0, next.stderr);
    // the server (1) and this run are all its pid namespace holds (the template is another uid's)
    t.is(JSON.parse(next.stdout.replaceAll("'", '"')).length, 1, next.stdout);
  } finally {
    await worker.close();
  }
});

test("nativeTemplate must be a boolean, for a worker and for an executor", (t) => {
  for (const bad of ["yes", 1, null]) {
    const worker = t.throws(() => new SandboxWorker({ name: "x", nativeTemplate: bad as never }));
    t.true(worker instanceof SandboxConfigError, String(worker));
    t.regex(worker.message, /nativeTemplate.*must be true or false/);
    const executor = t.throws(() => new SandboxExecutor({ nativeTemplate: bad as never }));
    t.true(executor instanceof SandboxConfigError, String(executor));
  }
});
