#!/usr/bin/env bash
# bench/tp.sh: tensor parallelism against the monolith on one machine, measured in one run.
# configs/medium.json (16 x Linear(1024,1024), batch 256) three ways, REPS times each, taking turns
# inside one loop (so a drift of a shared machine's load falls on all three alike):
#   mono-1t   micropp train (one rank, one BLAS thread)
#   mono-2t   micropp train --threads 2 (one rank, two BLAS threads: what 2 cores give one process)
#   tp-2      mpiexec -n 2 micropp train --tp 2 (two ranks of one thread, the all-reduce over shm)
#   pp-2      mpiexec -n 2 micropp train --mode pp --schedule 1f1b --micro-batches 8 (the other way to
#             split the model over two ranks: by layers, with a bubble)
#   tp-2-b16, pp-2-b16  the same two on a batch of 16 rows (pp: 4 micro-batches of 4), where the
#             all-reduces are small and many and the pipeline's bubble is short in time
#   tp-2-narrow, pp-2-narrow  the same two on a narrow model (16 x 128 wide, batch 2048; pp: 4
#             micro-batches), where a layer's product is short beside the all-reduce's fixed cost
# and the pipeline's message between two tensor-parallel groups both ways, on pp 2 x tp 2 (4 ranks)
# with a model whose messages weigh (4 x 1024 wide, batch 512 in 8 micro-batches of 64 rows):
#   msg-full  --tp-message full   every rank sends the whole activation (and gradient) to its counterpart
#   msg-slice --tp-message slice  each sends its half, the receiving group all-gathers
# A run's figure is its samples_per_s (micropp's, from the median step, the first left out); a way's
# figure is the median of its REPS runs. Printed: each way's samples/s, tp-2's ratios to mono-1t and
# mono-2t, tp-2's all-reduce share of the step (tp_allreduce_share, its median), tp-2 / pp-2 at both
# batches (above 1: tensor parallelism beats the pipeline there), msg-slice / msg-full
# (the 4-rank ways oversubscribe a 2-core machine: compare them with each other only). Lines that are not
# data start with '#'. Exit 0 whatever the figures; 2 for bad input; 1 when a run fails.
#   bash bench/tp.sh          # 3 reps, STEPS=8 steps each
#   bash bench/tp.sh 5        # more reps on a noisy machine
#   STEPS=2 CONFIG=small.json bash bench/tp.sh 1   # a quick check of the script (tests/t_benches.sh)
#
# --tcp: the group's all-reduce across two hosts. Hydra's fake hosts (-launcher fork -hosts
# nodeA:1,nodeB:1) put the two ranks on two nodes, so micropp's shm window (one node only) is out and
# --allreduce auto sums over MPI; UCX_TLS=tcp,self makes MPI's bytes go through TCP (loopback), not
# UCX's shared memory (docs/several-machines.md). Taking turns, REPS times:
#   mono-1t   micropp train (one rank, one BLAS thread)
#   tp-shm    mpiexec -n 2 ... --tp 2 on one node: the all-reduce through the shm window
#   tp-mpi    the same with --allreduce mpi: MPI on one node (UCX's shared memory)
#   tp-tcp    the same on the two fake hosts: MPI over TCP (checked: 2 nodes, all-reduce mpi)
#   pp-tcp    the pipeline on the same two hosts (--mode pp --schedule 1f1b --micro-batches 8): the
#             other way to split the model over them, one activation and one gradient per micro-batch
#   link      micropp pingpong on the two fake hosts over TCP: a 1 KiB and a 1 MiB message
#   coll      micropp allreduce --algo mpi of 1 MiB (one of the step's all-reduces) on the fake hosts,
#             alone: the collective's own time, no compute around it
# Printed: each way's samples/s, tp_allreduce_share and all-reduce ms per step (medians), the link's
# latency and bandwidth, and the all-reduce bytes per step priced at the link and at coll's time. The
# tp ways run with --trace: each all-reduce of the two ranks (steps 2.., paired in order) splits into
# the time both were inside, the shorter of the two spans (the rank that came last waits for no one),
# and the first rank's wait for the other, the difference of the spans (no clock compared across
# ranks: both leave an all-reduce of two at about the same time); per step, medians over the runs.
#   bash bench/tp.sh --tcp 3
set -euo pipefail
TCP=0
if [ "${1:-}" = --tcp ]; then TCP=1; shift; fi
REPS=${1:-3}
[[ $REPS =~ ^[1-9][0-9]*$ ]] || { echo "tp.sh: REPS must be a positive integer, not '$REPS'" >&2; exit 2; }
STEPS=${STEPS:-8}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MICROPP=${MICROPP:-$ROOT/micropp}
[ -x "$MICROPP" ] || { echo "tp.sh: $MICROPP is missing: run make" >&2; exit 2; }
CONFIG=${CONFIG:-$ROOT/configs/medium.json}  # (tests/t_benches.sh runs the script on a small one)
[ -r "$CONFIG" ] || { echo "tp.sh: CONFIG '$CONFIG' is not a readable file: name a model config" >&2; exit 2; }
ARGS=(train --config "$CONFIG" --steps "$STEPS" --log-every 0 --json)
NARROW=(train --layers 16 --hidden 128 --inputs 128 --batch 2048 --steps "$((STEPS * 4))" --log-every 0 --json)
RAW=$(mktemp "${TMPDIR:-/tmp}/micropp-tp.XXXXXX")
TRACES=$(mktemp -d "${TMPDIR:-/tmp}/micropp-tp-traces.XXXXXX")
trap 'rm -rf "$RAW" "$TRACES"' EXIT

