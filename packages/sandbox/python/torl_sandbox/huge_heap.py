"""The warm heap in 2 MiB huge pages, set up before any import. On virtual machines with shadow paging
every 4 KiB copy-on-write fault costs 20-40 us, and a sympy run writes ~1,500 pages spread over the
50 MB heap (reference counts): ~45 ms per run. With the heap in MAP_PRIVATE hugetlb pages a fork
copies one entry per 2 MiB and a run copies each 2 MiB page once (~0.25 ms): measured 5-8x less CPU
per run. glibc does the mapping (Node starts us with PYTHONMALLOC=malloc and
glibc.malloc.hugetlb=2); we only stop the brk heap from growing, so that glibc grows the main arena
with hugetlb mmaps instead.
"""

import ctypes
import os

from torl_sandbox.cgroups import hugetlb_hierarchy
from torl_sandbox.linux import PAGE, libc


HUGE = 2 << 20
MAP_PRIVATE, MAP_ANONYMOUS, MAP_NORESERVE, MAP_FIXED_NOREPLACE = 0x02, 0x20, 0x4000, 0x100000
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.sbrk.restype = ctypes.c_void_p
libc.sbrk.argtypes = [ctypes.c_long]


def meminfo(key):
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def huge_pages_usable():
    """Allows surplus huge pages (taken from free memory on use, given back on release) if root."""
    path = "/proc/sys/vm/nr_overcommit_hugepages"
    if os.geteuid() == 0:
        # up to a quarter of RAM, capped at 8 GiB; grow-only, so concurrent workers agree
        want = min(meminfo("MemTotal") // 4 // 2048, 4096)
        try:
            with open(path) as f:
                have = int(f.read())
            if have < want:
                with open(path, "w") as f:
                    f.write(str(want))
        except OSError:
            pass
    try:
        with open(path) as f:
            overcommit = int(f.read())
    except OSError:
        overcommit = 0
    spare = meminfo("HugePages_Free") - meminfo("HugePages_Rsvd") + overcommit - meminfo("HugePages_Surp")
    return meminfo("Hugepagesize") == 2048 and spare >= 64


def block_brk():
    """One inaccessible page right after the brk heap: brk cannot grow, glibc falls back to mmap."""
    end = (libc.sbrk(0) + PAGE - 1) & ~(PAGE - 1)
    got = libc.mmap(end, PAGE, 0, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0)
    if got != end:
        raise OSError(ctypes.get_errno(), f"cannot place a guard page at the brk end {end:#x}")


def huge_ranges():
    """(start, length) of this process's hugetlb mappings."""
    out = []
    start = None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(None, 1)[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                start = (lo, hi - lo)
            elif head == "KernelPageSize:" and start is not None and int(line.split()[1]) == 2048:
                out.append(start)
    return out


def in_ranges(addr, ranges):
    return any(lo <= addr < lo + n for lo, n in ranges)


def huge_heap_setup(enabled, need_hugetlb_cgroup=False):
    """Makes glibc grow the heap in huge pages when configured and possible (before any import);
    returns None when it did, else why not. A speed feature, not a protection: when it is off the
    health says why but stays "ok"."""
    if not (enabled and os.environ.get("PYTHONMALLOC") == "malloc"):
        return "huge pages off by configuration"
    if need_hugetlb_cgroup and hugetlb_hierarchy() is None:
        return "no hugetlb cgroup controller to cap the runs' copies of a huge-page heap"
    try:
        if not huge_pages_usable():
            return "no free or overcommittable 2 MiB pages"
        block_brk()
        return None
    except OSError as exc:
        return f"huge-page heap off: {exc}"
