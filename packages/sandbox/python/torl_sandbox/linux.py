"""The Linux calls the fork server makes through libc (namespaces, mounts, prctl, fork) and their
constants; `check` turns a failed call into an OSError naming it."""

import ctypes
import os
import platform


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
MS_MOVE = 8192
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
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
libc.setdomainname.argtypes = [ctypes.c_char_p, ctypes.c_size_t]

PAGE = os.sysconf("SC_PAGE_SIZE")

# what `ps`, `top` and `perf` call each of the sandbox's processes (at most 15 bytes): the process Node
# started, the server in the pid namespace, the template that forks the runs, a run; and the bench's
# bare fork loop and its children
PROCESS_NAMES = {
    role: ctypes.create_string_buffer(name.encode())
    for role, name in (("sandbox", "torl-sandbox"), ("server", "sandbox-server"), ("template", "sandbox-tmpl"),
                       ("run", "sandbox-run"), ("bare_loop", "bare-fork-loop"), ("bare_run", "bare-fork-run"))
}


def name_process(role):
    """Gives this process the name of its role (PROCESS_NAMES), which its children inherit."""
    libc.prctl(PR_SET_NAME, ctypes.addressof(PROCESS_NAMES[role]), 0, 0, 0)


def check(ret, what):
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
