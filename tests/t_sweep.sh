# tests/t_sweep.sh: bench/sweep.sh runs its experiments on a tiny config: one JSONL line per run with
# its parameters, the four summary tables, plots when gnuplot is installed; bad settings exit 2.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)

run 600 bash "$ROOT/bench/sweep.sh" --tiny --out "$TMP/sw"
if [ "$RC" -ne 0 ]; then fail "sweep/--tiny runs" "exit $RC: $(tail -c 800 <<<"$OUT") $ERR"
else
    why=$(python3 - "$TMP/sw/sweep.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
bad = []
# monolith + 2 schedules x M in 1 2 4 + checkpoint off/on + partition even/skewed + 3 schedules
if len(rows) != 1 + 2 * 3 + 2 + 2 + 3: bad.append("%d lines" % len(rows))
for r in rows:
    if "error" in r: bad.append("%s %s failed: %s" % (r["experiment"], r["variant"], r["error"]))
    for k in ("experiment", "variant", "np", "threads", "step_ms_median", "layers", "hidden", "batch"):
        if k not in r: bad.append("%s: no %s" % (r.get("experiment"), k))
    if r.get("mode") == "pp" and (len(r.get("bubble_simulated", [])) != 2 or r["np"] != 2): bad.append("pp line without bubble_simulated")
exp = [r["experiment"] for r in rows]
for e, n in (("monolith", 1), ("m_sweep", 6), ("checkpoint", 2), ("partition", 2), ("schedules", 3)):
    if exp.count(e) != n: bad.append("%d %s lines" % (exp.count(e), e))
ms = sorted((r["schedule"], r["micro_batches"]) for r in rows if r["experiment"] == "m_sweep")
if ms != sorted((s, m) for s in ("gpipe", "1f1b") for m in (1, 2, 4)): bad.append("m_sweep runs %r" % ms)
ck = {r["variant"]: r["checkpoint_activations"] for r in rows if r["experiment"] == "checkpoint"}
if ck != {"off": False, "on": True}: bad.append("checkpoint runs %r" % ck)
parts = sorted(r["partition"] for r in rows if r["experiment"] == "partition")
if parts != [[2, 2], [3, 1]]: bad.append("partitions %r (want even and 80%% on stage 0)" % parts)
if sorted(r["schedule"] for r in rows if r["experiment"] == "schedules") != ["1f1b", "gpipe", "naive"]: bad.append("schedules")
print("; ".join(bad[:4]))
PY
)
    [ -z "$why" ] && pass "sweep/--tiny: 14 JSONL lines, every experiment, parameters on each line" || fail "sweep/JSONL" "$why"
    s="$TMP/sw/summary.txt"
    if grep -q '^# sensitivity to M' "$s" && grep -q '^# checkpointing' "$s" && grep -q '^# non-uniform partitioning' "$s" && grep -q '^# schedules at fixed M' "$s" \
       && [ "$(grep -cE '^(gpipe|1f1b) +[124] +[0-9.]+ +[0-9.]+x' "$s")" -eq 6 ] && grep -qE '^3,1 ' "$s" && grep -qE '^on +[0-9.]+ +[-+][0-9.]+%' "$s"; then
        pass "sweep/summary.txt: the four tables"
    else fail "sweep/summary.txt" "$(head -c 1500 "$s")"; fi
    # the schedules' curves: micropp plot over their --metrics logs, a step line per step (--tiny: 3)
    why=$(python3 - "$TMP/sw" 2>&1 <<'PY'
import json, sys, xml.etree.ElementTree as ET
d = sys.argv[1]
bad = []
for s in ("naive", "gpipe", "1f1b"):
    steps = [j["step"] for j in map(json.loads, open("%s/schedules_%s.jsonl" % (d, s))) if "loss" in j]  # (not the evaluation's)
    if steps != [1, 2, 3]: bad.append("%s: steps %s" % (s, steps))
root = ET.parse(d + "/schedules_curves.svg").getroot()
names = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text") if t.text and t.text.startswith("schedules_")]
if names != ["schedules_naive", "schedules_gpipe", "schedules_1f1b"]: bad.append("legend %s" % names)
print("; ".join(bad))
PY
) || why="the check itself failed: ${why:-no output}"
    [ -z "$why" ] && [ -z "$(python3 "$ROOT/tests/svg_check.py" "$TMP/sw/schedules_curves.svg")" ] \
        && pass "sweep/the schedules' --metrics logs and their curves (micropp plot)" || fail "sweep/schedules' curves" "$why"
    if command -v gnuplot >/dev/null; then
        ok=1; for p in speedup_vs_m bubble_vs_m; do [ "$(head -c 4 "$TMP/sw/$p.png" 2>/dev/null | tail -c 3)" = PNG ] || ok=0; done
        [ "$ok" = 1 ] && pass "sweep/PNG plots drawn by gnuplot" || fail "sweep/PNG plots" "$(ls "$TMP/sw")"
    else skip "sweep/PNG plots" "gnuplot is not installed and bench/sweep.sh could not install it (no apt-get access?)"; fi
fi
run 120 bash -c "cd '$TMP' && NP=2 LAYERS=2 HIDDEN=8 BATCH=4 STEPS=1 MS=1 FIXED_M=2 SCHEDULES=gpipe MICROPP='$MICROPP' bash '$ROOT/bench/sweep.sh' --out '$TMP/np' --no-plot"
[ "$RC" -eq 0 ] && [ "$(wc -l < "$TMP/np/sweep.jsonl")" -eq 8 ] && [ ! -e "$TMP/np/speedup_vs_m.png" ] && [ ! -e "$TMP/np/schedules_curves.svg" ] \
    && pass "sweep/env sizes, --no-plot" || fail "sweep/env sizes, --no-plot" "$RC $ERR"

expect_user_error "sweep/BATCH not divisible by M" "BATCH=10 is not divisible by M=4" 10 env BATCH=10 MS="1 4" bash "$ROOT/bench/sweep.sh" --out "$TMP/x"
expect_user_error "sweep/unknown option" "unknown option '--fast'" 10 bash "$ROOT/bench/sweep.sh" --fast
expect_user_error "sweep/NP below 2" "NP=1: a pipeline needs at least 2 ranks" 10 bash "$ROOT/bench/sweep.sh" --np 1 --out "$TMP/x"
expect_user_error "sweep/unwritable --out" "cannot write to --out '/proc/sweep'" 10 bash "$ROOT/bench/sweep.sh" --tiny --out /proc/sweep
