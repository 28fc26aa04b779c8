#!/usr/bin/env bash
# bench/ddp.sh: data parallelism on this machine in ONE run: the one-core monolith of a config
# (default configs/medium.json) against 2-rank ddp (naive, bucketed, bucketed + ZeRO-1, and the
# bucketed ring), each rank bound to its own core; then MPI_Allreduce against the ring on a 64 MiB
# buffer (micropp allreduce). Step time = median over the steps after the first (slowest rank).
#
#   bash bench/ddp.sh                              # the figures for the issue (~1-2 minutes)
#   STEPS=3 SIZE=1M bash bench/ddp.sh configs/x.json   # a quick check on a tiny config
#
# Env: MICROPP (binary), STEPS (default 20), SIZE (all-reduce buffer, default 64M), ITERS (default 20).
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=${1:-configs/medium.json}
MICROPP=${MICROPP:-./micropp}
STEPS=${STEPS:-20}
SIZE=${SIZE:-64M}
ITERS=${ITERS:-20}
export MPIEXEC_TIMEOUT=${MPIEXEC_TIMEOUT:-1200}
[ -x "$MICROPP" ] || { echo "bench/ddp.sh: $MICROPP not built: run make" >&2; exit 1; }
[ -f "$CONFIG" ] || { echo "bench/ddp.sh: no config $CONFIG" >&2; exit 1; }
TMP=$(mktemp -d /tmp/micropp-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

# name ranks args...: one training run, its JSON saved as $TMP/name.json
train() {
    local name=$1 n=$2; shift 2
    mpiexec -n "$n" -bind-to core "$MICROPP" train --config "$CONFIG" --steps "$STEPS" --threads 1 \
        --log-every 0 --json "$@" > "$TMP/$name.json"
}

echo "# bench/ddp.sh: $CONFIG, $STEPS steps, $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ)"
train monolith 1
train naive 2 --mode ddp --ddp-sync naive
train bucketed 2 --mode ddp --ddp-sync bucketed
train zero1 2 --mode ddp --ddp-sync bucketed --zero 1
train ring 2 --mode ddp --ddp-sync bucketed --allreduce ring
mpiexec -n 2 -bind-to core "$MICROPP" allreduce --size "$SIZE" --iters "$ITERS" --warmup 3 --json > "$TMP/allreduce.json"

python3 - "$TMP" <<'PY'
import json, sys, os
d = sys.argv[1]
runs = [("monolith", "monolith, 1 core"), ("naive", "ddp 2 ranks, naive, mpi"),
        ("bucketed", "ddp 2 ranks, bucketed, mpi"), ("zero1", "ddp 2 ranks, bucketed, mpi, --zero 1"),
        ("ring", "ddp 2 ranks, bucketed, ring")]
res = {k: json.load(open(os.path.join(d, k + ".json"))) for k, _ in runs}
base = res["monolith"]["step_ms_median"]
p = res["monolith"]
print(f"# model: {p['layers']} x {p['hidden']} hidden, batch {p['batch']}, {p['params']:.0f} parameters, {p['optimizer']}, {p['blas']}")
print(f"{'run':40s} {'step_ms':>9s} {'samples/s':>10s} {'speedup':>8s} {'comm_ms':>8s} {'hidden':>7s} {'buckets':>8s} {'opt_MB/rank':>11s} {'final_loss':>11s}")
for k, label in runs:
    r = res[k]
    dp = "dp" in r
    print(f"{label:40s} {r['step_ms_median']:9.2f} {r['samples_per_s']:10.0f} {base / r['step_ms_median']:7.2f}x "
          f"{r['comm_ms'] if dp else 0:8.2f} {r['comm_hidden_fraction'] if dp else 0:7.2f} {r['bucket_count'] if dp else 0:8.0f} "
          f"{(r['optimizer_bytes_per_rank'] if dp else 0) / 1e6:11.1f} {r['final_loss']:11.6f}")
a = json.load(open(os.path.join(d, "allreduce.json")))
t = {x["algo"]: x for x in a["results"]}
m, g = t["mpi"], t["ring"]
print(f"# all-reduce of {m['bytes'] / 2**20:.0f} MiB over {a['ranks']} ranks (median of the slowest rank; busbw GB = 1e9 B)")
print(f"{'algo':8s} {'time_ms':>9s} {'busbw_GB/s':>11s} {'wrong':>6s}")
for x in (m, g):
    print(f"{x['algo']:8s} {x['time_us'] / 1e3:9.2f} {x['busbw_gbs']:11.3f} {x['wrong']:6.0f}")
print(f"ring / MPI_Allreduce time: {g['time_us'] / m['time_us']:.2f}x")
PY
