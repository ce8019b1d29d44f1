"""Warm fork server for @torl-ts/sandbox.

One instance is one sandbox worker. Node starts it as `python3 -u -c <bootstrap> '<config json>'`
with this file open on fd 3 (so that no host path is in its command line or in `__file__`, which
every run inherits), and talks to it over fds 0/1 with length-prefixed JSON frames (4-byte
big-endian length + UTF-8 JSON).

Start-up (as root; each step is recorded in `protections`, a failed step is reported, never hidden):
  1. import sympy and numpy once (the point of the pool) and warm them up;
  2. create cgroups (pids, memory and hugetlb; v1, v2 or both) that will hold the runs of this worker;
  3. unshare a new pid namespace and fork: the child is pid 1 of that namespace and becomes the
     server; the parent only waits, relays the exit status and removes the cgroups;
  4. the server unshares mount, network, IPC and UTS namespaces, builds a minimal read-only root
     (overlay views of the interpreter's own directories and /usr, a private /tmp, /dev with a few
     devices, its own /proc with hidepid=2) and pivots into it, so no host file is reachable any more;
  5. before the first request the server forks the template, the only process that forks runs.
     The server handles every request and result but never forks a run; the template never sees a
     request. So no run inherits memory that held another run's data.

Each run: a fresh fork of the template, in its own session, moved into the run cgroups, with fresh
entropy in every random generator, its own IPC namespace, rlimits (address space, processes, file
size, open files, CPU), an empty capability bounding set, dropped to the worker's unprivileged uid
(not the server's), no_new_privs, seccomp, an empty environment, stdin from a memfd and a scratch
working directory. After the run the template SIGKILLs every process left in the pid namespace
(kill(-1) spares only pid 1 and itself) and replaces /tmp and /dev/shm by fresh tmpfs mounts, so
nothing carries over.
"""

import base64
import builtins
import ctypes
import errno
import fcntl
import io
import json
import os
import platform
import random
import resource
import select
import signal
import socket
import stat
import struct
import sys
import time
import traceback

CONFIG = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}.get(platform.machine())

libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
libc.unshare.argtypes = [ctypes.c_int]
libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
libc.sethostname.argtypes = [ctypes.c_char_p, ctypes.c_size_t]

PROTECTIONS = {}  # name -> {"active": bool, "how": str} or {"active": False, "reason": str}
WARNINGS = []


def _check(ret, what):
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def status_in_child(check):
    """Runs check() in a throwaway child: its wait status, 0 when check returned True."""
    pid = os.fork()
    if pid == 0:
        try:
            os._exit(0 if check() else 2)
        except BaseException:  # noqa: BLE001
            os._exit(1)
    return os.waitpid(pid, 0)[1]


def protect(name, how, fn):
    """Runs one isolation step; records whether it is active and why not."""
    try:
        result = fn()
        PROTECTIONS[name] = {"active": True, "how": how}
        return result
    except Exception as exc:  # noqa: BLE001 - every failure is reported, never hidden
        PROTECTIONS[name] = {"active": False, "reason": f"{type(exc).__name__}: {exc}"}
        WARNINGS.append(f"{name} not active: {exc}")
        return None


def mount(src, dst, fstype=None, flags=0, data=None):
    enc = lambda s: s.encode() if isinstance(s, str) else s  # noqa: E731
    _check(libc.mount(enc(src), enc(dst), enc(fstype), flags, enc(data)), f"mount {src} on {dst}")


