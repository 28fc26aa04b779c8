#!/usr/bin/env bash
# bench/ep_overlap.sh: how much of a step --ep's all-to-all takes with and without --ep-overlap, side by side:
# 2 ranks, dp 2 with --ep 2, medium-sized experts (4 layers of hidden 512, 4 experts, top-2, batch 256: each
# replica's 128 rows), REPS runs of each, taking turns (on/off, then off/on, ...) so that a drift of the
# machine's load falls on both alike. A run's figures are its --json's: step_ms_median, and the all-to-all's
# in flight and exposed (waited in) ms per step and exposed share of the step (axes/expert.c: medians over
# the steps, then means over the ranks); a row is the median of its REPS runs. Lines that are not data start
# with '#'. Exit 1 when a run fails. With `pair` as its second argument: 4 ranks, a 2-stage 1F1B pipeline of
# 2 replicas with --ep 2 (8 micro-batches of 32 rows), --ep-overlap on against pair (a stage's forward and
# another micro-batch's backward in turn: train/executor.c's exec_pair). With MICROPP_BEFORE naming another build
# (the code before a change), each run of a mode is made by both builds in turn too (before/after, then
# after/before, ...), a row per build and mode, and a last line the ratio of their exposed ms (after / before).
#   bash bench/ep_overlap.sh          # 3 reps: ~6 runs of 20 steps
#   bash bench/ep_overlap.sh 5
#   bash bench/ep_overlap.sh 3 pair
#   MICROPP_BEFORE=/tmp/old/micropp bash bench/ep_overlap.sh 5
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MICROPP=${MICROPP:-$ROOT/micropp}
BEFORE=${MICROPP_BEFORE:-}
[ -z "$BEFORE" ] || [ -x "$BEFORE" ] || { echo "bench/ep_overlap.sh: MICROPP_BEFORE '$BEFORE' is not a program: name a micropp build" >&2; exit 2; }
REPS=${1:-3}
case $REPS in '' | *[!0-9]*) echo "bench/ep_overlap.sh: REPS '$REPS' is not a count: give a number like 3" >&2; exit 2 ;; esac
MODE=${2:-off}
case $MODE in off | pair) ;; *) echo "bench/ep_overlap.sh: '$MODE' is not a mode: give pair, or nothing" >&2; exit 2 ;; esac
ARGS=(train --layers 4 --hidden 512 --batch 256 --experts 4 --dp 2 --ep 2 --steps 20 --log-every 0 --json)
N=2
if [ "$MODE" = pair ]; then
    ARGS=(train --layers 4 --hidden 512 --batch 256 --experts 4 --pp 2 --dp 2 --ep 2 --schedule 1f1b --micro-batches 8
          --steps 20 --log-every 0 --json)
    N=4
fi
OUT=$(mktemp -d /tmp/ep_overlap.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
echo "# mpiexec -n $N micropp ${ARGS[*]} --ep-overlap on|$MODE, $REPS runs each${BEFORE:+, by $BEFORE (before) and $MICROPP (after) in turn}"
builds="after"; [ -n "$BEFORE" ] && builds="before after"
for ((r = 0; r < REPS; r++)); do
    order="on $MODE"; [ $((r % 2)) = 1 ] && order="$MODE on"
    turn="$builds"; [ $((r % 2)) = 1 ] && [ -n "$BEFORE" ] && turn="after before"
    for o in $order; do
        for b in $turn; do
            bin=$MICROPP; [ "$b" = before ] && bin=$BEFORE
            mpiexec -n "$N" "$bin" "${ARGS[@]}" --ep-overlap "$o" > "$OUT/$b.$o.$r.json" ||
                { echo "bench/ep_overlap.sh: the run of $bin with --ep-overlap $o failed" >&2; exit 1; }
        done
    done
done
python3 - "$OUT" "$REPS" "$MODE" $builds <<'EOF'
import json, statistics, sys
out, reps, mode, builds = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
two = len(builds) > 1
print("#" + ("  build" if two else "") + " overlap  step(ms)  all-to-all in flight(ms)  exposed(ms)  exposed share  "
      "share in flight")
exposed = {}
for b in builds:
    for o in ("on", mode):
        runs = [json.load(open(f"{out}/{b}.{o}.{r}.json")) for r in range(reps)]
        med = lambda k: statistics.median(d[k] for d in runs)
        exposed[b, o] = med('alltoall_exposed_ms_per_step')
        print((f"{b:>7}" if two else "") + f"{o:>9} {med('step_ms_median'):9.2f} {med('alltoall_ms_per_step'):25.2f} "
              f"{exposed[b, o]:12.2f} {100 * med('alltoall_exposed_share'):13.1f}% "
              f"{100 * med('alltoall_share'):15.1f}%")
if two:
    print("# exposed ms, after / before: " + ", ".join(
        f"{o} {exposed['after', o] / exposed['before', o]:.2f}" if exposed['before', o] > 0 else f"{o} -"
        for o in ("on", mode)))
EOF
