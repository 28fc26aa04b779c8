# tests/t_trace.sh: what `micropp train --mode pp` shows of its pipeline: the Chrome trace (one file
# from rank 0, every rank's slices), the measured timeline SVG, the terminal Gantt chart, the
# summary's measured / theory / simulated bubble, and the bad inputs of these flags.
source "$(dirname "$0")/lib.sh"
SMALL="--layers 4 --hidden 32 --batch 16 --steps 3 --log-every 0"

# --- 2 ranks, 1F1B, 4 micro-batches, 3 of the 4 layers on stage 0, 3 steps: trace + timeline + JSON ---
run 120 mpiexec -n 2 "$MICROPP" train --mode pp --schedule 1f1b --micro-batches 4 --partition 3,1 $SMALL --trace "$TMP/t.json" --timeline "$TMP/t.svg" --json
if [ "$RC" -ne 0 ]; then fail "trace/2-rank 1f1b run" "exit $RC: $ERR"
else
    printf '%s' "$OUT" > "$TMP/summary.json"
    why=$(python3 - "$TMP/t.json" "$TMP/summary.json" <<'PY'
import json, sys, statistics
t = json.load(open(sys.argv[1])); s = json.load(open(sys.argv[2]))
K, M, steps = 2, 4, 3
bad = []
x = [e for e in t["traceEvents"] if e["ph"] == "X"]
# per rank per step: M forwards, M backwards, M sends, M receives, the loss all-reduce, the optimizer step
if len(x) != K * steps * (4 * M + 2): bad.append("%d slices, expected %d" % (len(x), K * steps * (4 * M + 2)))
names = {e["name"] for e in x}
for n in ["F0", "F3", "B0", "B3", "SEND_ACT 0", "RECV_ACT 3 (recv wait)", "SEND_GRAD 1", "RECV_GRAD 2 (recv wait)", "optimizer step", "all-reduce"]:
    if n not in names: bad.append("no slice named %r" % n)
if {e["pid"] for e in x} != {0, 1} or any(e["pid"] != e["tid"] for e in x): bad.append("pid/tid are not the ranks")
meta = {(e["pid"], e["name"]): e["args"] for e in t["traceEvents"] if e["ph"] == "M"}
if meta.get((1, "process_name"), {}).get("name") != "rank 1": bad.append("no track named rank 1")
for e in x:
    if e["name"][0] in "FB" and e["name"][1:].isdigit() and e["args"].get("micro_batch") != int(e["name"][1:]): bad.append("micro_batch arg of %s" % e["name"]); break
    if not 1 <= e["args"]["step"] <= steps: bad.append("step arg %r" % e["args"]["step"]); break
for r in range(K):  # a rank's slices follow one another
    ev = sorted((e for e in x if e["pid"] == r), key=lambda e: e["ts"])
    for a, b in zip(ev, ev[1:]):
        if a["ts"] + a["dur"] > b["ts"] + 0.01: bad.append("rank %d: %s overlaps %s" % (r, a["name"], b["name"])); break
    per = {}
    for e in ev: per.setdefault(e["args"]["step"], []).append(e["name"])
    if any(v.count("optimizer step") != 1 for v in per.values()): bad.append("rank %d: not one optimizer step per step" % r)
# the summary's median F and B times are the trace's (steps 2..3; step 1 is the warm-up)
for r in range(K):
    for letter, key in (("F", "forward_ms_median"), ("B", "backward_ms_median")):
        d = [e["dur"] for e in x if e["pid"] == r and e["name"][0] == letter and e["name"][1:].isdigit() and e["args"]["step"] >= 2]
        if abs(statistics.median(d) - s[key][r] * 1e3) > 0.002: bad.append("rank %d %s median %.3f us vs summary %.3f" % (r, letter, statistics.median(d), s[key][r] * 1e3))
# bubble_simulated: the 1F1B action lists re-simulated here with the summary's per-stage costs
f = s["forward_ms_median"]; b = s["backward_ms_median"]
def actions(st):  # schedule.c's 1F1B: warm-up forwards, one forward one backward, cool-down backwards
    F = lambda m: ([("RA", m)] if st > 0 else []) + [("F", m)] + ([("SA", m)] if st < K - 1 else [])
    B = lambda m: ([("RG", m)] if st < K - 1 else []) + [("B", m)] + ([("SG", m)] if st > 0 else [])
    w = min(K - st - 1, M)
    out = sum((F(m) for m in range(w)), [])
    for i in range(M - w): out += F(w + i) + B(i)
    return out + sum((B(m) for m in range(M - w, M)), [])
lists = [actions(st) for st in range(K)]
pc, clock, busy, arrive = [0] * K, [0.0] * K, [0.0] * K, {}
moved = True
while moved:
    moved = False
    for st in range(K):
        while pc[st] < len(lists[st]):
            kind, m = lists[st][pc[st]]
            if kind in ("RA", "RG"):
                key = (st, kind, m)
                if key not in arrive: break
                clock[st] = max(clock[st], arrive[key])
            elif kind == "SA": arrive[(st + 1, "RA", m)] = clock[st]
            elif kind == "SG": arrive[(st - 1, "RG", m)] = clock[st]
            else:
                c = f[st] if kind == "F" else b[st]
                clock[st] += c; busy[st] += c
            pc[st] += 1; moved = True
span = max(clock)
want = [(span - busy[st]) / span for st in range(K)]
if len(s.get("bubble_simulated", [])) != K or any(abs(a - w) > 1e-9 for a, w in zip(s["bubble_simulated"], want)):
    bad.append("bubble_simulated %r, re-simulated %r" % (s.get("bubble_simulated"), want))
if len(s["bubble_measured"]) != K or s["bubble_theory"] != 1 / 5: bad.append("measured/theory %r %r" % (s["bubble_measured"], s["bubble_theory"]))
if s.get("timeline_step") not in (2, 3): bad.append("timeline_step %r (the median of steps 2..3)" % s.get("timeline_step"))
print("; ".join(bad[:4]))
PY
)
    [ -z "$why" ] && pass "trace/one Chrome trace from rank 0: 2 ranks x 3 steps x (4M+2) slices, names, args, medians, 1F1B re-simulated bubble" \
                  || fail "trace/Chrome trace" "$why"
    why=$(python3 - "$TMP/t.svg" <<'PY'
import sys, xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[1]).getroot()
charts = [g for g in root.iter(ns + "g") if g.get("class") == "chart"]
bad = []
if len(charts) != 2: bad.append("%d charts, expected measured + simulated" % len(charts))
else:
    n = [len([r for r in g.iter(ns + "rect") if r.get("class") == "slice"]) for g in charts]
    if n != [2 * (4 * 4 + 2), 2 * 2 * 4]: bad.append("slices %r, expected [36, 16]" % n)
    title = "".join(charts[0].find(ns + "text").itertext())
    if not title.startswith("measured: step "): bad.append("title %r" % title)
