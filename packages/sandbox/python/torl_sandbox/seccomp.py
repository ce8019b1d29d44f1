"""The seccomp filter every run installs: a small deny-list on top of the namespaces and the uid drop.
It keeps the run from creating namespaces (user namespaces would hand it capabilities inside them),
mounting, tracing, loading kernel code or using
bpf/userfaultfd/perf/keyrings/io_uring/legacy AIO/inotify/fanotify, and from taking huge pages (the
warm heap's pool; the run's own memory stays in ordinary pages, counted by its memory cgroup).

Sockets: only the address families a run has use for, AF_UNIX, AF_INET and AF_INET6 (the latter two
in an empty network namespace); every other family (AF_VSOCK, which no network namespace covers and
whose ports are the host's; AF_NETLINK, AF_PACKET, AF_ALG, AF_KEY, Bluetooth...) answers EAFNOSUPPORT,
as on a kernel built without it, so the kernel never even loads the family's module for a run.
glibc's getaddrinfo, which asks netlink which address families are configured, falls back to "both".
"""

import ctypes
import errno
import platform

from torl_sandbox.linux import CLONE_NEWUTS, PR_SET_NO_NEW_PRIVS, check, libc, status_in_child


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
    # legacy AIO: contexts come from one kernel-wide budget (fs.aio-max-nr) that a run could use up;
    # without a context no other io_* call does anything
    "io_setup": (206, 0),
    # checked by their first argument (the address family), see SOCKET_FAMILIES
    "socket": (41, 198), "socketpair": (53, 199),
}
# the only address families a run may create sockets of (socket, socketpair); others: EAFNOSUPPORT
AF_UNIX, AF_INET, AF_INET6 = 1, 2, 10
SOCKET_FAMILIES = (AF_UNIX, AF_INET, AF_INET6)
FILTERED = ("mmap", "memfd_create", "shmget", "clone", "clone3", "socket", "socketpair")
DENIED_SYSCALLS = [n for n in SYSCALL_NUMBERS if n not in FILTERED]
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
        check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0), "seccomp")
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
    op(JEQ_K, nr["socket"], "socket", None)
    op(JEQ_K, nr["socketpair"], "socket", None)
    op(RET_K, RET_ALLOW)
    label("socket")
    op(LD_ABS_W, arg_low(0))
    for family in SOCKET_FAMILIES:
        op(JEQ_K, family, "allow", None)
    op(RET_K, RET_ERRNO | errno.EAFNOSUPPORT)
    label("allow")
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
