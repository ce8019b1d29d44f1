#!/usr/bin/env bash
# The tiny recipe's settings over seeds: 5 settings x 3 seeds of the main job (100 steps each, one
# run after another), then `pnpm torl report --group` into docs/results/torl-seeded/.
#
#   examples/torl/scripts/seeded-runs.sh [k=v ...]
#
# Settings (config overrides of examples/torl/configs/tiny.yaml):
#   default   the recipe as it is (C=1)
#   c0        actor_rollout_ref.rollout.num_llm_calls_available=0   (no tool: the control)
#   c2        actor_rollout_ref.rollout.num_llm_calls_available=2
#   penalty   data.execution_error_penalty=true                     (-0.5 when the code failed)
#   nomask    actor_rollout_ref.actor.mask_tool_output=false        (train on the tool's output too)
# Seed S sets trainer.seed=S (the rollouts' sampling) and data.seed=S (the order of the training rows);
# the train/held-out split stays torl.split_seed's, the same for every run.
#
# Resumable: a run whose summary.json exists is finished and skipped; a run directory without one (a
# run that was stopped) is removed and the run made again. Extra k=v arguments go to every run (e.g. a
# smoke test: trainer.total_training_steps=2 trainer.test_freq=2 data.train_batch_size=4 ...); use
# another RUNS_DIR and OUT_DIR for those, since finished runs are not remade with new arguments.
#
# Environment: RUNS_DIR (default runs/seeded), OUT_DIR (default docs/results/torl-seeded),
# SEEDS (default "1 2 3"), SETTINGS (default "default c0 c2 penalty nomask"), ALLOW_DIRTY=1 to run with
# uncommitted changes to tracked files (refused by default: the results name the commit they were made with).
#
# Writes OUT_DIR/report.html, report.png, results.md, results.json (see `pnpm torl report --help`),
# page.png (the page in headless Chromium, when chromium is installed), summaries/<run>.json and COMMIT.
set -euo pipefail

cd "$(dirname "$0")/../../.."
RUNS_DIR=${RUNS_DIR:-runs/seeded}
OUT_DIR=${OUT_DIR:-docs/results/torl-seeded}
SEEDS=${SEEDS:-1 2 3}
SETTINGS=${SETTINGS:-default c0 c2 penalty nomask}

declare -A OVERRIDES=(
  [default]=""
  [c0]="actor_rollout_ref.rollout.num_llm_calls_available=0"
  [c2]="actor_rollout_ref.rollout.num_llm_calls_available=2"
  [penalty]="data.execution_error_penalty=true"
  [nomask]="actor_rollout_ref.actor.mask_tool_output=false"
)
declare -A LABELS=(
  [default]="default (C=1)"
  [c0]="C=0 (no tool)"
  [c2]="C=2"
  [penalty]="execution penalty"
  [nomask]="observation mask off"
)

for setting in $SETTINGS; do
  if [[ -z ${LABELS[$setting]+set} ]]; then
    echo "error: unknown setting '$setting' in SETTINGS (known: ${!LABELS[*]})" >&2
    exit 2
  fi
done
for seed in $SEEDS; do
  if ! [[ $seed =~ ^[0-9]+$ ]]; then
    echo "error: SEEDS must be non-negative integers, got '$seed'" >&2
    exit 2
  fi
done

# tracked files that differ from HEAD, but for the results this script writes (OUT_DIR)
pathspec=(.)
case $(realpath -m "$OUT_DIR") in "$(pwd)"/*) pathspec+=(":(exclude)$OUT_DIR") ;; esac
changed=$(git diff --name-only HEAD -- "${pathspec[@]}")
if [[ -n $changed && ${ALLOW_DIRTY:-0} != 1 ]]; then
  echo "error: tracked files differ from commit $(git rev-parse --short HEAD): $(echo "$changed" | head -5 | tr '\n' ' ')" >&2
  echo "the runs must be made with committed code: commit first, or set ALLOW_DIRTY=1 (COMMIT then says so)" >&2
  exit 2
fi

# The code a run is made with: HEAD when it starts, and whether tracked files differed from it.
code_version() {
  echo "$(git rev-parse HEAD) $([[ -z $(git diff --name-only HEAD -- "${pathspec[@]}") ]] && echo clean || echo "dirty (uncommitted changes)")"
}

mkdir -p "$RUNS_DIR"
groups=()
for setting in $SETTINGS; do
  dirs=()
  for seed in $SEEDS; do
    name="$setting-s$seed"
    dir="$RUNS_DIR/$name"
    dirs+=("$dir")
    if [[ -f $dir/summary.json ]]; then
      echo "[seeded] $name: finished earlier (made with commit $(cat "$dir/COMMIT" 2>/dev/null || echo unknown)), skipped"
      continue
    fi
    rm -rf "$dir"
    version=$(code_version)
    echo "[seeded] $name: ${OVERRIDES[$setting]:-no override} trainer.seed=$seed data.seed=$seed $*"
    # shellcheck disable=SC2086 # the setting's overrides are one word each
    if ! pnpm torl ${OVERRIDES[$setting]} "trainer.seed=$seed" "data.seed=$seed" \
      "torl.runs_dir=$RUNS_DIR" "torl.run_name=$name" "$@" >"$RUNS_DIR/$name.log" 2>&1; then
      echo "error: run $name failed; its output is in $RUNS_DIR/$name.log:" >&2
      tail -n 20 "$RUNS_DIR/$name.log" >&2
      exit 1
    fi
    echo "$version" >"$dir/COMMIT"
    grep '^\[torl\] held-out' "$RUNS_DIR/$name.log" || true
  done
  groups+=(--group "${LABELS[$setting]}=$(IFS=,; echo "${dirs[*]}")")
done

mkdir -p "$OUT_DIR/summaries"
screenshot=()
if command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then
  screenshot=(--screenshot "$OUT_DIR/page.png")
else
  echo "[seeded] chromium not found: no page.png (report.png has the charts)"
fi
pnpm torl report "${groups[@]}" --out "$OUT_DIR" "${screenshot[@]}"

{
  echo "The runs of this folder were made by examples/torl/scripts/seeded-runs.sh with these commits:"
  for setting in $SETTINGS; do
    for seed in $SEEDS; do
      name="$setting-s$seed"
      # the run's paths relative to the repository, so the committed copy names no machine's path
      node -e 'const fs = require("node:fs"), path = require("node:path");
        const s = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
        for (const key of ["run_dir", "report"])
          if (typeof s[key] === "string") s[key] = path.relative(process.cwd(), s[key]);
        fs.writeFileSync(process.argv[2], JSON.stringify(s, null, 2) + "\n");' \
        "$RUNS_DIR/$name/summary.json" "$OUT_DIR/summaries/$name.json"
      echo "$name $(cat "$RUNS_DIR/$name/COMMIT" 2>/dev/null || echo "unknown (no COMMIT file in the run directory)")"
    done
  done
  if [[ $# -gt 0 ]]; then echo "Extra overrides for every run: $*"; fi
} >"$OUT_DIR/COMMIT"
echo "[seeded] wrote $OUT_DIR (results.md, report.html, report.png, results.json, summaries/, COMMIT)"
