"""The machine's ceiling for `pnpm torl bench sandbox`: the fork server's warm heap forking children in a
bare loop. Run as `python3 bench_fork_loop.py '<config json>'` (config: huge_pages, code)."""

import json
import os
import sys
import time

import torl_sandbox.warm  # noqa: F401 - first: BLAS pinned to one thread before numpy is imported
from torl_sandbox.huge_heap import huge_heap_setup
from torl_sandbox.linux import fork_bare, name_process
from torl_sandbox.warm import warm_up


def bare_fork_loop(config):
    """The machine's ceiling for any fork-per-run pool, for `bench sandbox`: the same huge-page heap,
    warmed the same way, forking children in a plain loop with no isolation, no IPC and no Node.

    Line protocol on stdin/stdout: prints `ready huge` or `ready small <why>` (the heap it got: huge
    pages asked for may be unavailable); each `go exit N` (fork, then exit at once),
    `go code N` (fork, run config["code"] with stdout on /dev/null, exit) or `go handoff N` (see
    handoff_run) answers one JSON line `{"mode", "runs", "seconds"}`; end of input ends it.
    """
    import gc

    name_process("bare_loop")
    huge_off = huge_heap_setup(config.get("huge_pages"))
    warm_up()
    compiled = compile(config.get("code", "pass"), "main.py", "exec")
    gc.collect()
    gc.freeze()
    devnull = os.open(os.devnull, os.O_WRONLY)
    print("ready huge" if huge_off is None else f"ready small {huge_off}", flush=True)
    source = config.get("code", "pass").encode()
    for line in sys.stdin:
        _, mode, runs = line.split()
        started = time.perf_counter()
        if mode == "handoff":
            child = fork_waiting_child()
            for _ in range(int(runs)):
                child = handoff_run(child, source)
            os.close(child[1])  # the last prepared child reads end of input and exits
            os.waitpid(child[0], 0)
            print(json.dumps({"mode": mode, "runs": int(runs), "seconds": time.perf_counter() - started}), flush=True)
            continue
        for _ in range(int(runs)):
            pid = fork_bare()
            if pid == 0:
                name_process("bare_run")
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


def fork_waiting_child():
    """A child forked before its code exists, waiting for it on a pipe: (pid, code pipe, output pipe)."""
    code_r, code_w = os.pipe()
    out_r, out_w = os.pipe()
    pid = fork_bare()
    if pid == 0:
        name_process("bare_run")
        status = 0
        try:
            os.close(code_w)
            os.close(out_r)
            chunks = []
            while chunk := os.read(code_r, 1 << 16):
                chunks.append(chunk)
            if not chunks:
                os._exit(0)
            os.dup2(out_w, 1)
            exec(compile(b"".join(chunks), "main.py", "exec"), {"__name__": "__main__"})  # noqa: S102
            sys.stdout.flush()
        except BaseException:  # noqa: BLE001
            status = 1
        os._exit(status)
    os.close(code_r)
    os.close(out_w)
    return pid, code_w, out_r


def handoff_run(child, source):
    """The least a fork-per-run pool adds to a run, with no isolation and no other process: the
    prepared child gets the code through a pipe and compiles it; its output comes back through
    another, read to the end; the parent reaps it and forks the next child for the next code."""
    pid, code_w, out_r = child
    os.write(code_w, source)
    os.close(code_w)
    output = []
    while chunk := os.read(out_r, 1 << 16):
        output.append(chunk)
    os.close(out_r)
    _, st = os.waitpid(pid, 0)
    if st != 0 or not output:
        sys.exit(f"bare fork loop: a prepared child running the code failed (wait status {st})")
    return fork_waiting_child()


if __name__ == "__main__":
    bare_fork_loop(json.loads(sys.argv[1]) if len(sys.argv) > 1 else {})
