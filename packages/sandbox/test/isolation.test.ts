/**
 * Each isolation point is enforced and shown by a real attack. Runs as root (as CI does); where the
 * machine lacks a kernel feature the matching test fails and names the protection that is missing.
 */
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import test from "ava";
import { HUGE_HEAP_MIN_FAULT_US, pageFaultMicros, SandboxExecutor } from "../src/index.js";
import { resolvePython } from "../src/python.js";
import { eventually, isRoot, leftovers, processesOf } from "./helpers.js";

let ex: SandboxExecutor;
const SECRET_ENV = `torl-secret-${randomBytes(6).toString("hex")}`;

test.before(async () => {
  process.env.TORL_TEST_SECRET = SECRET_ENV;
  ex = await new SandboxExecutor({
    workers: 2,
    maxOutputBytes: 1 << 20,
    maxProcesses: 32,
    // the huge-page heap whatever a fault costs here (its copies and their cap are tested below);
    // the other suites run the default ("auto"), which picks ordinary pages where faults are cheap
    hugePages: true,
    log: () => {},
  }).start();
});

test.after.always(async () => {
  await ex?.close();
});

test.serial("the machine runs every protection (a missing kernel feature fails here, by name)", (t) => {
  t.true(isRoot(), "the sandbox's namespaces and cgroups need root; CI runs as root");
  const missing = Object.entries(ex.health().protections)
    .filter(([, p]) => !p.active)
    .map(([name, p]) => `${name}: ${p.reason}`);
  t.deepEqual(missing, []);
  t.is(ex.health().status, "ok");
  t.deepEqual(ex.health().warnings, []);
});

test("wall timeout kills the whole process tree, grandchildren included", async (t) => {
  const marker = `987.${randomBytes(3).readUIntBE(0, 3)}`;
  const code = `
import subprocess, os, time
subprocess.Popen(["sleep", "${marker}"])
if os.fork() == 0:
    subprocess.Popen(["sleep", "${marker}"])
    time.sleep(1000)
print("started", flush=True)
time.sleep(1000)
`;
  const r = await ex.run({ code, run_timeout: 4 });
  t.is(r.run_result?.status, "TimeLimitExceeded");
  t.is(r.status, "Failed");
  t.is(r.run_result?.stdout, "started\n");
  t.true(
    await eventually(() => leftovers(marker).length === 0),
    `left running: ${JSON.stringify(leftovers(marker))}`,
  );
});

test("a daemon that starts its own session does not survive the run", async (t) => {
  const marker = `986.${randomBytes(3).readUIntBE(0, 3)}`;
  const code = `
import os
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sleep", ["sleep", "${marker}"])
    os._exit(0)
os.wait()
print("parent done")
`;
  const r = await ex.run({ code, run_timeout: 5 });
  t.is(r.status, "Success", JSON.stringify(r));
  t.true(
    await eventually(() => leftovers(marker).length === 0),
    `left running: ${JSON.stringify(leftovers(marker))}`,
  );
});

test("memory limit: allocating past memory_limit_MB fails inside the run, a smaller allocation works", async (t) => {
  const big = await ex.run({
    code: "x = bytearray(600 * 1024 * 1024)\nprint('allocated')",
    memory_limit_MB: 128,
  });
  t.is(big.status, "Failed");
  t.regex(big.run_result?.stderr ?? "", /MemoryError/);
  t.notRegex(big.run_result?.stdout ?? "", /allocated/);
  const small = await ex.run({
    code: "x = bytearray(32 * 1024 * 1024)\nprint('allocated')",
    memory_limit_MB: 128,
  });
  t.is(small.run_result?.stdout, "allocated\n");
  // several processes together are held by the memory cgroup, not only by per-process RLIMIT_AS
  const many = await ex.run({
    code: `
import os, time
pids = []
for i in range(4):
    pid = os.fork()
    if pid == 0:
        x = bytearray(100 * 1024 * 1024)
        for j in range(0, len(x), 4096): x[j] = 1
        time.sleep(3)  # hold it while the others allocate: on a loaded machine they may start late
        os._exit(0)
    pids.append(pid)
codes = [os.waitpid(p, 0)[1] for p in pids]
print(sum(1 for c in codes if c == 0), "of 4 children allocated 100 MB")
`,
    memory_limit_MB: 256,
    run_timeout: 20,
  });
  const ok = Number(/^(\d+) of 4/.exec(many.run_result?.stdout ?? "")?.[1] ?? -1);
  t.true(ok >= 0 && ok < 4, `cgroup memory limit not enforced: ${JSON.stringify(many.run_result)}`);
});

