"""Isolation of the runs: the record of protections in force, the minimal read-only root the server
pivots into, fresh scratch mounts between runs, the runs' IPC namespace and the capability drop."""

import ctypes
import errno
import os
import platform
import shutil
import stat
import sys

from torl_sandbox.linux import (
    CLONE_NEWIPC,
    MNT_DETACH,
    MS_BIND,
    MS_MOVE,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_RDONLY,
    MS_REC,
    MS_REMOUNT,
    PR_CAP_AMBIENT,
    PR_CAP_AMBIENT_CLEAR_ALL,
    PR_CAPBSET_DROP,
    SYS_PIVOT_ROOT,
    check,
    libc,
    status_in_child,
)


PROTECTIONS = {}  # name -> {"active": bool, "how": str} or {"active": False, "reason": str}
WARNINGS = []


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
    check(libc.mount(enc(src), enc(dst), enc(fstype), flags, enc(data)), f"mount {src} on {dst}")


def bind_ro(src, dst):
    if os.path.isdir(src):
        os.makedirs(dst, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        open(dst, "a").close()
    mount(src, dst, None, MS_BIND | MS_REC)
    mount(None, dst, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


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


DEVICES = ("null", "zero", "full", "random", "urandom")  # the runs' /dev (character devices)
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
    # /dev: a few harmless devices, as nodes of our own (not binds of the host's: a bind is the host's
    # inode, so a run's flock or POSIX lock on it would block the host's, and a run's utime would
    # change the host's timestamps), on a tmpfs made read-only once filled (no utime, chmod or new
    # names; locks stay possible but are on this worker's inodes and die with the run)
    os.makedirs(root + "/dev")
    mount("tmpfs", root + "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755")
    for dev in DEVICES:
        info = os.stat(f"/dev/{dev}")
        os.mknod(f"{root}/dev/{dev}", stat.S_IFCHR | 0o666, info.st_rdev)
        os.chmod(f"{root}/dev/{dev}", 0o666)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{root}/dev/{name}")
    os.makedirs(root + "/dev/shm")
    mount(None, root + "/dev", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC)
    os.makedirs(root + "/tmp")
    os.makedirs(root + "/proc")
    # hidepid=2: a run sees only its own processes, not the server's or the template's (their command
    # lines, status, maps)
    mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2")
    for _, name in SCRATCH_MOUNTS:
        os.makedirs(f"{root}{PARKED}/{name}")
    os.chmod(root + PARKED, 0o700)
    os.makedirs(root + "/.old")
    os.chdir(root)
    if SYS_PIVOT_ROOT is None:
        raise OSError(errno.ENOSYS, f"pivot_root syscall number unknown for {platform.machine()}")
    check(libc.syscall(SYS_PIVOT_ROOT, b".", b".old"), "pivot_root")
    os.chdir("/")
    check(libc.umount2(b"/.old", MNT_DETACH), "umount old root")
    os.rmdir("/.old")
    mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID)
    fresh_scratch(tmpfs_mb)
    return shown


# Without the private root (filesystem isolation off) each run still gets a scratch directory of its
# own, wiped between runs, under this host directory (see use_host_scratch).
_host_scratch = None


def use_host_scratch(base):
    """Scratch under `base` on the host's filesystem instead of private tmpfs mounts; wipes it now."""
    global _host_scratch
    _host_scratch = base
    fresh_scratch(0)


PARKED = "/.parked"  # root-only (0700): where the last run's /tmp and /dev/shm wait to be unmounted
SCRATCH_MOUNTS = (("/tmp", "tmp"), ("/dev/shm", "shm"))


def fresh_scratch(tmpfs_mb, parked=None):
    """Replaces /tmp and /dev/shm by empty tmpfs mounts (the previous ones vanish with their files);
    with a host scratch directory instead, empties that.

    With a list as `parked`, the old mounts are moved under PARKED instead of unmounted, and their
    paths appended, for unmount_parked: unmounting waits for an RCU grace period (0.2-2.6 ms
    measured, against ~20 us for a move or a mount), which the caller then spends while the next run
    works instead of before it. No run can enter PARKED (root's, mode 0700) and no process of the run
    that used the mounts is left, so nothing reaches their files meanwhile."""
    if _host_scratch is not None:
        shutil.rmtree(_host_scratch, ignore_errors=True)
        os.makedirs(_host_scratch, exist_ok=True)
        return
    sizes = {"/tmp": tmpfs_mb, "/dev/shm": 16}
    for path, name in SCRATCH_MOUNTS:
        if parked is None:
            libc.umount2(path.encode(), MNT_DETACH)
        else:
            mount(path, f"{PARKED}/{name}", None, MS_MOVE)
            parked.append(f"{PARKED}/{name}")
        mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"size={sizes[path]}m,mode=1777")


