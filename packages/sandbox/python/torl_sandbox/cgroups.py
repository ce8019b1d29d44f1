"""The cgroups that hold a worker's runs: pids and memory (v1 or v2) and hugetlb (the warm heap's
huge-page copies, which the memory controller does not count)."""

import errno
import os
import time

from torl_sandbox.linux import status_in_child


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
