#!/usr/bin/env bash
# bench/crossover.sh: issue 36's crossover, measured against the planner's (minutes, root only, not a test): 2
# network namespaces of one rank each (tests/slowhosts.sh), their links held in turn to each of RATES Mb/s;
# at each rate ddp (bucketed, MPI's all-reduce) and --compress METHOD take turns, STEPS steps each, and
# their step medians give the measured crossover (interpolated in 1/rate where the difference changes sign:
# bench/crossover.py); beside it the crossover line of `plan --profile PROFILE ... --compress METHOD` on the
# same model, and the ratio; where it calibrated the profile itself, a second calibration after the runs and its
# prediction (the load of a shared machine moves both). OUT/rows.txt has "RATE RUN MEDIAN_MS" lines,
# OUT/RATE-RUN.log each run's output, OUT/plan.txt (plan-after.txt) the plan's, OUT/summary.txt the table and
# the lines.
#
#   bench/crossover.sh [--dry-run] [OUT]   (bench/results/crossover)
#   RATES="100 150 200 300 400 550" METHOD=powersgd:128 STEPS=12 MODEL="--config configs/medium.json --layers 2"
#   (RATES: whole Mb/s, 2 or more; a bad RATES or STEPS: one line, exit 2)
#   PROFILE=FILE (default: calibrated here first, OUT/profile.json: mpiexec -n 2 micropp plan --calibrate)
#
# --dry-run prints the runs it would make and the plan's line (PROFILE default then
# configs/profiles/cpu-2ranks.json), without root and without runs. Not root: one line, exit 3.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
dry=0
[ "${1:-}" = --dry-run ] && { dry=1; shift; }
case ${1:-} in -*) echo "bench/crossover.sh: unknown argument '$1': see the usage at the top of $0" >&2; exit 2 ;; esac
OUT=${1:-$ROOT/bench/results/crossover}
MICROPP=${MICROPP:-$ROOT/micropp}
RATES=${RATES:-100 150 200 300 400 550}
METHOD=${METHOD:-powersgd:128}
STEPS=${STEPS:-12}
read -r -a M <<<"${MODEL:---config $ROOT/configs/medium.json --layers 2}"
PROFILE=${PROFILE:-}
case $STEPS in ''|*[!0-9]*|0) echo "bench/crossover.sh: STEPS must be a positive integer, not '$STEPS'" >&2; exit 2 ;; esac
n_rates=0
for rate in $RATES; do
    case $rate in ''|*[!0-9]*|0) echo "bench/crossover.sh: RATES must be whole Mb/s above 0 (as 100 150 200), not '$rate'" >&2; exit 2 ;; esac
    n_rates=$((n_rates + 1))
done
[ $n_rates -ge 2 ] || { echo "bench/crossover.sh: RATES must name 2 rates or more, not '$RATES'" >&2; exit 2; }
[ $dry = 1 ] && [ -z "$PROFILE" ] && PROFILE=$ROOT/configs/profiles/cpu-2ranks.json
[ $dry = 1 ] || [ "$(id -u)" = 0 ] || { echo "bench/crossover.sh: unavailable: not root (the hosts are network namespaces)" >&2; exit 3; }
mkdir -p "$OUT" || exit 1
: > "$OUT/rows.txt"

calibrated=0
calibrate() {  # calibrate FILE: a profile of this model on 2 ranks here
    echo "== calibrate $(date -u +%T)"
    mpiexec -n 2 "$MICROPP" plan --calibrate "${M[@]}" --out "$1" > "$1.log" 2>&1 ||
        { echo "bench/crossover.sh: the calibration failed: $(tail -n 3 "$1.log")" >&2; exit 1; }
}
predict() {  # predict PROFILE FILE: the plan's output on the profile, its crossover line shown
    "$MICROPP" plan --profile "$1" --world 2 "${M[@]}" --mode ddp --compress "$METHOD" --device-memory 8G \
        > "$2" 2>&1 || { echo "bench/crossover.sh: the plan failed: $(tail -n 3 "$2")" >&2; exit 1; }
    grep '^crossover:' "$2"
}
[ -z "$PROFILE" ] && { PROFILE=$OUT/profile.json; calibrated=1; calibrate "$PROFILE"; }
predict "$PROFILE" "$OUT/plan.txt"

T=(train "${M[@]}" --dp 2 --allreduce mpi --steps "$STEPS" --log-every 0)
one() {  # one RATE NAME ARGS...: a run on the hosts at RATE Mb/s, its median in rows.txt
    local rate=$1 name=$2; shift 2
    local cmd=("$ROOT/tests/slowhosts.sh" --hosts 2 --ppn 1 --rate "${rate}mbit" -- -n 2 "$MICROPP" "${T[@]}" "$@")
    if [ $dry = 1 ]; then echo "run $rate $name: ${cmd[*]}"; return 0; fi
    "${cmd[@]}" > "$OUT/$rate-$name.log" 2>&1 ||
        { echo "bench/crossover.sh: the $name run at $rate Mb/s failed: $(tail -n 3 "$OUT/$rate-$name.log")" >&2; exit 1; }
    local ms
    ms=$(python3 "$ROOT/bench/crossover.py" median "$OUT/$rate-$name.log") || exit 1
    echo "$rate $name $ms" | tee -a "$OUT/rows.txt"
}
for rate in $RATES; do
    [ $dry = 1 ] || echo "== $rate Mb/s $(date -u +%T)"
    one "$rate" ddp
    one "$rate" "$METHOD" --compress "$METHOD"
done
[ $dry = 1 ] && exit 0
after=()
if [ $calibrated = 1 ]; then
    calibrate "$OUT/profile-after.json"
    predict "$OUT/profile-after.json" "$OUT/plan-after.txt"
    after=("$OUT/plan-after.txt")
fi
python3 "$ROOT/bench/crossover.py" summary "$OUT/rows.txt" "$OUT/plan.txt" "${after[@]}" | tee "$OUT/summary.txt"
exit "${PIPESTATUS[0]}"
