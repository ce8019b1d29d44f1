#!/usr/bin/env bash
# Sandbox (packages/sandbox): checks what its isolation needs and says loudly what is missing.
# The sandbox builds its isolation itself (python/forkserver.py and python/torl_sandbox/: unshare + pivot_root + cgroups +
# rlimits, as root), so nothing has to be installed; util-linux's `unshare` is only used here to
# check the kernel. Idempotent; never fails the build (the sandbox tests fail, by name, instead).
set -u

if ! command -v unshare >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq util-linux >/dev/null || true
fi

ok=1
say() { printf 'sandbox setup: %s\n' "$*"; }

[ "$(id -u)" = 0 ] || { say "WARNING: not root: namespaces, cgroups and the uid drop will be off"; ok=0; }
if python3 -c 'import sympy, numpy' 2>/dev/null; then
  say "python3 with sympy and numpy: $(python3 -c 'import sys; print(sys.executable)')"
else
  say "WARNING: python3 cannot import sympy and numpy"; ok=0
fi
if unshare --pid --fork --mount --net --ipc --uts true 2>/dev/null; then
  say "pid/mount/net/ipc/uts namespaces: available"
else
  say "WARNING: unshare of pid/mount/net/ipc/uts namespaces failed"; ok=0
fi
if [ -e /sys/fs/cgroup/cgroup.controllers ]; then
  say "cgroup v2: $(cat /sys/fs/cgroup/cgroup.controllers)"
elif [ -e /sys/fs/cgroup/pids/cgroup.procs ]; then
  say "cgroup v1: pids$( [ -e /sys/fs/cgroup/memory/cgroup.procs ] && echo ' + memory')"
else
  say "WARNING: no pids cgroup controller mounted: the per-run process limit falls back to RLIMIT_NPROC"; ok=0
fi
# the runs' copies of the huge-page heap are capped by the hugetlb controller (v1, v2, or v2 beside v1)
if [ -e /sys/fs/cgroup/hugetlb/cgroup.procs ] \
  || grep -qw hugetlb /sys/fs/cgroup/cgroup.controllers 2>/dev/null \
  || grep -qw hugetlb /sys/fs/cgroup/unified/cgroup.controllers 2>/dev/null; then
  say "hugetlb cgroup controller: available"
else
  say "WARNING: no hugetlb cgroup controller: the warm heap stays in ordinary pages (slower runs)"; ok=0
fi
# read-only overlays keep host paths and devices out of the runs' mountinfo
if grep -qw overlay /proc/filesystems || modinfo overlay >/dev/null 2>&1; then
  say "overlayfs: available"
else
  say "WARNING: no overlayfs: runs see the host's mount sources in /proc/self/mountinfo"; ok=0
fi
[ "$ok" = 1 ] && say "all isolation prerequisites present"
exit 0
