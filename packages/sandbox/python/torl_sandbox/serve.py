"""The server loop: one request at a time from Node, handed to the prepared run child, its output,
exit and files collected; the template prepares the next child meanwhile."""

import base64
import errno
import json
import os
import select
import stat
import time

from torl_sandbox.framing import read_frame, write_all, write_frame
from torl_sandbox.huge_heap import HUGE, in_ranges
from torl_sandbox.isolation import PROTECTIONS, WARNINGS, fresh_scratch, unmount_parked
from torl_sandbox.linux import PAGE, name_process
from torl_sandbox.prefault import LEARN_CODE
from torl_sandbox.run_child import fork_zygote, run_limits
from torl_sandbox.template import Template, end_runs
from torl_sandbox.warm import StateReseeder, random_generators


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


def parked_holds_memory(parked):
    """Whether the last run's parked /tmp and /dev/shm hold more than a few files: most runs leave
    only their main.py, which the cgroup's slack covers while the unmount waits for the next run."""
    for path in parked:
        st = os.statvfs(path)
        if (st.f_blocks - st.f_bfree) * st.f_frsize > (1 << 20) or st.f_files - st.f_ffree > 64:
            return True
    return False


def run_one(z, req, state, template):
    """Hands the request to the waiting run child and collects its result."""
    max_out = int(req.get("max_output_bytes", state["max_output_bytes"]))
    scratch = state["scratch"]
    files = req.get("files") or {}
    setup_timeout = float(req.get("setup_timeout") or 10)
    setup_deadline = time.monotonic() + setup_timeout
    for i, (name, b64) in enumerate(files.items()):
        if time.monotonic() > setup_deadline:
            raise TimeoutError(f"writing the request's files took over {setup_timeout:g} s ({i} of {len(files)} "
                               "written); the code was not run")
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
    trace = state["trace"]
    t_limits = time.perf_counter_ns()
    cg = state["cgroups"]
    if cg is not None:
        # pids: the run's own limit; memory: what the run allocates beyond the pages it shares
        # the copies of the warm heap's huge pages: capped on their own (the memory controller does
        # not see them), at the run's limit, but never below one whole copy of the heap
        huge_cap = -(-max(state["heap_bytes"], int(mem_mb * 1024 * 1024)) // HUGE) * HUGE
        # a lower limit than the cgroup holds is refused (EBUSY); the last run's System V shared
        # memory is freed a little after its IPC namespace died (the kernel does it in a work item)
        waited_until = time.monotonic() + 5
        if parked_holds_memory(state["parked"]):
            # the last run's files still count in the cgroup: gone before this run starts, not during it
            unmount_parked(state["parked"])
        while not cg.set_limits(max_processes, int(mem_mb * 1024 * 1024) + (64 << 20), huge_cap):
            if time.monotonic() > waited_until:
                raise OSError(errno.EBUSY, f"cannot write the run's limits into {cg.dirs} for 5 s "
                              f"({max_processes} processes, {mem_mb} MB): the cgroup still holds more")
            time.sleep(0.005)
    if trace is not None:
        trace["server_set_limits_us"] = (time.perf_counter_ns() - t_limits) / 1000
    started = time.monotonic()
    keys = ("code", "stdin", "run_timeout", "memory_limit_MB", "max_processes")
    body = json.dumps({k: req[k] for k in keys if req.get(k) is not None})
    body = body.encode()
    try:
        write_all(z.ctrl_w, body)
    except OSError:
        pass
    os.close(z.ctrl_w)
    # while the run works: unmount the last run's /tmp and /dev/shm (see fresh_scratch)
    unmount_parked(state["parked"])
    bufs = {z.out_r: bytearray(), z.err_r: bytearray()}
    totals = {z.out_r: 0, z.err_r: 0}
    open_fds = {z.out_r, z.err_r}
    poller = select.poll()
    for fd in (z.out_r, z.err_r, z.status_r, z.pidfd):
        poller.register(fd, select.POLLIN)
    deadline = started + timeout
    timed_out = False
    exited = False
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
                # the run child's timings (profiling only): written by the run's own process, so
                # never trusted for anything else; the exit status comes from the kernel below
                if trace is not None and chunk:
                    try:
                        trace.update({k: float(v) for k, v in json.loads(chunk).items()})
                        trace["status_ms"] = (time.monotonic() - started) * 1000
                    except (ValueError, TypeError, AttributeError):
                        pass
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
        if exited and not open_fds:
            break
        if exited:
            # the run is over, but a descendant may still hold the pipes: drain what is there, then
            # stop waiting (descendants are killed below).
            ready = {fd for fd, _ in poller.poll(0)}
            if not (ready & open_fds):
                break
    wall = time.monotonic() - started
    if timed_out:
        # killed now, before its output is encoded and sent, so the kill does not wait for the answer
        template.end_run()
    signum = None
    ended = None
    if timed_out:
        return_code = None
    else:
        # the exit status as the kernel gives it to the run's parent (the template), never what the
        # run could write: it ends the run (kills what is left of it) and reaps the run's process
        t_end = time.perf_counter_ns()
        ended = template.end_run()
        if trace is not None:
            trace["server_end_run_us"] = (time.perf_counter_ns() - t_end) / 1000
            # the run child's whole life, fork to exit, as its parent reaps it: less the CPU it had
            # used when its code returned (zygote_cpu_after_exec_ms), what its exit costs
            trace["zygote_cpu_total_ms"], trace["zygote_faults_total"] = ended["cpu_ms"], ended["faults"]
        st = ended["status"]
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
        if ended is None:
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


def learn_hot_pages(state):
    """Runs the warm-up code through a real run child in learning mode; it reports the pages it copied.
    Done by the server before the template exists and before any request."""
    pid, ctrl_w, out_r, err_r, status_r = fork_zygote(dict(state, learning=True))
    body = json.dumps({"code": state.get("learn_code") or LEARN_CODE, "run_timeout": 30}).encode()
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


def next_scratch(state, template, ended_run):
    """A fresh /tmp and /dev/shm for the next run, once no process of the last one is left (every
    completed run_one has had the template end it; a request that failed before may have left its
    waiting child): the old mounts are parked, and unmounted while the next run works (run_one)."""
    if not ended_run:
        template.end_run()
    fresh_scratch(state["tmpfs_mb"], state["parked"])


def serve(state):
    import gc

    name_process("server")
    req_fd, resp_fd = state["req_fd"], state["resp_fd"]
    state["generators"] = random_generators()  # before gc.freeze: get_objects() skips frozen objects
    state["reseeder"] = StateReseeder(state["generators"])
    if state["native"] is not None and state["reseeder"].others:
        state["native"], state["native_off"] = None, (
            f"{len(state['reseeder'].others)} random generator(s) whose state the native loop cannot refill")
    # a speed feature, not a protection: the Python loop isolates runs the same way (health says which)
    if state["native"] is not None:
        PROTECTIONS["warm_pool"]["how"] += "; the template's loop and each run's preparation in C"
    else:
        PROTECTIONS["warm_pool"]["how"] += f"; the template's loop in Python ({state['native_off']})"
    gc.collect()
    gc.freeze()
    try:
        state["hot_pages"], state["hot_huge"] = [], state["huge_ranges"]
        if state["prefault"]:
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
    state["parked"] = []
    z, ended = template.next_zygote()
    write_frame(resp_fd, {"type": "ready", "uid": state["uid"] if state["drop_uid"] else os.geteuid(),
                          "heap": "huge" if state["huge_ranges"] else "small",
                          "template_loop": "native" if state["native"] is not None else "python",
                          "template_loop_why": state["native_off"],
                          "protections": PROTECTIONS, "warnings": WARNINGS})
    while True:
        req = read_frame(req_fd)
        if req is None:
            template.end_run()
            return
        ended_run = True
        try:
            result = run_one(z, req, state, template)
            result["id"] = req.get("id")
            result["type"] = "result"
        except Exception as exc:  # noqa: BLE001
            result = {"type": "error", "id": req.get("id"), "error": f"{type(exc).__name__}: {exc}"}
            ended_run = False
        del req
        write_frame(resp_fd, result)
        del result
        z.close()
        t = time.monotonic()
        unmount_parked(state["parked"])  # already done, unless the request failed before its run
        t_scratch = time.perf_counter_ns(), time.thread_time_ns()
        next_scratch(state, template, ended_run)
        t_next = time.perf_counter_ns(), time.thread_time_ns()
        z, ended = template.next_zygote()
        if state["trace"] is not None:
            state["trace"] = {"prev_cycle_ms": ended["cycle_ms"], "prev_next_ms": (time.monotonic() - t) * 1000,
                              "server_fresh_scratch_us": (t_next[0] - t_scratch[0]) / 1000,
                              "server_fresh_scratch_cpu_us": (t_next[1] - t_scratch[1]) / 1000}
            state["trace"].update({f"template_{k}": v for k, v in ended.items() if k.endswith(("_us", "_faults"))})
