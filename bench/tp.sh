#!/usr/bin/env bash
# bench/tp.sh: tensor parallelism against the monolith on one machine, measured in one run.
# configs/medium.json (16 x Linear(1024,1024), batch 256) three ways, REPS times each, taking turns
# inside one loop (so a drift of a shared machine's load falls on all three alike):
#   mono-1t   micropp train (one rank, one BLAS thread)
#   mono-2t   micropp train --threads 2 (one rank, two BLAS threads: what 2 cores give one process)
#   tp-2      mpiexec -n 2 micropp train --tp 2 (two ranks of one thread, the all-reduce over shm)
# and the pipeline's message between two tensor-parallel groups both ways, on pp 2 x tp 2 (4 ranks)
# with a model whose messages weigh (4 x 1024 wide, batch 512 in 8 micro-batches of 64 rows):
#   msg-full  --tp-message full   every rank sends the whole activation (and gradient) to its counterpart
#   msg-slice --tp-message slice  each sends its half, the receiving group all-gathers
# A run's figure is its samples_per_s (micropp's, from the median step, the first left out); a way's
# figure is the median of its REPS runs. Printed: each way's samples/s, tp-2's ratios to mono-1t and
# mono-2t, tp-2's all-reduce share of the step (tp_allreduce_share, its median), msg-slice / msg-full
# (the 4-rank ways oversubscribe a 2-core machine: compare them with each other only). Lines that are not
# data start with '#'. Exit 0 whatever the figures; 2 for bad input; 1 when a run fails.
#   bash bench/tp.sh          # 3 reps, STEPS=8 steps each
#   bash bench/tp.sh 5        # more reps on a noisy machine
set -euo pipefail
REPS=${1:-3}
[[ $REPS =~ ^[1-9][0-9]*$ ]] || { echo "tp.sh: REPS must be a positive integer, not '$REPS'" >&2; exit 2; }
STEPS=${STEPS:-8}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MICROPP=${MICROPP:-$ROOT/micropp}
[ -x "$MICROPP" ] || { echo "tp.sh: $MICROPP is missing: run make" >&2; exit 2; }
ARGS=(train --config "$ROOT/configs/medium.json" --steps "$STEPS" --log-every 0 --json)
RAW=$(mktemp "${TMPDIR:-/tmp}/micropp-tp.XXXXXX")
trap 'rm -f "$RAW"' EXIT

echo "# bench/tp.sh: configs/medium.json, $STEPS steps, $REPS reps, $(nproc) cores; $(date -u +%FT%TZ)"
echo "# load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 0; r < REPS; r++)); do
    for way in mono-1t mono-2t tp-2 msg-full msg-slice; do
        case $way in
        mono-1t) out=$("$MICROPP" "${ARGS[@]}") ;;
        mono-2t) out=$("$MICROPP" "${ARGS[@]}" --threads 2) ;;
        tp-2) out=$(mpiexec -n 2 "$MICROPP" "${ARGS[@]}" --tp 2) ;;
        msg-*) out=$(mpiexec -n 4 "$MICROPP" train --layers 4 --hidden 1024 --batch 512 --micro-batches 8 --steps "$STEPS" \
            --log-every 0 --json --mode pp --tp 2 --tp-message "${way#msg-}") ;;
        esac || { echo "tp.sh: the $way run failed" >&2; exit 1; }
        printf '%s %s\n' "$way" "$out" >>"$RAW"
    done
done
python3 - "$RAW" <<'EOF'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    way, obj = line.split(" ", 1)
    runs.setdefault(way, []).append(json.loads(obj))
med = {w: statistics.median(r["samples_per_s"] for r in rs) for w, rs in runs.items()}
share = statistics.median(r["tp_allreduce_share"] for r in runs["tp-2"])
print("%-8s %12s %10s" % ("way", "samples/s", "runs"))
for w in ("mono-1t", "mono-2t", "tp-2", "msg-full", "msg-slice"):
    print("%-8s %12.0f %10s" % (w, med[w], " ".join("%.0f" % r["samples_per_s"] for r in runs[w])))
print("tp-2 / mono-1t = %.2fx | tp-2 / mono-2t = %.2fx | tp-2's all-reduce: %.0f%% of the step" %
      (med["tp-2"] / med["mono-1t"], med["tp-2"] / med["mono-2t"], 100 * share))
print("pp 2 x tp 2: msg-slice / msg-full = %.2fx (above 1: slicing the message is faster)" % (med["msg-slice"] / med["msg-full"]))
EOF
echo "# load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