print("; ".join(bad))
PY
)
    [ -z "$why" ] && pass "timeline/SVG parses: measured step (36 slices) + simulated (16)" || fail "timeline/SVG" "$why"
    why=$(python3 "$ROOT/tests/svg_check.py" "$TMP/t.svg")
    [ -z "$why" ] && pass "timeline/every text inside the picture (titles, axis unit, legend)" || fail "timeline/text inside" "$why"
    ls "$TMP" | grep -q '\.tmp' && fail "trace/no temporary file left" "$(ls "$TMP")" || pass "trace/no temporary file left"
fi

# --- --timeline-step picks the step ---
run 120 mpiexec -n 2 "$MICROPP" train --mode pp --schedule 1f1b --micro-batches 2 $SMALL --timeline "$TMP/s1.svg" --timeline-step 1 --json
[ "$RC" -eq 0 ] && [ "$(json_get '["timeline_step"]')" = 1 ] && grep -q '>measured: step 1 of 3 ' "$TMP/s1.svg" \
    && pass "timeline/--timeline-step 1 draws step 1" || fail "timeline/--timeline-step" "$RC $ERR"

# --- text: 3 ranks, 1F1B, --gantt after the summary with its three bubbles ---
run 120 mpiexec -n 3 "$MICROPP" train --mode pp --schedule 1f1b --micro-batches 3 --layers 6 --hidden 32 --batch 24 --steps 3 --log-every 0 --gantt
if [ "$RC" -ne 0 ]; then fail "gantt/3-rank 1f1b --gantt run" "exit $RC: $ERR"
else
    grep -qE '^stage +layers +measured +theory +simulated +F ms +B ms +peak in-flight +peak activations' <<<"$OUT" \
       && [ "$(grep -cE '^[0-2] +[0-9]+-[0-9]+ +[0-9.]+ +0\.400 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9]+ ' <<<"$OUT")" -eq 3 ] \
       && pass "gantt/summary: bubble measured, theory 0.400, simulated per stage" || fail "gantt/summary columns" "$OUT"
    why=$(printf '%s\n' "$OUT" | python3 -c '
import re, sys
lines = sys.stdin.read().splitlines()
bad = []
i = next((i for i, l in enumerate(lines) if l.startswith("measured: step ")), None)
if i is None or not re.match(r"measured: step [23] of 3 \| 1f1b \| 3 ranks \| 3 micro-batches", lines[i]): bad.append("measured title")
else:
    rows = lines[i + 1:i + 4]
    if [r[:7] for r in rows] != ["rank 0 ", "rank 1 ", "rank 2 "] or any(len(r) > 7 + 161 for r in rows): bad.append("measured rows %r" % rows)
    if not lines[i + 4].startswith("time ") or not lines[i + 4].endswith(" ms"): bad.append("measured axis %r" % lines[i + 4])
j = next((j for j, l in enumerate(lines) if l.startswith("simulated: 1f1b with each stage")), None)
if j is None: bad.append("no simulated chart")
else:
    rows = lines[j + 1:j + 4]
    if [r[:8] for r in rows] != ["stage 0 ", "stage 1 ", "stage 2 "]: bad.append("simulated rows %r" % rows)
    # the shortest F or B is one label wide at least (unless the chart is capped at 160 characters)
    cells = [len(re.findall(r"\[[FB][0-2] *\]", r)) for r in rows]
    if sum(cells) < 6: bad.append("simulated cells %r" % cells)
if "\033" in "".join(lines): bad.append("colour codes without a terminal")
print("; ".join(bad))')
    [ -z "$why" ] && pass "gantt/--gantt: measured chart a row per rank, simulated a row per stage, no colour" || fail "gantt/--gantt charts" "$why"
fi

# --- bad input: one line, exit 2, on every rank, before any step; no file left ---
e() { expect_user_error "$@"; }
e "bad/--trace unwritable" "cannot write --trace '/nonexistent/t.json': No such file" 60 mpiexec -n 2 "$MICROPP" train --mode pp $SMALL --trace /nonexistent/t.json
e "bad/--timeline is a folder" "cannot write --timeline '$TMP': Is a directory" 60 mpiexec -n 2 "$MICROPP" train --mode pp $SMALL --timeline "$TMP"
e "bad/--trace in monolith mode" "--trace applies to --mode pp" 30 "$MICROPP" train $SMALL --trace "$TMP/m.json"
e "bad/--gantt with --json" "--gantt prints a chart and --json" 60 mpiexec -n 2 "$MICROPP" train --mode pp $SMALL --gantt --json
e "bad/--timeline-step past the end" "--timeline-step 4 is past the last step: use 1..3" 60 mpiexec -n 2 "$MICROPP" train --mode pp $SMALL --timeline "$TMP/x.svg" --timeline-step 4
e "bad/--timeline-step alone" "--timeline-step picks the step drawn by --timeline or --gantt" 60 mpiexec -n 2 "$MICROPP" train --mode pp $SMALL --timeline-step 2
expect_failure "bad/a run that fails writes no trace" "loss became (NaN|Inf)|loss diverged" 60 mpiexec -n 2 "$MICROPP" train --mode pp --optimizer sgd --lr 1000 --steps 50 --log-every 0 --trace "$TMP/nan.json" --timeline "$TMP/nan.svg"
ls "$TMP" | grep -qE '^(m|x|nan)\.|\.tmp' && fail "bad/no file left by refused or failed runs" "$(ls "$TMP")" || pass "bad/no file left by refused or failed runs"
