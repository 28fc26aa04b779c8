# bench/lib.sh: shared by the bench scripts: run a micropp job REPS times, keep every JSON line in
# $RESULTS, and report the median of the runs' median step times.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MICROPP=${MICROPP:-$ROOT/micropp}
REPS=${REPS:-3}
mkdir -p "$ROOT/bench/results"

# measure LABEL NRANKS ARGS...: prints "median_step_ms samples_per_s gflops" and appends JSONL.
measure() {
    local label=$1 n=$2; shift 2
    local lines=()
    for ((i = 0; i < REPS; i++)); do
        local out
        if [ "$n" -gt 1 ]; then out=$(mpiexec -n "$n" "$MICROPP" train "$@" --json)
        else out=$("$MICROPP" train "$@" --json); fi
        lines+=("$out")
        printf '{"label": "%s", "ranks": %d, "result": %s}\n' "$label" "$n" "$out" >> "$RESULTS"
    done
    printf '%s\n' "${lines[@]}" | python3 -c '
import json, statistics, sys
runs = [json.loads(l) for l in sys.stdin if l.strip()]
ms = statistics.median(r["step_ms_median"] for r in runs)
best = min(runs, key=lambda r: abs(r["step_ms_median"] - ms))
print("%.3f %.1f %.2f" % (ms, best["samples_per_s"], best["gflops"]))'
}
