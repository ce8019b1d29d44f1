#!/usr/bin/env bash
# Native matrix products (packages/blas): Debian's OpenBLAS and a C++ toolchain, so that `pnpm install`
# builds the addon (node-gyp against the Node headers of the nodejs package; nothing is downloaded).
# Idempotent: installs only what is missing. Without them the install still succeeds and the tensor
# backend keeps its own matmul kernels, naming the reason on its backend line.
set -eu

missing=()
[ -e /usr/include/x86_64-linux-gnu/cblas.h ] || [ -e /usr/include/cblas.h ] || missing+=(libopenblas-dev)
command -v c++ >/dev/null 2>&1 || missing+=(g++)
command -v make >/dev/null 2>&1 || missing+=(make)
if [ "${#missing[@]}" -eq 0 ]; then
  echo "openblas setup: $(dpkg-query -W -f='${Package} ${Version}' libopenblas-dev 2>/dev/null || echo 'cblas.h present'), c++ and make present"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "openblas setup: installed ${missing[*]}"
