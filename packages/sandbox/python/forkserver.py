"""Warm fork server for @torl-ts/sandbox.

One instance is one sandbox worker. Node starts it as `python3 -u -c <bootstrap> '<config json>'`
with this file and the modules of torl_sandbox/ sent over fd 3 (so that no host path is in its
command line, `__file__` or `sys.path`, which every run inherits), and talks to it over fds 0/1 with
length-prefixed JSON frames (torl_sandbox/framing.py). This file is the start-up sequence; each
concern has its module: isolation.py (the protections, the minimal root), cgroups.py, seccomp.py,
huge_heap.py and prefault.py (the warm heap), run_child.py, template.py and serve.py (the serve loop).

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
entropy in every random generator, the runs' IPC namespace (not the server's), rlimits (address space, processes, file
size, open files, CPU), an empty capability bounding set, dropped to the worker's unprivileged uid
(not the server's), no_new_privs, seccomp, an empty environment, stdin from a memfd and a scratch
working directory. What does not differ between runs (the bounding set, signals, environment,
no_new_privs and the seccomp filter, which the template itself then lives under) the template sets
once; the generators' entropy it renews before each fork (see run_child.prepare_template and
template.template_main). After the run the template SIGKILLs every process left in the pid
namespace (kill(-1) spares only pid 1 and itself) and removes every IPC object from the runs'
namespace, and the server replaces /tmp and /dev/shm by fresh tmpfs mounts, so nothing carries
over. The run's exit status is the one the template reaps (wait4), never anything the run writes.
"""

import json
import os
import shutil
import signal
import sys

import torl_sandbox.warm  # noqa: F401 - first: BLAS pinned to one thread before numpy is imported
from torl_sandbox.cgroups import Cgroups
from torl_sandbox.huge_heap import HUGE, huge_heap_setup, huge_ranges
from torl_sandbox.isolation import (
    PROTECTIONS,
    WARNINGS,
    build_root,
    protect,
    run_uid,
    use_host_scratch,
    verify_ipc_unshare,
)
from torl_sandbox.native import load_native
from torl_sandbox.linux import (
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUTS,
    PR_SET_PDEATHSIG,
    check,
    libc,
    name_process,
)
from torl_sandbox.run_child import vm_size_bytes
from torl_sandbox.seccomp import seccomp_program, verify_seccomp
from torl_sandbox.serve import serve
from torl_sandbox.warm import forget_host, warm_up

CONFIG = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}


def main():
    name_process("sandbox")
    # protocol fds away from 0/1 so that nothing printed by a library can corrupt a frame
    req_fd = os.dup(0)
    resp_fd = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    disabled = set(CONFIG.get("disable", []))
    # the template's loop in C, as Node built it (sent with the sources; see native.py)
    native, native_off = (load_native(globals().get("bundle", {}).get("native")) if CONFIG.get("native_template", True)
                          else (None, "nativeTemplate is false"))
    # as root with cgroups, the runs' copies of a huge-page heap must be capped: no hugetlb
    # controller, no huge pages (the heap stays in ordinary pages, which the memory cgroup counts)
    huge_off = huge_heap_setup(CONFIG.get("huge_pages"), need_hugetlb_cgroup=os.geteuid() == 0 and "cgroups" not in disabled)
    for var in list(os.environ):
        if var not in ("PATH", "LANG", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                       "NUMEXPR_NUM_THREADS"):
            del os.environ[var]
    warm_up(CONFIG.get("preload", []))
    how = "sympy and numpy imported and warmed once; each run is a fork"
    ranges = huge_ranges() if huge_off is None else []
    # why "auto" chose the heap it did (the cost of a page fault, measured by Node), if it chose
    choice = CONFIG.get("heap_choice")
    if ranges:
        how += f"; heap in {sum(n for _, n in ranges) // HUGE} huge pages, copied whole per run"
        how += f" ({choice})" if choice else ""
    else:
        why = choice if choice and not CONFIG.get("huge_pages") else huge_off or "glibc made no huge mapping"
        how += f"; heap in 4 KiB pages ({why})"
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
        "trace": {} if CONFIG.get("trace") else None,
        "prefault": CONFIG.get("prefault", True),
        "learn_code": CONFIG.get("learn_code"),  # per-phase timings, returned with each result
        "seccomp": None,
        "uid": uid,
        "gid": gid,
        "tmpfs_mb": tmpfs_mb,
        "max_output_bytes": int(CONFIG.get("max_output_bytes", 1 << 20)),
        "max_fetch_bytes": int(CONFIG.get("max_fetch_bytes", 32 << 20)),
        "drop_uid": False,
        "ipc_per_run": False,
        "cgroups": None,
        "native": native,
        "native_off": native_off,
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
                         lambda: check(libc.unshare(CLONE_NEWPID), "unshare(CLONE_NEWPID)") or True)
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
                     lambda: check(libc.unshare(flags), "unshare(NEWNS|NEWIPC|NEWUTS)") or True)
        if ok:
            # the new UTS namespace starts as a copy of the host's names: replace both
            libc.sethostname(b"sandbox", 7)
            libc.setdomainname(b"(none)", 6)
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
                lambda: check(libc.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)") or True)
    for step, names in (("pid_ns", ["pid_namespace"]), ("mount_ns", ["mount_ipc_uts_namespaces", "filesystem", "mount_sources_hidden"]),
                        ("net_ns", ["network_namespace"]), ("cgroups", ["cgroups"])):
        for pname in names:
            if pname not in PROTECTIONS:
                why = "disabled by configuration" if step in disabled else "needs root"
                PROTECTIONS[pname] = {"active": False, "reason": why}
    if is_root:
        state["ipc_per_run"] = bool(protect(
            "ipc_namespace_per_run", "runs have an IPC namespace of their own, emptied after each run: SysV shared memory, message queues,"
            " semaphores and POSIX queues die with the run, and their limits count per run", verify_ipc_unshare))
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
                                   "keyrings, kernel modules, kexec, huge pages, io_uring, legacy AIO, inotify or "
                                   "fanotify; sockets of AF_UNIX, AF_INET and AF_INET6 only (no AF_VSOCK, netlink...)", lambda: verify_seccomp(seccomp_program()))
    PROTECTIONS["rlimits"] = {"active": True, "how": "RLIMIT_AS (memory), FSIZE, NOFILE, CPU, CORE per run"}
    state["vm_base"] = vm_size_bytes()
    state["req_fd"], state["resp_fd"] = req_fd, resp_fd
    state["parent_fds"] = (req_fd, resp_fd)  # what every child of the server closes first
    state["pid_ns"] = bool(pid_ns)
    state["scratch"] = "/tmp/run"
    if not PROTECTIONS.get("filesystem", {}).get("active"):
        # without the private root, still give each run a scratch dir of its own (wiped per run)
        base = os.path.join(CONFIG.get("fallback_tmp", "/tmp"), f"torl-sandbox-{name}")
        WARNINGS.append(f"filesystem isolation off: runs see the host's files; scratch in {base}")
        use_host_scratch(base)
        state["scratch"] = base + "/run"
    forget_host()
    PROTECTIONS["host_state_forgotten"] = {
        "active": True, "how": "the warm interpreter's caches of host paths, directory listings and names are dropped"}
    try:
        serve(state)
    finally:
        if "base" in locals():
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