// Any process that writes a page of the warm heap it shares may be the one that finds the cap
// full (SIGBUS), so only processes whose fate does not matter write: the run execs into `cat`, which
// ends when every writer is done (or dead), and each writer that copied the whole heap says so.
const HEAP_COPIES = `
import ctypes, os
pages = []
span = None
for line in open("/proc/self/smaps"):
    head = line.split(None, 1)[0]
    if "-" in head and not head.endswith(":"):
        span = [int(x, 16) for x in head.split("-")]
    elif head == "KernelPageSize:" and int(line.split()[1]) == 2048:
        pages += range(span[0], span[1], 2 << 20)
print(len(pages), flush=True)
done_r, done_w = os.pipe()  # EOF once every writer is done or dead
hold_r, hold_w = os.pipe()  # never written: the writers keep their copies until the run ends
if os.fork() == 0:
    for i in range(12):
        if os.fork() == 0:
            try:
                for a in pages:
                    byte = ctypes.c_char.from_address(a)
                    byte.value = byte.value  # a write: this process gets its own copy of the page
                os.write(1, b"held\\n")
                os.close(done_w)
                os.read(hold_r, 1)
            finally:
                os._exit(0)
    os.close(done_w)
    os.read(hold_r, 1)
    os._exit(0)
os.dup2(done_r, 0)
os.execv("/bin/cat", ["cat"])
`;

test("copies of the huge-page heap count: 12 processes writing all of it cannot take more than the run's limit", async (t) => {
  const r = await ex.run({ code: HEAP_COPIES, memory_limit_MB: 128, run_timeout: 60 });
  t.is(r.status, "Success", JSON.stringify(r));
  const [first, ...rest] = (r.run_result?.stdout ?? "").trim().split("\n");
  const heapPages = Number(first);
  const held = rest.filter((line) => line === "held").length;
  t.true(heapPages > 4, `the heap is in ${heapPages} huge pages`);
  // 128 MB = 64 pages of 2 MiB; a writer that would pass it gets SIGBUS on the page that does not fit
  // (when all 12 race, each may get part of the way and none all of it: held is then 0)
  t.true(held * heapPages <= 64, `${held} processes held a copy of all ${heapPages} pages at once`);
  // the control: with room for them (2 GB), all 12 writers copy the whole heap and hold it
  const roomy = await ex.run({ code: HEAP_COPIES, memory_limit_MB: 2048, run_timeout: 60 });
  t.is(roomy.run_result?.stdout, `${heapPages}\n${"held\n".repeat(12)}`, JSON.stringify(roomy));
});

test("process-count limit: a run cannot have more than maxProcesses processes", async (t) => {
  const r = await ex.run({
    code: `
import os, time
n = 0
for i in range(200):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    n += 1
print(n)
`,
    run_timeout: 30,
  });
  const n = Number(r.run_result?.stdout?.trim());
  t.true(n > 0 && n < 32, `forked ${n} processes, limit is 32: ${JSON.stringify(r.run_result)}`);
});

test.serial("a fork bomb is contained: other runs still complete and nothing of it is left", async (t) => {
  const bomb = ex.run({
    code: `
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
`,
    run_timeout: 2,
  });
  const other = await ex.run("print(6 * 7)");
  t.is(other.run_result?.stdout, "42\n");
  const r = await bomb;
  t.is(r.run_result?.status, "TimeLimitExceeded");
  const uids = ex.runUids();
  t.true(uids.length > 0);
  // what may remain under the run uids is the one prepared child per worker that waits for the next run
  t.true(
    await eventually(() => processesOf(uids).length <= uids.length, 10_000),
    `left: ${processesOf(uids).length} processes of uids ${uids}`,
  );
  t.is((await ex.run("print('still up')")).run_result?.stdout, "still up\n");
});

