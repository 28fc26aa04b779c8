#!/usr/bin/env bash
# tests/t_mfu.sh: model FLOPs utilisation (train/measure.c's measure_peak, issue 32): the summary's step line,
# --json's mfu, peak_gflops, peak_source and peak_measure_s (and _cpu_s), --metrics' per-step mfu; on a monolith and a
# 2-rank pipeline, against the measured sgemm peak (in (0, 100%], measured in < 0.2 s) and a given one
# (MICROPP_PEAK_GFLOPS: the ratio exact, the ranks' peaks summed), checkpointing's recompute left out, an MoE
# row's FLOPs, and --profile's peak.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
unset MICROPP_PEAK_GFLOPS  # (the peak measured, as a user's run has it: tests/lib.sh gives one)

# check NAME PY: runs the Python check PY on --json's object (d) of the last run; PASS, or FAIL with its words.
check() {
    local name=$1 py=$2
    if [ "$RC" -ne 0 ]; then fail "$name" "exit $RC: $ERR"; return; fi
    why=$(python3 -c "import json, sys
d = json.load(open(sys.argv[1]))
$py" "$TMP/out" 2>&1) || why="the check itself failed: ${why:-no output}"
    [ -z "$why" ] && pass "$name" || fail "$name" "$why"
}

MEASURED='
bad = []
if not (0 < d["mfu"] <= 1): bad.append("mfu %s not in (0, 1]" % d["mfu"])
if d["peak_source"] != "measured sgemm": bad.append("source %r" % d["peak_source"])
if not (0 < d["peak_measure_s"] < 0.2 and 0 < d["peak_measure_cpu_s"] < 0.2): bad.append("measured in %s s (CPU %s s)" % (d["peak_measure_s"], d["peak_measure_cpu_s"]))
if abs(d["mfu"] * d["peak_gflops"] - d["gflops"]) > 1e-9 * d["gflops"]: bad.append("mfu x peak %s != gflops %s" % (d["mfu"] * d["peak_gflops"], d["gflops"]))
print("; ".join(bad))'

# --- the measured peak: a monolith, and a 2-rank pipeline (the ranks measure at once, their peaks summed) ---
run 60 "$MICROPP" train --steps 12 --hidden 256 --json
check "mfu/monolith: mfu in (0, 1] of the measured sgemm peak (measured in < 0.2 s), mfu x peak = gflops" "$MEASURED"
run 120 mpiexec -n 2 "$MICROPP" train --pp 2 --steps 12 --hidden 256 --json
check "mfu/2-rank pipeline: mfu in (0, 1] of the ranks' summed sgemm peaks, mfu x peak = gflops" "$MEASURED"

# --- a given peak: the ratio exact; 2 ranks: twice the peak ---
MICROPP_PEAK_GFLOPS=1000 run 60 "$MICROPP" train --steps 6 --json
check "mfu/MICROPP_PEAK_GFLOPS=1000: mfu = gflops / 1000, source named" '
bad = []
if abs(d["mfu"] - d["gflops"] / 1000) > 1e-12: bad.append("mfu %s, gflops %s" % (d["mfu"], d["gflops"]))
if d["peak_gflops"] != 1000 or d["peak_source"] != "MICROPP_PEAK_GFLOPS" or d["peak_measure_s"] != 0: bad.append("peak %s %r %s" % (d["peak_gflops"], d["peak_source"], d["peak_measure_s"]))
print("; ".join(bad))'
MICROPP_PEAK_GFLOPS=1000 run 120 mpiexec -n 2 "$MICROPP" train --pp 2 --steps 6 --json
check "mfu/MICROPP_PEAK_GFLOPS=1000 on 2 ranks: the peak 2000, mfu = gflops / 2000" '
bad = []
if d["peak_gflops"] != 2000 or abs(d["mfu"] - d["gflops"] / 2000) > 1e-12: bad.append("peak %s, mfu %s, gflops %s" % (d["peak_gflops"], d["mfu"], d["gflops"]))
print("; ".join(bad))'

# --- --metrics: every step line's mfu = the step's FLOPs (the summary's per step) / its time / the peak ---
MICROPP_PEAK_GFLOPS=500 run 60 "$MICROPP" train --steps 6 --metrics "$TMP/m.jsonl" --json
check "mfu/--metrics: every step line's mfu = FLOPs per step / step_ms / the peak" '
rows = [r for r in map(json.loads, open(sys.argv[1].replace("out", "m.jsonl"))) if "lr" in r]
flops = d["gflops"] * 1e9 * d["step_ms_median"] / 1e3
bad = ["step %d: mfu %s, want %s" % (r["step"], r.get("mfu"), flops / (r["step_ms"] / 1e3) / 500e9)
       for r in rows if abs(r.get("mfu", -1) - flops / (r["step_ms"] / 1e3) / 500e9) > 1e-3 * r.get("mfu", 1)]
if len(rows) != 6: bad.append("%d step lines" % len(rows))
print("; ".join(bad))'

# --- the summary's text: MFU on the step line, with the peak and where it came from ---
run 60 "$MICROPP" train --steps 6
line=$(grep '^step .* (median)' <<<"$OUT")
if [ "$RC" -eq 0 ] && grep -Eq '\| MFU [0-9]+\.[0-9]% \(of [0-9.]+[kM]? GFLOP/s peak, measured sgemm\)$' <<<"$line"; then
    pass "mfu/summary: the step line ends 'MFU x.x% (of N GFLOP/s peak, measured sgemm)'"
else fail "mfu/summary: the step line's MFU" "exit $RC: ${line:-no step line} $ERR"; fi
MICROPP_PEAK_GFLOPS=100 run 120 mpiexec -n 2 "$MICROPP" train --pp 2 --steps 6
line=$(grep '^step .* (median)' <<<"$OUT")
if [ "$RC" -eq 0 ] && grep -Eq '\| MFU [0-9]+\.[0-9]% \(of 200 GFLOP/s peak of the ranks together, MICROPP_PEAK_GFLOPS\)$' <<<"$line"; then
    pass "mfu/summary on 2 ranks: the peak of the ranks together, its source named"
else fail "mfu/summary on 2 ranks" "exit $RC: ${line:-no step line} $ERR"; fi

# --- model FLOPs: checkpointing's recompute counts in GFLOP/s, not in MFU (as the planner's); an MoE row's
# FLOPs are its router's and top-k experts' (as GFLOP/s counts them) ---
MICROPP_PEAK_GFLOPS=100 run 120 mpiexec -n 2 "$MICROPP" train --pp 2 --steps 4 --checkpoint-activations --json
check "mfu/--checkpoint-activations: GFLOP/s / (mfu x peak) = 1 + the recompute's 2 (P - head) / (6P - 2 D H)" '
P, head = d["params"], 128 * 2 + 2
want = 1 + 2 * (P - head) / (6 * P - 2 * d["inputs"] * d["hidden"])
got = d["gflops"] / (d["mfu"] * d["peak_gflops"])
print("" if abs(got - want) < 1e-9 else "ratio %s, want %s" % (got, want))'
MICROPP_PEAK_GFLOPS=100 run 60 "$MICROPP" train --steps 4 --experts 4 --top-k 1 --json
check "mfu/--experts 4 --top-k 1: mfu x peak = GFLOP/s, its FLOPs a step under 6 x all parameters x rows" '
flops = d["mfu"] * d["peak_gflops"] * 1e9 * d["step_ms_median"] / 1e3
bad = []
if not (d["mfu"] > 0 and abs(d["mfu"] * d["peak_gflops"] - d["gflops"]) < 1e-9 * d["gflops"]): bad.append("mfu %s, gflops %s" % (d["mfu"], d["gflops"]))
if not flops < 0.9 * 6 * d["params"] * 32: bad.append("%s FLOPs a step, all parameters %s" % (flops, 6 * d["params"] * 32))
print("; ".join(bad))'

# --- --profile: its peak (the fastest gemm it measured, as the planner's MFU), not measured: the
# same figure on every run, the ranks' summed ---
prof() {
    run 240 mpiexec -n 2 "$MICROPP" train --profile "$ROOT/configs/profiles/cpu-2ranks.json" --config "$ROOT/configs/medium.json" \
        --dp 2 --steps 1 --eval-samples 64 --log-every 0 --json
}
prof; cp "$TMP/out" "$TMP/prof1.json"; prof
check "mfu/--profile: the profile's peak (its source named, nothing measured, the same on a second run)" '
first = json.load(open(sys.argv[1].replace("out", "prof1.json")))
bad = []
if d["peak_source"] != "--profile'"'"'s fastest gemm" or d["peak_measure_s"] != 0: bad.append("source %r in %s s" % (d["peak_source"], d["peak_measure_s"]))
if not (d["peak_gflops"] > 0 and d["peak_gflops"] == first["peak_gflops"]): bad.append("peaks %s, %s" % (first["peak_gflops"], d["peak_gflops"]))
if abs(d["mfu"] * d["peak_gflops"] - d["gflops"]) > 1e-9 * d["gflops"]: bad.append("mfu %s" % d["mfu"])
print("; ".join(bad))'
