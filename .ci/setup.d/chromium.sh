#!/usr/bin/env bash
# Debian's headless-capable `chromium`, for two things:
# - the report rendering check (packages/verl-ts/test/report/report.test.ts); the report itself (report.html and
#   report.png) needs nothing outside node_modules, only the render check screenshots the page;
# - the WebGPU tests (packages/verl-ts/test/models/webgpu.test.ts): chromium ships SwiftShader, a Vulkan
#   implementation on the CPU (vk_swiftshader_icd.json and its own libvulkan.so.1, in chromium-common),
#   which gives Dawn a GPU adapter on machines without a GPU. The tests find the ICD with `dpkg -L`.
# Idempotent: installs only when no chromium binary is on PATH.
set -eu

if command -v chromium >/dev/null 2>&1; then
  echo "chromium setup: $(chromium --version 2>/dev/null || echo 'chromium present')"
  icd=$(dpkg -L chromium chromium-common 2>/dev/null | grep vk_swiftshader_icd.json || true)
  echo "chromium setup: SwiftShader ICD: ${icd:-none (the webgpu tests will skip)}"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
echo "chromium setup: installed $(chromium --version 2>/dev/null || echo chromium)"
