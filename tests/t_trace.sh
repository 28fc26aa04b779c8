# tests/t_trace.sh: what `micropp train --mode pp` shows of its pipeline: the Chrome trace (one file
# from rank 0, every rank's slices), the measured timeline SVG, the terminal Gantt chart, the
# summary's measured / theory / simulated bubble, and the bad inputs of these flags; with --tp and in
# hybrid, a track per rank named by its place, and the group's all-reduces on its collectives track.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
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
# per rank per step: M forwards, M backwards, M sends, M receives, the loss wait (its all-reduce, named for
# what a pipeline's ranks do in it: wait for the last stage's loss), the optimizer step
if len(x) != K * steps * (4 * M + 2): bad.append("%d slices, expected %d" % (len(x), K * steps * (4 * M + 2)))
names = {e["name"] for e in x}
for n in ["F0", "F3", "B0", "B3", "SEND_ACT 0", "RECV_ACT 3 (recv wait)", "SEND_GRAD 1", "RECV_GRAD 2 (recv wait)", "optimizer step", "loss wait"]:
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
e "bad/--trace in monolith mode" "--trace applies to a pipeline \(--pp > 1\), data parallelism \(--dp > 1\) or tensor parallelism \(--tp > 1\), and this run is pp 1 x dp 1 x tp 1" 30 "$MICROPP" train $SMALL --trace "$TMP/m.json"
e "bad/--gantt with --json" "--gantt prints a chart and --json" 60 mpiexec -n 2 "$MICROPP" train --mode pp $SMALL --gantt --json
e "bad/--timeline-step past the end" "--timeline-step 4 is past the last step: use 1..3" 60 mpiexec -n 2 "$MICROPP" train --mode pp $SMALL --timeline "$TMP/x.svg" --timeline-step 4
e "bad/--timeline-step alone" "--timeline-step picks the step drawn by --timeline or --gantt" 60 mpiexec -n 2 "$MICROPP" train --mode pp $SMALL --timeline-step 2
expect_failure "bad/a run that fails writes no trace" "loss became (NaN|Inf)|loss diverged" 60 mpiexec -n 2 "$MICROPP" train --mode pp --optimizer sgd --lr 1000 --steps 50 --log-every 0 --trace "$TMP/nan.json" --timeline "$TMP/nan.svg"
ls "$TMP" | grep -qE '^(m|x|nan)\.|\.tmp' && fail "bad/no file left by refused or failed runs" "$(ls "$TMP")" || pass "bad/no file left by refused or failed runs"

