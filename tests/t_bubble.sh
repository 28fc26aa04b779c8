# tests/t_bubble.sh: `micropp bubble` (no MPI): the simulated bubble equals the formula on a grid,
# the peak in-flight counts, the text table, the Gantt chart against a checked-in one, colour only on
# a terminal, the SVG picture, and every bad input ends with one line and exit 2.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)

# --- simulated == formula, exactly, for integer costs on a grid; peak in-flight per schedule ---
for costs in "1 2" "1 1" "2 3"; do
    set -- $costs
    run 60 "$MICROPP" bubble --schedule all --stages 1:8 --micro-batches 1:24 --cost-f "$1" --cost-b "$2" --json
    if [ "$RC" -ne 0 ]; then fail "bubble/grid F=$1 B=$2" "exit $RC: $ERR"; continue; fi
    why=$(printf '%s' "$OUT" | python3 -c '
import json, sys
d = json.load(sys.stdin)
rows = d["rows"]
F, B = float(sys.argv[1]), float(sys.argv[2])
v = 2  # interleaved: the default --virtual-stages (any M); dualpipev rows with M < 2K are skipped (as its authors require)
bad = []
dpv = sum(1 for K in range(1, 9) for M in range(1, 25) if M >= 2 * K)
want_rows = 10 * 8 * 24 + dpv  # (every kind but dualpipev at every K, M; v-half and v-min too)
if len(rows) != want_rows or d["skipped_rows"] != 8 * 24 - dpv:
    bad.append("%d rows, expected %d" % (len(rows), want_rows))
seen = set()
one = {(r["stages"], r["micro_batches"]): r["bubble_simulated"] for r in rows if r["schedule"] == "1f1b"}
one_span = {(r["stages"], r["micro_batches"]): r["makespan"] for r in rows if r["schedule"] == "1f1b"}
for r in rows:
    K, M, s = r["stages"], r["micro_batches"], r["schedule"]
    seen.add(s)
    if s == "naive": f = (K - 1) / K
    elif s == "interleaved": f = (K - 1) / (v * M + K - 1) if M % K == 0 else None
    elif s == "looped-bfs": f = (K - 1) / (v * M + K - 1) if M >= K else None  # any F, B
    elif s == "zb-h1": f = (K - 1) / (3 * M + K - 1) if F == B / 2 and M >= K else None  # F = I = W only
    elif s == "zb-h2": f = (K - 1) / (3 * M + K - 1) if F == B / 2 and M >= 2 * K - 1 else None
    elif s in ("zb-v", "dualpipev"): f = (K - 1) / (6 * M + K - 1) if F == B / 2 and M >= 2 * K - 1 else None
    elif s in ("v-half", "v-min"): f = None  # no closed form (the figures of their authors: unit_schedules)
    else: f = (K - 1) / (M + K - 1)
    if r["bubble_formula"] != f: bad.append("%s K=%d M=%d formula %r != %r" % (s, K, M, r["bubble_formula"], f))
    if f is not None and r["bubble_simulated"] != f: bad.append("%s K=%d M=%d simulated %r formula %r" % (s, K, M, r["bubble_simulated"], f))
    if f is not None and any(b != f for b in r["bubble_simulated_per_stage"]): bad.append("%s K=%d M=%d per-stage bubble differs" % (s, K, M))
    if s == "zb-h1" and K >= 2 and M >= K and not r["bubble_simulated"] < one[(K, M)]: bad.append("zb-h1 K=%d M=%d not below 1f1b" % (K, M))
    if s in ("v-half", "v-min"): continue  # their peaks and spans: unit_schedules
    if s in ("zb-v", "dualpipev") or (s == "interleaved" and M % K):  # peaks: unit_schedules; here the makespan against 1f1b
        if K >= 2 and M >= K and F == B / 2 and r["makespan"] > one_span[(K, M)]: bad.append("%s K=%d M=%d slower than 1f1b" % (s, K, M))
        continue
    want = ([1] * K if s == "naive" else [M] * K if s == "gpipe" else
            [min(2 * (K - st - 1) + (v - 1) * K + 1, v * M) for st in range(K)] if s == "interleaved" else
            [v * M] * K if s == "looped-bfs" else
            [min(2 * (K - st - 1) + 1, M) for st in range(K)] if s == "zb-h2" else [min(K - st, M) for st in range(K)])
    if r["peak_inflight"] != want: bad.append("%s K=%d M=%d peak %r want %r" % (s, K, M, r["peak_inflight"], want))
    if abs(r["memory_gpipe"] - (1 / K + 1 / M)) > 1e-15: bad.append("memory K=%d M=%d" % (K, M))
if seen != {"naive", "gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "dualpipev", "looped-bfs", "v-half", "v-min"}: bad.append("schedules %r" % sorted(seen))
print("; ".join(bad[:3]))' "$1" "$2")
    [ -z "$why" ] && pass "bubble/simulated == formula exactly, peak in-flight naive 1, gpipe M, 1f1b and zb-h1 min(K-s,M), zb-h2 min(2(K-s-1)+1,M), interleaved 2(K-s-1)+(v-1)K+1, looped-bfs vM and (K-1)/(vM+K-1) for M>=K; zb-h1 below 1f1b; zb-h2 (K-1)/(3M+K-1) at F=I=W, M>=2K-1; zb-v, dualpipev (K-1)/(6M+K-1) at F=I=W and never slower than 1f1b (F=$1 B=$2, K 1..8, M 1..24)" \
                  || fail "bubble/grid F=$1 B=$2" "$why"
done

# a transfer cost lengthens the pipeline: the simulator is not just echoing the formula
run 30 "$MICROPP" bubble --schedule gpipe --stages 4 --micro-batches 8 --cost-comm 0.5 --json
sim=$(json_get '["rows"][0]["bubble_simulated"]'); fml=$(json_get '["rows"][0]["bubble_formula"]'); span=$(json_get '["rows"][0]["makespan"]')
python3 -c "import sys; sys.exit(0 if $sim > $fml and $span == 33 + 6 * 0.5 else 1)" \
    && pass "bubble/--cost-comm 0.5 adds 2(K-1) transfers to the makespan ($span) and raises the bubble ($sim > $fml)" \
    || fail "bubble/--cost-comm" "simulated $sim formula $fml makespan $span"

# --- the text table ---
run 30 "$MICROPP" bubble --schedule gpipe,1f1b --stages 4 --micro-batches 4,32
if [ "$RC" -eq 0 ] && grep -qE '^schedule +stages +micro-batches +bubble formula +bubble simulated +overlapped +makespan +peak in-flight per stage +gpipe memory +reduction' <<<"$OUT" \
   && grep -qE '^gpipe +4 +4 +0\.4286 +0\.4286 +0\.4286 +21 +4,4,4,4 +0\.500 +2\.00x' <<<"$OUT" \
   && grep -qE '^1f1b +4 +32 +0\.0857 +0\.0857 +0\.0857 +105 +4,3,2,1 +0\.281 +3\.56x' <<<"$OUT" \
   && [ "$(grep -cE '^(gpipe|1f1b) ' <<<"$OUT")" -eq 4 ]; then pass "bubble/text table: header and rows (gpipe K=4 M=4: 3/7, 1f1b K=4 M=32: 3/35)"
else fail "bubble/text table" "$OUT $ERR"; fi
run 30 "$MICROPP" bubble
[ "$RC" -eq 0 ] && [ "$(grep -cE '^(naive|gpipe|1f1b) +4 ' <<<"$OUT")" -eq 18 ] && pass "bubble/defaults: every schedule, K=4, M=1,2,4,8,16,32" || fail "bubble/defaults" "$OUT $ERR"
run 30 "$MICROPP" --help
grep -qE '^  bubble ' <<<"$OUT" && pass "bubble/listed in micropp --help" || fail "bubble/listed in micropp --help" "$OUT"

# --- the Gantt chart: the checked-in K=4, M=4 GPipe picture, no colour when not a terminal ---
run 30 "$MICROPP" bubble --schedule gpipe --stages 4 --micro-batches 4 --gantt
if [ "$RC" -eq 0 ] && diff <(printf '%s\n' "$OUT") "$ROOT/tests/expected/gantt_gpipe_k4_m4.txt" >"$TMP/diff"; then
    pass "gantt/K=4 M=4 gpipe equals tests/expected/gantt_gpipe_k4_m4.txt"
else fail "gantt/K=4 M=4 gpipe equals tests/expected/gantt_gpipe_k4_m4.txt" "exit $RC $ERR $(head -c 600 "$TMP/diff")"; fi
grep -q $'\033' <<<"$OUT" && fail "gantt/no colour codes when stdout is not a terminal" "escape found" || pass "gantt/no colour codes when stdout is not a terminal"

# 1F1B K=4 M=4: each stage's cells start where the simulator says (F=1, B=2, 4 characters a time unit)
run 30 "$MICROPP" bubble --schedule 1f1b --stages 4 --micro-batches 4 --gantt
why=$(printf '%s\n' "$OUT" | python3 -c '
import re, sys
rows = [l for l in sys.stdin.read().splitlines() if l.startswith("stage ")]
want = {  # (stage) -> [(label, start time)]: warm-up K-s-1 forwards, then one forward one backward
 3: [("F0",3),("B0",4),("F1",6),("B1",7),("F2",9),("B2",10),("F3",12),("B3",13)],
 0: [("F0",0),("F1",1),("F2",2),("F3",3),("B0",10),("B1",13),("B2",16),("B3",19)],
}
bad = []
if len(rows) != 4: bad.append("%d rows" % len(rows))
for s, cells in want.items():
    body = rows[s][len("stage 0 "):]
    got = [(m.group(1), m.start() / 4) for m in re.finditer(r"\[([FB]\d+) *\]", body)]
    if got != [(l, float(t)) for l, t in cells]: bad.append("stage %d: %r" % (s, got))
print("; ".join(bad))')
[ "$RC" -eq 0 ] && [ -z "$why" ] && pass "gantt/1f1b K=4 M=4 cells where the schedule puts them" || fail "gantt/1f1b K=4 M=4" "$why $ERR"

# colour on a terminal (script gives the command a pseudo-terminal), and NO_COLOR turns it off
if command -v script >/dev/null && script -qec true /dev/null >/dev/null 2>&1 </dev/null; then
    script -qec "$MICROPP bubble --schedule gpipe --stages 2 --micro-batches 2 --gantt" /dev/null >"$TMP/tty" 2>&1 </dev/null
    grep -q $'\033\[0;34m\[F0\]' "$TMP/tty" && pass "gantt/colour on a terminal" || fail "gantt/colour on a terminal" "$(head -c 300 "$TMP/tty" | od -c | head -5)"
    NO_COLOR=1 script -qec "$MICROPP bubble --schedule gpipe --stages 2 --micro-batches 2 --gantt" /dev/null >"$TMP/tty" 2>&1 </dev/null
    grep -q $'\033' "$TMP/tty" && fail "gantt/NO_COLOR" "escape found" || pass "gantt/NO_COLOR=1 turns colour off"
else skip "gantt/colour on a terminal" "no 'script' command, or it cannot open a pseudo-terminal here (a chroot without /dev/pts)"; fi

# --- zb-v and dualpipev draw too: both chunks of every micro-batch on each rank, the V's split passes ---
run 30 "$MICROPP" bubble --schedule zb-v,dualpipev --stages 2 --micro-batches 4 --svg "$TMP/v.svg" --gantt
if [ "$RC" -eq 0 ] && [ -f "$TMP/v.svg" ]; then
    why=$(python3 - "$TMP/v.svg" <<'PY'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
charts = [g for g in root.iter("{http://www.w3.org/2000/svg}g") if g.get("class") == "chart"]
bad = [] if len(charts) == 2 else ["%d charts" % len(charts)]
for g in charts:
    sl = [r for r in g.iter("{http://www.w3.org/2000/svg}rect") if r.get("class") == "slice"]
    k = [r.get("data-kind") for r in sl]
    if k.count("F") != 16 or k.count("B") + k.count("I") != 16 or k.count("I") != k.count("W"): bad.append("chart %s: %r" % (g.get("data-chart"), sorted(k)))
    fw = sorted((int(r.get("data-chunk")), int(r.get("data-mb"))) for r in sl if r.get("data-kind") == "F" and r.get("data-row") == "0")
    if fw != [(c, m) for c in range(2) for m in range(4)]: bad.append("rank 0 forwards %r" % fw)
print("; ".join(bad))
PY
)
    [ -z "$why" ] && grep -q 'zb-v | 2 stages x 2 virtual stages | 4 micro-batches' <<<"$OUT" && grep -q 'bubble 0.0400 simulated, 0.0400 formula' <<<"$OUT" \
        && pass "svg+gantt/zb-v, dualpipev K=2 M=4: both chunks of every micro-batch per rank, I = W, bubble 1/25" || fail "svg/zb-v, dualpipev" "$why $OUT"
else fail "svg/zb-v, dualpipev" "exit $RC: $ERR"; fi

# --- SVG: parses as XML, a rect per compute slice, charts stacked; written whole ---
run 30 "$MICROPP" bubble --schedule naive,gpipe,1f1b,interleaved,zb-h1 --stages 4 --micro-batches 4 --svg "$TMP/b.svg" --json
if [ "$RC" -eq 0 ] && [ -f "$TMP/b.svg" ]; then
    why=$(python3 - "$TMP/b.svg" <<'PY'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
charts = [g for g in root.iter("{http://www.w3.org/2000/svg}g") if g.get("class") == "chart"]
bad = []
if len(charts) != 5: bad.append("%d charts" % len(charts))
# naive, gpipe, 1f1b: F and B of 4 micro-batches on 4 stages; interleaved: on 2 chunks each; zb-h1: F, I, W
want = [["B"] * 16 + ["F"] * 16] * 3 + [["B"] * 32 + ["F"] * 32, ["F"] * 16 + ["I"] * 16 + ["W"] * 16]
for g, w in zip(charts, want):
    sl = [r for r in g.iter("{http://www.w3.org/2000/svg}rect") if r.get("class") == "slice"]
    kinds = sorted(r.get("data-kind") for r in sl)
    if kinds != w: bad.append("chart %s: %d slices %r" % (g.get("data-chart"), len(sl), kinds[:5]))
    fw = sorted((int(r.get("data-chunk")), int(r.get("data-mb"))) for r in sl if r.get("data-kind") == "F" and r.get("data-row") == "0")
    chunks = 2 if len(w) == 64 else 1
    if fw != [(c, m) for c in range(chunks) for m in range(4)]: bad.append("stage 0 forwards %r" % fw)
print("; ".join(bad))
PY
)
    [ -z "$why" ] && pass "svg/5 schedules x 4 stages: a slice per F, B, I, W (per chunk), valid XML" || fail "svg/slices" "$why"
    ls "$TMP" | grep -q '\.tmp' && fail "svg/no temporary file left" "$(ls "$TMP")" || pass "svg/no temporary file left"
else fail "svg/written" "exit $RC: $ERR"; fi

# --- every text inside the picture: the long titles (zb-v, dualpipev, interleaved) wrap within its width,
# the axis unit and the legend fit (tests/svg_check.py reckons each text's extent from its font size) ---
run 30 "$MICROPP" bubble --schedule all --stages 4 --micro-batches 8 --svg "$TMP/all.svg"
if [ "$RC" -eq 0 ]; then
    why=$(python3 "$ROOT/tests/svg_check.py" "$TMP/all.svg" --count)
    n=$(grep -oE '^[0-9]+ texts' <<<"$why" | cut -d' ' -f1)
    [ "${n:-0}" -ge 200 ] && [ "$(grep -vc ' texts$' <<<"$why")" -eq 0 ] \
        && pass "svg/every text inside the picture: titles wrapped, axis unit and legend fit ($n texts)" \
        || fail "svg/every text inside the picture" "$(head -c 600 <<<"$why")"
    t=$(grep -o '<tspan' "$TMP/all.svg" | wc -l)
    [ "$t" -gt 9 ] && pass "svg/long titles wrapped: $t title lines for 9 charts" || fail "svg/long titles wrapped" "$t title lines for 9 charts"
else fail "svg/every text inside the picture" "exit $RC: $ERR"; fi

# --- each chart on its own time axis: naive's span (the longest) squeezes no other chart; every chart's
# idle background spans the plot's whole width, and its axis ends at its own makespan ---
if [ -f "$TMP/all.svg" ]; then
    why=$(python3 - "$TMP/all.svg" <<'PY'
import sys, xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
charts = [g for g in ET.parse(sys.argv[1]).getroot().iter(ns + "g") if g.get("class") == "chart"]
bad, widths, ends = [], [], []
for g in charts:
    bg = [float(r.get("width")) for r in g.iter(ns + "rect") if r.get("fill") == "#eeeeee"]
    widths.append(max(bg))
    ends.append(max(float(r.get("x")) + float(r.get("width")) for r in g.iter(ns + "rect") if r.get("class") == "slice"))
if len(charts) < 9: bad.append("%d charts" % len(charts))
if max(widths) - min(widths) > 0.5: bad.append("backgrounds %r px wide" % sorted(set(widths)))
if max(ends) - min(ends) > 1.0: bad.append("last slices end at %r px" % sorted(set(ends)))
print("; ".join(bad))
PY
)
    [ -z "$why" ] && pass "svg/each schedule on its own time axis: every chart as wide as naive's" \
        || fail "svg/each schedule on its own time axis" "$why"
fi

# --- M up to train's 1048576 within the simulator's limit (K x v x M <= 4194304 passes) ---
run 60 "$MICROPP" bubble --schedule 1f1b --stages 2 --micro-batches 1048576 --json
[ "$RC" -eq 0 ] && [ "$(json_get '["rows"][0]["micro_batches"]')" = 1048576 ] && [ "$(json_get '["rows"][0]["makespan"]')" = 3145731 ] \
    && pass "large M/1f1b K=2 M=1048576 simulated (makespan 3M+1 of F=1, B=2: 3145731)" || fail "large M/1f1b K=2 M=1048576" "rc $RC $(printf '%s' "$ERR$OUT" | tail -c 300)"

# --- bad input: one line, exit 2, and no file written ---
e() { expect_user_error "$@"; }
e "bad/--stages reversed range" "--pp '8:2' is a reversed range" 10 "$MICROPP" bubble --stages 8:2
e "bad/--micro-batches reversed range" "micro-batches '32:1' is a reversed range" 10 "$MICROPP" bubble --micro-batches 32:1
e "bad/--stages empty" "--pp is empty" 10 "$MICROPP" bubble --stages ""
e "bad/--stages 0" "--pp '0': 0 is below 1" 10 "$MICROPP" bubble --stages 0
e "bad/--stages 0:4" "below 1" 10 "$MICROPP" bubble --stages 0:4
e "bad/--micro-batches 0" "micro-batches '0': 0 is below 1" 10 "$MICROPP" bubble --micro-batches 0
e "bad/--micro-batches -3" "below 1" 10 "$MICROPP" bubble --micro-batches -3
e "bad/--stages not a number" "--pp 'four' is not a number" 10 "$MICROPP" bubble --stages four
e "bad/--stages half range" "a range needs two numbers" 10 "$MICROPP" bubble --stages 2:
e "bad/--stages too large" "above the 1024 supported" 10 "$MICROPP" bubble --stages 5000
e "bad/a row past the simulator's limit, refused before any runs" \
    "bubble: 64 stages x 1 chunk x 1048576 micro-batches = 67108864 passes to simulate, more than the 4194304 the simulator takes: use --micro-batches 65536 or fewer at 64 stages" \
    10 "$MICROPP" bubble --schedule 1f1b --stages 2,64 --micro-batches 1048576
e "bad/--micro-batches above train's range" "micro-batches '1048577': 1048577 is above the 1048576 supported" 10 "$MICROPP" bubble --micro-batches 1048577
e "bad/--cost-f 0" "cost-f 0: a cost must be > 0" 10 "$MICROPP" bubble --cost-f 0
e "bad/--cost-b negative" "cost-b -2: a cost must be > 0" 10 "$MICROPP" bubble --cost-b -2
e "bad/--cost-f not a number" "cost-f expects a number" 10 "$MICROPP" bubble --cost-f fast
e "bad/--cost-comm negative" "cost-comm -1: a transfer time must be >= 0" 10 "$MICROPP" bubble --cost-comm -1
e "bad/--schedule unknown" "schedule 'zb' is not 'all' or a list of" 10 "$MICROPP" bubble --schedule zb
e "bad/--gantt with --json" "use one" 10 "$MICROPP" bubble --gantt --json
e "bad/--gantt of too many charts" "would draw 336 charts" 10 "$MICROPP" bubble --stages 1:4 --micro-batches 1:8 --gantt
e "bad/--svg unwritable folder" "cannot write --svg '/nonexistent/b.svg': No such file" 10 "$MICROPP" bubble --svg /nonexistent/b.svg
e "bad/--svg is a folder" "cannot write --svg '$TMP': Is a directory" 10 "$MICROPP" bubble --svg "$TMP"
mkdir -p "$TMP/ro" && chmod 500 "$TMP/ro"
if [ "$(id -u)" -ne 0 ]; then e "bad/--svg read-only folder" "Permission denied" 10 "$MICROPP" bubble --svg "$TMP/ro/b.svg"
elif ro=$(mktemp -d /tmp/micropp-ro.XXXXXX) && chmod 555 "$ro" && nobody_micropp; then
    # root writes anywhere: ask as user nobody (with a copy of micropp that nobody can reach)
    e "bad/--svg read-only folder" "Permission denied" 10 $NOBODY "$NOBODY_MICROPP" bubble --svg "$ro/b.svg"
    [ -z "$(ls "$ro")" ] || fail "bad/no file left behind in the read-only folder" "$(ls "$ro")"
    rm -rf "$ro"
else skip "bad/--svg read-only folder" "running as root and ${NOBODY_WHY:-could not make a read-only folder}"; rm -rf "${ro:-/nonexistent}"; fi
e "bad/unknown option" "unknown option '--colour'" 10 "$MICROPP" bubble --colour
[ -z "$(ls "$TMP/ro")" ] && pass "bad/no file left behind by a refused --svg" || fail "bad/no file left behind" "$(ls "$TMP/ro")"

# --model: each stage's peak activation bytes for a train config's model, equal to what train measures.
MODEL="$TMP/model.json"
echo '{"layers": 8, "hidden": 64, "inputs": 32, "classes": 4, "batch": 64}' > "$MODEL"
for s in 1f1b gpipe zb-h2 zb-v "interleaved --virtual-stages 2"; do
    name=${s%% *}
    run 30 "$MICROPP" bubble --schedule $s --stages 2 --micro-batches 4 --model "$MODEL" --json
    want=$(printf '%s' "$OUT" | python3 -c "import json,sys; print([float(x) for x in json.load(sys.stdin)['rows'][0]['peak_activation_bytes']])" 2>/dev/null)
    run 60 mpiexec -n 2 "$MICROPP" train --mode pp --config "$MODEL" --schedule $s --micro-batches 4 --steps 2 --log-every 0 --json
    got=$(printf '%s' "$OUT" | python3 -c "import json,sys; print([float(x) for x in json.load(sys.stdin)['peak_activation_bytes']])" 2>/dev/null)
    if [ -n "$want" ] && [ "$want" = "$got" ]; then pass "model/$name: bubble --model's activation bytes per stage equal train's measured $got"
    else fail "model/$name: bubble --model's activation bytes per stage equal train's" "bubble '$want', train '$got' (exit $RC)"; fi
done
run 30 "$MICROPP" bubble --schedule 1f1b --stages 2 --micro-batches 4 --model "$MODEL"
printf '%s' "$OUT" | grep -q 'activations MiB per stage' && printf '%s' "$OUT" | grep -qE '^1f1b +2 +4 .* [0-9.]+,[0-9.]+$' &&
    pass "model/the table gains a column of MiB per stage" || fail "model/the table gains a column of MiB per stage" "$OUT"
run 30 "$MICROPP" bubble --schedule 1f1b --stages 16 --micro-batches 4 --model "$MODEL" --json
[ "$(printf '%s' "$OUT" | python3 -c "import json,sys; print(json.load(sys.stdin)['rows'][0]['peak_activation_bytes'])" 2>/dev/null)" = None ] &&
    pass "model/more stages than layers: null, not a made-up figure" || fail "model/more stages than layers: null" "$OUT"
e "bad/--model missing" "model.missing" 10 "$MICROPP" bubble --model "$TMP/model.missing"
"$MICROPP" bubble --schedule 1f1b --stages 2 --micro-batches 4 --dump-csv "$TMP/s.csv" >/dev/null 2>&1
e "bad/--model with --schedule-file" "not --schedule-file's" 10 "$MICROPP" bubble --schedule-file "$TMP/s.csv" --model "$MODEL"
# A row asked for and not shown says why under the table (dualpipev at M < 2K was dropped without a word).
run 10 "$MICROPP" bubble --schedule 1f1b,dualpipev --pp 4 --micro-batches 4
if [ "$RC" -eq 0 ] && grep -qE '^1f1b +4 +4 ' <<<"$OUT" && ! grep -qE '^dualpipev ' <<<"$OUT" \
   && grep -qE '^# left out: dualpipev 4 stages x 4 micro-batches: .*[0-9]' <<<"$OUT"; then
    pass "table/a row left out is named under the table, with why"
else fail "table/a row left out is named" "rc $RC: $(tail -3 <<<"$OUT")"; fi
