#!/usr/bin/env bash
# bench/pipeline.sh: 2-rank pipelines against the one-core monolith of the same config, measured in
# this one script (issue: pipeline). Targets: configs/pipeline.json 1F1B >= 1.6x the monolith; the
# seed config (H=128, B=32, M=8) <= 1 ms/step; measured bubble within 0.05 of theory for M = 2..16.
source "$(dirname "$0")/lib.sh"
RESULTS=${RESULTS:-$ROOT/bench/results/pipeline.jsonl}
: > "$RESULTS"
STEPS=${STEPS:-6}
P="--config $ROOT/configs/pipeline.json --steps $STEPS --log-every 0"
read -r mono_ms _ mono_gf < <(measure pipeline-monolith 1 $P --mode monolith)
read -r pp_ms _ pp_gf < <(measure pipeline-1f1b 2 $P --schedule 1f1b --micro-batches 8)
M="--config $ROOT/configs/medium.json --steps 12 --log-every 0"
read -r mm_ms _ mm_gf < <(measure medium-monolith 1 $M)
read -r mp_ms _ mp_gf < <(measure medium-1f1b 2 $M --mode pp --schedule 1f1b --micro-batches 8)
read -r seed_ms _ _ < <(measure seed-1f1b 2 --mode pp --schedule 1f1b --micro-batches 8 --steps 300 --log-every 0)
printf '\n%-34s %10s %9s %8s\n' "job" "step ms" "GFLOP/s" "speedup"
printf '%-34s %10s %9s %8s\n' "pipeline.json monolith (1 core)" "$mono_ms" "$mono_gf" "1.00"
printf '%-34s %10s %9s %8.2f\n' "pipeline.json 1f1b M=8 (2 ranks)" "$pp_ms" "$pp_gf" "$(python3 -c "print($mono_ms/$pp_ms)")"
printf '%-34s %10s %9s %8s\n' "medium.json monolith (1 core)" "$mm_ms" "$mm_gf" "1.00"
printf '%-34s %10s %9s %8.2f\n' "medium.json 1f1b M=8 (2 ranks)" "$mp_ms" "$mp_gf" "$(python3 -c "print($mm_ms/$mp_ms)")"
printf '%-34s %10s\n' "seed H=128 B=32 1f1b M=8 (2 ranks)" "$seed_ms"
echo
printf '%-8s %-4s %10s %16s %14s %8s\n' schedule M "step ms" "bubble measured" "bubble theory" "|diff|"
for sched in gpipe 1f1b; do for m in 2 4 8 16; do
    out=$(mpiexec -n 2 "$MICROPP" train $P --schedule $sched --micro-batches $m --json)
    printf '{"label": "bubble-%s-%d", "ranks": 2, "result": %s}\n' "$sched" "$m" "$out" >> "$RESULTS"
    python3 - "$out" "$sched" "$m" <<'PY'
import json, sys
d = json.loads(sys.argv[1]); b = sum(d["bubble_measured"]) / len(d["bubble_measured"])
print("%-8s %-4s %10.1f %16.3f %14.3f %8.3f" % (sys.argv[2], sys.argv[3], d["step_ms_median"], b, d["bubble_theory"], abs(b - d["bubble_theory"])))
PY
done; done
echo "# raw runs: $RESULTS"
