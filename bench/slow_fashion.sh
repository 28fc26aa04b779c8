#!/usr/bin/env bash
# bench/slow_fashion.sh: issue 36's Fashion-MNIST on slow hosts (minutes, root only, not a test): 2 network
# namespaces whose links tc holds to RATE (tests/slowhosts.sh), a rank on each, configs/fashion.json's
# recipe on a 784 -> 2 x 256 -> 10 model for 10 epochs, evaluated every 117 steps: ddp (bucketed, MPI's
# all-reduce across the hosts) against local SGD (--sync-every H, the default outer Nesterov, and H 8 as
# the plain mean). Each run's --metrics log is OUT/NAME.jsonl; OUT/summary.txt has, per run, the seconds
# of steps (the sum of step_ms) to 0.89 test accuracy and the final accuracy; OUT/curves.svg draws them
# against those seconds (micropp plot --x time).
#
#   bench/slow_fashion.sh [OUT] (bench/results/slow_fashion; RATE=100mbit, EPOCHS=10, MICROPP=./micropp,
#   HOSTS=2: the hosts, a rank on each; RUNS="ddp h8 h8mean h32": which of the runs)
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/bench/results/slow_fashion}
MICROPP=${MICROPP:-$ROOT/micropp}
RATE=${RATE:-100mbit}
EPOCHS=${EPOCHS:-10}
HOSTS=${HOSTS:-2}
RUNS=${RUNS:-ddp h8 h8mean h32}
case $HOSTS in [2-8]) ;; *) echo "bench/slow_fashion.sh: HOSTS '$HOSTS' must be 2 to 8" >&2; exit 2 ;; esac
for r in $RUNS; do
    case $r in ddp | h8 | h8mean | h32) ;;
        *) echo "bench/slow_fashion.sh: RUNS names '$r': the runs are ddp, h8, h8mean and h32" >&2; exit 2 ;; esac
done
mkdir -p "$OUT" || exit 1
C=(train --config "$ROOT/configs/fashion.json" --layers 2 --hidden 256 --dp "$HOSTS" --epochs "$EPOCHS" --log-every 0
   --eval-every 117)
one() {
    local name=$1; shift
    echo "== $name $(date -u +%T)"
    "$ROOT/tests/slowhosts.sh" --hosts "$HOSTS" --ppn 1 --rate "$RATE" -- -n "$HOSTS" "$MICROPP" "${C[@]}" \
        --metrics "$OUT/$name.jsonl" "$@" 2>&1 | grep -E "^epoch|^final|median|^local SGD|^gradient sync|slowhosts"
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "bench/slow_fashion.sh: the $name run failed" >&2; exit 1; }
}
logs=()
for r in $RUNS; do
    case $r in
        ddp) one ddp ;;
        h8) one h8 --sync-every 8 ;;
        h8mean) one h8mean --sync-every 8 --outer-lr 1 --outer-momentum 0 ;;
        h32) one h32 --sync-every 32 ;;
    esac
    logs+=("$OUT/$r.jsonl")
done
python3 - "${logs[@]}" <<'EOF' | tee "$OUT/summary.txt"
import json, sys
for path in sys.argv[1:]:
    ms, evals = {}, []
    for line in open(path):
        d = json.loads(line)
        if "step_ms" in d: ms[d["step"]] = d["step_ms"]
        elif "accuracy" in d: evals.append((d["step"], d["accuracy"]))
    cum, s = {}, 0.0
    for k in sorted(ms): s += ms[k] / 1e3; cum[k] = s
    hit = next((st for st, a in evals if a >= 0.89), None)
    at = "%.1f s of steps (step %d)" % (cum[hit], hit) if hit else "not reached"
    print("%-7s 0.89 after %s | all steps %.1f s | final accuracy %.4f" % (path.split("/")[-1][:-6], at, s,
                                                                         evals[-1][1]))
EOF
"$MICROPP" plot "${logs[@]}" --x time --svg "$OUT/curves.svg"
