"""The run child ("zygote"): forked by the template and prepared before its request arrives, then
isolated, limited and dropped to the run uid; it runs the request's code and reports its exit."""

import builtins
import ctypes
import fcntl
import io
import json
import os
import resource
import signal
import sys
import time
import traceback

from torl_sandbox.framing import read_frame
from torl_sandbox.isolation import RunIpc, drop_capability_bounding_set
from torl_sandbox.linux import CLONE_NEWIPC, PR_SET_NO_NEW_PRIVS, check, fork_bare, libc, name_process
from torl_sandbox.huge_heap import HUGE
from torl_sandbox.prefault import MADV_POPULATE_WRITE, SMALL_CHUNK, exclusive_pages, populate_while_idle
from torl_sandbox.seccomp import PR_SET_SECCOMP, SECCOMP_MODE_FILTER
from torl_sandbox.warm import reseed_generators


def vm_size_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


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


def step_timer(timings, on):
    """`mark(name)` records, for the stretch since the previous mark, the wall time, this process's
    CPU time and its page faults as timings["step_<name>_us" / "_cpu_us" / "_faults"] (profiling,
    with TORL_SANDBOX_TRACE=1; a no-op otherwise). The faults tell copy-on-write from the step's own work."""
    def now():
        return time.perf_counter_ns(), time.thread_time_ns(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    last = [now() if on else None]

    def mark(name):
        if on:
            t = now()
            timings[f"step_{name}_us"] = (t[0] - last[0][0]) / 1000
            timings[f"step_{name}_cpu_us"] = (t[1] - last[0][1]) / 1000
            timings[f"step_{name}_faults"] = t[2] - last[0][2]
            last[0] = now()

    return mark


def run_stdio():
    """The run's sys.stdout and sys.stderr: text on fds 1 and 2, whatever pipes they are by then."""
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="backslashreplace")
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace", line_buffering=True
    )


def run_signals_and_env(state):
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP, signal.SIGUSR1, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL if sig != signal.SIGPIPE else signal.SIG_IGN)
    os.environ.clear()
    os.environ.update(RUN_ENV)
    os.environ["HOME"] = state["scratch"]


def prepare_template(state):
    """What every run child would otherwise do after its fork, done once by the template, from which
    the children inherit it: the empty capability bounding set (the template keeps its effective
    capabilities; each child loses them with its uid), the runs' signal dispositions, environment
    and sys.stdout/sys.stderr. (The seccomp filter and no_new_privs too, installed by template_main
    once this is done: the IPC namespace below needs calls the filter denies.)
    Returns the state the template forks its children with. Random generators: the template reseeds
    them before each fork (reseed_before_fork, with the server's StateReseeder), when no child shares their pages any more, so no
    page is copied for it. IPC namespace: the template enters the runs' own here (RunIpc), and
    empties it after each run, before it forks the next child. (The cgroups are not among these: a
    template inside a run's memory cgroup could be the one its OOM killer picks, and this needs no
    CAP_SYS_RESOURCE to prevent.)"""
    if state["drop_uid"]:
        drop_capability_bounding_set()
    run_signals_and_env(state)
    # the template never writes to them: each child starts with empty buffers (fds 1 and 2 are
    # /dev/null here, the run's pipes in the child)
    run_stdio()
    run_ipc = RunIpc() if state["ipc_per_run"] else None
    return dict(state, template_prepared=True, run_ipc=run_ipc)


def fresh_ipc_namespace():
    """A run child forked without the template (the prefault probe) enters an IPC namespace alone."""
    check(libc.unshare(CLONE_NEWIPC), "unshare(CLONE_NEWIPC)")


def reseed_before_fork(state):
    state["reseeder"].reseed()


def scratch_and_pipes(state):
    """The next run child's working directory, and its pipes: (ctrl_r, out_w, err_w, status_w) for
    the child, (ctrl_w, out_r, err_r, status_r) for the server."""
    scratch = state["scratch"]
    os.makedirs(scratch, mode=0o700, exist_ok=True)
    if state["drop_uid"]:
        os.chown(scratch, state["uid"], state["gid"])
    ctrl_r, ctrl_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    status_r, status_w = os.pipe()
    return (ctrl_r, out_w, err_w, status_w), (ctrl_w, out_r, err_r, status_r)


def fork_zygote(state):
    """Forks a run child; returns (pid, ctrl_w, out_r, err_r, status_r) in the parent."""
    (ctrl_r, out_w, err_w, status_w), (ctrl_w, out_r, err_r, status_r) = scratch_and_pipes(state)
    pid = fork_bare()
    if pid == 0:
        for fd in (ctrl_w, out_r, err_r, status_r, *state["parent_fds"]):
            os.close(fd)
        zygote_main(state, ctrl_r, out_w, err_w, status_w)
    for fd in (ctrl_r, out_w, err_w, status_w):
        os.close(fd)
    return pid, ctrl_w, out_r, err_r, status_r


