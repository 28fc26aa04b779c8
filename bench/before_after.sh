#!/usr/bin/env bash
# bench/before_after.sh: is revision AFTER slower than revision BEFORE? Made for refactors that must
# show "no regression beyond noise (2%)". It builds both revisions from git (CPU only, each in its
# own scratch folder, removed on exit) and times three CPU workloads REPS times with each build:
#   default   micropp train --steps 30                       (16 x 128, batch 32: ~1 ms steps, overheads)
#   medium    micropp train --config configs/medium.json --steps 20     (16 x 1024, batch 256: BLAS-bound)
#   pp-1f1b   mpiexec -n 2 micropp train --config configs/pipeline.json --mode pp --schedule 1f1b --steps 6
#                                                            (2 stages, 8 micro-batches: MPI + schedule)
# A run's figure is its step_ms_median (micropp's median over the steps, the first step left out as a
# warm-up); a workload's figure is the median of its REPS runs. The builds take turns inside one loop,
# the pair's order flipped every rep (before/after, then after/before, ...), so a drift of the shared
# machine's load falls on both builds alike and neither always goes first.
# Reading the table: ratio = after ms / before ms (above 1: AFTER is slower); the spreads are the
# min-max of each build's REPS runs, i.e. the noise seen this time. verdict "ok" when the ratio is
# <= 1.02, or when AFTER's median is no slower than BEFORE's slowest run (inside BEFORE's own noise);
# else "SLOWER". Lines that are not data start with '#'. With REV_BEFORE = REV_AFTER the ratios show
# the noise floor (expect ~1.00, a few % either way on a busy machine). The exit status is 0 whatever
# the verdict; 2 for bad input, 1 when a build or a run fails.
#   bash bench/before_after.sh main HEAD          # 5 reps: ~2 x 1 min of builds + ~5 x 2 x 20 s of runs
#   bash bench/before_after.sh main HEAD 10       # more reps when the spreads are wide
#   OUT=bench/results/ba.txt RAW=bench/results/ba.jsonl bash bench/before_after.sh v1 v2   # keep table, runs
# Steps per workload: STEPS_DEFAULT=30 STEPS_MEDIUM=20 STEPS_PP=6 (env) if a machine is much slower.
set -euo pipefail

usage="usage: bash bench/before_after.sh REV_BEFORE REV_AFTER [REPS]"
[ $# -ge 2 ] && [ $# -le 3 ] || { echo "$usage" >&2; exit 2; }
REV_BEFORE=$1 REV_AFTER=$2 REPS=${3:-5}
[[ $REPS =~ ^[1-9][0-9]*$ ]] || { echo "before_after: REPS must be a positive integer, not '$REPS'" >&2; exit 2; }
ROOT=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)
for rev in "$REV_BEFORE" "$REV_AFTER"; do
    git -C "$ROOT" rev-parse --verify --quiet "$rev^{commit}" > /dev/null \
        || { echo "before_after: unknown revision '$rev'" >&2; exit 2; }
done
STEPS_DEFAULT=${STEPS_DEFAULT:-30} STEPS_MEDIUM=${STEPS_MEDIUM:-20} STEPS_PP=${STEPS_PP:-6}

SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/micropp-before-after.XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT
trap 'exit 130' INT TERM     # through the EXIT trap, so the scratch folders go on ^C too
T0=$(date +%s)

# build NAME REV: the tracked files of REV into $SCRATCH/NAME, built there (CPU only, no apt).
build() {
    local dir=$SCRATCH/$1
    mkdir -p "$dir"
    git -C "$ROOT" archive "$2" | tar -x -C "$dir"
    echo "# building $1 ($2 = $(git -C "$ROOT" rev-parse --short "$2^{commit}")) in $dir" >&2
    if ! make -C "$dir" -j2 DEPS=0 CUDA=0 micropp > "$dir/build.log" 2>&1; then
        echo "before_after: building $2 failed; the end of its log:" >&2
        tail -n 20 "$dir/build.log" >&2
        exit 1
    fi
}
build before "$REV_BEFORE"
build after "$REV_AFTER"