MODE=""
[ $TCP = 1 ] && MODE=" --tcp"
echo "# bench/tp.sh$MODE: ${CONFIG#"$ROOT"/}, $STEPS steps, $REPS reps, $(nproc) cores; $(date -u +%FT%TZ)"
echo "# load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ $TCP = 1 ]; then
    HOSTS=(env UCX_TLS=tcp,self mpiexec -launcher fork -hosts nodeA:1,nodeB:1 -n 2 "$MICROPP")
    for ((r = 0; r < REPS; r++)); do
        for way in mono-1t tp-shm tp-mpi tp-tcp pp-tcp link coll; do
            case $way in
            mono-1t) out=$("$MICROPP" "${ARGS[@]}") ;;
            tp-shm) out=$(mpiexec -n 2 "$MICROPP" "${ARGS[@]}" --tp 2 --trace "$TRACES/$way-$r.json") ;;
            tp-mpi) out=$(mpiexec -n 2 "$MICROPP" "${ARGS[@]}" --tp 2 --allreduce mpi --trace "$TRACES/$way-$r.json") ;;
            tp-tcp) out=$("${HOSTS[@]}" "${ARGS[@]}" --tp 2 --trace "$TRACES/$way-$r.json") ;;
            pp-tcp) out=$("${HOSTS[@]}" "${ARGS[@]}" --mode pp --schedule 1f1b --micro-batches 8) ;;
            link) out=$("${HOSTS[@]}" pingpong -b 1K -e 1M -f 1024 -n 200 --json) ;;
            coll) out=$("${HOSTS[@]}" allreduce -b 1M -n 50 --algo mpi --json) ;;
            esac || { echo "tp.sh: the $way run failed" >&2; exit 1; }
            printf '%s %s\n' "$way" "$out" >>"$RAW"
        done
    done
    python3 - "$RAW" "$TRACES" <<'EOF'
import glob, json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    way, obj = line.split(" ", 1)
    runs.setdefault(way, []).append(json.loads(obj))
for r in runs["tp-tcp"]:  # the group across the two hosts, summed over MPI
    if r.get("nodes") != 2 or r.get("tp_allreduce") != "mpi":
        sys.exit("tp.sh: tp-tcp ran on %r nodes with all-reduce %r, not 2 and mpi" % (r.get("nodes"), r.get("tp_allreduce")))
med = lambda w, k: statistics.median(r[k] for r in runs[w])
print("%-8s %12s %10s %14s   %s" % ("way", "samples/s", "all-reduce", "all-reduce ms", "runs (samples/s)"))
for w in ("mono-1t", "tp-shm", "tp-mpi", "tp-tcp", "pp-tcp"):
    tp = w.startswith("tp")
    print("%-8s %12.0f %10s %14s   %s" % (w, med(w, "samples_per_s"), "%.0f%%" % (100 * med(w, "tp_allreduce_share")) if tp else "-",
          "%.1f" % med(w, "tp_allreduce_ms_per_step") if tp else "-", " ".join("%.0f" % r["samples_per_s"] for r in runs[w])))
row = lambda r, size: next(x for x in r["rows"] if x["size_bytes"] == size)
lat_small = statistics.median(row(r, 1024)["latency_us"] for r in runs["link"])
lat_big = statistics.median(row(r, 1 << 20)["latency_us"] for r in runs["link"])
bw = statistics.median(row(r, 1 << 20)["bandwidth_gbs"] for r in runs["link"])
t = runs["tp-tcp"][0]
calls, nbytes = t["tp_allreduces_per_step"], t["tp_allreduce_bytes_per_step"]
print("link (pingpong over TCP, the fake hosts): 1 KiB %.1f us, 1 MiB %.0f us one way, %.3f GB/s streamed" % (lat_small, lat_big, bw))
print("all-reduce per step and rank: %g x %.2f MB = %.1f MB; at the link's 1 MiB time: %.0f ms; at its bandwidth: %.0f ms" %
      (calls, nbytes / calls / 1e6, nbytes / 1e6, calls * lat_big * (nbytes / calls) / (1 << 20) / 1e3, nbytes / (bw * 1e9) * 1e3))