def zygote_main(state, ctrl_r, out_w, err_w, status_w):
    """Runs in a child forked by Python (the prefault probe, or the template's loop in Python);
    never returns. (native/template_loop.c has the same steps up to the request in C.)"""
    name_process("run")
    code = 1
    timings = {"zygote_cpu_at_start_ms": time.process_time() * 1000}
    mark = step_timer(timings, state["trace"] is not None)
    try:
        prepare_child(state, ctrl_r, out_w, err_w, status_w, timings, mark)
        timings["zygote_cpu_ready_ms"] = time.process_time() * 1000
        req = read_frame(4)
        os.close(4)
        if req is None:
            os._exit(0)
        code = run_request(state, req, timings)
    except BaseException:  # noqa: BLE001
        code = report_failure()
    end_child(state, code, timings)


def native_child_main(state, native):
    """Runs in a child the native loop forked and prepared (native/template_loop.c), before its
    request arrives; never returns."""
    code = 1
    timings = {}
    try:
        if state["trace"] is not None:
            timings.update(json.loads("{" + native.timings() + "}"))
        req = json.loads(native.request())
        code = run_request(state, req, timings)
    except BaseException:  # noqa: BLE001
        code = report_failure()
    end_child(state, code, timings)


def prepare_child(state, ctrl_r, out_w, err_w, status_w, timings, mark):
    """Everything that does not depend on the request, before it arrives."""
    os.setsid()
    mark("setsid")
    cg = state["cgroups"]
    prepared = state.get("template_prepared", False)
    if cg is not None:
        cg.join()
    mark("cgroup_join")
    t_pop = time.perf_counter()
    if not state.get("learning"):
        if state["huge_ranges"]:
            # a huge-page heap leaves ~160 small hot pages (libraries' data, stacks): always
            # copied, as under shadow paging one madvise costs ~25 us a page, the fault it saves ~65 us
            for addr, length in state["hot_pages"]:
                libc.madvise(addr, length, MADV_POPULATE_WRITE)
            timings["zygote_populated_ranges"] = populate_while_idle(state["hot_huge"], ctrl_r, HUGE)
        else:
            # in an ordinary-page heap the hot list is most of what a run writes (~1,400 pages,
            # 8 ms to copy on a KVM guest): copying it under load costs more than the faults
            timings["zygote_populated_ranges"] = populate_while_idle(state["hot_pages"], ctrl_r, SMALL_CHUNK)
    timings["zygote_populate_ms"] = (time.perf_counter() - t_pop) * 1000
    mark("prefault")
    ends = (out_w, err_w, status_w, ctrl_r)
    if min(ends) < 5:
        # above every target first: a pipe end may itself sit on 1-4 (the template's children
        # get theirs at CHILD_ENDS, above them)
        ends = [fcntl.fcntl(fd, fcntl.F_DUPFD, 5) for fd in ends]
    for target, fd in enumerate(ends, start=1):
        os.dup2(fd, target)
    os.closerange(5, 65536)
    os.chdir(state["scratch"])
    mark("fds_chdir")
    fixed = [
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NOFILE, 256),
        (resource.RLIMIT_FSIZE, int(state["tmpfs_mb"]) * 1024 * 1024),
    ]
    for which, value in fixed:
        resource.setrlimit(which, (value, value))
    mark("rlimits")
    if not prepared:
        reseed_generators(state.get("generators", ()))
    mark("reseed")
    if state["ipc_per_run"] and not prepared:
        fresh_ipc_namespace()
    mark("ipc_namespace")
    if state["drop_uid"]:
        if not prepared:
            drop_capability_bounding_set()
        mark("capability_drop")
        uid, gid = state["uid"], state["gid"]
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    mark("uid_drop")
    if not prepared:
        # a child of the template inherits both from it (see template_main)
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        if state["seccomp"] is not None:
            check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(state["seccomp"]), 0, 0),
                  "seccomp")
    mark("seccomp")
    if not prepared:
        run_signals_and_env(state)
        run_stdio()
    mark("signals_env_stdio")


def run_request(state, req, timings):
    """Runs one request in this prepared child: stdin, the request's limits, the code; its exit code."""
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
    sys.path.insert(0, state["scratch"])  # as `python3 main.py` has it
    timings["zygote_cpu_before_exec_ms"] = time.process_time() * 1000
    t_exec = time.perf_counter()
    code = run_user_code(path, req.get("code", ""))
    timings["zygote_exec_ms"] = (time.perf_counter() - t_exec) * 1000
    timings["zygote_cpu_after_exec_ms"] = time.process_time() * 1000
    if state.get("learning"):
        libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE, so that /proc/self/pagemap stays readable
        os.write(3, json.dumps(exclusive_pages()).encode())
        os._exit(0)
    return code


def report_failure():
    """A failure of the sandbox's own steps, said on the run's stderr; the run's exit code (1)."""
    try:
        traceback.print_exc()
    except BaseException:  # noqa: BLE001
        pass
    return 1


def end_child(state, code, timings):
    """Flushes the run's output and exits with `code`. The server learns the exit status from the
    kernel (the template reaps this process); fd 3 carries only timings, for profiling."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001
            pass
    try:
        os.close(1)
        os.close(2)
        if state["trace"] is not None:
            os.write(3, json.dumps(timings).encode())
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