WORKLOADS=(default medium pp-1f1b)
declare -A CMD=(
    [default]="./micropp train --json --steps $STEPS_DEFAULT"
    [medium]="./micropp train --config configs/medium.json --json --steps $STEPS_MEDIUM"
    [pp-1f1b]="mpiexec -n 2 ./micropp train --config configs/pipeline.json --mode pp --schedule 1f1b --json --steps $STEPS_PP"
)
RUNS=$SCRATCH/runs.jsonl

# run BUILD WORKLOAD REP: one run from the build's own folder (configs/ is read from the cwd);
# its --json line goes to $RUNS, tagged.
run() {
    local out line
    if ! out=$(cd "$SCRATCH/$1" && ${CMD[$2]} 2> "$SCRATCH/$1/run.err"); then
        echo "before_after: $1 $2 failed: (cd $SCRATCH/$1 && ${CMD[$2]}); its stderr:" >&2
        tail -n 20 "$SCRATCH/$1/run.err" >&2
        exit 1
    fi
    line=$(printf '%s\n' "$out" | grep '^{' | tail -n 1) \
        || { echo "before_after: $1 $2 printed no JSON line" >&2; exit 1; }
    printf '{"build": "%s", "workload": "%s", "rep": %d, "result": %s}\n' "$1" "$2" "$3" "$line" >> "$RUNS"
}

for ((rep = 0; rep < REPS; rep++)); do
    if ((rep % 2 == 0)); then order=(before after); else order=(after before); fi
    for w in "${WORKLOADS[@]}"; do
        for b in "${order[@]}"; do
            echo "# rep $((rep + 1))/$REPS: $w, $b" >&2
            run "$b" "$w" "$rep"
        done
    done
done

if [ -n "${RAW:-}" ]; then cp "$RUNS" "$RAW"; fi
{
echo "# micropp before/after: $(date '+%Y-%m-%d %H:%M:%S %z'), $(hostname), nproc $(nproc), load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
echo "# before: $REV_BEFORE = $(git -C "$ROOT" rev-parse --short "$REV_BEFORE^{commit}")   after: $REV_AFTER = $(git -C "$ROOT" rev-parse --short "$REV_AFTER^{commit}")   reps: $REPS, alternating"
for w in "${WORKLOADS[@]}"; do echo "# $w: ${CMD[$w]}"; done
python3 - "$RUNS" "${WORKLOADS[@]}" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    runs.setdefault((r["workload"], r["build"]), []).append(r["result"])
print("# ms = median over the reps of each run's step_ms_median; ratio = after/before; spread = min-max of the reps")
print(f"# {'workload':<8s} {'before_ms':>10s} {'after_ms':>10s} {'ratio':>6s} {'before_spread':>17s} {'after_spread':>17s}"
      f" {'before_sps':>10s} {'after_sps':>10s}  verdict")
slower = []
for w in sys.argv[2:]:
    ms = {b: [r["step_ms_median"] for r in runs[(w, b)]] for b in ("before", "after")}
    sps = {b: statistics.median(r["samples_per_s"] for r in runs[(w, b)]) for b in ("before", "after")}
    mb, ma = statistics.median(ms["before"]), statistics.median(ms["after"])
    ratio = ma / mb
    ok = ratio <= 1.02 or ma <= max(ms["before"])
    if not ok:
        slower.append(w)
    spread = lambda b: f"{min(ms[b]):.2f}-{max(ms[b]):.2f}"
    print(f"  {w:<8s} {mb:10.2f} {ma:10.2f} {ratio:6.3f} {spread('before'):>17s} {spread('after'):>17s}"
          f" {sps['before']:10.1f} {sps['after']:10.1f}  {'ok' if ok else 'SLOWER'}")
print("# verdict: " + ("no regression beyond noise (ratio <= 1.02 or inside before's spread) in every workload" if not slower
                       else "SLOWER in " + ", ".join(slower) + " (rerun with more REPS to tell a trend from noise)"))
PY
echo "# total time $(($(date +%s) - T0)) s (builds included)"
} | if [ -n "${OUT:-}" ]; then tee "$OUT"; else cat; fi
