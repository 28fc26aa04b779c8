#!/usr/bin/env bash
# bench/ep_overlap.sh: how much of a step --ep's all-to-all takes with and without --ep-overlap, side by side:
# 2 ranks, dp 2 with --ep 2, medium-sized experts (4 layers of hidden 512, 4 experts, top-2, batch 256: each
# replica's 128 rows), REPS runs of each, taking turns (on/off, then off/on, ...) so that a drift of the
# machine's load falls on both alike. A run's figures are its --json's: step_ms_median, and the all-to-all's
# in flight and exposed (waited in) ms per step and exposed share of the step (axes/expert.c: medians over
# the steps, then means over the ranks); a row is the median of its REPS runs. Lines that are not data start
# with '#'. Exit 1 when a run fails.
#   bash bench/ep_overlap.sh          # 3 reps: ~6 runs of 20 steps
#   bash bench/ep_overlap.sh 5
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MICROPP=${MICROPP:-$ROOT/micropp}
REPS=${1:-3}
case $REPS in '' | *[!0-9]*) echo "bench/ep_overlap.sh: REPS '$REPS' is not a count: give a number like 3" >&2; exit 2 ;; esac
ARGS=(train --layers 4 --hidden 512 --batch 256 --experts 4 --dp 2 --ep 2 --steps 20 --log-every 0 --json)
OUT=$(mktemp -d /tmp/ep_overlap.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
echo "# mpiexec -n 2 micropp ${ARGS[*]} --ep-overlap on|off, $REPS runs each"
for ((r = 0; r < REPS; r++)); do
    order="on off"; [ $((r % 2)) = 1 ] && order="off on"
    for o in $order; do
        mpiexec -n 2 "$MICROPP" "${ARGS[@]}" --ep-overlap "$o" > "$OUT/$o.$r.json" ||
            { echo "bench/ep_overlap.sh: the run with --ep-overlap $o failed" >&2; exit 1; }
    done
done
python3 - "$OUT" "$REPS" <<'EOF'
import json, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
print("# overlap  step(ms)  all-to-all in flight(ms)  exposed(ms)  exposed share  share in flight")
for o in ("on", "off"):
    runs = [json.load(open(f"{out}/{o}.{r}.json")) for r in range(reps)]
    med = lambda k: statistics.median(d[k] for d in runs)
    print(f"{o:>9} {med('step_ms_median'):9.2f} {med('alltoall_ms_per_step'):25.2f} "
          f"{med('alltoall_exposed_ms_per_step'):12.2f} {100 * med('alltoall_exposed_share'):13.1f}% "
          f"{100 * med('alltoall_share'):15.1f}%")
EOF
