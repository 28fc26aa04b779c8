#!/usr/bin/env bash
# bench/zero.sh: the ZeRO levels against plain ddp on 2 ranks (issue 23, item 7): ddp, --zero 1, 2 and 3
# on configs/medium.json with the all-reduce auto picks (shm on one node), the repetitions interleaved
# (job 1..4, then again), so that a slow spell of a shared machine falls on every job alike. Prints each
# job's median samples/s, step and collective time, and the two ratios of the issue's targets:
# zero-2 / zero-1 >= 0.95 and zero-3 / ddp >= 0.85, both from this one run.
#   bash bench/zero.sh                                        # the figures (about 3 minutes on 2 cores)
#   REPS=1 STEPS=3 CONFIG=/tmp/tiny.json bash bench/zero.sh   # a quick check of the script
#   EXTRA="--allreduce mpi" bash bench/zero.sh                # the same over MPI's collectives
source "$(dirname "$0")/lib.sh"
RESULTS=${RESULTS:-$ROOT/bench/results/zero.jsonl}
: > "$RESULTS"
CONFIG=${CONFIG:-$ROOT/configs/medium.json}
STEPS=${STEPS:-15}
REPS=${REPS:-5}
EXTRA=${EXTRA:-}
# shellcheck disable=SC2206
C=(--config "$CONFIG" --steps "$STEPS" --log-every 0 --threads 1 --mode ddp $EXTRA)
for ((rep = 0; rep < REPS; rep++)); do
    for z in 0 1 2 3; do
        REPS=1 measure "zero$z" 2 "${C[@]}" --zero $z > /dev/null
    done
done
python3 - "$RESULTS" "$CONFIG" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    runs.setdefault(r["label"], []).append(r["result"])
med = lambda label, key: statistics.median(r.get(key, 0) or 0 for r in runs[label])
first = runs["zero0"][0]
print(f"# {sys.argv[2]}: {first['layers']} x {first['hidden']} hidden, batch {first['batch']}, 2 ranks, "
      f"{first['steps']} steps x {len(runs['zero0'])} interleaved runs, all-reduce {first['allreduce']}; medians")
print(f"{'job':8s} {'samples/s':>10s} {'step ms':>8s} {'comm ms':>8s} {'hidden':>7s} {'runs (samples/s)':s}")
for z in range(4):
    label = f"zero{z}"
    every = " ".join(f"{r['samples_per_s']:.0f}" for r in runs[label])
    print(f"{'ddp' if z == 0 else 'zero-%d' % z:8s} {med(label, 'samples_per_s'):10.0f} {med(label, 'step_ms_median'):8.1f} "
          f"{med(label, 'comm_ms'):8.1f} {med(label, 'comm_hidden_fraction'):7.2f} {every}")
r2 = med("zero2", "samples_per_s") / med("zero1", "samples_per_s")
r3 = med("zero3", "samples_per_s") / med("zero0", "samples_per_s")
print(f"zero-2 / zero-1: {r2:.2f}x (target >= 0.95); zero-3 / ddp: {r3:.2f}x (target >= 0.85)")
PY
echo "# raw runs: $RESULTS"
