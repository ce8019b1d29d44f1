#!/usr/bin/env bash
# Report rendering check (examples/torl/test/report.test.ts): Debian's headless-capable `chromium`.
# Idempotent: installs only when no chromium binary is on PATH. The report itself (report.html and
# report.png) needs nothing outside node_modules; only the render check screenshots the page.
set -eu

if command -v chromium >/dev/null 2>&1; then
  echo "chromium setup: $(chromium --version 2>/dev/null || echo 'chromium present')"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
echo "chromium setup: installed $(chromium --version 2>/dev/null || echo chromium)"