def bind_ro(src, dst):
    if os.path.isdir(src):
        os.makedirs(dst, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        open(dst, "a").close()
    mount(src, dst, None, MS_BIND | MS_REC)
    mount(None, dst, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


# ---------------------------------------------------------------------------------------------
# framing


def read_exact(fd, n):
    chunks = []
    while n > 0:
        data = os.read(fd, n)
        if not data:
            return None
        chunks.append(data)
        n -= len(data)
    return b"".join(chunks)


def read_frame(fd):
    head = read_exact(fd, 4)
    if head is None:
        return None
    (length,) = struct.unpack(">I", head)
    body = read_exact(fd, length)
    return None if body is None else json.loads(body)


def write_frame(fd, obj):
    body = json.dumps(obj).encode()
    data = struct.pack(">I", len(body)) + body
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


# ---------------------------------------------------------------------------------------------
# cgroups


def hugetlb_hierarchy():
    """(mount point, cgroup version) of the hugetlb controller, or None."""
    root = "/sys/fs/cgroup"
    if os.path.exists(os.path.join(root, "hugetlb", "cgroup.procs")):
        return os.path.join(root, "hugetlb"), 1
    for v2 in (root, os.path.join(root, "unified")):
        try:
            with open(os.path.join(v2, "cgroup.controllers")) as f:
                if "hugetlb" in f.read().split():
                    return v2, 2
        except OSError:
            continue
    return None


class Cgroups:
    """The cgroup(s) that hold this worker's runs: pids.max and the memory limit are set per run."""

    def __init__(self, name, hugetlb=False):
        self.dirs = []
        self.procs_fds = []
        self.pids_max_fd = None
        self.mem_fds = []
        self.huge_fd = None
        self._controllers(name)
        if hugetlb:
            self._hugetlb(name)

    def _hugetlb(self, name):
        """The hugetlb controller, where this machine has it: its own v1 hierarchy, or the v2 one
        (also beside v1 controllers, as /sys/fs/cgroup/unified). Caps the run's copies of the warm
        heap's huge pages, which the memory controller does not count."""
        found = hugetlb_hierarchy()
        if found is None:
            raise OSError(errno.ENOENT, "no hugetlb cgroup controller (v1 hierarchy or v2) on this machine")
        root, version = found
        parent = os.path.join(root, "torl-sandbox")
        d = os.path.join(parent, name)
        if version == 2:
            for level in (root, parent):
                os.makedirs(level, exist_ok=True)
                with open(os.path.join(level, "cgroup.subtree_control"), "w") as f:
                    f.write("+hugetlb")
        os.makedirs(d, exist_ok=True)
        limit = "hugetlb.2MB.max" if version == 2 else "hugetlb.2MB.limit_in_bytes"
        self.huge_fd = os.open(os.path.join(d, limit), os.O_WRONLY)
        if d not in self.dirs:
            self.dirs.append(d)
            self.procs_fds.append(os.open(os.path.join(d, "cgroup.procs"), os.O_WRONLY))

    def _controllers(self, name):
        root = "/sys/fs/cgroup"
        if os.path.exists(os.path.join(root, "cgroup.controllers")):  # cgroup v2
            parent = os.path.join(root, "torl-sandbox")
            os.makedirs(parent, exist_ok=True)
            with open(os.path.join(root, "cgroup.subtree_control"), "w") as f:
                f.write("+pids +memory")
            with open(os.path.join(parent, "cgroup.subtree_control"), "w") as f:
                f.write("+pids +memory")
            d = os.path.join(parent, name)
            os.makedirs(d, exist_ok=True)
            self.dirs.append(d)
            self.pids_max_fd = os.open(os.path.join(d, "pids.max"), os.O_WRONLY)
            self.mem_fds.append(os.open(os.path.join(d, "memory.max"), os.O_WRONLY))
            self.procs_fds.append(os.open(os.path.join(d, "cgroup.procs"), os.O_WRONLY))
            self.kind = "cgroup v2"
            return
        pids_root = os.path.join(root, "pids")
        mem_root = os.path.join(root, "memory")
        if not os.path.exists(os.path.join(pids_root, "cgroup.procs")):
            raise OSError(errno.ENOENT, "no pids cgroup controller mounted")
        d = os.path.join(pids_root, "torl-sandbox", name)
        os.makedirs(d, exist_ok=True)
        self.dirs.append(d)
        self.pids_max_fd = os.open(os.path.join(d, "pids.max"), os.O_WRONLY)
        self.procs_fds.append(os.open(os.path.join(d, "cgroup.procs"), os.O_WRONLY))
        if os.path.exists(os.path.join(mem_root, "cgroup.procs")):
            d = os.path.join(mem_root, "torl-sandbox", name)
            os.makedirs(d, exist_ok=True)
            self.dirs.append(d)
            # memsw (memory+swap) must stay >= memory; set memory first when lowering, memsw first
            # when raising: we always write both twice in set_limits.
            for fname in ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes"):
                p = os.path.join(d, fname)
                if os.path.exists(p):
                    self.mem_fds.append(os.open(p, os.O_WRONLY))
            self.procs_fds.append(os.open(os.path.join(d, "cgroup.procs"), os.O_WRONLY))
        self.kind = "cgroup v1"

    def verify(self):
        """A throwaway child joins the cgroups: a machine where that fails runs without them."""
        st = status_in_child(lambda: self.join() or True)
        if st != 0:
            raise OSError(errno.EPERM, f"cannot move a process into {self.dirs}")
        return self

    @staticmethod
    def _write(fd, value):
        try:
            os.pwrite(fd, str(value).encode(), 0)
            return True
        except OSError:
            return False

    def set_limits(self, max_pids, mem_bytes, huge_bytes):
        if (max_pids, mem_bytes, huge_bytes) == getattr(self, "_last", None):
            return True  # the usual case: same limits as the previous run, nothing to write
        ok = self._write(self.pids_max_fd, max_pids)
        if self.huge_fd is not None:
            ok = self._write(self.huge_fd, huge_bytes) and ok
        # v1 wants memory.memsw >= memory at every moment: one of the first writes may be refused,
        # the second round then succeeds whichever way the limit moved
        for fd in self.mem_fds:
            self._write(fd, mem_bytes)
        for fd in self.mem_fds:
            ok = self._write(fd, mem_bytes) and ok
        self._last = (max_pids, mem_bytes, huge_bytes) if ok else None
        return ok

    def join(self):
        """Called in the run child before dropping privileges."""
        for fd in self.procs_fds:
            os.pwrite(fd, b"0", 0)

    def remove(self):
        for d in self.dirs:
            for _ in range(50):
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


# ---------------------------------------------------------------------------------------------
# namespaces and the minimal root


def python_dirs():
    dirs = set()
    for p in [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *sys.path[1:]]:
        if p and os.path.isabs(p) and os.path.exists(p):
            dirs.add(os.path.realpath(p) if os.path.isdir(p) else os.path.dirname(os.path.realpath(p)))
    # keep only the outermost of nested dirs
    out = []
    for d in sorted(dirs):
        if d == "/" or any(d == o or d.startswith(o + "/") for o in out):
            continue
        out.append(d)
    return [d for d in out if not (d == "/usr" or d.startswith("/usr/"))]


LAYERS = "/tmp/layers"  # in the server's private /tmp, which the pivot detaches with the old root


def view_ro(src, dst):
    """A read-only view of host directory `src` at `dst` whose mount entry names neither a host path
    nor the host's device and filesystem options (a bind would show both in /proc/self/mountinfo):
    an overlay whose lower layers are a bind of `src` under LAYERS and an empty directory. Returns
    False where overlayfs refuses (e.g. stacked too deep); then it is a plain read-only bind."""
    layer = os.path.join(LAYERS, str(len(os.listdir(LAYERS))))
    os.makedirs(layer)
    os.makedirs(dst, exist_ok=True)
    try:
        mount(src, layer, None, MS_BIND | MS_REC)
        mount("sandbox", dst, "overlay", MS_RDONLY | MS_NOSUID | MS_NODEV, f"lowerdir={layer}:{LAYERS}/empty")
        return True
    except OSError:
        libc.umount2(layer.encode(), MNT_DETACH)
        bind_ro(src, dst)
        return False


def mounts_below(path):
    """Mount points strictly below `path` (this namespace's view), outermost first."""
    below = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            at = line.split()[4].replace("\\040", " ")
            if at.startswith(path.rstrip("/") + "/") and not at.startswith(LAYERS):
                below.append(at)
    return sorted(set(below), key=lambda m: m.count("/"))


def build_root(uid, gid, tmpfs_mb):
    """In a fresh mount namespace: a tmpfs root holding read-only views of what Python needs.
    Returns the directories whose mount entry still shows the host's (see view_ro)."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    # A private tmpfs over /tmp gives a place for the new root that the host never sees.
    mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=0755")
    root = "/tmp/root"
    os.makedirs(root)
    os.makedirs(LAYERS + "/empty")
    mount("tmpfs", root, "tmpfs", MS_NOSUID, "size=16m,mode=0755")
    shown = []
    for d in ["/usr", *python_dirs()]:
        # an overlay does not show what is mounted below its lower directory: view those mounts too
        for at in [d, *mounts_below(d)]:
            if not view_ro(at, root + at):
                shown.append(at)
    for link in ("bin", "lib", "lib64", "sbin", "lib32", "libx32"):
        src = "/" + link
        if os.path.islink(src):
            os.symlink(os.readlink(src), f"{root}/{link}")
        elif os.path.isdir(src) and not view_ro(src, f"{root}/{link}"):
            shown.append(src)
    for d in python_dirs():
        # make the path down to each bind traversable for the unprivileged uid
        parts = d.strip("/").split("/")
        for i in range(1, len(parts)):
            p = root + "/" + "/".join(parts[:i])
            try:
                os.chmod(p, 0o755)
            except OSError:
                pass
    os.makedirs(root + "/etc")
    for f in ("/etc/ld.so.cache", "/etc/localtime", "/etc/nsswitch.conf"):
        if os.path.exists(f):
            # copies, not binds: a bind's mount entry would show where the file lives on the host
            with open(f, "rb") as src, open(root + f, "wb") as dst:
                dst.write(src.read())
            os.chmod(root + f, 0o644)
    with open(root + "/etc/passwd", "w") as f:
        f.write(f"root:x:0:0:root:/root:/bin/sh\nsandbox:x:{uid}:{gid}:sandbox:/tmp:/bin/sh\n")
    with open(root + "/etc/group", "w") as f:
        f.write(f"root:x:0:\nsandbox:x:{gid}:\n")
    with open(root + "/etc/hosts", "w") as f:
        f.write("127.0.0.1 localhost\n")
    # /dev: a few harmless devices bound from the host
    os.makedirs(root + "/dev")
    mount("tmpfs", root + "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755")
    for dev in ("null", "zero", "full", "random", "urandom"):
        open(f"{root}/dev/{dev}", "w").close()
        mount(f"/dev/{dev}", f"{root}/dev/{dev}", None, MS_BIND)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{root}/dev/{name}")
    os.makedirs(root + "/dev/shm")
    os.makedirs(root + "/tmp")
    os.makedirs(root + "/proc")
    # hidepid=2: a run sees only its own processes, not the server's or the template's (their command
    # lines, status, maps)
    mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2")
    os.makedirs(root + "/.old")
    os.chdir(root)
    if SYS_PIVOT_ROOT is None:
        raise OSError(errno.ENOSYS, f"pivot_root syscall number unknown for {platform.machine()}")
    _check(libc.syscall(SYS_PIVOT_ROOT, b".", b".old"), "pivot_root")
    os.chdir("/")
    _check(libc.umount2(b"/.old", MNT_DETACH), "umount old root")
    os.rmdir("/.old")
    mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID)
    fresh_scratch(tmpfs_mb)
    return shown


def fresh_scratch(tmpfs_mb):
    """Replaces /tmp and /dev/shm by empty tmpfs mounts (the previous ones vanish with their files)."""
    for path, size in (("/tmp", tmpfs_mb), ("/dev/shm", 16)):
        libc.umount2(path.encode(), MNT_DETACH)
        mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size}m,mode=1777")


# ---------------------------------------------------------------------------------------------
# the run child


def vm_size_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


# ---------------------------------------------------------------------------------------------
# seccomp: a small deny-list on top of the namespaces and the uid drop. It keeps the run from
# creating namespaces (user namespaces would hand it capabilities inside them), mounting, tracing,
# loading kernel code or using bpf/userfaultfd/perf/keyrings/io_uring/inotify/fanotify, and from taking huge pages (the warm
# heap's pool; the run's own memory stays in ordinary pages, counted by its memory cgroup).

PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
LD_ABS_W, JEQ_K, JSET_K, RET_K = 0x20, 0x15, 0x45, 0x06
CLONE_NEW_ANY = 0x10000000 | 0x00020000 | 0x20000000 | 0x40000000 | 0x08000000 | 0x04000000 | 0x02000000
MAP_HUGETLB, MFD_HUGETLB, SHM_HUGETLB = 0x40000, 0x4, 0o4000

# name: (x86_64 number, aarch64 number)
SYSCALL_NUMBERS = {
    "mmap": (9, 222), "memfd_create": (319, 279), "shmget": (29, 194), "clone": (56, 220), "clone3": (435, 435),
    "unshare": (272, 97), "setns": (308, 268), "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41),
    "ptrace": (101, 117), "process_vm_writev": (311, 271), "bpf": (321, 280), "userfaultfd": (323, 282),
    "perf_event_open": (298, 241), "kexec_load": (246, 104), "kexec_file_load": (320, 294),
    "init_module": (175, 105), "finit_module": (313, 273), "delete_module": (176, 106), "keyctl": (250, 219),
    "add_key": (248, 217), "request_key": (249, 218), "open_by_handle_at": (304, 265), "fsopen": (430, 430),
    "fsmount": (432, 432), "move_mount": (429, 429), "open_tree": (428, 428), "mount_setattr": (442, 442),
    "swapon": (167, 224), "swapoff": (168, 225), "reboot": (169, 142), "acct": (163, 89),
    # io_uring's operations never pass through this filter; inotify/fanotify would let a run watch
    # the read-only host directories it shares with the host and with other runs
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "inotify_init": (253, None), "inotify_init1": (294, 26), "inotify_add_watch": (254, 27),
    "fanotify_init": (300, 262), "fanotify_mark": (301, 263),
}
DENIED_SYSCALLS = [n for n in SYSCALL_NUMBERS if n not in ("mmap", "memfd_create", "shmget", "clone", "clone3")]
# machine: (column in SYSCALL_NUMBERS, AUDIT_ARCH value, bit marking x32 calls)
SECCOMP_ARCH = {"x86_64": (0, 0xC000003E, 0x40000000), "aarch64": (1, 0xC00000B7, None)}


class SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]


def verify_seccomp(fprog):
    """A throwaway child installs the filter and checks that unshare is refused."""

    def probe():
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        _check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0), "seccomp")
        return libc.unshare(CLONE_NEWUTS) != 0 and ctypes.get_errno() == errno.EPERM

    st = status_in_child(probe)
    if st != 0:
        raise OSError(errno.EPERM, f"the seccomp filter did not install or did not hold (status {st})")
    return fprog


def seccomp_program():
    """The BPF filter as a sock_fprog (kept alive by the caller). Raises on an unknown architecture."""
    arch = SECCOMP_ARCH.get(platform.machine())
    if arch is None:
        raise OSError(errno.ENOSYS, f"no seccomp table for {platform.machine()}")
    column, audit_arch, x32_bit = arch
    nr = {name: numbers[column] for name, numbers in SYSCALL_NUMBERS.items()}
    prog = []  # (code, k, jump-if-true label, jump-if-false label); labels resolve to relative offsets
    labels = {}

    def op(code, k=0, jt=None, jf=None):
        prog.append((code, k, jt, jf))

    def label(name):
        labels[name] = len(prog)

    def arg_low(i):  # struct seccomp_data: nr, arch, ip, args[6]; the low half of a 64-bit argument
        return 16 + 8 * i

    op(LD_ABS_W, 4)
    op(JEQ_K, audit_arch, None, "enosys")  # a foreign syscall ABI (e.g. int 0x80) gets nothing
    op(LD_ABS_W, 0)
    if x32_bit:
        op(JSET_K, x32_bit, "enosys", None)
    for name in DENIED_SYSCALLS:
        if nr[name] is not None:  # None: the architecture has no such call
            op(JEQ_K, nr[name], "eperm", None)
    op(JEQ_K, nr["clone3"], "enosys", None)  # its flags live in memory; libc falls back to clone
    op(JEQ_K, nr["clone"], "clone", None)
    op(JEQ_K, nr["mmap"], "mmap", None)
    op(JEQ_K, nr["memfd_create"], "memfd", None)
    op(JEQ_K, nr["shmget"], "shmget", None)
    op(RET_K, RET_ALLOW)
    for name, arg, bit, err in (("clone", 0, CLONE_NEW_ANY, errno.EPERM), ("mmap", 3, MAP_HUGETLB, errno.ENOMEM),
                                ("memfd", 1, MFD_HUGETLB, errno.EINVAL), ("shmget", 2, SHM_HUGETLB, errno.EPERM)):
        label(name)
        op(LD_ABS_W, arg_low(arg))
        op(JSET_K, bit, f"ret{err}", None)
        op(RET_K, RET_ALLOW)
    for name, err in (("eperm", errno.EPERM), ("enosys", errno.ENOSYS)):
        label(name)
        op(RET_K, RET_ERRNO | err)
    for err in (errno.EPERM, errno.ENOMEM, errno.EINVAL):
        label(f"ret{err}")
        op(RET_K, RET_ERRNO | err)
    insns = (SockFilter * len(prog))()
    for i, (code, k, jt, jf) in enumerate(prog):
        rel = lambda target: 0 if target is None else labels[target] - i - 1  # noqa: E731
        insns[i] = SockFilter(code, rel(jt), rel(jf), k)
    fprog = SockFprog(len(prog), insns)
    fprog._keep = insns
    return fprog


# ---------------------------------------------------------------------------------------------
# the warm heap in 2 MiB huge pages. On virtual machines with shadow paging every 4 KiB copy-on-write
# fault costs 20-40 us, and a sympy run writes ~1,500 pages spread over the 50 MB heap (reference
# counts): ~45 ms per run. With the heap in MAP_PRIVATE hugetlb pages a fork copies one entry per
# 2 MiB and a run copies each 2 MiB page once (~0.25 ms): measured 5-8x less CPU per run. glibc does
# the mapping (Node starts us with PYTHONMALLOC=malloc and glibc.malloc.hugetlb=2); we only stop the
# brk heap from growing, so that glibc grows the main arena with hugetlb mmaps instead.

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


# ---------------------------------------------------------------------------------------------
# prefaulting: page faults are the main cost of a forked run (each touched page is copied on write,
# and a fault costs 20-40 us on virtualised machines with shadow paging). One madvise call that
# populates many pages costs ~1 us per page. At start a probe child runs the warm-up code and reports
# which pages it had to copy; every run child populates exactly those, before its request arrives.

MADV_POPULATE_WRITE = 23
PAGE = os.sysconf("SC_PAGE_SIZE")
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


def learn_hot_pages(state):
    """Runs the warm-up code through a real run child in learning mode; it reports the pages it copied.
    Done by the server before the template exists and before any request."""
    pid, ctrl_w, out_r, err_r, status_r = fork_zygote(dict(state, learning=True))
    body = json.dumps({"code": CONFIG.get("learn_code", LEARN_CODE), "run_timeout": 30}).encode()
    write_all(ctrl_w, body)
    os.close(ctrl_w)
    chunks = []
    while True:
        chunk = os.read(status_r, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    end_runs(state, pid)
    for fd in (out_r, err_r, status_r):
        os.close(fd)
    fresh_scratch(state["tmpfs_mb"])
    data = b"".join(chunks)
    ranges = json.loads(data) if data else []
    # a huge page the run wrote is copied whole: keep one entry per such 2 MiB page
    windows = sorted({a // HUGE * HUGE for a, _ in ranges if in_ranges(a, state["huge_ranges"])})
    return [(a, n) for a, n in ranges if not in_ranges(a, state["huge_ranges"])], [(w, HUGE) for w in windows]


def populate_while_idle(ranges, request_fd):
    """Copies the ranges into this process until its request arrives; returns how many it copied.

    Idle, the copies take the faults off the request's path (latency). Under load the request is
    usually waiting already, and copying pages the run may not write costs more than faulting in the
    ones it does (measured: 57 vs 68 runs/s for a bare fork loop), so the run starts at once.
    """
    waiting = select.poll()
    waiting.register(request_fd, select.POLLIN)
    for i, (addr, length) in enumerate(ranges):
        if waiting.poll(0):
            return i
        libc.madvise(addr, length, MADV_POPULATE_WRITE)
    return len(ranges)


# ---------------------------------------------------------------------------------------------
# the run child ("zygote"): forked and prepared before its request arrives


libc.fork.restype = ctypes.c_int


def fork_bare():
    """fork(2) without Python's at-fork machinery, which costs ~3 ms of copy-on-write faults per run.

    Safe here because the server has one thread (numpy's BLAS pools are pinned to one thread) and holds
    no lock across the call; what the hooks would do that matters is done by hand: each run child
    reseeds every random generator (reseed_generators).
    """
    pid = libc.fork()
    if pid < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"fork: {os.strerror(err)}")
    return pid


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
    import numpy.random

    for gen in generators:
        if isinstance(gen, numpy.random.Generator):
            gen.bit_generator.state = type(gen.bit_generator)().state
        else:
            gen.seed()


class Zygote:
    """The server's handle on a forked child waiting for one request (everything request-independent
    is done already): the pipe ends the server keeps, and a pidfd that turns readable when it exits."""

    def __init__(self, pid, ctrl_w, out_r, err_r, status_r):
        self.pid, self.ctrl_w, self.out_r, self.err_r, self.status_r = pid, ctrl_w, out_r, err_r, status_r
        self.pidfd = os.pidfd_open(pid)

    def close(self):
        for fd in (self.out_r, self.err_r, self.status_r, self.pidfd, self.ctrl_w):
            try:
                os.close(fd)
            except OSError:
                pass


def fork_zygote(state):
    """Forks a run child; returns (pid, ctrl_w, out_r, err_r, status_r) in the parent."""
    scratch = state["scratch"]
    os.makedirs(scratch, mode=0o700, exist_ok=True)
    if state["drop_uid"]:
        os.chown(scratch, state["uid"], state["gid"])
    ctrl_r, ctrl_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    status_r, status_w = os.pipe()
    pid = fork_bare()
    if pid == 0:
        for fd in (ctrl_w, out_r, err_r, status_r, *state["parent_fds"]):
            os.close(fd)
        zygote_main(state, ctrl_r, out_w, err_w, status_w)
    for fd in (ctrl_r, out_w, err_w, status_w):
        os.close(fd)
    return pid, ctrl_w, out_r, err_r, status_r


# ---------------------------------------------------------------------------------------------
# the template: the only process that forks runs. It is forked from the server before the first
# request and never receives one: requests are parsed, files written and outputs collected by the
# server, so no run inherits memory in which another run's code, input or output ever was. Over a
# SOCK_SEQPACKET socketpair the server sends one byte per command, the template answers with JSON
# (and, for "next", the new child's pipe ends as SCM_RIGHTS):
#   b"E" end the run: SIGKILL every run process, reap them; answer {"status", "cpu_ms", "faults"}
#        of the last run child (status: its wait status, null if there was none)
#   b"N" end the run as above, then fresh /tmp and /dev/shm, and fork the next run child:
#        answer as above plus "pid" and "cycle_ms", with fds [ctrl_w, out_r, err_r, status_r]


class Template:
    """The server's side of the template process."""

    def __init__(self, state):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = fork_bare()
        if pid == 0:
            ours.close()
            for fd in state["parent_fds"]:
                os.close(fd)
            state = dict(state, parent_fds=(theirs.fileno(),))
            try:
                template_main(theirs, state)
            finally:
                os._exit(70)
        theirs.close()
        self.sock, self.pid = ours, pid

    def _ask(self, command):
        self.sock.send(command)
        data, fds, _, _ = socket.recv_fds(self.sock, 4096, 4)
        if not data:
            raise RuntimeError("the template process (the parent of every run) is gone")
        return json.loads(data), fds

    def end_run(self):
        """Kills whatever the run left and reaps it; the last run child's wait status and usage."""
        return self._ask(b"E")[0]

    def next_zygote(self):
        """Ends the run, then a fresh scratch and a new prepared child: (Zygote, what end_run says)."""
        ended, fds = self._ask(b"N")
        if len(fds) != 4:
            for fd in fds:
                os.close(fd)
            raise RuntimeError(f"the template answered 'next' without the run child's pipes: {ended}")
        return Zygote(ended.pop("pid"), *fds), ended


def template_main(sock, state):
    """The template's loop: one command at a time from the server (see above); never returns."""
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # the run's orphaned descendants come to us (not to the server), so we can reap them
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    child = None
    while True:
        command = sock.recv(16)
        if not command:
            os._exit(0)
        ended = end_runs(state, child)
        child = None
        if command == b"E":
            sock.send(json.dumps(ended).encode())
            continue
        t = time.monotonic()
        fresh_scratch(state["tmpfs_mb"])
        child, *fds = fork_zygote(state)
        ended.update(pid=child, cycle_ms=(time.monotonic() - t) * 1000)
        socket.send_fds(sock, [json.dumps(ended).encode()], fds)
        for fd in fds:
            os.close(fd)


def end_runs(state, child):
    """SIGKILLs every process the run left (all of them, daemons in their own session included) and
    reaps them; the wait status and resource usage of `child`, the run's first process."""
    found = {"status": None, "cpu_ms": 0.0, "faults": 0}

    def reap_all(block):
        while True:
            try:
                pid, st, usage = os.wait4(-1, 0 if block else os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == child:
                found.update(status=st, cpu_ms=(usage.ru_utime + usage.ru_stime) * 1000, faults=usage.ru_minflt)

    if state["pid_ns"]:
        # in our own pid namespace, kill(-1) from a root process that is not its pid 1 reaches every
        # process but pid 1 (the server) and ourselves: exactly what the runs left
        for i in range(100000):
            try:
                os.kill(-1, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                break
            reap_all(False)
            if i > 20:
                time.sleep(0.001)
        reap_all(True)
    elif child is not None:
        # without the namespace only the run's process group can be reached safely
        try:
            os.killpg(child, signal.SIGKILL)
        except OSError:
            pass
        try:
            _, st, usage = os.wait4(child, 0)
            found.update(status=st, cpu_ms=(usage.ru_utime + usage.ru_stime) * 1000, faults=usage.ru_minflt)
        except ChildProcessError:
            pass
        reap_all(False)
    return found


def verify_ipc_unshare():
    """A throwaway child enters a new IPC namespace, as every run child will."""
    st = status_in_child(lambda: libc.unshare(CLONE_NEWIPC) == 0)
    if st != 0:
        raise OSError(errno.EPERM, f"unshare(CLONE_NEWIPC) failed in a probe child (status {st})")
    return True


def drop_capability_bounding_set():
    """No capability can ever come back to the run (not even through a file capability)."""
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for cap in range(last + 1):
        _check(libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"PR_CAPBSET_DROP {cap}")
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)


def zygote_main(state, ctrl_r, out_w, err_w, status_w):
    """Runs in the forked child; never returns."""
    code = 1
    timings = {"zygote_cpu_at_start_ms": time.process_time() * 1000}
    try:
        os.setsid()
        cg = state["cgroups"]
        if cg is not None:
            cg.join()
        t_pop = time.perf_counter()
        if not state.get("learning"):
            # small pages always: one madvise per range costs ~25 us a page, the fault it saves ~65 us
            for addr, length in state["hot_pages"]:
                libc.madvise(addr, length, MADV_POPULATE_WRITE)
            timings["zygote_populated_ranges"] = populate_while_idle(state["hot_huge"], ctrl_r)
        timings["zygote_populate_ms"] = (time.perf_counter() - t_pop) * 1000
        # above every target first: a pipe end may itself sit on 1-4
        moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, 5) for fd in (out_w, err_w, status_w, ctrl_r)]
        for target, fd in enumerate(moved, start=1):
            os.dup2(fd, target)
        os.closerange(5, 65536)
        os.chdir(state["scratch"])
        # everything that does not depend on the request happens before it arrives
        fixed = [
            (resource.RLIMIT_CORE, 0),
            (resource.RLIMIT_NOFILE, 256),
            (resource.RLIMIT_FSIZE, int(state["tmpfs_mb"]) * 1024 * 1024),
        ]
        for which, value in fixed:
            resource.setrlimit(which, (value, value))
        reseed_generators(state.get("generators", ()))
        if state["ipc_per_run"]:
            # SysV shared memory, queues and semaphores and POSIX queues die with the run
            _check(libc.unshare(CLONE_NEWIPC), "unshare(CLONE_NEWIPC)")
        if state["drop_uid"]:
            drop_capability_bounding_set()
            uid, gid = state["uid"], state["gid"]
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        if state["seccomp"] is not None:
            _check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(state["seccomp"]), 0, 0),
                   "seccomp")
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP, signal.SIGUSR1, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL if sig != signal.SIGPIPE else signal.SIG_IGN)
        os.environ.clear()
        os.environ.update(RUN_ENV)
        os.environ["HOME"] = state["scratch"]
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="backslashreplace")
        sys.stderr = io.TextIOWrapper(
            io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace", line_buffering=True
        )
        timings["zygote_cpu_ready_ms"] = time.process_time() * 1000
        req = read_frame(4)
        os.close(4)
        if req is None:
            os._exit(0)
        stdin_fd = os.memfd_create("stdin")
        data = (req.get("stdin") or "").encode()
        if data:
            os.write(stdin_fd, data)
            os.lseek(stdin_fd, 0, os.SEEK_SET)
        os.dup2(stdin_fd, 0)
        os.close(stdin_fd)
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8", errors="replace")
        # per-request limits: only ever lowered, which an unprivileged process may do
        mem_mb, timeout, max_processes = run_limits(req)
        limits = [(resource.RLIMIT_CPU, int(timeout) + 2)]
        if state["drop_uid"]:
            limits.append((resource.RLIMIT_NPROC, max_processes))
        limits.append((resource.RLIMIT_AS, state["vm_base"] + int(mem_mb * 1024 * 1024)))
        for which, value in limits:
            resource.setrlimit(which, (value, value))
        path = os.path.join(state["scratch"], "main.py")
        sys.argv = [path]
        sys.path[0] = state["scratch"]
        timings["zygote_cpu_before_exec_ms"] = time.process_time() * 1000
        t_exec = time.perf_counter()
        code = run_user_code(path, req.get("code", ""))
        timings["zygote_exec_ms"] = (time.perf_counter() - t_exec) * 1000
        timings["zygote_cpu_after_exec_ms"] = time.process_time() * 1000
        if state.get("learning"):
            libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE, so that /proc/self/pagemap stays readable
            os.write(3, json.dumps(exclusive_pages()).encode())
            os._exit(0)
    except BaseException:  # noqa: BLE001
        try:
            traceback.print_exc()
        except BaseException:  # noqa: BLE001
            pass
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001
            pass
    # tell the server before exiting: tearing down the address space takes milliseconds
    try:
        os.close(1)
        os.close(2)
        os.write(3, struct.pack(">i", code) + (json.dumps(timings).encode() if state["trace"] is not None else b""))
    except BaseException:  # noqa: BLE001
        pass
    os._exit(code)


