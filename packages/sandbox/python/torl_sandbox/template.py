"""The template, the only process that forks runs, and its end of the protocol with the server."""

import ctypes
import json
import os
import resource
import signal
import socket
import time
import traceback

from torl_sandbox.linux import PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS, PR_SET_PDEATHSIG, check, fork_bare, libc, name_process
from torl_sandbox.run_child import (
    Zygote,
    native_child_main,
    prepare_template,
    reseed_before_fork,
    scratch_and_pipes,
    zygote_main,
)
from torl_sandbox.seccomp import PR_SET_SECCOMP, SECCOMP_MODE_FILTER


# the template: the only process that forks runs. It is forked from the server before the first
# request and never receives one: requests are parsed, files written and outputs collected by the
# server, so no run inherits memory in which another run's code, input or output ever was. Over a
# SOCK_SEQPACKET socketpair the server sends one byte per command, the template answers with JSON
# (and, for "next", the new child's pipe ends as SCM_RIGHTS):
#   b"E" end the run: SIGKILL every run process, reap them; answer {"status", "cpu_ms", "faults"}
#        of the last run child (status: its wait status, null if there was none)
#   b"N" end the run as above, remove every IPC object it made; answer as above plus "cycle_ms",
#        with the next run child's fds [ctrl_w, out_r, err_r, status_r], and fork that child, whose
#        first line on status_r is its pid. The server gives the run a fresh /tmp and /dev/shm
#        between its "E" and this "N" (see Template.next_zygote): the template cannot mount, since it
#        lives under the runs' seccomp filter (see template_main)


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
            except BaseException:  # noqa: BLE001 - said on the worker's stderr, which Node keeps
                traceback.print_exc()
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
        """Ends the run, then a new prepared child: (Zygote, what end_run says). The caller has
        ended the last run ("E") and replaced its /tmp and /dev/shm (fresh_scratch) before."""
        ended, fds = self._ask(b"N")
        if len(fds) != 4:
            for fd in fds:
                os.close(fd)
            raise RuntimeError(f"the template answered 'next' without the run child's pipes: {ended}")
        # the child's first words on its status pipe are its pid (one write, shorter than PIPE_BUF)
        said = os.read(fds[3], 32)
        if not said.endswith(b"\n"):
            for fd in fds:
                os.close(fd)
            raise RuntimeError(f"the next run child did not start (it said {said!r} on its status pipe)")
        return Zygote(int(said), *fds), ended


def template_main(sock, state):
    """The template's loop: one command at a time from the server (see above); never returns."""
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    name_process("template")
    # the run's orphaned descendants come to us (not to the server), so we can reap them
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    state = prepare_template(state)
    # no_new_privs and the runs' seccomp filter, set once here: every run child inherits both (a
    # forked process keeps its parent's filters and can never drop them), so no child pays for
    # compiling the filter. The template needs nothing the filter denies from here on: it forks with
    # plain fork (no namespace flags), and the mounts between runs are the server's (next_scratch).
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs (the template's, which every run inherits)")
    if state["seccomp"] is not None:
        check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(state["seccomp"]), 0, 0),
              "seccomp (the template's, which every run inherits)")
    native = state["native"]
    if native is not None:
        # the same loop in C (native/template_loop.c), which also prepares each run child up to its
        # request: it comes back here only in a run child, or once the server has gone
        if native.loop(sock, state, CHILD_ENDS):
            native_child_main(state, native)
        os._exit(0)
    child = None
    last_fork = None  # with tracing: the last cycle's fork, as seen here (wall ns, CPU ns, faults)
    while True:
        command = sock.recv(16)
        if not command:
            os._exit(0)
        t0 = time.perf_counter_ns(), time.thread_time_ns()
        ended = end_runs(state, child)
        child = None
        if command == b"E":
            sock.send(json.dumps(ended).encode())
            continue
        # the run's IPC objects: gone before the next child exists (here, not at "E", which the
        # server waits for before it answers the request)
        if state["run_ipc"] is not None:
            state["run_ipc"].clear()
        t1 = time.perf_counter_ns(), time.thread_time_ns()
        reseed_before_fork(state)
        t2r = time.perf_counter_ns(), time.thread_time_ns()
        if state["trace"] is not None:
            for name, a, b in (("kill_reap", t0, t1), ("reseed", t1, t2r)):
                ended[f"{name}_us"], ended[f"{name}_cpu_us"] = (b[0] - a[0]) / 1000, (b[1] - a[1]) / 1000
            if last_fork is not None:
                ended["fork_us"], ended["fork_cpu_us"], ended["fork_faults"] = last_fork
        ended["cycle_ms"] = (time.perf_counter_ns() - t1[0]) / 1e6
        child = fork_zygote_after_answer(state, sock, ended)
        if state["trace"] is not None:
            done = time.perf_counter_ns(), time.thread_time_ns(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            last_fork = (done[0] - t2r[0]) / 1000, (done[1] - t2r[1]) / 1000, done[2] - ended["faults_before_fork"]


# where the template keeps the run child's pipe ends across the fork, so that it closes them with one call
CHILD_ENDS = 200


def fork_zygote_after_answer(state, sock, ended):
    """Answers the server (`ended`, with the server's ends of the next run child's pipes), then forks
    that child, which tells the server its pid first thing on its status pipe. After the fork this
    process does nothing but close its copies of the child's ends: every page it wrote while the
    child lives would be copied (2 MiB of the huge-page heap each), so everything else comes first."""
    theirs, ours = scratch_and_pipes(state)
    for i, fd in enumerate(theirs):
        os.dup2(fd, CHILD_ENDS + i, inheritable=False)
        os.close(fd)
    socket.send_fds(sock, [json.dumps(ended).encode()], ours)
    for fd in ours:
        os.close(fd)
    if state["trace"] is not None:
        ended["faults_before_fork"] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    pid = fork_bare()
    if pid == 0:
        try:
            os.write(CHILD_ENDS + 3, b"%d\n" % os.getpid())
            for fd in state["parent_fds"]:
                os.close(fd)
        except BaseException:  # noqa: BLE001 - the server reads no pid and says so
            os._exit(70)
        zygote_main(state, *range(CHILD_ENDS, CHILD_ENDS + 4))
    os.closerange(CHILD_ENDS, CHILD_ENDS + 4)
    return pid


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
