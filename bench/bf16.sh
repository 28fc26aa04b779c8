#!/usr/bin/env bash
# bench/bf16.sh: --precision bf16 against fp32 in one script (issue 15): samples/s of the medium
# monolith and of configs/pipeline.json 1F1B on 2 ranks (fp32 and bf16 runs alternate, REPS each,
# medians, so both see the same load), and the loss after 50 steps on the default and medium configs
# (bf16 within 2% of fp32). Exit 1 when a loss is off by more; the speed ratios are reported, not
# judged: they depend on whether this CPU has AVX512_BF16 (the header's note says when it has not).
source "$(dirname "$0")/lib.sh"
RESULTS=${RESULTS:-$ROOT/bench/results/bf16.jsonl}
: > "$RESULTS"
STEPS=${STEPS:-6}

# pair LABEL NRANKS ARGS...: REPS alternating fp32/bf16 runs; prints "fp32_samples_s bf16_samples_s ratio kernel".
pair() {
    local label=$1 n=$2; shift 2
    local run=("$MICROPP" train "$@" --json)
    [ "$n" -gt 1 ] && run=(mpiexec -n "$n" "${run[@]}")
    for ((i = 0; i < REPS; i++)); do
        for p in fp32 bf16; do
            printf '{"label": "%s-%s", "ranks": %d, "result": %s}\n' "$label" "$p" "$n" "$("${run[@]}" --precision $p)" >> "$RESULTS"
        done
    done
    python3 - "$RESULTS" "$label" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
med = {p: statistics.median(r["result"]["samples_per_s"] for r in rows if r["label"] == sys.argv[2] + "-" + p) for p in ("fp32", "bf16")}
kernel = next((r["result"].get("onednn", "?") for r in rows if r["label"] == sys.argv[2] + "-bf16"), "?")
print("%.1f %.1f %.2f %s" % (med["fp32"], med["bf16"], med["bf16"] / med["fp32"], kernel.replace(" ", "_")))
PY
}

# loss50 LABEL ARGS...: final loss after 50 steps in fp32 and bf16; prints "fp32 bf16 rel_diff".
loss50() {
    local label=$1; shift
    local f b
    f=$("$MICROPP" train "$@" --steps 50 --log-every 0 --json)
    b=$("$MICROPP" train "$@" --steps 50 --log-every 0 --json --precision bf16)
    printf '{"label": "%s-fp32", "ranks": 1, "result": %s}\n{"label": "%s-bf16", "ranks": 1, "result": %s}\n' "$label" "$f" "$label" "$b" >> "$RESULTS"
    python3 -c 'import json,sys; f,b=(json.loads(a)["final_loss"] for a in sys.argv[1:]); print("%.5f %.5f %.4f" % (f, b, abs(b-f)/abs(f)))' "$f" "$b"
}

echo "# $(uptime | sed 's/^ *//') | $(nproc) cores: a shared machine; ratios come from alternating runs"
"$MICROPP" train --steps 1 --precision bf16 | grep -E '^(precision|note)' | sed 's/^/# /'
read -r mf mb mr mk < <(pair medium-monolith 1 --config "$ROOT/configs/medium.json" --steps "$STEPS" --log-every 0)
read -r pf pb pr pk < <(pair pipeline-1f1b 2 --config "$ROOT/configs/pipeline.json" --steps "$STEPS" --log-every 0 --schedule 1f1b)
printf '\n%-34s %14s %14s %10s  %s\n' "job" "fp32 samples/s" "bf16 samples/s" "bf16/fp32" "oneDNN kernel"
printf '%-34s %14s %14s %10s  %s\n' "medium.json monolith (1 core)" "$mf" "$mb" "$mr" "$mk"
printf '%-34s %14s %14s %10s  %s\n' "pipeline.json 1f1b M=8 (2 ranks)" "$pf" "$pb" "$pr" "$pk"
status=0
printf '\n%-34s %12s %12s %10s %8s\n' "loss after 50 steps" "fp32" "bf16" "|diff|/fp32" "<= 2%"
for job in default medium; do
    read -r lf lb ld < <(loss50 "loss-$job" --config "$ROOT/configs/$job.json")
    ok=$(python3 -c "print('yes' if $ld <= 0.02 else 'NO')")
    [ "$ok" = yes ] || status=1
    printf '%-34s %12s %12s %10s %8s\n' "$job.json" "$lf" "$lb" "$ld" "$ok"
done
echo "# raw runs: $RESULTS"
exit $status