RUN_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "PYTHONIOENCODING": "utf-8",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
}


def run_user_code(path, source):
    glb = {"__name__": "__main__", "__file__": path, "__builtins__": builtins}
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(source)
    except OSError:
        pass
    try:
        compiled = compile(source, path, "exec")
        exec(compiled, glb)  # noqa: S102 - this is the sandbox
        return 0
    except SystemExit as exc:
        c = exc.code
        if c is None:
            return 0
        if isinstance(c, int):
            return c & 0xFF
        try:
            sys.stdout.flush()
        except BaseException:  # noqa: BLE001
            pass
        print(c, file=sys.stderr)
        return 1
    except BaseException as exc:  # noqa: BLE001
        try:
            sys.stdout.flush()
        except BaseException:  # noqa: BLE001
            pass
        tb = exc.__traceback__
        # drop our own frame so the traceback starts in the user's file, as `python3 main.py` shows it
        if tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next
        sys.stderr.write("".join(traceback.format_exception(type(exc), exc, tb)))
        return 1


# ---------------------------------------------------------------------------------------------
# the server loop


def read_run_file(scratch, name, limit):
    """A regular file of the run's working directory, read by root without blocking or following
    links: a FIFO, a device or a socket is refused instead of read, and so is a file over `limit`."""
    real = os.path.realpath(os.path.join(scratch, safe_relpath(name)))
    if not real.startswith(scratch + "/"):
        raise ValueError("leads outside the working directory (a link?)")
    fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"not a regular file ({file_kind(info.st_mode)})")
        if info.st_size > limit:
            raise ValueError(f"{info.st_size} bytes, over the limit of {limit}")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise ValueError(f"over the limit of {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def file_kind(mode):
    for test, kind in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a link")):
        if test(mode):
            return kind
    return "not a plain file"


def safe_relpath(name):
    norm = os.path.normpath(name)
    if os.path.isabs(name) or norm.startswith("..") or norm in ("", "."):
        raise ValueError(f"file path {name!r} must be relative and stay inside the working directory")
    return norm


def run_limits(req):
    """(memory_limit_MB, run_timeout, max_processes) of a request; a limit that would be off (<= 0,
    not a number) is refused: Node validates first, this is the last line."""
    values = []
    for key, default in (("memory_limit_MB", 1024), ("run_timeout", 10), ("max_processes", 64)):
        value = req.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value == float("inf"):
            raise ValueError(f"{key} must be a finite number > 0, got {value!r}")
        values.append(value)
    return float(values[0]), float(values[1]), int(values[2])


def run_one(z, req, state, template):
    """Hands the request to the waiting run child and collects its result."""
    max_out = int(req.get("max_output_bytes", state["max_output_bytes"]))
    scratch = state["scratch"]
    for name, b64 in (req.get("files") or {}).items():
        dest = os.path.join(scratch, safe_relpath(name))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(dest, "wb") as f:
            f.write(base64.b64decode(b64))
        if state["drop_uid"]:
            d = os.path.dirname(dest)
            while d.startswith(scratch):
                os.chown(d, state["uid"], state["gid"])
                d = os.path.dirname(d)
            os.chown(dest, state["uid"], state["gid"])
    mem_mb, timeout, max_processes = run_limits(req)
    cg = state["cgroups"]
    if cg is not None:
        # pids: the run's own limit; memory: what the run allocates beyond the pages it shares
        # the copies of the warm heap's huge pages: capped on their own (the memory controller does
        # not see them), at the run's limit, but never below one whole copy of the heap
        huge_cap = -(-max(state["heap_bytes"], int(mem_mb * 1024 * 1024)) // HUGE) * HUGE
        # a lower limit than the cgroup holds is refused (EBUSY); the last run's System V shared
        # memory is freed a little after its IPC namespace died (the kernel does it in a work item)
        waited_until = time.monotonic() + 5
        while not cg.set_limits(max_processes, int(mem_mb * 1024 * 1024) + (64 << 20), huge_cap):
            if time.monotonic() > waited_until:
                raise OSError(errno.EBUSY, f"cannot write the run's limits into {cg.dirs} for 5 s "
                              f"({max_processes} processes, {mem_mb} MB): the cgroup still holds more")
            time.sleep(0.005)
    started = time.monotonic()
    trace = state["trace"]
    keys = ("code", "stdin", "run_timeout", "memory_limit_MB", "max_processes")
    body = json.dumps({k: req[k] for k in keys if req.get(k) is not None})
    body = body.encode()
    try:
        write_all(z.ctrl_w, body)
    except OSError:
        pass
    os.close(z.ctrl_w)
    bufs = {z.out_r: bytearray(), z.err_r: bytearray()}
    totals = {z.out_r: 0, z.err_r: 0}
    open_fds = {z.out_r, z.err_r}
    poller = select.poll()
    for fd in (z.out_r, z.err_r, z.status_r, z.pidfd):
        poller.register(fd, select.POLLIN)
    deadline = started + timeout
    timed_out = False
    exited = False
    reported = None
    while True:
        now = time.monotonic()
        if now >= deadline:
            timed_out = True
            break
        events = poller.poll(max(1, int((deadline - now) * 1000) + 1))
        for fd, _ev in events:
            if fd == z.pidfd:
                exited = True
                poller.unregister(fd)
                continue
            chunk = os.read(fd, 1 << 16)
            if fd == z.status_r:
                if len(chunk) >= 4:
                    (reported,) = struct.unpack(">i", chunk[:4])
                    if trace is not None and len(chunk) > 4:
                        trace.update(json.loads(chunk[4:]))
                        trace["status_ms"] = (time.monotonic() - started) * 1000
                poller.unregister(fd)
                continue
            if chunk:
                totals[fd] += len(chunk)
                room = max_out - len(bufs[fd])
                if room > 0:
                    bufs[fd] += chunk[:room]
            else:
                poller.unregister(fd)
                open_fds.discard(fd)
        if (exited or reported is not None) and not open_fds:
            break
        if exited or reported is not None:
            # the run is over, but a descendant may still hold the pipes: drain what is there, then
            # stop waiting (descendants are killed below).
            ready = {fd for fd, _ in poller.poll(0)}
            if not (ready & open_fds):
                break
    wall = time.monotonic() - started
    signum = None
    if timed_out:
        return_code = None
    elif reported is not None:
        return_code = reported
    else:
        # the child died without reporting (a signal: SIGKILL by the memory cgroup, SIGXCPU, ...):
        # its wait status is with the template, its parent
        st = template.end_run()["status"]
        if st is None:
            raise RuntimeError(f"run child {z.pid} ended but its parent holds no wait status for it")
        if os.WIFSIGNALED(st):
            signum = os.WTERMSIG(st)
            return_code = -signum
        else:
            return_code = os.WEXITSTATUS(st)
    fetched, unfetched = {}, {}
    if req.get("fetch_files"):
        # nothing of the run may still be running while root reads its files (no link swapping)
        template.end_run()
        for name in req["fetch_files"]:
            try:
                fetched[name] = base64.b64encode(read_run_file(scratch, name, state["max_fetch_bytes"])).decode()
            except (OSError, ValueError) as exc:
                unfetched[name] = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    result = {
        "timed_out": timed_out,
        "return_code": return_code,
        "signal": signum,
        "execution_time": wall,
        "stdout": bufs[z.out_r].decode("utf-8", errors="replace"),
        "stderr": bufs[z.err_r].decode("utf-8", errors="replace"),
        "stdout_bytes": totals[z.out_r],
        "stderr_bytes": totals[z.err_r],
        "files": fetched,
        "unfetched": unfetched,
    }
    if trace is not None:
        trace["run_ms"] = wall * 1000
        result["trace"] = dict(trace)
    return result


def write_all(fd, body):
    data = memoryview(struct.pack(">I", len(body)) + body)
    while data:
        data = data[os.write(fd, data):]


# Imported once into the warm interpreter so that runs find them loaded (model-written math code uses
# these most); `preload` in the config adds more (e.g. scipy).
STDLIB_PRELOAD = (
    "math cmath fractions decimal itertools functools collections re json random statistics heapq bisect "
    "string datetime copy operator typing numbers socket encodings.idna subprocess io textwrap array struct hashlib"
).split()


def warm_up():
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
    for mod in CONFIG.get("preload", []):
        __import__(mod)


def serve(state):
    import gc

    req_fd, resp_fd = state["req_fd"], state["resp_fd"]
    state["generators"] = random_generators()  # before gc.freeze: get_objects() skips frozen objects
    gc.collect()
    gc.freeze()
    try:
        state["hot_pages"], state["hot_huge"] = [], state["huge_ranges"]
        if CONFIG.get("prefault", True):
            state["hot_pages"], state["hot_huge"] = learn_hot_pages(state)
        PROTECTIONS["warm_pool"]["how"] += (
            f"; {sum(n for _, n in state['hot_pages']) // PAGE} small hot pages copied into each prepared run,"
            f" {len(state['hot_huge'])} huge ones while no request waits"
        )
    except Exception as exc:  # noqa: BLE001
        state["hot_pages"], state["hot_huge"] = [], state["huge_ranges"]
        WARNINGS.append(f"prefault learning failed: {exc}")
    gc.collect()
    gc.freeze()
    # from here on this process handles requests, so it never forks a run again: the template does
    template = Template(state)
    z, _ = template.next_zygote()
    write_frame(resp_fd, {"type": "ready", "uid": state["uid"] if state["drop_uid"] else os.geteuid(),
                          "protections": PROTECTIONS, "warnings": WARNINGS})
    while True:
        req = read_frame(req_fd)
        if req is None:
            template.end_run()
            return
        try:
            result = run_one(z, req, state, template)
            result["id"] = req.get("id")
            result["type"] = "result"
        except Exception as exc:  # noqa: BLE001
            result = {"type": "error", "id": req.get("id"), "error": f"{type(exc).__name__}: {exc}"}
        del req
        write_frame(resp_fd, result)
        del result
        z.close()
        t = time.monotonic()
        z, ended = template.next_zygote()
        if state["trace"] is not None:
            state["trace"] = {"prev_zygote_cpu_ms": ended["cpu_ms"], "prev_zygote_faults": ended["faults"],
                              "prev_cycle_ms": ended["cycle_ms"], "prev_next_ms": (time.monotonic() - t) * 1000}


def huge_heap_setup(need_hugetlb_cgroup=False):
    """Makes glibc grow the heap in huge pages when configured and possible (before any import);
    returns None when it did, else why not. A speed feature, not a protection: when it is off the
    health says why but stays "ok"."""
    if not (CONFIG.get("huge_pages") and os.environ.get("PYTHONMALLOC") == "malloc"):
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


def bare_fork_loop():
    """The machine's ceiling for any fork-per-run pool, for `bench sandbox`: the same huge-page heap,
    warmed the same way, forking children in a plain loop with no isolation, no IPC and no Node.

    Line protocol on stdin/stdout: prints `ready`; each `go exit N` (fork, then exit at once) or
    `go code N` (fork, run config["code"] with stdout on /dev/null, exit) answers one JSON line
    `{"mode", "runs", "seconds"}`; end of input ends it.
    """
    import gc

    huge_heap_setup()
    warm_up()
    compiled = compile(CONFIG.get("code", "pass"), "main.py", "exec")
    gc.collect()
    gc.freeze()
    devnull = os.open(os.devnull, os.O_WRONLY)
    print("ready", flush=True)
    for line in sys.stdin:
        _, mode, runs = line.split()
        started = time.perf_counter()
        for _ in range(int(runs)):
            pid = fork_bare()
            if pid == 0:
                status = 0
                try:
                    if mode == "code":
                        os.dup2(devnull, 1)
                        exec(compiled, {"__name__": "__main__"})  # noqa: S102 - the benchmark's own code
                        sys.stdout.flush()
                except BaseException:  # noqa: BLE001
                    status = 1
                os._exit(status)
            _, st = os.waitpid(pid, 0)
            if st != 0:
                sys.exit(f"bare fork loop: a child running the code failed (wait status {st})")
        print(json.dumps({"mode": mode, "runs": int(runs), "seconds": time.perf_counter() - started}), flush=True)


# Run uids: one per worker, RUN_UID_BASE + the worker's pid, so that no two live workers share one
# (RLIMIT_NPROC and signals go by uid) whatever pid_max is (at most 2^22 on Linux).
RUN_UID_BASE = 1_000_000_000


def run_uid(worker_pid):
    return RUN_UID_BASE + worker_pid


def main():
    # protocol fds away from 0/1 so that nothing printed by a library can corrupt a frame
    req_fd = os.dup(0)
    resp_fd = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    disabled = set(CONFIG.get("disable", []))
    # as root with cgroups, the runs' copies of a huge-page heap must be capped: no hugetlb
    # controller, no huge pages (the heap stays in ordinary pages, which the memory cgroup counts)
    huge_off = huge_heap_setup(need_hugetlb_cgroup=os.geteuid() == 0 and "cgroups" not in disabled)
    for var in list(os.environ):
        if var not in ("PATH", "LANG", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                       "NUMEXPR_NUM_THREADS"):
            del os.environ[var]
    warm_up()
    how = "sympy and numpy imported and warmed once; each run is a fork"
    ranges = huge_ranges() if huge_off is None else []
    if ranges:
        how += f"; heap in {sum(n for _, n in ranges) // HUGE} huge pages, copied whole per run"
    else:
        how += f"; heap in 4 KiB pages ({huge_off or 'glibc made no huge mapping'})"
    PROTECTIONS["warm_pool"] = {"active": True, "how": how}
    PROTECTIONS["env_scrubbed"] = {"active": True, "how": "the server drops its environment; runs get a fixed minimal one"}
    is_root = os.geteuid() == 0
    uid = int(CONFIG.get("uid", 0)) or run_uid(os.getpid())
    gid = uid
    tmpfs_mb = int(CONFIG.get("tmpfs_mb", 256))
    name = CONFIG.get("name") or f"w{os.getpid()}"
    state = {
        "huge_ranges": ranges,
        "heap_bytes": sum(n for _, n in ranges),
        "trace": {} if CONFIG.get("trace") else None,  # per-phase timings, returned with each result
        "seccomp": None,
        "uid": uid,
        "gid": gid,
        "tmpfs_mb": tmpfs_mb,
        "max_output_bytes": int(CONFIG.get("max_output_bytes", 1 << 20)),
        "max_fetch_bytes": int(CONFIG.get("max_fetch_bytes", 32 << 20)),
        "drop_uid": False,
        "ipc_per_run": False,
        "cgroups": None,
    }
    if not is_root:
        WARNINGS.append("not running as root: namespaces, cgroups and the uid drop are unavailable")
    cgroups = None
    if is_root and "cgroups" not in disabled:
        cgroups = protect("cgroups", "", lambda: Cgroups(name, hugetlb=bool(ranges)).verify())
        if cgroups is not None:
            PROTECTIONS["cgroups"]["how"] = f"{cgroups.kind}: pids.max and memory limit per run"
    elif "cgroups" in disabled:
        PROTECTIONS["cgroups"] = {"active": False, "reason": "disabled by configuration"}
    if not ranges:
        PROTECTIONS["heap_copies_counted"] = {
            "active": True, "how": "heap in ordinary pages: a run's copies count in its memory cgroup"}
    elif cgroups is not None:
        PROTECTIONS["heap_copies_counted"] = {
            "active": True, "how": "hugetlb cgroup: a run's copies of the huge-page heap are capped at "
            "memory_limit_MB (at least one whole copy of the heap), its processes together"}
    else:
        PROTECTIONS["heap_copies_counted"] = {
            "active": False, "reason": "the heap is in huge pages and no cgroup caps the runs' copies of it"}
    state["cgroups"] = cgroups
    pid_ns = False
    if is_root and "pid_ns" not in disabled:
        pid_ns = protect("pid_namespace", "new pid namespace; after each run the parent of the runs kill(-1)s every process left",
                         lambda: _check(libc.unshare(CLONE_NEWPID), "unshare(CLONE_NEWPID)") or True)
    if pid_ns:
        child = os.fork()
        if child != 0:
            # the outer parent: stays in the host namespaces, relays the exit and cleans up cgroups
            os.close(req_fd)
            os.close(resp_fd)

            def on_term(signum, frame):
                try:
                    os.kill(child, signal.SIGKILL)
                except OSError:
                    pass

            signal.signal(signal.SIGTERM, on_term)
            signal.signal(signal.SIGINT, on_term)
            while True:
                try:
                    _, st = os.waitpid(child, 0)
                    break
                except InterruptedError:
                    continue
                except ChildProcessError:
                    st = 0
                    break
            if cgroups is not None:
                cgroups.remove()
            os._exit(os.waitstatus_to_exitcode(st) & 0xFF if st else 0)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if is_root and "mount_ns" not in disabled:
        flags = CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS
        ok = protect("mount_ipc_uts_namespaces", "private mount, IPC and UTS namespaces",
                     lambda: _check(libc.unshare(flags), "unshare(NEWNS|NEWIPC|NEWUTS)") or True)
        if ok:
            libc.sethostname(b"sandbox", 7)
            shown = protect("filesystem", "pivot_root into a tmpfs root with read-only /usr and Python dirs, "
                            "private /tmp per run", lambda: build_root(uid, gid, tmpfs_mb))
            if shown == []:
                PROTECTIONS["mount_sources_hidden"] = {
                    "active": True, "how": "read-only overlays: the runs' mountinfo names no host path or device"}
            elif shown is not None:
                PROTECTIONS["mount_sources_hidden"] = {
                    "active": False, "reason": f"overlayfs refused, plain binds show the host's mounts for {shown}"}
            else:
                PROTECTIONS["mount_sources_hidden"] = {"active": False, "reason": "no private root (see filesystem)"}
    if is_root and "net_ns" not in disabled:
        protect("network_namespace", "empty network namespace (no interfaces up)",
                lambda: _check(libc.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)") or True)
    for step, names in (("pid_ns", ["pid_namespace"]), ("mount_ns", ["mount_ipc_uts_namespaces", "filesystem", "mount_sources_hidden"]),
                        ("net_ns", ["network_namespace"]), ("cgroups", ["cgroups"])):
        for pname in names:
            if pname not in PROTECTIONS:
                why = "disabled by configuration" if step in disabled else "needs root"
                PROTECTIONS[pname] = {"active": False, "reason": why}
    if is_root:
        state["ipc_per_run"] = bool(protect(
            "ipc_namespace_per_run", "each run has an IPC namespace of its own: SysV shared memory, message queues,"
            " semaphores and POSIX queues die with it, and their limits count per run", verify_ipc_unshare))
    else:
        PROTECTIONS["ipc_namespace_per_run"] = {"active": False, "reason": "needs root"}
    if is_root and "uid" not in disabled:
        state["drop_uid"] = True
        PROTECTIONS["uid_drop"] = {"active": True, "how": f"runs as uid {uid} (this worker's own) with an empty capability bounding set and no_new_privs"}
        PROTECTIONS["process_limit_rlimit"] = {"active": True, "how": "RLIMIT_NPROC per run uid"}
    else:
        PROTECTIONS["uid_drop"] = {"active": False, "reason": "not root" if not is_root else "disabled"}
    if "seccomp" in disabled:
        PROTECTIONS["seccomp"] = {"active": False, "reason": "disabled by configuration"}
    else:
        state["seccomp"] = protect("seccomp", "BPF filter: no namespaces, mounts, ptrace, bpf, userfaultfd, perf, "
                                   "keyrings, kernel modules, kexec, huge pages, io_uring, inotify or fanotify", lambda: verify_seccomp(seccomp_program()))
    PROTECTIONS["rlimits"] = {"active": True, "how": "RLIMIT_AS (memory), FSIZE, NOFILE, CPU, CORE per run"}
    state["vm_base"] = vm_size_bytes()
    state["req_fd"], state["resp_fd"] = req_fd, resp_fd
    state["parent_fds"] = (req_fd, resp_fd)  # what every child of the server closes first
    state["pid_ns"] = bool(pid_ns)
    state["scratch"] = "/tmp/run"
    if not PROTECTIONS.get("filesystem", {}).get("active"):
        # without the private root, still give each run a scratch dir of its own (wiped per run)
        global fresh_scratch

        base = os.path.join(CONFIG.get("fallback_tmp", "/tmp"), f"torl-sandbox-{name}")
        WARNINGS.append(f"filesystem isolation off: runs see the host's files; scratch in {base}")

        def fresh_scratch(_mb):  # noqa: F811
            import shutil

            shutil.rmtree(base, ignore_errors=True)
            os.makedirs(base, exist_ok=True)

        fresh_scratch(0)
        state["scratch"] = base + "/run"
    try:
        serve(state)
    finally:
        if "base" in locals():
            import shutil

            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    if CONFIG.get("bare_fork_loop"):
        bare_fork_loop()
    else:
        main()
