#!/usr/bin/env bash
# bench/schedules.sh: 1F1B against the schedules beyond it, in one run. 2 ranks, configs/pipeline.json,
# M=8: measured bubble (mean over ranks) and samples/s of 1f1b, interleaved (v=2), zb-h1, zb-h2, zb-v
# and dualpipev, beside the yardstick a 2-rank pipeline can at best match on one machine: the same
# model as a monolith with --threads 2 (both cores on one BLAS). Targets: interleaved and zb-h1 beat
# 1f1b; the best near-zero-bubble schedule measures a bubble <= 0.03 and >= 0.98x the yardstick's
# samples/s. Repetitions go round-robin over the runs so that a drift of the machine hits them alike;
# each figure is the median over REPS runs of a run's median step.
#   bash bench/schedules.sh                  # the full size (one rank per core: run it on a quiet machine)
#   TINY=1 REPS=1 bash bench/schedules.sh    # a smoke test of the script on a tiny model
source "$(dirname "$0")/lib.sh"
RESULTS=${RESULTS:-$ROOT/bench/results/schedules.jsonl}
: > "$RESULTS"
STEPS=${STEPS:-6}
M=${M:-8}
if [ "${TINY:-0}" = 1 ]; then CFG="--mode pp --layers 8 --hidden 64 --batch 64 --steps 3"
else CFG="--config $ROOT/configs/pipeline.json --steps $STEPS"; fi
SCHEDS=("1f1b" "interleaved --virtual-stages 2" "zb-h1" "zb-h2" "zb-v" "dualpipev")
MONO=${CFG/--mode pp /}  # (--mode monolith is added below: a flag is given once)
for ((i = 0; i < REPS; i++)); do
    for s in "${SCHEDS[@]}"; do
        out=$(mpiexec -n 2 "$MICROPP" train $CFG --micro-batches "$M" --log-every 0 --schedule $s --json)
        printf '{"label": "%s", "rep": %d, "ranks": 2, "result": %s}\n' "${s%% *}" "$i" "$out" >> "$RESULTS"
    done
    out=$("$MICROPP" train $MONO --mode monolith --threads 2 --log-every 0 --json)
    printf '{"label": "monolith-t2", "rep": %d, "ranks": 1, "result": %s}\n' "$i" "$out" >> "$RESULTS"
done
echo "# micropp bench/schedules.sh: 2 ranks, M=$M, $CFG; $REPS repetitions, round-robin; raw runs: $RESULTS"
python3 - "$RESULTS" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    d = json.loads(line)
    runs.setdefault(d["label"], []).append(d["result"])
print("# bubble measured = mean over ranks of 1 - compute / pipeline span (median step); theory = simulated, uniform costs")
print("%-12s %10s %12s %16s %14s %22s" % ("schedule", "step ms", "samples/s", "bubble measured", "bubble theory", "peak activations MB"))
row = {}
for label in ("1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "dualpipev"):
    rs = runs[label]
    ms = statistics.median(r["step_ms_median"] for r in rs)
    sps = statistics.median(r["samples_per_s"] for r in rs)
    bub = statistics.median(sum(r["bubble_measured"]) / len(r["bubble_measured"]) for r in rs)
    peak = max(max(r["peak_activation_bytes"]) for r in rs) / 1e6
    row[label] = (ms, sps, bub)
    print("%-12s %10.1f %12.1f %16.3f %14.3f %22.1f" % (label, ms, sps, bub, rs[0]["bubble_theory"], peak))
base = row["1f1b"]
for label in ("interleaved", "zb-h1"):
    ms, sps, bub = row[label]
    ok = bub < base[2] and sps > base[1]
    print("# %-11s vs 1f1b: bubble %.3f vs %.3f, samples/s x%.3f -> target %s" % (label, bub, base[2], sps / base[1], "met" if ok else "NOT met"))
mono = statistics.median(r["samples_per_s"] for r in runs["monolith-t2"])
print("%-12s %10.1f %12.1f   (the yardstick: the same model, one process, --threads 2)" % ("monolith-t2", statistics.median(r["step_ms_median"] for r in runs["monolith-t2"]), mono))
best = min(("zb-h2", "zb-v", "dualpipev"), key=lambda l: row[l][2])
ms, sps, bub = row[best]
ok = bub <= 0.03 and sps >= 0.98 * mono
print("# best near-zero-bubble schedule %s: bubble %.3f (target <= 0.03), samples/s %.3fx the --threads 2 monolith (target >= 0.98x) -> target %s" % (best, bub, sps / mono, "met" if ok else "NOT met"))
PY