def unmount_parked(parked):
    """Unmounts what fresh_scratch parked, freeing the last run's files; empties `parked`."""
    while parked:
        path = parked.pop()
        check(libc.umount2(path.encode(), MNT_DETACH), f"umount {path}")


def verify_ipc_unshare():
    """A throwaway child does what the template will: enters an IPC namespace of its own and opens
    its POSIX message queue filesystem."""

    def probe():
        RunIpc().close()
        return True

    st = status_in_child(probe)
    if st != 0:
        raise OSError(errno.EPERM, f"a private IPC namespace with its own mqueue filesystem failed in a probe child (status {st})")
    return True


# the new mount API (the same numbers on every architecture since Linux 5.2)
SYS_FSOPEN, SYS_FSCONFIG, SYS_FSMOUNT = 430, 431, 432
FSCONFIG_CMD_CREATE = 6
IPC_RMID = 0
SYSV_KINDS = (("shm", "shmctl"), ("msg", "msgctl"), ("sem", "semctl"))


class RunIpc:
    """The runs' IPC namespace: one of the template's own (never the server's or the host's), which
    every run child is born in and which is emptied after each run, before the next child is forked:
    every System V segment, queue and semaphore set is removed and every POSIX message queue unlinked.
    So nothing of a run's IPC outlives it, and a run that fills a table (4,096 segments) leaves the
    next run an empty one, as a namespace per run would, without creating and freeing a namespace per
    run (an unshare costs ~1.6 ms of CPU and its release more in a kernel thread). The queues are
    reached through an mqueue filesystem mounted with no path (fsmount): no run can see it."""

    def __init__(self):
        check(libc.unshare(CLONE_NEWIPC), "unshare(CLONE_NEWIPC)")
        fs = libc.syscall(SYS_FSOPEN, b"mqueue", 0)
        if fs < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"fsopen(mqueue): {os.strerror(err)}")
        try:
            if libc.syscall(SYS_FSCONFIG, fs, FSCONFIG_CMD_CREATE, None, None, 0) < 0:
                err = ctypes.get_errno()
                raise OSError(err, f"fsconfig(mqueue, create): {os.strerror(err)}")
            mnt = libc.syscall(SYS_FSMOUNT, fs, 0, 0)
            if mnt < 0:
                err = ctypes.get_errno()
                raise OSError(err, f"fsmount(mqueue): {os.strerror(err)}")
        finally:
            os.close(fs)
        # the mount's fd is a path handle: a directory opened through it can be listed
        try:
            self.mqueues = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=mnt)
        finally:
            os.close(mnt)
        # /proc/sysvipc shows the reader's namespace: opened now, read again after each run
        self.tables = [(os.open(f"/proc/sysvipc/{kind}", os.O_RDONLY | os.O_CLOEXEC), ctl) for kind, ctl in SYSV_KINDS]

    def clear(self):
        """Removes every IPC object in the namespace (no process of the last run is left); how many.
        Cheap when the run made none, as most do: three reads of a header and one empty listing."""
        removed = 0
        for fd, ctl in self.tables:
            if os.pread(fd, 4096, 0).count(b"\n") > 1:
                removed += self._remove_all(fd, ctl)
        names = os.listdir(self.mqueues)
        for name in names:
            os.unlink(name, dir_fd=self.mqueues)
        return removed + len(names)

    @staticmethod
    def _remove_all(fd, ctl):
        chunks, offset = [], 0
        while chunk := os.pread(fd, 1 << 16, offset):
            chunks.append(chunk)
            offset += len(chunk)
        idents = [int(row.split()[1]) for row in b"".join(chunks).split(b"\n")[1:] if row.strip()]
        for ident in idents:
            ret = libc.semctl(ident, 0, IPC_RMID) if ctl == "semctl" else getattr(libc, ctl)(ident, IPC_RMID, None)
            check(0 if ret == 0 else -1, f"{ctl}({ident}, IPC_RMID)")
        return len(idents)

    def close(self):
        for fd in (self.mqueues, *(fd for fd, _ in self.tables)):
            os.close(fd)


def drop_capability_bounding_set():
    """No capability can ever come back to the run (not even through a file capability)."""
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for cap in range(last + 1):
        check(libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"PR_CAPBSET_DROP {cap}")
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)


# Run uids: one per worker, RUN_UID_BASE + the worker's pid, so that no two live workers share one
# (RLIMIT_NPROC and signals go by uid) whatever pid_max is (at most 2^22 on Linux).
RUN_UID_BASE = 1_000_000_000


def run_uid(worker_pid):
    return RUN_UID_BASE + worker_pid