test("output limit: 50 MB printed comes back truncated and the service stays up", async (t) => {
  const r = await ex.run({
    code: "import sys\nsys.stdout.write('x' * (50 << 20))\nprint('end', file=sys.stderr)",
  });
  t.is(r.status, "Success");
  t.is(r.run_result?.stdout?.length, 1 << 20);
  t.regex(r.message, /stdout truncated to 1048576 of 52428800 bytes/);
  t.is(r.run_result?.stderr, "end\n");
  t.is((await ex.run("print('alive')")).run_result?.stdout, "alive\n");
});

test("no network: a connection to a listener on the host's 127.0.0.1 fails", async (t) => {
  let connections = 0;
  const server: Server = createServer((s) => {
    connections++;
    s.end();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as { port: number }).port;
  try {
    const r = await ex.run(`
import socket
try:
    socket.create_connection(("127.0.0.1", ${port}), timeout=3)
    print("connected")
except OSError as e:
    print("failed", type(e).__name__)
`);
    t.regex(r.run_result?.stdout ?? "", /^failed/);
    t.is(connections, 0);
  } finally {
    server.close();
  }
});

test("no view of host files: a host file in /tmp is unreadable; a file written to /tmp stays inside", async (t) => {
  const tag = randomBytes(6).toString("hex");
  const hostFile = `/tmp/torl-host-secret-${tag}`;
  const planted = `/tmp/torl-planted-${tag}`;
  writeFileSync(hostFile, "host secret");
  try {
    const r = await ex.run(`
import os
try:
    print(open("${hostFile}").read())
except OSError as e:
    print("unreadable", type(e).__name__)
open("${planted}", "w").write("from the sandbox")
for p in ["/work", "/root/.ssh", "/etc/shadow", "/home", "/var"]:
    print(p, os.path.exists(p))
`);
    const out = r.run_result?.stdout ?? "";
    t.regex(out, /^unreadable FileNotFoundError/);
    t.notRegex(out, /host secret/);
    t.regex(out, /\/work False\n\/root\/.ssh False\n\/etc\/shadow False\n\/home False\n\/var False/);
    t.false(existsSync(planted));
  } finally {
    rmSync(hostFile, { force: true });
    rmSync(planted, { force: true });
  }
});

test("the service's environment variables are not visible, not even through /proc", async (t) => {
  const r = await ex.run(`
import os
print(sorted(os.environ))
seen = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            seen.append(open(f"/proc/{pid}/environ", "rb").read())
        except OSError:
            pass
print(b"${SECRET_ENV}" in b"".join(seen))
`);
  const out = r.run_result?.stdout ?? "";
  t.notRegex(out, /TORL_TEST_SECRET/);
  t.regex(out, /\nFalse\n$/);
});

test("killing its parent (or pid 1) is refused and the service stays up", async (t) => {
  const r = await ex.run(`
import os, signal
for target in (os.getppid(), 1, -1):
    try:
        os.kill(target, signal.SIGKILL)
        print(target, "sent")
    except OSError as e:
        print(target, type(e).__name__)
`);
  // kill(-1) answers success when the namespace holds other processes, even if it may signal none
  // of them (the parent of the runs is one): what counts is that the next run still works
  t.regex(r.run_result?.stdout ?? "", /^\d+ PermissionError\n1 PermissionError\n-1 /);
  t.is((await ex.run("print('up')")).run_result?.stdout, "up\n");
});

test("a run finds no host path or host device in its command line, environment, interpreter or mountinfo", async (t) => {
  const r = await ex.run(`
import ctypes, os, sys, __main__
ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: its own /proc/self/environ becomes readable
print(os.path.exists("/proc/1/cmdline"), len(os.listdir("/proc/self/fd")) > 0)
for path in ("/proc/self/cmdline", "/proc/self/environ", "/proc/self/mountinfo"):
    sys.stdout.write(open(path, "rb").read().decode("utf-8", "replace"))
print(sys.orig_argv, sys.argv, getattr(__main__, "__file__", None), sys.path)
`);
  t.is(r.status, "Success", JSON.stringify(r));
  const out = r.run_result?.stdout ?? "";
  // pid 1 (the server) and the template are other uids' processes: not even listed
  t.true(out.startsWith("False True\n"), out.slice(0, 200));
  t.false(out.includes(process.cwd()), `the repository's path ${process.cwd()} is visible to runs`);
  const hostRoot = readFileSync("/proc/self/mountinfo", "utf8")
    .split("\n")
    .map((line) => line.split(" "))
    .find((f) => f[4] === "/");
  const [fstype, source] = hostRoot?.slice(hostRoot.indexOf("-") + 1) ?? [];
  t.truthy(source);
  t.false(out.includes(` ${fstype} ${source} `), `the host's root filesystem (${fstype} ${source}) is named`);
  t.regex(out, / - overlay sandbox ro,lowerdir=\/tmp\/layers\/\d+:/);
});

test("runs cannot gain privileges: uid is unprivileged, setuid root fails, no capabilities, empty bounding set", async (t) => {
  const r = await ex.run(`
import os
print(os.getuid() != 0, os.geteuid() != 0)
try:
    os.setuid(0)
    print("became root")
except PermissionError:
    print("setuid refused")
status = open("/proc/self/status").read()
print(status.split("CapEff:")[1].split()[0], status.split("CapBnd:")[1].split()[0], status.split("CapAmb:")[1].split()[0])
`);
  // CapBnd empty: no capability can come back, not even through a file with capabilities
  t.is(
    r.run_result?.stdout,
    "True True\nsetuid refused\n0000000000000000 0000000000000000 0000000000000000\n",
  );
});

test("sympy and numpy are importable and already loaded in the run", async (t) => {
  const r = await ex.run(`
import sys
print("sympy" in sys.modules, "numpy" in sys.modules)
import sympy, numpy
x = sympy.symbols("x")
print(sympy.factor(x**2 - 1), int(numpy.arange(5).sum()))
`);
  t.is(r.run_result?.stdout, "True True\n(x - 1)*(x + 1) 10\n");
});

test("fetch_files does not follow a link the run planted towards a file only root may read", async (t) => {
  const r = await ex.run({
    code: `
import os
os.symlink("/proc/1/environ", "leak.txt")
open("ok.txt", "w").write("fine")
`,
    fetch_files: ["leak.txt", "ok.txt"],
  });
  t.is(r.status, "Success", JSON.stringify(r));
  t.deepEqual(r.files, { "ok.txt": Buffer.from("fine").toString("base64") });
});

test("each worker's runs have a uid of their own: 1e9 + the worker's pid, never wrapped", (t) => {
  const pids = ex.workerPids();
  t.is(pids.length, 2);
  // a pid modulo a constant would give two workers one uid (and one RLIMIT_NPROC) where pid_max is large
  t.deepEqual(
    ex.runUids(),
    pids.map((pid) => 1_000_000_000 + pid),
  );
});

test("fetch_files: a FIFO, a directory, a missing or an oversized file is refused at once and named", async (t) => {
  const r = await ex.run({
    code: `
import os
os.mkfifo("pipe")
os.mkdir("dir")
open("ok.txt", "w").write("fine")
open("big.bin", "wb").write(b"x" * (40 << 20))
`,
    fetch_files: ["pipe", "dir", "ok.txt", "absent.txt", "big.bin"],
    run_timeout: 20,
  });
  t.is(r.status, "Success", JSON.stringify(r));
  t.deepEqual(r.files, { "ok.txt": Buffer.from("fine").toString("base64") });
  t.regex(r.message, /fetch_files 'pipe' not read: not a regular file \(a FIFO\)/);
  t.regex(r.message, /fetch_files 'dir' not read: not a regular file \(a directory\)/);
  t.regex(r.message, /fetch_files 'absent.txt' not read: No such file or directory/);
  t.regex(r.message, /fetch_files 'big.bin' not read: 41943040 bytes, over the limit of 33554432/);
});

const SYSCALL_PROBE = `
import ctypes, threading
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
def errno_of(ret):
    return 0 if ret == 0 else ctypes.get_errno()
print("userns", errno_of(libc.unshare(0x10000000)))
print("traceme", errno_of(libc.ptrace(0, 0, 0, 0)))
huge = libc.mmap(None, 2 << 20, 3, 0x22 | 0x40000, -1, 0)
print("hugetlb", 0 if huge not in (None, 2**64 - 1) else ctypes.get_errno())
print("inotify", 0 if libc.inotify_init1(0) >= 0 else ctypes.get_errno())
print("fanotify", 0 if libc.fanotify_init(0, 0) >= 0 else ctypes.get_errno())
params = ctypes.create_string_buffer(120)
print("io_uring", 0 if libc.syscall(425, 1, params) >= 0 else ctypes.get_errno())
out = []
th = threading.Thread(target=lambda: out.append(sum(range(10))))
th.start(); th.join()
print("thread", out[0])
print("alloc", len(bytearray(64 << 20)) >> 20)
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
print("mode", status["Seccomp"].strip(), "nnp", status["NoNewPrivs"].strip())
`;

test("seccomp: no user namespace (it would hand the run capabilities), no ptrace, no huge pages, no io_uring, no inotify; threads work", async (t) => {
  const r = await ex.run({ code: SYSCALL_PROBE, memory_limit_MB: 256 });
  // EPERM = 1, ENOMEM = 12: glibc falls back to ordinary pages, which the run's memory cgroup counts
  t.is(
    r.run_result?.stdout,
    "userns 1\ntraceme 1\nhugetlb 12\ninotify 1\nfanotify 1\nio_uring 1\nthread 45\nalloc 64\nmode 2 nnp 1\n",
    JSON.stringify(r),
  );
  // the control: the same probe without the filter (the namespaces and the uid drop stay on)
  const open = await new SandboxExecutor({ workers: 1, disable: ["seccomp"], log: () => {} }).start();
  try {
    t.false(open.health().protections.seccomp?.active);
    const c = await open.run({ code: SYSCALL_PROBE, memory_limit_MB: 256 });
    // fanotify needs CAP_SYS_ADMIN, which the run lacks anyway (EPERM with or without the filter)
    t.regex(
      c.run_result?.stdout ?? "",
      /^userns 0\ntraceme 0\nhugetlb \d+\ninotify 0\nfanotify 1\nio_uring 0\n[\s\S]*mode 0 nnp 1\n$/,
      JSON.stringify(c),
    );
  } finally {
    await open.close();
  }
});

test("the warm heap is in huge pages: a run holds its own copy of each 2 MiB page", async (t) => {
  t.regex(ex.health().protections.warm_pool?.how ?? "", /heap in \d+ huge pages/);
  t.is(ex.health().heap, "huge");
  const probe = "print(int(open('/proc/self/status').read().split('HugetlbPages:')[1].split()[0]) > 0)";
  const r = await ex.run(probe);
  t.is(r.run_result?.stdout, "True\n");
  const plain = await new SandboxExecutor({ workers: 1, hugePages: false, log: () => {} }).start();
  try {
    t.regex(
      plain.health().protections.warm_pool?.how ?? "",
      /heap in 4 KiB pages \(huge pages off by configuration\)/,
    );
    t.is(plain.health().status, "ok", "a speed feature that is off does not degrade the health");
    t.is(plain.health().heap, "small");
    t.is((await plain.run(probe)).run_result?.stdout, "False\n");
    const same = "import sympy\nx = sympy.symbols('x')\nprint(sympy.factor(x**6 - 1))";
    t.is((await plain.run(same)).run_result?.stdout, (await ex.run(same)).run_result?.stdout);
  } finally {
    await plain.close();
  }
});

test("the default heap (auto) is the one the cost of a page fault here calls for, and says so", async (t) => {
  const us = await pageFaultMicros(resolvePython());
  t.true(Number.isFinite(us) && us > 0, `${us}`);
  t.is(pageFaultMicros(resolvePython()), pageFaultMicros(resolvePython()), "measured once per process");
  const auto = await new SandboxExecutor({ workers: 1, log: () => {} }).start();
  try {
    const how = auto.health().protections.warm_pool?.how ?? "";
    const said = /auto: a page fault costs ([\d.]+) us here, (at least|under) (\d+)/.exec(how);
    t.truthy(said, how);
    t.is(Number(said![3]), HUGE_HEAP_MIN_FAULT_US);
    t.is(auto.health().heap, Number(said![1]) >= HUGE_HEAP_MIN_FAULT_US ? "huge" : "small", how);
    t.is(auto.health().status, "ok");
    t.is((await auto.run("print(6 * 7)")).run_result?.stdout, "42\n");
  } finally {
    await auto.close();
  }
});
