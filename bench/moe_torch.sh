#!/usr/bin/env bash
# bench/moe_torch.sh: micropp's mixture-of-experts model against the same model in PyTorch
# (bench/moe_torch.py: the same shape, routing rule, Adam and one thread per process), per-step time:
# one core (both one process, one thread), and 2 ranks (micropp mpiexec -n 2 with --mode ddp and with
# --dp 2 --ep 2; PyTorch two processes over torch.distributed gloo, DDP). Prints a table with the
# ratio PyTorch / micropp (above 1: micropp faster). Each side runs REPS times, interleaved, and the
# median of the runs' median step times is kept. Every JSON line goes to $RESULTS.
#   bash bench/moe_torch.sh                                  # Fashion-MNIST's shape, 4 experts, top-2
#   STEPS=6 REPS=1 SHAPE="--layers 3 --hidden 64" bash bench/moe_torch.sh   # a quick check of the script
source "$(dirname "$0")/lib.sh"
RESULTS=${RESULTS:-$ROOT/bench/results/moe_torch.jsonl}
: > "$RESULTS"
PYTHON=${PYTHON:-/usr/bin/python3}
STEPS=${STEPS:-30}
SHAPE=${SHAPE:-"--layers 4 --hidden 512"}
MOE="--inputs 784 --classes 10 --batch 128 --experts 4 --top-k 2 --capacity-factor 1.25 --aux-loss 0.01"
if ! "$PYTHON" -c 'import torch' 2>/dev/null; then
    echo "moe_torch.sh: no PyTorch for $PYTHON (apt-get install python3-torch, or PYTHON=...)" >&2
    exit 2
fi
# shellcheck disable=SC2086  # (SHAPE and MOE: words)
C="$SHAPE $MOE --steps $STEPS --log-every 0 --eval-samples 0 --threads 1"
torch() {  # torch LABEL ARGS...: one line of $RESULTS
    local label=$1 out; shift
    # shellcheck disable=SC2086
    out=$("$PYTHON" "$ROOT/bench/moe_torch.py" $SHAPE $MOE --steps "$STEPS" --threads 1 "$@" 2>/dev/null | tail -1)
    printf '{"label": "%s", "result": %s}\n' "$label" "$out" >> "$RESULTS"
}
echo "# $(date -u +%FT%TZ) | $(nproc) cores | load average $(cut -d' ' -f1-3 /proc/loadavg) (other jobs slow every figure)"
echo "# model: $SHAPE $MOE | $STEPS steps | $("$PYTHON" -c 'import torch; print("torch", torch.__version__)')"
for ((rep = 0; rep < REPS; rep++)); do  # (the reps go round the jobs, so a slow spell falls on all alike)
    # shellcheck disable=SC2086
    REPS=1 measure micropp-1 1 $C > /dev/null
    torch torch-1 --ranks 1
    # shellcheck disable=SC2086
    REPS=1 measure micropp-ddp2 2 $C --mode ddp > /dev/null
    # shellcheck disable=SC2086
    REPS=1 measure micropp-ep2 2 $C --dp 2 --ep 2 > /dev/null
    torch torch-ddp2 --ranks 2
done
python3 - "$RESULTS" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    runs.setdefault(r["label"], []).append(r["result"]["step_ms_median"])
ms = {k: statistics.median(v) for k, v in runs.items()}
print("%-48s %12s %12s %8s" % ("setup", "micropp ms", "torch ms", "ratio"))
for name, mine, theirs in (("one core (1 process, 1 thread)", "micropp-1", "torch-1"),
                           ("2 ranks: micropp --mode ddp, torch gloo DDP", "micropp-ddp2", "torch-ddp2"),
                           ("2 ranks: micropp --dp 2 --ep 2, torch gloo DDP", "micropp-ep2", "torch-ddp2")):
    print("%-48s %12.2f %12.2f %7.2fx" % (name, ms[mine], ms[theirs], ms[theirs] / ms[mine]))
print("# ratio = PyTorch's step time / micropp's (above 1: micropp faster); medians of %d run(s) each"
      % len(runs["micropp-1"]))
PY
