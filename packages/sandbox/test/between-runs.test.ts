/**
 * One worker, so consecutive runs are forked by the same warm process: nothing of one run (its data,
 * its kernel objects, its random state) may be visible to the next, and no run may use up for later
 * runs what they share.
 */
import { randomBytes } from "node:crypto";
import test from "ava";
import { SandboxExecutor } from "../src/index.js";

let ex: SandboxExecutor;

test.before(async () => {
  ex = await new SandboxExecutor({ workers: 1, log: () => {} }).start();
});

test.after.always(async () => {
  await ex?.close();
});

const PREFIX = "torlplanted";

/**
 * A later run reads every readable mapping of its own memory (/proc/self/maps + /proc/self/mem) and
 * reports each `PREFIX<12 hex>` it finds whose hex part, reversed, is one of `reversedTails`. Only
 * the reversed tails travel with this run, so it never holds a planted secret itself.
 */
function memorySearch(reversedTails: string[]): string {
  return `
import ctypes, re
ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: /proc/self/mem becomes ours to open
wanted = set(${JSON.stringify(reversedTails)})
pattern = re.compile(rb"${PREFIX}([0-9a-f]{12})")
found = set()
regions = 0
with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", buffering=0) as mem:
    for line in maps:
        fields = line.split()
        if fields[1][0] != "r" or (len(fields) > 5 and fields[5] in ("[vvar]", "[vsyscall]", "[vvar_vclock]")):
            continue
        lo, hi = (int(x, 16) for x in fields[0].split("-"))
        at = lo
        while at < hi:
            n = min(1 << 22, hi - at)
            try:
                mem.seek(at)
                chunk = mem.read(n + 32)  # the overlap catches a secret across two chunks
            except OSError:
                break
            for m in pattern.finditer(chunk):
                tail = m.group(1).decode()[::-1]
                if tail in wanted:
                    found.add(tail)
            at += n
        regions += 1
print(regions > 10, sorted(found))
`;
}

test.serial(
  "no run can read an earlier run's code, stdin, files or output anywhere in its memory",
  async (t) => {
    const tails = Array.from({ length: 5 }, () => randomBytes(6).toString("hex"));
    const [inCode, inStdin, inFile, inOutput, inFetched] = tails as [string, string, string, string, string];
    const rev = (s: string) => [...s].reverse().join("");
    const planted = await ex.run({
      code: `
import sys
code_secret = "${PREFIX}${inCode}"
stdin_secret = sys.stdin.read()
file_secret = open("in.txt").read()
print("${PREFIX}" + "${rev(inOutput)}"[::-1])
open("out.txt", "w").write("${PREFIX}" + "${rev(inFetched)}"[::-1])
`,
      stdin: `${PREFIX}${inStdin}`,
      files: { "in.txt": Buffer.from(`${PREFIX}${inFile}`).toString("base64") },
      fetch_files: ["out.txt"],
    });
    t.is(planted.status, "Success", JSON.stringify(planted));
    t.is(planted.run_result?.stdout, `${PREFIX}${inOutput}\n`);
    t.is(Buffer.from(planted.files["out.txt"] ?? "", "base64").toString(), `${PREFIX}${inFetched}`);
    // a few runs in between: data of older runs must not be there either
    for (let i = 0; i < 2; i++) t.is((await ex.run("print(1)")).run_result?.stdout, "1\n");
    const search = await ex.run({ code: memorySearch(tails.map(rev)), run_timeout: 60 });
    t.is(search.status, "Success", JSON.stringify(search));
    t.is(search.run_result?.stdout, "True []\n", "found an earlier run's secrets in a later run's memory");
    // the control: the search finds a secret this run holds itself
    const self = await ex.run({
      code: `mine = "${PREFIX}" + "${inCode}"\n${memorySearch([rev(inCode)])}`,
      run_timeout: 60,
    });
    t.is(self.run_result?.stdout, `True ['${rev(inCode)}']\n`, JSON.stringify(self));
  },
);

const IPC_LEAK = `
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.mq_open.restype = ctypes.c_int
def sysv(kind):
    with open(f"/proc/sysvipc/{kind}") as f:
        return len(f.read().splitlines()) - 1
print("shm", sysv("shm"), "msg", sysv("msg"), "sem", sysv("sem"), end=" ")
fd = libc.mq_open(b"/torl-left", os.O_RDONLY)
print("mq", "found" if fd >= 0 else ctypes.get_errno())
if PLANT:
    assert libc.shmget(0, 1 << 20, 0o1600) >= 0, "shmget"
    assert libc.msgget(0, 0o1600) >= 0, "msgget"
    assert libc.semget(0, 4, 0o1600) >= 0, "semget"
    assert libc.mq_open(b"/torl-left", os.O_CREAT | os.O_RDWR, 0o600, None) >= 0, "mq_open"
`;

test.serial(
  "SysV shared memory, queues, semaphores and POSIX queues of one run are gone in the next",
  async (t) => {
    const plant = await ex.run(`PLANT = True\n${IPC_LEAK}`);
    t.is(plant.status, "Success", JSON.stringify(plant));
    t.is(plant.run_result?.stdout, "shm 0 msg 0 sem 0 mq 2\n");
    const look = await ex.run(`PLANT = False\n${IPC_LEAK}`);
    // 2 = ENOENT: no queue of that name
    t.is(look.run_result?.stdout, "shm 0 msg 0 sem 0 mq 2\n", JSON.stringify(look));
  },
);

