/**
 * What runs share with the host through the kernel, beyond the namespaces: address families that no
 * network namespace covers (vsock), device inodes, the kernel-wide AIO budget, what the warm
 * interpreter learnt about the host before it moved into its namespaces, and the status channel a
 * run could write to. Each test attacks from a run while the host (this process, through a Python
 * probe) uses the same resource at the same moment.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { statSync } from "node:fs";
import { hostname } from "node:os";
import { createInterface } from "node:readline";
import test from "ava";
import { SandboxExecutor } from "../src/index.js";
import { resolvePython } from "../src/python.js";
import { isRoot } from "./helpers.js";

let ex: SandboxExecutor;

test.before(async () => {
  ex = await new SandboxExecutor({ workers: 2, log: () => {} }).start();
});

test.after.always(async () => {
  await ex?.close();
});

const IO_SETUP = process.arch === "arm64" ? 0 : 206;
const IO_DESTROY = process.arch === "arm64" ? 1 : 207;

/**
 * The host's side: a Python loop that uses a resource every 20 ms until its stdin closes, then
 * prints `[[time, [failures...]], ...]` (wall-clock seconds, comparable with a run's time.time()).
 * Modes: "locks" (flock and a POSIX lock on each of /dev/null, zero, full, random, urandom), "aio"
 * (io_setup(1) and io_destroy), "vsock PORT" (bind that vsock port on any CID). It prints `ready`
 * first, or `unavailable REASON` and exits where the kernel lacks the resource.
 */
const HOST_PROBE = `
import ctypes, fcntl, json, os, select, socket, sys, time
mode = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
fds = {d: os.open("/dev/" + d, os.O_RDWR) for d in ("null", "zero", "full", "random", "urandom")}
def locks():
    failed = []
    for d, fd in fds.items():
        for kind, lock in (("flock", fcntl.flock), ("lockf", fcntl.lockf)):
            try:
                lock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                lock(fd, fcntl.LOCK_UN)
            except OSError as e:
                failed.append(f"{kind} /dev/{d}: {e.strerror}")
    return failed
def aio():
    ctx = ctypes.c_ulong(0)
    if libc.syscall(${IO_SETUP}, 1, ctypes.byref(ctx)) != 0:
        return ["io_setup(1): " + os.strerror(ctypes.get_errno())]
    libc.syscall(${IO_DESTROY}, ctx)
    return []
def vsock():
    s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    try:
        s.bind((socket.VMADDR_CID_ANY, int(sys.argv[2])))
        return []
    except OSError as e:
        return ["bind: " + e.strerror]
    finally:
        s.close()
if mode == "vsock":
    try:
        socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM).close()
    except (OSError, AttributeError) as e:
        print("unavailable", "this kernel has no AF_VSOCK:", e, flush=True)
        sys.exit(0)
check = {"locks": locks, "aio": aio, "vsock": vsock}[mode]
log = []
print("ready", flush=True)
while not select.select([sys.stdin], [], [], 0.02)[0]:
    log.append([time.time(), check()])
print(json.dumps(log), flush=True)
`;

type HostLog = [number, string[]][];

