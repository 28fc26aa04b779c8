#!/usr/bin/env bash
# bench/overlap.sh: the bubble across consecutive steps, measured beside its theory. For each schedule, a
# synchronous run and a --post-validate run of a pipeline, each with --trace and --json: bench/overlap.py
# measures the bubble across steps 2 .. N-1 from the trace, and `micropp bubble --costs-from` the --json gives
# the overlapped figure the simulator reaches with that run's own per-stage F, I and W (the theory for the costs
# the run met, where `bubble --pp P` alone assumes F = I = W); the difference is what the run lost beyond them.
# Usage: bash bench/overlap.sh [RANKS] [SCHEDULES]   (default 2 "zb-h2 zb-v"; CONFIG, STEPS, MICROPP in the
# environment: default configs/pipeline.json, 8 steps; EXTRA: more train flags)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MICROPP=${MICROPP:-$ROOT/micropp}
RANKS=${1:-2}
SCHEDULES=${2:-zb-h2 zb-v}
CONFIG=${CONFIG:-$ROOT/configs/pipeline.json}
STEPS=${STEPS:-8}
case $RANKS in '' | *[!0-9]*) echo "bench/overlap.sh: RANKS '$RANKS' is not a number of ranks (2 or 4)" >&2; exit 2 ;; esac
case $STEPS in '' | *[!0-9]* | [0-3]) echo "bench/overlap.sh: STEPS '$STEPS' must be 4 or more (steps 2 .. N-1 are read)" >&2; exit 2 ;; esac
[ -r "$CONFIG" ] && [ -f "$CONFIG" ] || { echo "bench/overlap.sh: CONFIG '$CONFIG' is not a readable file" >&2; exit 2; }
W=$(mktemp -d /tmp/micropp-overlap.XXXXXX)
trap 'rm -rf "$W"' EXIT
echo "# mpiexec -n $RANKS micropp train --config ${CONFIG#"$ROOT"/} --mode pp --steps $STEPS ${EXTRA:-}--schedule S [--post-validate]"
echo "# measured: bench/overlap.py on the run's --trace (steps 2 .. $((STEPS - 1))); theory: bubble --costs-from the run's --json"
echo "# measured less optimizer: the optimizer steps' time out of the windows, as the simulator has none;" \
    "difference: that minus theory"
printf '%-10s %-15s %10s %10s %16s %10s %10s\n' "schedule" "steps" "step(ms)" "measured" "less optimizer" "theory" \
    "difference"
for s in $SCHEDULES; do
    for mode in synchronous post-validate; do
        flag=()
        [ "$mode" = post-validate ] && flag=(--post-validate)
        # shellcheck disable=SC2086
        mpiexec -n "$RANKS" "$MICROPP" train --config "$CONFIG" --mode pp --steps "$STEPS" --log-every 0 ${EXTRA:-} \
            --schedule "$s" "${flag[@]}" --trace "$W/t.json" --json > "$W/j.json"
        read -r measured less < <(python3 "$ROOT/bench/overlap.py" "$W/t.json" |
            python3 -c 'import json,sys; d = json.load(sys.stdin); print(d["bubble"], d["bubble_less_optimizer"])')
        theory=$("$MICROPP" bubble --costs-from "$W/j.json" --schedule "$s" |
            awk -v s="$s" '$1 == s && $2 ~ /^[0-9]+$/ { print $6 }')
        step=$(python3 -c 'import json,sys; print("%.1f" % json.load(open(sys.argv[1]))["step_ms_median"])' "$W/j.json")
        printf '%-10s %-15s %10s %10.4f %16.4f %10.4f %+10.4f\n' "$s" "$mode" "$step" "$measured" "$less" "$theory" \
            "$(python3 -c 'import sys; print(float(sys.argv[1]) - float(sys.argv[2]))' "$less" "$theory")"
    done
done
