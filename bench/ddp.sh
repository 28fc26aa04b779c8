#!/usr/bin/env bash
# bench/ddp.sh: data parallelism against the one-core monolith of the same config, measured in this
# one script (issue: data parallelism). 2 ranks: ddp naive, bucketed, bucketed + --zero 1, the
# bucketed ring, and bucketed and --zero 1 over shm; then MPI_Allreduce vs the ring vs shm on a
# 64 MiB buffer (micropp allreduce). Targets on
# configs/medium.json: bucketed >= 1.5x the monolith and faster than naive, --zero 1 >= 1.7x, ring
# within 1.3x of MPI_Allreduce's time.
#   bash bench/ddp.sh                                             # the figures (a few minutes)
#   CONFIG=/tmp/tiny.json STEPS=3 REPS=1 SIZE=1M bash bench/ddp.sh   # a quick check of the script
source "$(dirname "$0")/lib.sh"
RESULTS=${RESULTS:-$ROOT/bench/results/ddp.jsonl}
: > "$RESULTS"
CONFIG=${CONFIG:-$ROOT/configs/medium.json}
STEPS=${STEPS:-12}
SIZE=${SIZE:-64M}
ITERS=${ITERS:-20}
C="--config $CONFIG --steps $STEPS --log-every 0 --threads 1"
# The reps go round the jobs (job 1..8, then again), so a slow spell of the shared machine falls
# on every job alike rather than on one.
for ((rep = 0; rep < REPS; rep++)); do
    REPS=1 measure ddp-monolith 1 $C --mode monolith > /dev/null
    REPS=1 measure ddp-naive 2 $C --mode ddp --ddp-sync naive --allreduce mpi > /dev/null
    REPS=1 measure ddp-bucketed 2 $C --mode ddp --ddp-sync bucketed --allreduce mpi > /dev/null
    REPS=1 measure ddp-zero1 2 $C --mode ddp --ddp-sync bucketed --zero 1 --allreduce mpi > /dev/null
    REPS=1 measure ddp-bucketed-ring 2 $C --mode ddp --ddp-sync bucketed --allreduce ring > /dev/null
    REPS=1 measure ddp-naive-shm 2 $C --mode ddp --ddp-sync naive --allreduce shm > /dev/null
    REPS=1 measure ddp-bucketed-shm 2 $C --mode ddp --ddp-sync bucketed --allreduce shm > /dev/null
    REPS=1 measure ddp-zero1-shm 2 $C --mode ddp --ddp-sync bucketed --zero 1 --allreduce shm > /dev/null
done
out=$(mpiexec -n 2 "$MICROPP" allreduce --size "$SIZE" --iters "$ITERS" --warmup 3 --json)
printf '{"label": "allreduce", "ranks": 2, "result": %s}\n' "$out" >> "$RESULTS"
python3 - "$RESULTS" "$CONFIG" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    runs.setdefault(r["label"], []).append(r["result"])
def med(label):  # the rep whose median step time is the median of the reps
    rs = runs[label]
    ms = statistics.median(r["step_ms_median"] for r in rs)
    return min(rs, key=lambda r: abs(r["step_ms_median"] - ms))
mono = med("ddp-monolith")
print(f"# {sys.argv[2]}: {mono['layers']} x {mono['hidden']} hidden, batch {mono['batch']}, {mono['params']:.0f} parameters, "
      f"{mono['optimizer']}, {mono['steps']} steps x {len(runs['ddp-monolith'])} runs, {mono['blas']}")
print(f"{'job':40s} {'step ms':>8s} {'samples/s':>10s} {'speedup':>8s} {'comm ms':>8s} {'hidden':>7s} {'buckets':>8s} {'optim MB/rank':>14s}")
for label, name in [("ddp-monolith", "monolith (1 core)"), ("ddp-naive", "ddp naive, mpi (2 ranks)"),
                    ("ddp-bucketed", "ddp bucketed, mpi (2 ranks)"), ("ddp-zero1", "ddp bucketed, mpi, --zero 1 (2 ranks)"),
                    ("ddp-bucketed-ring", "ddp bucketed, ring (2 ranks)"), ("ddp-naive-shm", "ddp naive, shm (2 ranks)"),
                    ("ddp-bucketed-shm", "ddp bucketed, shm (2 ranks)"),
                    ("ddp-zero1-shm", "ddp bucketed, shm, --zero 1 (2 ranks)")]:
    r = med(label)
    dp = "dp" in r
    print(f"{name:40s} {r['step_ms_median']:8.1f} {r['samples_per_s']:10.0f} {mono['step_ms_median'] / r['step_ms_median']:7.2f}x "
          + (f"{r['comm_ms']:8.1f} {r['comm_hidden_fraction']:7.2f} {r['bucket_count']:8.0f} {r['optimizer_bytes_per_rank'] / 1e6:14.1f}" if dp else
             f"{'-':>8s} {'-':>7s} {'-':>8s} {'-':>14s}"))
a = runs["allreduce"][0]
t = {x["algo"]: x for x in a["results"]}
m, g, h = t["mpi"], t["ring"], t["shm"]
print(f"\n# all-reduce of {m['bytes'] / 2**20:g} MiB over {a['ranks']} ranks: median of the slowest rank (GB = 1e9 B)")
print(f"{'algo':6s} {'time ms':>9s} {'busbw GB/s':>11s} {'#wrong':>7s}")
for x in (m, g, h):
    print(f"{x['algo']:6s} {x['time_us'] / 1e3:9.2f} {x['busbw_gbs']:11.3f} {x['wrong']:7.0f}")
print(f"ring / MPI_Allreduce time: {g['time_us'] / m['time_us']:.2f}x; shm / MPI_Allreduce time: {h['time_us'] / m['time_us']:.2f}x")
PY
echo "# raw runs: $RESULTS"
