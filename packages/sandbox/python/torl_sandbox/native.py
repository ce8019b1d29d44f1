"""The template's loop and each run child's preparation in C (native/template_loop.c in the npm
package), loaded from the bytes Node sends with the sources. Where it is missing (no C compiler
where Node runs, or `nativeTemplate: false`) the template runs the same steps in Python
(template.template_main, run_child.zygote_main), at a higher cost per run: see the module's C file."""

import base64
import ctypes
import os

from torl_sandbox.prefault import SMALL_CHUNK

# the layout of struct torl_native_config; native/template_loop.c says the same number
ABI = 2


class Range(ctypes.Structure):
    _fields_ = [("addr", ctypes.c_size_t), ("len", ctypes.c_size_t)]


class Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class Config(ctypes.Structure):
    _fields_ = [
        ("abi", ctypes.c_int),
        ("sock", ctypes.c_int),
        ("pid_ns", ctypes.c_int),
        ("child_ends", ctypes.c_int),
        ("trace", ctypes.c_int),
        ("scratch", ctypes.c_char_p),
        ("n_parent_fds", ctypes.c_int),
        ("parent_fds", ctypes.POINTER(ctypes.c_int)),
        ("ipc_on", ctypes.c_int),
        ("ipc_tables", ctypes.c_int * 3),
        ("mqueue_dir", ctypes.c_int),
        ("urandom", ctypes.c_int),
        ("n_iov", ctypes.c_int),
        ("iov", ctypes.POINTER(Iovec)),
        ("n_procs_fds", ctypes.c_int),
        ("procs_fds", ctypes.POINTER(ctypes.c_int)),
        ("populate_hot_whole", ctypes.c_int),
        ("n_hot", ctypes.c_int),
        ("hot", ctypes.POINTER(Range)),
        ("n_hot_huge", ctypes.c_int),
        ("hot_huge", ctypes.POINTER(Range)),
        ("small_chunk", ctypes.c_size_t),
        ("fsize_limit", ctypes.c_long),
        ("drop_uid", ctypes.c_int),
        ("uid", ctypes.c_int),
        ("gid", ctypes.c_int),
    ]


class NativeLoop:
    """The loaded library. Loaded through a memfd, so that every run's /proc/self/maps names
    "/memfd:torl-sandbox-native" and no host path."""

    def __init__(self, library):
        fd = os.memfd_create("torl-sandbox-native", os.MFD_CLOEXEC)
        try:
            view = memoryview(library)
            while view:
                view = view[os.write(fd, view) :]
            self.lib = ctypes.CDLL(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
        abi = self.lib.torl_native_abi()
        if abi != ABI:
            raise OSError(f"the native loop was built for configuration {abi}, this server speaks {ABI}")
        self.lib.torl_template_loop.argtypes = [ctypes.POINTER(Config)]
        self.lib.torl_child_request.restype = ctypes.c_void_p
        self.lib.torl_child_request.argtypes = [ctypes.POINTER(ctypes.c_size_t)]
        self.lib.torl_child_timings.restype = ctypes.c_char_p
        self.keep = []  # what the configuration points to, alive as long as the loop

    def request(self):
        """The run child's request as the server sent it (bytes of JSON), once it arrives; a child
        whose server closes instead ends here (exit 0)."""
        n = ctypes.c_size_t()
        at = self.lib.torl_child_request(ctypes.byref(n))
        return ctypes.string_at(at, n.value)

    def timings(self):
        """The run child's per-step timings (trace on) as the members of a JSON object."""
        return self.lib.torl_child_timings().decode()

    def config(self, sock, state, child_ends):
        def ints(values):
            array = (ctypes.c_int * max(1, len(values)))(*values)
            self.keep.append(array)
            return array

        def ranges(pairs):
            array = (Range * max(1, len(pairs)))(*[Range(a, n) for a, n in pairs])
            self.keep.append(array)
            return array

        reseeder, ipc, cg = state["reseeder"], state["run_ipc"], state["cgroups"]
        # the generators' Mersenne Twister state arrays, read into straight from /dev/urandom
        views = [(ctypes.c_char * v.nbytes).from_buffer(v) for v in reseeder.views]
        iov = (Iovec * max(1, len(views)))(*[Iovec(ctypes.addressof(v), ctypes.sizeof(v)) for v in views])
        scratch = state["scratch"].encode()
        self.keep += [views, iov, scratch]
        procs = list(cg.procs_fds) if cg is not None else []
        cfg = Config(
            abi=ABI,
            sock=sock.fileno(),
            pid_ns=int(bool(state["pid_ns"])),
            child_ends=child_ends,
            trace=int(state["trace"] is not None),
            scratch=scratch,
            n_parent_fds=len(state["parent_fds"]),
            parent_fds=ints(state["parent_fds"]),
            ipc_on=int(ipc is not None),
            ipc_tables=(ctypes.c_int * 3)(*([fd for fd, _ in ipc.tables] if ipc is not None else [-1, -1, -1])),
            mqueue_dir=ipc.mqueues if ipc is not None else -1,
            urandom=reseeder.urandom,
            n_iov=len(views),
            iov=iov,
            n_procs_fds=len(procs),
            procs_fds=ints(procs),
            populate_hot_whole=int(bool(state["huge_ranges"])),
            n_hot=len(state["hot_pages"]),
            hot=ranges(state["hot_pages"]),
            n_hot_huge=len(state["hot_huge"]) if state["huge_ranges"] else 0,
            hot_huge=ranges(state["hot_huge"] if state["huge_ranges"] else []),
            small_chunk=SMALL_CHUNK,
            fsize_limit=int(state["tmpfs_mb"]) * 1024 * 1024,
            drop_uid=int(bool(state["drop_uid"])),
            uid=state["uid"],
            gid=state["gid"],
        )
        self.keep.append(cfg)
        return cfg

    def loop(self, sock, state, child_ends):
        """The template's loop; True in each new run child (prepared up to its request), False in
        the template once the server has closed the socket."""
        return self.lib.torl_template_loop(ctypes.byref(self.config(sock, state, child_ends))) == 0


def load_native(part):
    """(NativeLoop, None) from the bundle's "native" entry, or (None, why not)."""
    if not part:
        return None, "no native loop was sent with the sources"
    if part.get("unavailable"):
        return None, part["unavailable"]
    try:
        return NativeLoop(base64.b64decode(part["library"])), None
    except (OSError, KeyError, ValueError, AttributeError) as exc:
        return None, f"the native loop could not be loaded: {exc}"

