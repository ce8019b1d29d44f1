"""Prefaulting: page faults are the main cost of a forked run (each touched page is copied on write,
and a fault costs 20-40 us on virtualised machines with shadow paging). One madvise call that
populates many pages costs ~1 us per page. At start a probe child runs the warm-up code and reports
which pages it had to copy; every run child populates exactly those, before its request arrives.
"""

import ctypes
import select
import struct

from torl_sandbox.linux import PAGE, libc


MADV_POPULATE_WRITE = 23
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def writable_private_ranges():
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            perms = parts[1]
            if perms[1] == "w" and perms[3] == "p":
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                out.append((lo, hi))
    return out


def exclusive_pages():
    """Ranges of pages of this process that are present and mapped only here (copied or new)."""
    ranges = []
    with open("/proc/self/pagemap", "rb") as pm:
        for lo, hi in writable_private_ranges():
            n = (hi - lo) // PAGE
            pm.seek(lo // PAGE * 8)
            data = pm.read(n * 8)
            entries = struct.unpack(f"<{len(data) // 8}Q", data)
            start = None
            for i, e in enumerate(entries):
                hot = (e >> 63) & 1 and (e >> 56) & 1
                if hot and start is None:
                    start = i
                elif not hot and start is not None:
                    ranges.append((lo + start * PAGE, (i - start) * PAGE))
                    start = None
            if start is not None:
                ranges.append((lo + start * PAGE, (len(entries) - start) * PAGE))
    return ranges


# The learning run: the shape of typical model-written code. Learning from more varied code copies
# more pages into every run than it saves in faults (measured: 2,350 pages cost ~15% more CPU per run
# than 1,500 on a mix of sympy and plain-math runs).
LEARN_CODE = """
import sympy, numpy
x = sympy.symbols("x")
print(sympy.factor(x**2 - 1))
print(numpy.arange(10).sum())
"""

def populate_while_idle(ranges, request_fd, chunk):
    """Copies the ranges into this process until its request arrives, `chunk` bytes at a time (a
    request waits for one chunk at most); returns how many ranges it copied whole.

    Idle, the copies take the faults off the request's path (latency). Under load the request is
    usually waiting already, and copying pages the run may not write costs more than faulting in the
    ones it does (measured: 57 vs 68 runs/s for a bare fork loop), so the run starts at once.
    """
    waiting = select.poll()
    waiting.register(request_fd, select.POLLIN)
    done = 0
    for addr, length in ranges:
        for at in range(addr, addr + length, chunk):
            if waiting.poll(0):
                return done
            libc.madvise(at, min(chunk, addr + length - at), MADV_POPULATE_WRITE)
        done += 1
    return done


# how many small pages to copy between two looks for the request: 64 take ~0.4 ms on a KVM guest
SMALL_CHUNK = 64 * PAGE