coll = sorted(r["results"][0]["time_us"] for r in runs["coll"])
print("one 1 MiB MPI_Allreduce alone over TCP: %s us (median of 50, each run); x %g per step: %.0f ms (their median)" %
      (", ".join("%.0f" % c for c in coll), calls, calls * statistics.median(coll) / 1e3))
def split(path):  # per step: the first rank's wait for the other, and the time both were inside
    x = [e for e in json.load(open(path))["traceEvents"] if e["ph"] == "X" and e["cat"] == "tp all-reduce" and e["args"]["step"] >= 2]
    by = [sorted((e for e in x if e["pid"] == r), key=lambda e: e["ts"]) for r in (0, 1)]
    steps = len({e["args"]["step"] for e in x})
    wait = sum(abs(a["dur"] - b["dur"]) for a, b in zip(*by)) / 1e3 / steps
    inside = sum(min(a["dur"], b["dur"]) for a, b in zip(*by)) / 1e3 / steps
    return wait, inside
for w in ("tp-shm", "tp-mpi", "tp-tcp"):
    sp = [split(f) for f in sorted(glob.glob("%s/%s-*.json" % (sys.argv[2], w)))]
    print("%s all-reduce per step: %.0f ms waiting for the other rank, %.0f ms both inside (%.1f ms per all-reduce)" %
          (w, statistics.median(a for a, _ in sp), statistics.median(b for _, b in sp), statistics.median(b for _, b in sp) / calls))
print("across the two hosts: tp-tcp / pp-tcp = %.2fx (above 1: tensor parallelism is faster), pp-tcp / mono-1t = %.2fx" %
      (med("tp-tcp", "samples_per_s") / med("pp-tcp", "samples_per_s"), med("pp-tcp", "samples_per_s") / med("mono-1t", "samples_per_s")))
print("tp-tcp / tp-shm = %.2fx | tp-tcp / mono-1t = %.2fx | all-reduce ms/step: tp-tcp %.0f, tp-mpi %.0f, tp-shm %.0f" %
      (med("tp-tcp", "samples_per_s") / med("tp-shm", "samples_per_s"), med("tp-tcp", "samples_per_s") / med("mono-1t", "samples_per_s"),
       med("tp-tcp", "tp_allreduce_ms_per_step"), med("tp-mpi", "tp_allreduce_ms_per_step"), med("tp-shm", "tp_allreduce_ms_per_step")))
EOF
    echo "# load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
    exit 0
fi
for ((r = 0; r < REPS; r++)); do
    for way in mono-1t mono-2t tp-2 pp-2 tp-2-b16 pp-2-b16 tp-2-narrow pp-2-narrow msg-full msg-slice; do
        case $way in
        mono-1t) out=$("$MICROPP" "${ARGS[@]}") ;;
        mono-2t) out=$("$MICROPP" "${ARGS[@]}" --threads 2) ;;
        tp-2) out=$(mpiexec -n 2 "$MICROPP" "${ARGS[@]}" --tp 2) ;;
        pp-2) out=$(mpiexec -n 2 "$MICROPP" "${ARGS[@]}" --mode pp --schedule 1f1b --micro-batches 8) ;;
        tp-2-b16) out=$(mpiexec -n 2 "$MICROPP" "${ARGS[@]}" --batch 16 --tp 2) ;;
        pp-2-b16) out=$(mpiexec -n 2 "$MICROPP" "${ARGS[@]}" --batch 16 --mode pp --schedule 1f1b --micro-batches 4) ;;
        tp-2-narrow) out=$(mpiexec -n 2 "$MICROPP" "${NARROW[@]}" --tp 2) ;;
        pp-2-narrow) out=$(mpiexec -n 2 "$MICROPP" "${NARROW[@]}" --mode pp --schedule 1f1b --micro-batches 4) ;;
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
for w in ("mono-1t", "mono-2t", "tp-2", "pp-2", "tp-2-b16", "pp-2-b16", "tp-2-narrow", "pp-2-narrow", "msg-full", "msg-slice"):
    print("%-8s %12.0f %10s" % (w, med[w], " ".join("%.0f" % r["samples_per_s"] for r in runs[w])))
print("tp-2 / mono-1t = %.2fx | tp-2 / mono-2t = %.2fx | tp-2's all-reduce: %.0f%% of the step" %
      (med["tp-2"] / med["mono-1t"], med["tp-2"] / med["mono-2t"], 100 * share))
print("tp-2 / pp-2 = %.2fx at batch 256 | %.2fx at batch 16 | %.2fx narrow (above 1: tensor parallelism is faster)" %
      (med["tp-2"] / med["pp-2"], med["tp-2-b16"] / med["pp-2-b16"], med["tp-2-narrow"] / med["pp-2-narrow"]))
print("pp 2 x tp 2: msg-slice / msg-full = %.2fx (above 1: slicing the message is faster)" % (med["msg-slice"] / med["msg-full"]))
EOF
echo "# load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