# --- --tp and hybrid: a track per rank, named by its place; the group's all-reduces on its collectives track ---
TPM="--layers 6 --hidden 32 --batch 16 --steps 3 --log-every 0 --tp 2"
run 240 mpiexec -n 4 "$MICROPP" train --mode pp --schedule 1f1b --micro-batches 4 $TPM --tp-message full --trace "$TMP/tp.json" --timeline "$TMP/tp.svg" --json
if [ "$RC" -ne 0 ]; then fail "trace/pp 2 x tp 2 run" "exit $RC: $(printf '%s' "$ERR" | tail -c 300)"
else
    printf '%s' "$OUT" > "$TMP/tp-summary.json"
    why=$(python3 - "$TMP/tp.json" "$TMP/tp-summary.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1])); s = json.load(open(sys.argv[2]))
R, M, steps, COMM = 4, 4, 3, 1000000
bad = []
meta = {(e["pid"], e["tid"], e["name"]): e["args"].get("name") for e in t["traceEvents"] if e["ph"] == "M"}
for r in range(R):
    want = "rank %d (stage %d, tp %d)" % (r, r // 2, r % 2)
    if meta.get((r, r, "process_name")) != want: bad.append("rank %d named %r, not %r" % (r, meta.get((r, r, "process_name")), want))
    if meta.get((r, COMM + r, "thread_name")) != want + " collectives": bad.append("rank %d: no collectives track" % r)
x = [e for e in t["traceEvents"] if e["ph"] == "X"]
main = [e for e in x if e["tid"] == e["pid"]]
tp = [e for e in x if e["tid"] == COMM + e["pid"]]
if len(main) + len(tp) != len(x): bad.append("slices on neither track")
if len(main) != R * steps * (4 * M + 2): bad.append("%d slices on the ranks' tracks, expected %d" % (len(main), R * steps * (4 * M + 2)))
if any(e["cat"] != "tp all-reduce" for e in tp): bad.append("collectives track holds %r" % {e["cat"] for e in tp})
# 6 layers: stage 0 = a pair + layer 2, stage 1 = a pair + layer 5. Per micro-batch: stage 0 the forward's g
# (its column layer is the model's first: no backward all-reduce), stage 1 g and the backward's f
for r in range(R):
    for step in range(1, steps + 1):
        mine = sorted((e for e in tp if e["pid"] == r and e["args"]["step"] == step), key=lambda e: e["ts"])
        want = M * (1 if r < 2 else 2)
        if len(mine) != want: bad.append("rank %d step %d: %d tp all-reduces, expected %d" % (r, step, len(mine), want)); continue
        passes = [e for e in main if e["pid"] == r and e["args"]["step"] == step and e["cat"] in ("forward", "backward")]
        for a in mine:  # inside a forward or backward of its micro-batch, of 4 rows x 32 floats
            inside = [p for p in passes if p["ts"] - 0.01 <= a["ts"] and a["ts"] + a["dur"] <= p["ts"] + p["dur"] + 0.01]
            if not inside or a["args"].get("micro_batch") != inside[0]["args"]["micro_batch"] or a["name"] != "tp all-reduce %d" % inside[0]["args"]["micro_batch"]:
                bad.append("rank %d: %s at %.0f us inside no pass of its micro-batch" % (r, a["name"], a["ts"])); break
            if a["args"].get("bytes") != 4 * 32 * 4: bad.append("rank %d: %r bytes" % (r, a["args"].get("bytes"))); break
# the two ranks of a group call the same all-reduces in the same order (one collective at a time)
for g in (0, 2):
    seq = [[e["name"] for e in sorted((e for e in tp if e["pid"] == r), key=lambda e: (e["args"]["step"], e["ts"]))] for r in (g, g + 1)]
    if seq[0] != seq[1]: bad.append("ranks %d and %d: all-reduces in another order" % (g, g + 1))
# the summary's mean all-reduces and bytes per step and rank are the trace's
n = len(tp) / steps / R; b = sum(e["args"]["bytes"] for e in tp) / steps / R
if s["tp_allreduces_per_step"] != n or abs(s["tp_allreduce_bytes_per_step"] - b) > 1e-6: bad.append("summary %r / %r, trace %r / %r" % (s["tp_allreduces_per_step"], s["tp_allreduce_bytes_per_step"], n, b))
if t["otherData"].get("tp") != 2 or t["otherData"].get("stages") != 2: bad.append("otherData %r" % t["otherData"])
print("; ".join(bad[:4]))
PY
)
    [ -z "$why" ] && pass "trace/pp 2 x tp 2: a track per rank named (stage, tp), its tp all-reduces on its collectives track inside their passes, the group's in one order, = the summary's" \
                  || fail "trace/pp 2 x tp 2" "$why"
    why=$(python3 - "$TMP/tp.svg" "$TMP/tp.json" "$TMP/tp-summary.json" <<'PY'
import json, re, sys, xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[1]).getroot(); t = json.load(open(sys.argv[2])); s = json.load(open(sys.argv[3]))
charts = [g for g in root.iter(ns + "g") if g.get("class") == "chart"]
bad = []
if len(charts) != 2: print("%d charts" % len(charts)); sys.exit()
texts = [re.sub(r"\s+", " ", " ".join(e.itertext())).strip() for e in charts[0].iter(ns + "text")]
title = texts[0]
m = re.match(r"measured: step (\d) of 3 \| 1f1b \| 2 stages x tp 2 = 4 ranks \| 4 micro-batches \| [0-9.]+ ms \| bubble ([0-9.]+) \(mean over ranks\)", title)
if not m: print("title %r" % title); sys.exit()
step, bubble = int(m.group(1)), float(m.group(2))
labels = [x for x in texts if x.startswith("rank ")]
if labels != ["rank %d (s%d t%d)" % (r, r // 2, r % 2) for r in range(4)]: bad.append("row labels %r" % labels)
rects = [r for r in charts[0].iter(ns + "rect") if r.get("class") == "slice"]
x = [e for e in t["traceEvents"] if e["ph"] == "X" and e["args"]["step"] == step]
tps = [r for r in rects if r.get("data-kind") == "T"]
if len(tps) != len([e for e in x if e["cat"] == "tp all-reduce"]) or not tps: bad.append("%d tp all-reduces drawn, the trace has %d" % (len(tps), len([e for e in x if e["cat"] == "tp all-reduce"])))
# each drawn under its rank's cells, not over them
cells = {int(r.get("data-row")): float(r.get("y")) for r in rects if r.get("data-kind") == "F"}
for r in tps:
    row = int(r.get("data-row"))
    if not float(r.get("y")) >= cells[row] + 18: bad.append("row %d: a tp all-reduce at y %s over the cells (y %s)" % (row, r.get("y"), cells[row])); break
# the bubble in the title: per rank 1 - its F and B / its pipeline's span (the slowest of the stages, tp rank alike)
busy = {r: sum(e["dur"] for e in x if e["pid"] == r and e["cat"] in ("forward", "backward")) for r in range(4)}
end = {r: max(e["ts"] + e["dur"] for e in x if e["pid"] == r and e["tid"] == r and e["cat"] not in ("loss wait", "optimizer step")) for r in range(4)}
start = {r: min(e["ts"] for e in t["traceEvents"] if e["ph"] == "X" and e["pid"] == r and e["args"]["step"] == step) for r in range(4)}
span = {r: max(end[q] - start[q] for q in (r % 2, 2 + r % 2)) for r in range(4)}
want = sum(1 - busy[r] / span[r] for r in range(4)) / 4
if not 0 <= bubble < 1 or abs(bubble - want) > 0.05: bad.append("bubble %.3f, from the trace %.3f" % (bubble, want))
print("; ".join(bad))
PY
)
    [ -z "$why" ] && pass "timeline/pp 2 x tp 2: rows named (s, t), the step's tp all-reduces drawn under their rows, the bubble over each pipeline's span" \
                  || fail "timeline/pp 2 x tp 2 SVG" "$why"
    why=$(python3 "$ROOT/tests/svg_check.py" "$TMP/tp.svg")
    [ -z "$why" ] && pass "timeline/pp 2 x tp 2: every text inside the picture" || fail "timeline/pp 2 x tp 2: text inside" "$why"
fi

# hybrid 2 x 2 x 2, --tp-message slice (each rank sends its chunk, the receiving group all-gathers): --gantt
run 300 mpiexec -n 8 "$MICROPP" train --mode hybrid --pp 2 --dp 2 --schedule 1f1b --micro-batches 2 $TPM --tp-message slice --gantt --trace "$TMP/hs.json"
if [ "$RC" -ne 0 ]; then fail "gantt/hybrid 2 x 2 x 2 run" "exit $RC: $(printf '%s' "$ERR" | tail -c 300)"
else
    why=$(printf '%s\n' "$OUT" | python3 -c '
import re, sys
lines = sys.stdin.read().splitlines()
bad = []
i = next((i for i, l in enumerate(lines) if l.startswith("measured: step ")), None)
if i is None or not re.match(r"measured: step [23] of 3 \| 1f1b \| 2 stages x 2 replicas x tp 2 = 8 ranks \| 2 micro-batches", lines[i]): print("measured title"); sys.exit()
j = next(j for j in range(i, len(lines)) if lines[j].startswith("time "))
rows, coll, last = {}, {}, None
for l in lines[i + 1:j]:
    m = re.match(r"(rank (\d) \(s\d r\d t\d\)) ", l)
    if m: last = int(m.group(2)); rows[last] = m.group(1)
    elif l.startswith(" " * 18) and last is not None: coll[last] = l[18:]
    else: bad.append("line %r" % l[:40])
# the ranks of a group are adjacent (rank = group x 2 + tp rank), --placement auto lays out the groups
if sorted(rows) != list(range(8)) or any(not rows[r].endswith("t%d)" % (r % 2)) for r in rows): bad.append("rows %r" % rows)
if sorted(coll) != list(range(8)): bad.append("collectives lines under ranks %r" % sorted(coll))
for r, l in coll.items():
    if set(l) - set(" #~="): bad.append("rank %d collectives line holds %r" % (r, set(l) - set(" #~="))); break
# (a collective shorter than a column is drawn one column wide, where a later one may cover it)
if not any("~" in l for l in coll.values()) or not any("#" in l for l in coll.values()): bad.append("no all-gather or no tp all-reduce drawn")
# the gradient all-reduces of the replicas, drawn under the ranks that ran them
if not any("=" in l for l in coll.values()): bad.append("no gradient all-reduce drawn")
legend = lines[j + 1]
if "# tp all-reduce" not in legend or "~ all-gather" not in legend or "= gradient all-reduce" not in legend: bad.append("legend %r" % legend)
print("; ".join(bad[:4]))')
    [ -z "$why" ] && pass "gantt/hybrid 2 x 2 x 2, slice: a row per rank named (s r t), its tp all-reduces, all-gathers and gradient all-reduces on a line under it" \
                  || fail "gantt/hybrid 2 x 2 x 2" "$why"
    why=$(python3 - "$TMP/hs.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1])); bad = []
x = [e for e in t["traceEvents"] if e["ph"] == "X"]
stage = {e["pid"]: int(e["args"]["name"].split("stage ")[1][0]) for e in t["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
for r in range(8):  # a micro-batch's message sliced: stage 1 all-gathers each activation, stage 0 each gradient
    for step in (1, 2, 3):
        mine = [e for e in x if e["pid"] == r and e["args"]["step"] == step]
        ag = [e for e in mine if e["cat"] == "all-gather"]
        recv = [e for e in mine if e["name"].startswith("RECV_%s " % ("ACT" if stage[r] == 1 else "GRAD"))]
        if sorted(e["name"] for e in ag) != ["all-gather 0", "all-gather 1"] or any(e["tid"] != 1000000 + r for e in ag):
            bad.append("rank %d step %d: %r" % (r, step, sorted(e["name"] for e in ag))); break
        for a in ag:
            if not any(v["args"].get("micro_batch") == a["args"]["micro_batch"] and v["ts"] - 0.01 <= a["ts"] and a["ts"] + a["dur"] <= v["ts"] + v["dur"] + 0.01 for v in recv):
                bad.append("rank %d: %s inside no receive of its micro-batch" % (r, a["name"])); break
print("; ".join(bad[:4]))
PY
)
    [ -z "$why" ] && pass "trace/hybrid 2 x 2 x 2, slice: each rank's all-gathers, one per received message, inside the receive of its micro-batch" \
                  || fail "trace/hybrid 2 x 2 x 2, slice: all-gathers" "$why"
fi

# --tp alone (no pipeline): --trace only, the forward, backward and their 5 all-reduces per step
run 120 mpiexec -n 2 "$MICROPP" train $TPM --inputs 24 --trace "$TMP/tp1.json"
if [ "$RC" -ne 0 ]; then fail "trace/--tp 2 alone run" "exit $RC: $(printf '%s' "$ERR" | tail -c 300)"
else
    why=$(python3 - "$TMP/tp1.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1])); bad = []
x = [e for e in t["traceEvents"] if e["ph"] == "X"]
names = {(e["pid"], e["name"]): e["args"].get("name") for e in t["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
if [names.get((r, "process_name")) for r in (0, 1)] != ["rank 0 (tp 0)", "rank 1 (tp 1)"]: bad.append("names %r" % names)
for r in (0, 1):
    for step in (1, 2, 3):
        mine = [e for e in x if e["pid"] == r and e["args"]["step"] == step]
        f = [e for e in mine if e["cat"] == "forward"]; b = [e for e in mine if e["cat"] == "backward"]
        a = [e for e in mine if e["cat"] == "tp all-reduce"]
        # forward: g after each of the 3 pairs; backward: f before the column layers but the first (2)
        inf = [e for e in a if f and f[0]["ts"] - 0.01 <= e["ts"] <= f[0]["ts"] + f[0]["dur"] + 0.01]
        inb = [e for e in a if b and b[0]["ts"] - 0.01 <= e["ts"] <= b[0]["ts"] + b[0]["dur"] + 0.01]
        if len(f) != 1 or len(b) != 1 or len(a) != 5 or len(inf) != 3 or len(inb) != 2: bad.append("rank %d step %d: F %d B %d all-reduces %d (%d in F, %d in B)" % (r, step, len(f), len(b), len(a), len(inf), len(inb)))
        if any(e["tid"] != 1000000 + r for e in a): bad.append("rank %d: an all-reduce off the collectives track" % r)
print("; ".join(bad[:4]))
PY
)
    [ -z "$why" ] && pass "trace/--tp 2 alone: F and B per step, 3 all-reduces inside F and 2 inside B, on the collectives track" || fail "trace/--tp 2 alone" "$why"
fi
e "bad/--gantt with --tp and no pipeline" "--gantt applies to a pipeline \(--pp > 1\), and this run is pp 1 x dp 1 x tp 2: drop it or set --pp" 60 mpiexec -n 2 "$MICROPP" train $TPM --gantt

# hybrid without --tp (refused before): a track per rank named by stage and replica, each replica's pipeline whole
run 240 mpiexec -n 4 "$MICROPP" train --mode hybrid --pp 2 --dp 2 --schedule 1f1b --micro-batches 2 $SMALL --trace "$TMP/h.json" --timeline "$TMP/h.svg" --json
if [ "$RC" -ne 0 ]; then fail "trace/hybrid 2 x 2 run" "exit $RC: $(printf '%s' "$ERR" | tail -c 300)"
else
    why=$(python3 - "$TMP/h.json" "$TMP/h.svg" <<'PY'
import json, re, sys, xml.etree.ElementTree as ET
t = json.load(open(sys.argv[1])); bad = []
names = {e["pid"]: e["args"]["name"] for e in t["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
# --placement auto: the stage's replicas on adjacent ranks or the pipeline's stages: each rank names its own place
places = sorted(re.match(r"rank \d \(stage (\d), replica (\d)\)$", names.get(r, "")).groups() if re.match(r"rank \d \(stage (\d), replica (\d)\)$", names.get(r, "")) else ("?", "?") for r in range(4))
if places != [("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")]: bad.append("names %r" % names)
x = [e for e in t["traceEvents"] if e["ph"] == "X"]
for r in range(4):  # each replica runs the whole 1f1b: 2 forwards and 2 backwards a step on every rank
    f = [e for e in x if e["pid"] == r and e["cat"] == "forward"]; b = [e for e in x if e["pid"] == r and e["cat"] == "backward"]
    if len(f) != 2 * 3 or len(b) != 2 * 3: bad.append("rank %d: %d F, %d B" % (r, len(f), len(b)))
ns = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[2]).getroot()
chart = next(g for g in root.iter(ns + "g") if g.get("class") == "chart")
labels = sorted(e.text for e in chart.iter(ns + "text") if e.text and e.text.startswith("rank "))
if len(labels) != 4 or not all(re.match(r"rank \d \(s\d r\d\)$", l) for l in labels): bad.append("rows %r" % labels)
print("; ".join(bad[:4]))
PY
)
    [ -z "$why" ] && pass "trace/hybrid 2 x 2: a track per rank named (stage, replica), every replica's pipeline; the SVG's rows alike" || fail "trace/hybrid 2 x 2" "$why"
fi

# plain ddp (refused before: only ZeRO's collectives were drawn): each bucket's all-reduce on the rank's
# collectives track, the first started inside the backward (the gradient hook), their bytes the replica's
# gradients; --timeline draws one step with the all-reduces on a line under each rank's passes
run 240 mpiexec -n 2 "$MICROPP" train --mode ddp $SMALL --trace "$TMP/d.json" --timeline "$TMP/d.svg" --timeline-step 2 --json
if [ "$RC" -ne 0 ]; then fail "trace/ddp run" "exit $RC: $(printf '%s' "$ERR" | tail -c 300)"
else
    printf '%s' "$OUT" > "$TMP/d_summary.json"
    why=$(python3 - "$TMP/d.json" "$TMP/d.svg" "$TMP/d_summary.json" <<'PY'
import json, sys, xml.etree.ElementTree as ET
t = json.load(open(sys.argv[1])); s = json.load(open(sys.argv[3])); bad = []
x = [e for e in t["traceEvents"] if e["ph"] == "X"]
params = 32 * 33 * 4 + 2 * 33  # 4 layers of 32 and the head of 2 classes
for r in (0, 1):
    for step in (1, 2, 3):
        ev = [e for e in x if e["pid"] == r and e["args"]["step"] == step]
        a = [e for e in ev if e["name"] == "gradient all-reduce"]
        b = [e for e in ev if e["cat"] == "backward"]
        if len(a) != s["bucket_count"]: bad.append("rank %d step %d: %d all-reduces, %d buckets" % (r, step, len(a), s["bucket_count"]))
        if any(e["tid"] == e["pid"] for e in a): bad.append("rank %d: an all-reduce on the compute track" % r)
        if sum(e["args"]["bytes"] for e in a) != 4 * params: bad.append("rank %d step %d: bytes %r" % (r, step, [e["args"]["bytes"] for e in a]))
        if len(b) != 1 or not a or min(e["ts"] for e in a) >= b[0]["ts"] + b[0]["dur"]: bad.append("rank %d step %d: no all-reduce starts inside the backward" % (r, step))
ns = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[2]).getroot()
kinds = [e.get("data-kind") for e in root.iter(ns + "rect") if e.get("class") == "slice"]
if kinds.count("D") < 2 * s["bucket_count"] or kinds.count("B") != 2: bad.append("svg slices %r" % kinds)
text = " ".join("".join(e.itertext()) for e in root.iter(ns + "text"))
if "step 2 of 3" not in text or "gradient all-reduce" not in text: bad.append("svg text %r" % text[:200])
print("; ".join(bad[:4]))
PY
)
    [ -z "$why" ] && pass "trace/ddp: each bucket's all-reduce on the collectives track, the first inside the backward; --timeline draws them" \
        || fail "trace/ddp: the buckets' all-reduces" "$why"
fi
