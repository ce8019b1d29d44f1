"""The warm interpreter: BLAS pinned to one thread (the server forks without Python's at-fork hooks,
which is safe only with one thread), the modules every run finds imported, and the random generators
each run child reseeds."""

import io
import os
import random
import sys


for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"


# Imported once into the warm interpreter so that runs find them loaded (model-written math code uses
# these most); `preload` in the config adds more (e.g. scipy).
STDLIB_PRELOAD = (
    "math cmath fractions decimal itertools functools collections re json random statistics heapq bisect "
    "string datetime copy operator typing numbers socket encodings.idna subprocess io textwrap array struct hashlib"
).split()


def warm_up(preload=()):
    import numpy  # noqa: F401
    import sympy

    for mod in STDLIB_PRELOAD:
        __import__(mod)

    x = sympy.symbols("x")
    print(sympy.factor(x**2 - 1), file=io.StringIO())
    sympy.simplify(sympy.sin(x) ** 2 + sympy.cos(x) ** 2)
    sympy.solve(x**2 - 4, x)
    sympy.Rational(1, 3) + sympy.sqrt(2)
    sympy.integrate(x**2, x)
    numpy.arange(10).sum()
    compile("print(1)", "main.py", "exec")
    for mod in preload:
        __import__(mod)


def random_generators():
    """Every pseudo-random generator the warm interpreter holds (random's, sympy's, numpy's global
    RandomState, and any other random.Random, RandomState or Generator a preloaded module made)."""
    import gc

    import numpy.random

    kinds = (random.Random, numpy.random.RandomState, numpy.random.Generator)
    found = [o for o in gc.get_objects() if isinstance(o, kinds) and not isinstance(o, random.SystemRandom)]
    return found


def reseed_generators(generators):
    """Fresh entropy for each generator, in each run child: forked runs would otherwise all continue
    the warm interpreter's sequences, identically."""
    import numpy
    import numpy.random

    for gen in generators:
        if isinstance(gen, numpy.random.Generator):
            gen.bit_generator.state = type(gen.bit_generator)().state
        elif isinstance(gen, numpy.random.RandomState):
            # 256 bits through MT19937's init_by_array (what random.seed() does with its urandom key):
            # a tenth of the CPU of seed(), which hashes a SeedSequence into the whole state, ~1 ms a run
            gen.seed(numpy.frombuffer(os.urandom(32), dtype=numpy.uint32))
        else:
            gen.seed()


class StateReseeder:
    """Reseeds the generators by reading fresh entropy straight into their Mersenne Twister state
    arrays: one readv of /dev/urandom per fork instead of a seed() call per generator. In the
    template every page written after a fork is a page fault (16-45 us here), and seed() touches
    ~40 pages of Python and numpy objects; the arrays span a few.

    Only arrays whose address is proven: random.Random's (the C object's fields after its header)
    and a RandomState's MT19937 (numpy's `ctypes.state_address`), each checked against getstate()
    after a normal seed, which also leaves each at the end of its block (the next draw regenerates
    from the fresh words) with no cached gaussian. Any other generator is seeded the usual way.
    The template never draws from them, so those positions and caches stay as set."""

    MT_WORDS = 624

    def __init__(self, generators):
        import ctypes

        reseed_generators(generators)
        self.views, self.others = [], []
        for gen in generators:
            words = self._state_words(gen, ctypes)
            if words is None:
                self.others.append(gen)
            else:
                self.views.append(memoryview(words).cast("B"))
        self.size = sum(v.nbytes for v in self.views)
        self.urandom = os.open("/dev/urandom", os.O_RDONLY | os.O_CLOEXEC)

    def _state_words(self, gen, ctypes):
        import numpy.random

        words_t = ctypes.c_uint32 * self.MT_WORDS
        if type(gen) is random.Random or (isinstance(gen, random.Random) and type(gen).seed is random.Random.seed):
            # CPython's RandomObject: the object header, int index, uint32_t state[624]
            head = ctypes.sizeof(ctypes.c_ssize_t) + ctypes.sizeof(ctypes.c_void_p)
            version, state, gauss = gen.getstate()
            index = ctypes.c_int.from_address(id(gen) + head).value
            words = words_t.from_address(id(gen) + head + ctypes.sizeof(ctypes.c_int))
            ok = version == 3 and gauss is None and index == state[-1] == self.MT_WORDS
            return words if ok and list(words) == list(state[:-1]) else None
        if type(gen) is numpy.random.RandomState:
            name, key, pos, has_gauss, _ = gen.get_state(legacy=True)
            bits = gen._bit_generator
            if name != "MT19937" or has_gauss or pos != self.MT_WORDS:
                return None
            address = bits.ctypes.state_address
            words = words_t.from_address(address)
            at_end = ctypes.c_int.from_address(address + ctypes.sizeof(words_t)).value == self.MT_WORDS
            return words if at_end and list(words) == [int(k) for k in key] else None
        return None

    def reseed(self):
        if self.views and os.readv(self.urandom, self.views) != self.size:
            raise OSError("short read from /dev/urandom while reseeding the random generators")
        reseed_generators(self.others)


def forget_host():
    """Drops what the warm interpreter learnt about the host before it moved into its namespaces,
    so that no run (a fork of it) can read it: the relative entry of sys.path, the import system's finder for the directory the
    server was started in (its path and a listing of it, under sys.path_importer_cache) and for any
    other directory not on or below sys.path, the cached uname (the host's hostname: platform's cache), the
    platform strings built from it, os-release, and the source lines linecache kept. Called after the
    UTS namespace exists, so what platform learns again is the sandbox's own name."""
    import linecache
    import platform

    # '' (the current directory, first on the path of `python -c`) would resolve to wherever the
    # process stands at the next import; each run puts its own working directory first instead
    sys.path[:] = [p for p in sys.path if p and os.path.isabs(p)]
    for key in list(sys.path_importer_cache):
        # kept: the directories on the path and packages' directories below them, which runs see
        if not any(key == p or key.startswith(p + "/") for p in sys.path):
            del sys.path_importer_cache[key]
    platform._uname_cache = None
    platform._platform_cache = {}
    platform._os_release_cache = None
    linecache.clearcache()