test.serial(
  "the last run's /tmp and /dev/shm, until they are unmounted, are out of the next run's reach",
  async (t) => {
    const plant = await ex.run(
      "open('/tmp/left.txt', 'w').write('x' * 1000)\nopen('/dev/shm/left', 'w').write('y')\nprint('ok')",
    );
    t.is(plant.run_result?.stdout, "ok\n", JSON.stringify(plant));
    const look = await ex.run(`
import os
print(sorted(os.listdir("/tmp")), os.listdir("/dev/shm"))
for path in ("/.parked", "/.parked/tmp", "/.parked/tmp/left.txt"):
    try:
        os.listdir(path) if not path.endswith(".txt") else open(path).read()
        print(path, "readable")
    except OSError as e:
        print(path, e.strerror)
`);
    t.is(
      look.run_result?.stdout,
      "['run'] []\n/.parked Permission denied\n/.parked/tmp Permission denied\n/.parked/tmp/left.txt Permission denied\n",
      JSON.stringify(look),
    );
  },
);

test.serial("a run that uses up every SysV shared memory id leaves the next run its own", async (t) => {
  const exhaust = await ex.run({
    code: `
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
n = 0
while libc.shmget(0, 1, 0o1600) >= 0:
    n += 1
print(n > 100, ctypes.get_errno())
`,
    run_timeout: 60,
  });
  // 28 = ENOSPC: the namespace's table of segments is full
  t.is(exhaust.run_result?.stdout, "True 28\n", JSON.stringify(exhaust));
  const next = await ex.run(`
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print(libc.shmget(0, 1, 0o1600) >= 0)
`);
  t.is(next.run_result?.stdout, "True\n", JSON.stringify(next));
});

test.serial(
  "200 MB of shared memory a run pins are gone, and the next run gets its own memory limit, all of it",
  async (t) => {
    const pin = await ex.run({
      code: `
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
size = 200 << 20
seg = libc.shmget(0, size, 0o1600)
addr = libc.shmat(seg, None, 0)
ctypes.memset(addr, 1, size)  # 200 MB of shared memory, charged to the run's memory cgroup
print(seg >= 0)
`,
      memory_limit_MB: 512,
    });
    t.is(pin.run_result?.stdout, "True\n", JSON.stringify(pin));
    // the next run gets its own limit (128 MB + 64 MB of slack), all of it: one 80 MB process fits,
    // three do not (the old code kept the cgroup at the pinning run's limit, silently)
    const next = await ex.run({
      code: `
import os
done_r, done_w = os.pipe()
hold_r, hold_w = os.pipe()
children = []
for i in range(3):
    pid = os.fork()
    if pid == 0:
        try:
            os.close(done_r)
            os.close(hold_w)
            x = bytearray(80 << 20)
            for j in range(0, len(x), 4096):
                x[j] = 1
            os.write(done_w, b"a")
            os.close(done_w)
            os.read(hold_r, 1)  # EOF once the parent closes its end: hold the 80 MB until then
        finally:
            os._exit(0)
    children.append(pid)
os.close(done_w)
while os.read(done_r, 16):
    pass  # until every child allocated or was killed
os.close(hold_w)
# a child the memory cgroup killed (it may kill one that had finished) exits by SIGKILL; the others
# held their 80 MB together until now
print(sum(1 for pid in children if os.waitpid(pid, 0)[1] == 0))
`,
      memory_limit_MB: 128,
      run_timeout: 60,
    });
    t.is(next.status, "Success", JSON.stringify(next));
    const held = Number(next.run_result?.stdout);
    t.true(held >= 1 && held < 3, `${held} of 3 processes held 80 MB at once: ${JSON.stringify(next)}`);
  },
);

test.serial("170 MB a run leaves in /tmp are freed before the next run needs its memory", async (t) => {
  const fill = await ex.run({
    code: `
with open("/tmp/big", "wb") as f:
    for _ in range(170):
        f.write(b"x" * (1 << 20))
print("ok")
`,
    memory_limit_MB: 512,
  });
  t.is(fill.run_result?.stdout, "ok\n", JSON.stringify(fill));
  // 128 MB + 64 MB of slack: 100 MB fit only if the 170 MB of files no longer count
  const next = await ex.run({
    code: `
import os
x = bytearray(100 << 20)
for j in range(0, len(x), 4096):
    x[j] = 1
print(os.path.exists("/tmp/big"))
`,
    memory_limit_MB: 128,
    run_timeout: 60,
  });
  t.is(next.status, "Success", JSON.stringify(next));
  t.is(next.run_result?.stdout, "False\n", JSON.stringify(next));
});

test.serial("every random generator a run can reach starts from fresh entropy in each run", async (t) => {
  const code = `
import random, numpy, sympy.core.random as sr
print(random.random(), numpy.random.rand(), numpy.random.randint(1 << 30), sr.rng.random(), sr._assumptions_rng.random(),
      numpy.random.randn(), random.gauss(0, 1), random.getrandbits(64))
`;
  const a = (await ex.run(code)).run_result?.stdout ?? "";
  const b = (await ex.run(code)).run_result?.stdout ?? "";
  const fa = a.trim().split(" ");
  const fb = b.trim().split(" ");
  t.is(fa.length, 8, a);
  for (let i = 0; i < 8; i++) t.not(fa[i], fb[i], `generator ${i} repeats across runs: ${a} / ${b}`);
});