/** Runs `during` while the host probe in `mode` loops; the probe's log, or the reason it could not run. */
async function whileHostUses<T>(
  args: string[],
  during: () => Promise<T>,
): Promise<{ result: T | undefined; log: HostLog | undefined; unavailable?: string }> {
  const probe: ChildProcess = spawn(resolvePython(), ["-c", HOST_PROBE, ...args], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  const lines = createInterface({ input: probe.stdout! })[Symbol.asyncIterator]();
  try {
    const first = (await lines.next()).value as string | undefined;
    if (first?.startsWith("unavailable")) return { result: undefined, log: undefined, unavailable: first };
    if (first !== "ready") throw new Error(`host probe did not start: ${first}`);
    const result = await during();
    probe.stdin!.end();
    const last = (await lines.next()).value as string;
    return { result, log: JSON.parse(last) as HostLog };
  } finally {
    probe.kill("SIGKILL");
  }
}

/** The host's attempts made while the run held the resource, and those of them that failed. */
function duringRun(log: HostLog, window: { t0: number; t1: number }) {
  const inside = log.filter(([at]) => at > window.t0 && at < window.t1);
  const failures = inside.flatMap(([at, f]) => f.map((x) => `${at}: ${x}`));
  // the first few name the resource; all of them would only repeat it
  return {
    attempts: inside.length,
    failures: failures.length > 4 ? [...failures.slice(0, 4), `... ${failures.length} in all`] : failures,
  };
}

const SOCKETS_RUN = (port: number) => `
import errno, json, socket, time
out, keep = {}, []
for name, family, kind in (("vsock", 40, socket.SOCK_STREAM), ("netlink", 16, socket.SOCK_RAW),
                           ("alg", 38, socket.SOCK_SEQPACKET), ("packet", 17, socket.SOCK_DGRAM),
                           ("unix", 1, socket.SOCK_STREAM), ("inet", 2, socket.SOCK_STREAM),
                           ("inet6", 10, socket.SOCK_DGRAM)):
    try:
        keep.append(socket.socket(family, kind))
        out[name] = "ok"
    except OSError as e:
        out[name] = errno.errorcode[e.errno]
for name, family in (("pair_unix", 1), ("pair_vsock", 40)):
    try:
        keep.extend(socket.socketpair(family, socket.SOCK_STREAM))
        out[name] = "ok"
    except OSError as e:
        out[name] = errno.errorcode[e.errno]
if out["vsock"] == "ok":
    try:
        keep[0].bind((socket.VMADDR_CID_ANY, ${port}))
        keep[0].listen()
        out["vsock_bound"] = True
    except OSError as e:
        out["vsock_bound"] = errno.errorcode[e.errno]
out["localhost"] = socket.getaddrinfo("localhost", 80, socket.AF_INET)[0][4][0]
out["t0"] = time.time()
time.sleep(2)
out["t1"] = time.time()
print(json.dumps(out))
`;

test("sockets: AF_VSOCK, netlink, AF_ALG and AF_PACKET are refused to runs; the host binds its vsock port meanwhile", async (t) => {
  const port = 20_000 + Math.floor(Math.random() * 40_000);
  const {
    result: r,
    log,
    unavailable,
  } = await whileHostUses(["vsock", String(port)], () =>
    ex.run({ code: SOCKETS_RUN(port), run_timeout: 30 }),
  );
  const run = r ?? (await ex.run({ code: SOCKETS_RUN(port), run_timeout: 30 }));
  t.is(run.status, "Success", JSON.stringify(run));
  const out = JSON.parse(run.run_result?.stdout ?? "{}");
  t.like(out, {
    vsock: "EAFNOSUPPORT",
    netlink: "EAFNOSUPPORT",
    alg: "EAFNOSUPPORT",
    packet: "EAFNOSUPPORT",
    pair_vsock: "EAFNOSUPPORT",
    unix: "ok",
    inet: "ok",
    inet6: "ok",
    pair_unix: "ok",
    localhost: "127.0.0.1",
  });
  if (unavailable) {
    t.log(`host half skipped: ${unavailable}`);
    return;
  }
  const host = duringRun(log!, out);
  t.true(host.attempts > 0, "the host probe made no attempt while the run lived");
  t.deepEqual(host.failures, [], `the host could not bind vsock port ${port} while a run lived`);
});

const LOCKS_RUN = `
import fcntl, json, os, time
held = []
for d in ("null", "zero", "full", "random", "urandom"):
    a = os.open("/dev/" + d, os.O_RDWR)
    fcntl.flock(a, fcntl.LOCK_EX)
    b = os.open("/dev/" + d, os.O_RDWR)
    fcntl.lockf(b, fcntl.LOCK_EX)
    held.append(d)
t0 = time.time()
time.sleep(2)
print(json.dumps({"held": held, "t0": t0, "t1": time.time()}))
`;

test("device nodes: a run's flock and POSIX locks on /dev/null, zero, full, random and urandom never block the host's", async (t) => {
  t.true(isRoot());
  const { result: r, log } = await whileHostUses(["locks"], () =>
    ex.run({ code: LOCKS_RUN, run_timeout: 30 }),
  );
  t.is(r?.status, "Success", JSON.stringify(r));
  const out = JSON.parse(r?.run_result?.stdout ?? "{}");
  t.deepEqual(out.held, ["null", "zero", "full", "random", "urandom"]);
  const host = duringRun(log!, out);
  t.true(host.attempts > 0, "the host probe made no attempt while the run held its locks");
  t.deepEqual(host.failures, []);
});

test("device nodes: utime from a run changes no timestamp of the host's devices, nor of the next run's", async (t) => {
  const devices = ["null", "zero", "full", "random", "urandom"];
  const times = () =>
    devices.map((d) => {
      const s = statSync(`/dev/${d}`, { bigint: true });
      return `${d} ${s.atimeNs} ${s.mtimeNs} ${s.ctimeNs}`;
    });
  const before = times();
  const code = `
import os
for d in ${JSON.stringify(devices)}:
    for name, times in (("now", None), ("zero", (0, 0))):
        try:
            os.utime("/dev/" + d, times)
            print(d, name, "changed")
        except OSError as e:
            print(d, name, e.strerror)
    st = os.stat("/dev/" + d)
    print(d, st.st_atime_ns, st.st_mtime_ns)
`;
  const r = await ex.run(code);
  t.is(r.status, "Success", JSON.stringify(r));
  const out = r.run_result?.stdout ?? "";
  t.notRegex(out, /changed/);
  t.deepEqual(times(), before, "the host's device timestamps changed");
  // the next run of the same worker finds the same times: no channel from one run to the next (one
  // worker: each worker makes its own nodes, at its own start, so two workers' times differ)
  const single = await new SandboxExecutor({ workers: 1, log: () => {} }).start();
  try {
    const again = async () =>
      (await single.run(code)).run_result?.stdout
        ?.split("\n")
        .filter((l) => /^\w+ \d+ \d+$/.test(l))
        .join("\n");
    const first = await again();
    t.truthy(first);
    t.is(await again(), first);
  } finally {
    await single.close();
  }
});

test("legacy AIO: io_setup is refused to runs, so the host's io_setup works while a run lives", async (t) => {
  const code = `
import ctypes, json, time
libc = ctypes.CDLL(None, use_errno=True)
share = max(1, int(open("/proc/sys/fs/aio-max-nr").read()) // 16)
taken, err = 0, 0
for _ in range(64):
    ctx = ctypes.c_ulong(0)
    if libc.syscall(${IO_SETUP}, share, ctypes.byref(ctx)) != 0:
        err = ctypes.get_errno()
        break
    taken += 1
t0 = time.time()
time.sleep(2)
print(json.dumps({"taken": taken, "errno": err, "t0": t0, "t1": time.time()}))
`;
  const { result: r, log } = await whileHostUses(["aio"], () => ex.run({ code, run_timeout: 30 }));
  t.is(r?.status, "Success", JSON.stringify(r));
  const out = JSON.parse(r?.run_result?.stdout ?? "{}");
  t.like(out, { taken: 0, errno: 1 }); // EPERM from the seccomp filter
  const host = duringRun(log!, out);
  t.true(host.attempts > 0, "the host probe made no attempt while the run lived");
  t.deepEqual(host.failures, []);
});

test("a run finds nothing of the host's paths, directory listings or names among every object it can reach", async (t) => {
  const cwd = process.cwd();
  const host = hostname();
  // reversed, so that the run's own code does not hold what it looks for
  const rev = (s: string) => [...s].reverse().join("");
  const code = `
import gc, json, os, platform, socket, sys
wanted = [s[::-1] for s in ${JSON.stringify([rev(cwd), rev("pnpm-workspace.yaml")])}]
host = ${JSON.stringify(rev(host))}[::-1]
skip = {id(s) for s in wanted} | {id(host)}
gc.unfreeze()
seen, stack, hits, exact = set(), [sys.modules, sys.__dict__, *gc.get_objects()], [], 0
while stack:
    o = stack.pop()
    if id(o) in seen or id(o) in skip:
        continue
    seen.add(id(o))
    if isinstance(o, (str, bytes, bytearray)):
        text = o if isinstance(o, str) else bytes(o).decode("latin-1")
        hits.extend(text[:160] for w in wanted if w in text)
        exact += text == host
        continue
    stack.extend(gc.get_referents(o))
names = [platform.node(), platform.uname().node, socket.gethostname(), os.uname().nodename,
         open("/proc/sys/kernel/hostname").read().strip(), open("/proc/sys/kernel/domainname").read().strip()]
cache = [k for k in sys.path_importer_cache if not any(k == p or k.startswith(p + "/") for p in sys.path[1:])]
print(json.dumps({"objects": len(seen), "hits": hits[:10], "exact_hostname": exact, "names": names,
                  "importer_cache_off_path": cache, "argv": sys.argv, "cwd": os.getcwd()}))
`;
  const r = await ex.run({ code, run_timeout: 120, memory_limit_MB: 2048 });
  t.is(r.status, "Success", JSON.stringify(r).slice(0, 2000));
  const out = JSON.parse(r.run_result?.stdout ?? "{}");
  t.true(out.objects > 100_000, `walked only ${out.objects} objects`);
  t.deepEqual(out.hits, [], `host paths or listings reachable from a run (started in ${cwd})`);
  t.deepEqual(out.names, ["sandbox", "sandbox", "sandbox", "sandbox", "sandbox", "(none)"]);
  t.deepEqual(out.importer_cache_off_path, []);
  t.is(out.exact_hostname, 0, `the host's name ${JSON.stringify(host)} is reachable from a run`);
});

test("the exit status comes from the kernel: nothing a run writes to fd 3 (or does to it) changes it", async (t) => {
  const write3 = (data: string) => `
import os, struct, sys
try:
    os.write(3, ${data})
except OSError:
    pass
`;
  const cases: [string, string, number][] = [
    ["fake success record, then exit 7", `${write3('struct.pack(">i", 0)')}sys.exit(7)`, 7],
    ["fake success record, then os._exit(7)", `${write3('struct.pack(">i", 0)')}os._exit(7)`, 7],
    ["garbage, then exit 7", `${write3('b"\\xff garbage {not json"')}sys.exit(7)`, 7],
    [
      "fd 3 closed, then exit 7",
      "import os, sys\ntry:\n    os.close(3)\nexcept OSError:\n    pass\nsys.exit(7)",
      7,
    ],
    [
      "fake success record, then SIGKILL itself",
      `${write3('struct.pack(">i", 0)')}os.kill(os.getpid(), 9)`,
      -9,
    ],
    ["fake failure record, then a clean exit", `${write3('struct.pack(">i", 7)')}print("done")`, 0],
    [
      "a child writes a fake success record, the run exits 7",
      `${write3("b''")}if os.fork() == 0:\n    os.write(3, struct.pack(">i", 0))\n    os._exit(0)\nos.wait()\nsys.exit(7)`,
      7,
    ],
  ];
  for (const [what, code, expected] of cases) {
    const r = await ex.run(code);
    t.is(r.run_result?.return_code, expected, `${what}: ${JSON.stringify(r)}`);
    t.is(r.status, expected === 0 ? "Success" : "Failed", what);
  }
});
