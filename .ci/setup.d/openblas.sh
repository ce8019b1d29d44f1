#!/usr/bin/env bash
# Native matrix products (packages/blas): Debian's OpenBLAS, a C++ toolchain and the addon built against
# them, by the same script as the README's `pnpm setup:native`: it installs only what is missing, and
# rebuilds an addon that an earlier install left unbuilt or older than its sources (where the
# dependencies are installed already; on a fresh clone `pnpm install` builds it). --strict: CI fails
# here when the native kernels cannot be had, instead of in the tests that need them.
set -eu
exec node "$(dirname "$0")/../../packages/blas/scripts/setup-native.mjs" --strict
