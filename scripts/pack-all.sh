#!/usr/bin/env bash
# Builds and packs the five torl-ts packages into one folder, and prints the npm command that installs
# them into a project. Run it in a checkout after `pnpm install`:
#   scripts/pack-all.sh --out DIR
# The packages depend on one another by version, so a project installs all five tarballs at once
# (@torl-ts/blas included): `npm i DIR/torl-ts-*.tgz`.
set -euo pipefail

usage="usage: scripts/pack-all.sh --out DIR"
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] || { echo "error: --out needs a directory ($usage)" >&2; exit 2; }; out="$2"; shift 2 ;;
    --out=*) out="${1#--out=}"; shift ;;
    -h|--help) echo "$usage"; exit 0 ;;
    *) echo "error: unknown argument $1 ($usage)" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || { echo "error: --out DIR is required ($usage)" >&2; exit 2; }

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ -d "$root/node_modules" ] || { echo "error: run pnpm install in $root first" >&2; exit 2; }
mkdir -p "$out"
out="$(cd "$out" && pwd)"
rm -f "$out"/torl-ts-*.tgz

# each pack builds its package (prepack) and turns workspace:* into the released version
for dir in core blas actors sandbox verl-ts; do
  (cd "$root/packages/$dir" && pnpm pack --pack-destination "$out" >/dev/null)
done

tarballs=("$out"/torl-ts-*.tgz)
[ "${#tarballs[@]}" -eq 5 ] || { echo "error: expected 5 tarballs in $out, found ${#tarballs[@]}" >&2; exit 1; }
echo "packed ${#tarballs[@]} packages into $out; install them in your project with:"
echo "  npm i ${tarballs[*]}"
