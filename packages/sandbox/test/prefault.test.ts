import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import test from "ava";
import { resolvePython } from "../src/python.js";

const PYTHON_DIR = fileURLToPath(new URL("../python/", import.meta.url));

// A run child copies the pages runs usually write only until its request arrives: this drives the
// copying loop itself, in a plain python3, on a private anonymous mapping of 300 pages, and reads
// back from /proc/self/pagemap which of them it copied.
const PROBE = `
import mmap, os, sys
sys.path.insert(0, ${JSON.stringify(PYTHON_DIR)})
from torl_sandbox.linux import PAGE
from torl_sandbox.prefault import SMALL_CHUNK, populate_while_idle
import ctypes

def present(addr, pages):
    with open("/proc/self/pagemap", "rb") as f:
        f.seek(addr // PAGE * 8)
        data = f.read(pages * 8)
    return sum((int.from_bytes(data[i:i + 8], "little") >> 63) & 1 for i in range(0, len(data), 8))

for waiting in (False, True):
    m = mmap.mmap(-1, 300 * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    r, w = os.pipe()
    if waiting:
        os.write(w, b"x")
    ranges = [(addr, 100 * PAGE), (addr + 100 * PAGE, 200 * PAGE)]
    done = populate_while_idle(ranges, r, SMALL_CHUNK)
    print("waiting" if waiting else "idle", done, present(addr, 300), SMALL_CHUNK // PAGE)
`;

test("prefault: idle, every hot range is copied; with the request waiting, none is", (t) => {
  const out = spawnSync(resolvePython(), ["-c", PROBE], { encoding: "utf8", timeout: 30_000 });
  t.is(out.status, 0, out.stderr);
  const [idle, waiting] = out.stdout.trim().split("\n");
  t.is(idle, "idle 2 300 64", "both ranges copied whole, all 300 pages present");
  t.is(waiting, "waiting 0 0 64", "the request was there first: nothing copied");
});
