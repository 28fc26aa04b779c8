#!/usr/bin/env bash
# bench/det_cost.sh: what --deterministic costs a step (issue 34's item 4: at most 1.10x), on
# configs/medium.json (16 x 1024, batch 256) in the four layouts the issue names: the monolith, 1F1B on
# 2 ranks (4 micro-batches of 64 rows), ddp on 2 ranks and --tp 2. For each layout, REPS rounds of one
# run without the option and one with it, the two taking turns inside one loop (the pair's order flipped
# every round, so a drift of the machine's load falls on both); a run's figure is its step_ms_median
# (--json: micropp's median over the steps, the first left out). A layout's line: both medians over the
# rounds, their min-max, and the ratio with / without. A layout the option refuses prints why instead.
# Lines that are not data start with '#'. Needs a quiet machine for figures worth quoting.
#   bash bench/det_cost.sh                 # 5 rounds, 10 steps a run, the default --det-rows
#   DET_ROWS=64 REPS=7 bash bench/det_cost.sh
# Env: REPS (5), STEPS (10), DET_ROWS (empty: micropp's default), MICROPP (./micropp), CONFIG
# (configs/medium.json; tests/t_benches.sh runs a small one).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MICROPP=${MICROPP:-$ROOT/micropp} REPS=${REPS:-5} STEPS=${STEPS:-10} DET_ROWS=${DET_ROWS:-}
CONFIG=${CONFIG:-$ROOT/configs/medium.json}
for v in REPS STEPS; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "det_cost: $v must be a positive integer, not '${!v}'" >&2; exit 2; }
done
[ -x "$MICROPP" ] || { echo "det_cost: no micropp at $MICROPP: run make, or set MICROPP" >&2; exit 2; }
[ -r "$CONFIG" ] || { echo "det_cost: CONFIG '$CONFIG' is not a readable file" >&2; exit 2; }
BASE=(train --config "$CONFIG" --steps "$STEPS" --log-every 0 --json)
DET=(--deterministic ${DET_ROWS:+--det-rows "$DET_ROWS"})
LAYOUTS=("monolith|1|" "1f1b 2 ranks|2|--pp 2 --micro-batches 4" "ddp 2 ranks|2|--dp 2" "tp 2|2|--tp 2")

# one NRANKS ARGS...: the run's step_ms_median, or "refused: <why>" / "failed: <why>"
one() {
    local n=$1 out err rc
    shift
    err=$(mktemp)
    if [ "$n" -gt 1 ]; then out=$(mpiexec -n "$n" "$MICROPP" "${BASE[@]}" "$@" 2>"$err"); rc=$?
    else out=$("$MICROPP" "${BASE[@]}" "$@" 2>"$err"); rc=$?; fi
    if [ "$rc" -eq 2 ]; then echo "refused: $(head -1 "$err")"
    elif [ "$rc" -ne 0 ]; then echo "failed (exit $rc): $(head -c 200 "$err" | tr '\n' ' ')"
    else python3 -c 'import json, sys; print(json.load(sys.stdin)["step_ms_median"])' <<<"$out"; fi
    rm -f "$err"
}
median() { python3 -c 'import statistics, sys; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

echo "# $("$MICROPP" --version 2>/dev/null | head -1) | $(nproc) cores | load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $(basename "$CONFIG"), $STEPS steps a run, $REPS rounds, --det-rows ${DET_ROWS:-default}; step ms medians (min-max)"
printf "%-14s %22s %22s %7s\n" layout without with ratio
for row in "${LAYOUTS[@]}"; do
    IFS='|' read -r name n args <<<"$row"
    read -ra a <<<"$args"
    plain=() det=() why=""
    for ((r = 0; r < REPS; r++)); do
        [ -n "$why" ] && break
        for turn in $((r % 2)) $((1 - r % 2)); do
            if [ "$turn" -eq 0 ]; then x=$(one "$n" "${a[@]}"); else x=$(one "$n" "${a[@]}" "${DET[@]}"); fi
            [[ $x =~ ^[0-9.]+$ ]] || { why=$x; break; }
            if [ "$turn" -eq 0 ]; then plain+=("$x"); else det+=("$x"); fi
        done
    done
    if [ -n "$why" ]; then printf "%-14s %s\n" "$name" "$why"; continue; fi
    mp=$(median "${plain[@]}") md=$(median "${det[@]}")
    lo() { printf "%s\n" "$@" | sort -g | head -1; }
    hi() { printf "%s\n" "$@" | sort -g | tail -1; }
    printf "%-14s %9.2f (%.2f-%.2f) %9.2f (%.2f-%.2f) %7.3f\n" "$name" "$mp" "$(lo "${plain[@]}")" "$(hi "${plain[@]}")" \
        "$md" "$(lo "${det[@]}")" "$(hi "${det[@]}")" "$(python3 -c "print($md / $mp)")"
done
