#!/usr/bin/env bash
# tests/t_plot.sh: `micropp plot` (plot.c) draws --metrics logs: four panels (loss train and test,
# test accuracy, learning rate, step time), a curve per run and series in the run's colour, the
# points where the lines say, against steps or epochs; every text inside the picture
# (tests/svg_check.py); the PNG rsvg-convert makes shows each run's colour (tests/png_colours.py);
# bad input (no file, a line that is no metrics line, --x epochs without epochs, a folder) is one
# line and exit 2 with no picture left behind, a failed write exit 1.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)

# two runs written here, so that every figure is known: a falls linearly, b more slowly; 2 epochs of 10 steps
python3 - "$TMP" <<'PY'
import json, os, sys
for name, slope in (("a", 0.1), ("b", 0.05)):
    with open(os.path.join(sys.argv[1], name + ".jsonl"), "w") as f:
        for step in range(1, 21):
            f.write(json.dumps({"step": step, "loss": 3 - slope * step, "lr": 0.001 * (1 - step / 40),
                                "step_ms": 2.0, "samples_s": 16000.0}) + "\n")
            if step % 10 == 0:
                f.write(json.dumps({"epoch": step // 10, "step": step, "train_loss": 3 - slope * step,
                                    "test_loss": 3.2 - slope * step, "accuracy": 0.4 + slope * step / 10,
                                    "time_s": 0.02}) + "\n")
PY

# --- the picture: panels, a curve per run and series in its colour, points where the lines say ---
run 30 "$MICROPP" plot "$TMP/a.jsonl" "$TMP/b.jsonl" --svg "$TMP/ab.svg"
if [ "$RC" -eq 0 ]; then
    why=$(python3 - "$TMP/ab.svg" 2>&1 <<'PY'
import sys, xml.etree.ElementTree as ET
NS = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[1]).getroot()
bad = []
panels = {g.get("data-panel"): g for g in root.iter(NS + "g") if g.get("class") == "panel"}
want = ["loss: train (solid), test (dashed)", "test accuracy (%)", "learning rate", "step time (ms)"]
if list(panels) != want: bad.append("panels %s" % list(panels))
A, B = "#4e79a7", "#e15759"
def lines(panel, colour, dashed):
    return [[tuple(map(float, p.split(","))) for p in l.get("points").split()] for l in panels[panel].iter(NS + "polyline")
            if l.get("stroke") == colour and bool(l.get("stroke-dasharray")) == dashed]
for panel, n_pts, dashed in ((want[0], 20, False), (want[0], 2, True), (want[1], 2, False), (want[2], 20, False), (want[3], 20, False)):
    for c in (A, B):
        got = lines(panel, c, dashed)
        if len(got) != 1 or len(got[0]) != n_pts: bad.append("%s %s%s: %s" % (panel, c, " dashed" if dashed else "", [len(g) for g in got]))
if not bad:
    la, lb = lines(want[0], A, False)[0], lines(want[0], B, False)[0]
    # the loss falls: y grows down the picture, step by step; a ends lower than b; both end at the same x
    if not all(p[1] < q[1] for p, q in zip(la, la[1:])): bad.append("a's loss does not fall")
    if not la[-1][1] > lb[-1][1]: bad.append("a (0.1/step) should end below b (0.05/step)")
    if la[-1][0] != lb[-1][0] or not all(p[0] < q[0] for p, q in zip(la, la[1:])): bad.append("x not increasing with steps")
    # the test loss at epochs 1 and 2 sits at steps 10 and 20: the x of the train loss's points 10 and 20
    ta = lines(want[0], A, True)[0]
    if [p[0] for p in ta] != [la[9][0], la[19][0]]: bad.append("test loss x %s, steps 10/20 at %s" % (ta, (la[9][0], la[19][0])))
    # linear data: equal steps in y for equal steps in loss (to the 0.1 px the file keeps)
    d = [q[1] - p[1] for p, q in zip(la, la[1:])]
    if max(d) - min(d) > 0.25: bad.append("a's loss is not drawn linearly: dy %s..%s" % (min(d), max(d)))
legend = [t.text for t in root.iter(NS + "text") if t.text in ("a", "b")]
if legend != ["a", "b"]: bad.append("legend %s" % legend)
print("; ".join(bad))
PY
) || why="the check itself failed: ${why:-no output}"
    [ -z "$why" ] && pass "plot/two runs: 4 panels, a curve per run and series in its colour, points where the lines say" \
        || fail "plot/two runs" "$why"
    why=$(python3 "$ROOT/tests/svg_check.py" "$TMP/ab.svg" --count)
    n=$(grep -oE '^[0-9]+ texts' <<<"$why" | cut -d' ' -f1)
    [ "${n:-0}" -ge 30 ] && [ "$(grep -vc ' texts$' <<<"$why")" -eq 0 ] && pass "plot/every text inside the picture ($n texts)" \
        || fail "plot/every text inside the picture" "$why"
else fail "plot/two runs" "exit $RC: $ERR"; fi

# --- looking at it: the PNG rsvg-convert makes shows both runs' colours in quantity ---
if command -v rsvg-convert >/dev/null; then
    if rsvg-convert "$TMP/ab.svg" -o "$TMP/ab.png" 2>"$TMP/rsvg.err"; then
        got=$(python3 "$ROOT/tests/png_colours.py" "$TMP/ab.png" '#4e79a7' '#e15759' '#59a14f' 2>&1)
        python3 -c 'import sys; l=sys.argv[1].split("\n"); n=[int(x.split()[1]) for x in l[1:]]; sys.exit(not (l[0].startswith("960x") and n[0] > 300 and n[1] > 300 and n[2] == 0))' "$got" \
            && pass "plot/the PNG rsvg-convert draws shows each run's colour ($(tr '\n' ' ' <<<"$got"))" \
            || fail "plot/the PNG shows each run's colour" "$got"
    else fail "plot/rsvg-convert draws the SVG" "$(head -c 300 "$TMP/rsvg.err")"; fi
else skip "plot/the PNG shows each run's colour" "rsvg-convert is not installed (apt-get install librsvg2-bin)"; fi

# --- against epochs: the epoch points at x = 1 and 2 on the axis; a long title and file name stay inside ---
LONG=$(printf 'a-run-with-a-long-name-%.0s' $(seq 7))  # 161 characters: wider than the picture
cp "$TMP/a.jsonl" "$TMP/$LONG.jsonl"
run 30 "$MICROPP" plot "$TMP/$LONG.jsonl" \
    "$TMP/b.jsonl" --x epochs --title "$(printf 'a title long enough to wrap %.0s' $(seq 8))" --svg "$TMP/ep.svg"
if [ "$RC" -eq 0 ]; then
    why=$(python3 - "$TMP/ep.svg" 2>&1 <<'PY'
import sys, xml.etree.ElementTree as ET
NS = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[1]).getroot()
acc = [g for g in root.iter(NS + "g") if g.get("data-panel") == "test accuracy (%)"][0]
ticks = {t.text: float(t.get("x")) for t in acc.iter(NS + "text") if t.text in ("0", "1", "2")}
pts = [tuple(map(float, p.split(","))) for p in next(acc.iter(NS + "polyline")).get("points").split()]
bad = []
if sorted(ticks) != ["0", "1", "2"]: bad.append("ticks %s" % ticks)
elif [p[0] for p in pts] != [ticks["1"], ticks["2"]]: bad.append("accuracy at x %s, epochs 1 and 2 at %s" % (pts, ticks))
if "epoch" not in [t.text for t in acc.iter(NS + "text")]: bad.append("no axis name 'epoch'")
print("; ".join(bad))
PY
) || why="the check itself failed: ${why:-no output}"
    [ -z "$why" ] && pass "plot/--x epochs: the epochs' points at 1 and 2 on the axis" || fail "plot/--x epochs" "$why"
    why=$(python3 "$ROOT/tests/svg_check.py" "$TMP/ep.svg")
    t=$(grep -o '<tspan' "$TMP/ep.svg" | wc -l)
    [ -z "$why" ] && [ "$t" -ge 6 ] && pass "plot/a long title wraps ($t title lines) and a long name is cut: all inside" \
        || fail "plot/long title and name inside" "${why:-only $t title lines}"
else fail "plot/--x epochs" "exit $RC: $ERR"; fi

# --- learning rates 20x apart: a log scale, on which the smaller run's schedule shows; closer ones stay linear ---
python3 -c 'import json; [print(json.dumps({"step": s, "loss": 1.0, "lr": 0.05, "step_ms": 2.0})) for s in range(1, 21)]' > "$TMP/c.jsonl"
run 30 "$MICROPP" plot "$TMP/a.jsonl" "$TMP/c.jsonl" --svg "$TMP/ac.svg"
why=$(python3 - "$TMP/ac.svg" "$TMP/ab.svg" 2>&1 <<'PY'
import sys, xml.etree.ElementTree as ET
NS = "{http://www.w3.org/2000/svg}"
def lr_panel(path):
    return [g for g in ET.parse(path).getroot().iter(NS + "g") if g.get("data-panel") == "learning rate"][0]
bad = []
g = lr_panel(sys.argv[1])
title = "".join(t.text or "" for t in g.iter(NS + "tspan"))
frame = next(g.iter(NS + "rect")); bottom = float(frame.get("y")) + float(frame.get("height"))
a = [float(p.split(",")[1]) for p in [l for l in g.iter(NS + "polyline") if l.get("stroke") == "#4e79a7"][0].get("points").split()]
labels = [t.text for t in g.iter(NS + "text") if t.text and t.text.startswith("1e")]
if "(log scale)" not in title: bad.append("title %r" % title)
if not min(bottom - y for y in a) > 30: bad.append("a's rates (1e-3 .. 5e-4) squashed at the bottom: %s px above it" % min(bottom - y for y in a))
if "1e-3" not in labels: bad.append("decade labels %s" % labels)
t2 = "".join(t.text or "" for t in lr_panel(sys.argv[2]).iter(NS + "tspan"))
if "log" in t2: bad.append("a and b (2x apart) drawn on a log scale: %r" % t2)
print("; ".join(bad))
PY
) || why="the check itself failed: ${why:-no output}"
[ "$RC" -eq 0 ] && [ -z "$why" ] && pass "plot/learning rates 50x apart on a log scale (each run's schedule shows), 2x apart linear" \
    || fail "plot/learning rates on a log scale" "exit $RC: $why $ERR"

# --- a file still being written (its last line cut short) plots what is complete; a real train's log ---
head -c -20 "$TMP/a.jsonl" > "$TMP/live.jsonl"
run 30 "$MICROPP" train --steps 12 --log-every 3 --metrics "$TMP/real.jsonl"
run 30 "$MICROPP" plot "$TMP/live.jsonl" "$TMP/real.jsonl" --svg "$TMP/live.svg"
[ "$RC" -eq 0 ] && [ "$(grep -c '<polyline' "$TMP/live.svg")" -ge 6 ] && [ -z "$(python3 "$ROOT/tests/svg_check.py" "$TMP/live.svg")" ] \
    && pass "plot/a log still being written, and train's own: drawn" || fail "plot/a log still being written" "exit $RC: $ERR"
run 30 "$MICROPP" plot "$TMP/a.jsonl" --svg -
[ "$RC" -eq 0 ] && python3 -c 'import sys, xml.etree.ElementTree as ET; ET.fromstring(sys.stdin.read())' <<<"$OUT" \
    && pass "plot/--svg -: the picture on standard output" || fail "plot/--svg -" "exit $RC: $ERR"

# --- a steps-based run's evaluations (--eval-every: a test loss and accuracy without an epoch) draw the test
# curves; --smooth 2 draws the loss as the mean of each 2 points (a loss alternating 2 and 4: 3 from the
# second point on) over the raw curve drawn faint ---
python3 - "$TMP/ev.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for step in range(1, 21):
        f.write(json.dumps({"step": step, "loss": 2 + 2 * (step % 2), "lr": 0.001, "step_ms": 2.0, "samples_s": 1.0}) + "\n")
        if step % 10 == 0: f.write(json.dumps({"step": step, "test_loss": 3.5, "accuracy": 0.5 + step / 100}) + "\n")
PY
run 30 "$MICROPP" plot "$TMP/ev.jsonl" --smooth 2 --svg "$TMP/ev.svg"
why=$(python3 - "$TMP/ev.svg" 2>&1 <<'PY'
import sys, xml.etree.ElementTree as ET
NS = "{http://www.w3.org/2000/svg}"
panels = {g.get("data-panel"): g for g in ET.parse(sys.argv[1]).getroot().iter(NS + "g") if g.get("class") == "panel"}
bad = []
loss = panels["loss: train (solid), test (dashed)"]
pts = lambda l: [tuple(map(float, p.split(","))) for p in l.get("points").split()]
lines = list(loss.iter(NS + "polyline"))
smooth = [pts(l) for l in lines if l.get("class") == "smoothed"]
raw = [pts(l) for l in lines if l.get("stroke-opacity") and not l.get("stroke-dasharray")]
test = [pts(l) for l in lines if l.get("stroke-dasharray")]
if len(smooth) != 1 or len(smooth[0]) != 20 or len({round(y, 1) for x, y in smooth[0][1:]}) != 1: bad.append("smoothed %s" % smooth)
if len(raw) != 1 or len({round(y, 1) for x, y in raw[0]}) != 2: bad.append("raw %s" % raw)
if len(test) != 1 or len(test[0]) != 2: bad.append("test loss %s" % test)
acc = [pts(l) for l in panels["test accuracy (%)"].iter(NS + "polyline")]
if len(acc) != 1 or len(acc[0]) != 2 or not acc[0][1][1] < acc[0][0][1]: bad.append("accuracy %s" % acc)
title = " ".join("".join(t.itertext()) for t in loss.iter(NS + "text"))
if "mean of 2" not in title: bad.append("title %r" % title[:120])
print("; ".join(bad))
PY
)
[ "$RC" -eq 0 ] && [ -z "$why" ] && pass "plot/--eval-every's points draw the test loss and accuracy; --smooth 2: the mean over the faint raw loss" \
    || fail "plot/evaluations and --smooth" "exit $RC $why $ERR"

# --- bad input: one line, exit 2, and no picture left behind ---
echo '{"step":1,"loss":1}' > "$TMP/bad.jsonl"; echo 'not json' >> "$TMP/bad.jsonl"
expect_user_error "plot/a line that is no metrics line: named, exit 2" "bad.jsonl: line 2 is no metrics line" 30 \
    "$MICROPP" plot "$TMP/a.jsonl" "$TMP/bad.jsonl" --svg "$TMP/no1.svg"
printf '{"step":1,"loss":1}\n{"step":2,\0"loss":1}\n{"step":3,"loss":1}\n' > "$TMP/nul.jsonl"  # (not the later lines dropped)
expect_user_error "plot/a NUL byte inside a log: its line named" "nul.jsonl: line 2 holds a NUL byte" 30 \
    "$MICROPP" plot "$TMP/nul.jsonl" --svg "$TMP/no1.svg"
: > "$TMP/empty.jsonl"
expect_user_error "plot/an empty log" "empty.jsonl has no metrics lines" 30 "$MICROPP" plot "$TMP/empty.jsonl" --svg "$TMP/no2.svg"
expect_user_error "plot/a missing file" "plot: cannot open .*nothere.jsonl" 30 "$MICROPP" plot "$TMP/nothere.jsonl" --svg "$TMP/no3.svg"
run 30 "$MICROPP" train --steps 4 --metrics "$TMP/steps.jsonl"
expect_user_error "plot/--x epochs needs epoch lines" "steps.jsonl has no epoch lines \\(train with --epochs\\)" 30 \
    "$MICROPP" plot "$TMP/steps.jsonl" --x epochs --svg "$TMP/no4.svg"
expect_user_error "plot/no file" "plot: no metrics file given" 30 "$MICROPP" plot --svg "$TMP/no5.svg"
expect_user_error "plot/no --svg" "plot: --svg OUT.svg is missing" 30 "$MICROPP" plot "$TMP/a.jsonl"
expect_user_error "plot/--svg a folder" "cannot write --svg '$TMP': Is a directory" 30 "$MICROPP" plot "$TMP/a.jsonl" --svg "$TMP"
ls "$TMP"/no*.svg 2>/dev/null | grep -q . && fail "plot/no picture left behind by bad input" "$(ls "$TMP"/no*.svg)" \
    || pass "plot/no picture left behind by bad input"
ls "$TMP" | grep -q '\.tmp' && fail "plot/no temporary file left" "$(ls "$TMP")" || pass "plot/no temporary file left"
expect_failure "plot/a full disk: exit 1" "writing --svg '/dev/full' failed: No space left on device" 30 \
    "$MICROPP" plot "$TMP/a.jsonl" --svg /dev/full

# --- values one ulp apart end (they once drew ticks without end: 562 MB in 8 s, a temporary left); a
# long log is drawn in n log n (the step time's median was an insertion sort: 100,000 steps took 10 s) ---
printf '{"step":1,"loss":1.0}\n{"step":2,"loss":1.0000000000000002}\n' > "$TMP/ulp.jsonl"
mkdir "$TMP/ulp"
run 30 "$MICROPP" plot "$TMP/ulp.jsonl" --svg "$TMP/ulp/ulp.svg"
size=$(stat -c %s "$TMP/ulp/ulp.svg" 2>/dev/null || echo 0)
[ "$RC" -eq 0 ] && [ "$size" -gt 0 ] && [ "$size" -lt 100000 ] && [ "$(ls "$TMP/ulp")" = ulp.svg ] \
    && python3 "$ROOT/tests/svg_check.py" "$TMP/ulp/ulp.svg" >/dev/null \
    && pass "plot/losses one ulp apart: a picture of $size bytes, no temporary left" \
    || fail "plot/losses one ulp apart" "exit $RC, $size bytes, $(ls "$TMP/ulp"): $ERR"
python3 -c "
import sys
with open(sys.argv[1], 'w') as f:
    for i in range(1, 300001): f.write('{\"step\":%d,\"loss\":%.7g,\"lr\":0.001,\"step_ms\":%.4f,\"samples_s\":3000}\n' % (i, 1 / i, 1 + (i * 7919 % 1000) / 1000))
" "$TMP/long.jsonl"
cpu=$( { TIMEFORMAT=%U; time timeout -k 5 120 "$MICROPP" plot "$TMP/long.jsonl" --svg "$TMP/long.svg" >/dev/null 2>&1; } 2>&1 )
python3 -c "import sys; sys.exit(not float(sys.argv[1]) < 10)" "$cpu" && [ -s "$TMP/long.svg" ] \
    && pass "plot/a log of 300,000 steps in $cpu s of CPU (under 10)" || fail "plot/a log of 300,000 steps in under 10 s of CPU" "$cpu s"
rm -f "$TMP/long.jsonl" "$TMP/long.svg"

# --- a title with control characters and bytes that are not UTF-8 still makes well-formed XML (U+FFFD
# stands in for them; an accent and <, & stay as they were) ---
run 30 "$MICROPP" plot "$TMP/a.jsonl" --title "$(printf 'a\001b\377c \303\251 <&>')" --svg "$TMP/ctl.svg"
why=$(python3 -c "
import sys, xml.dom.minidom as m
m.parse(sys.argv[1]); t = open(sys.argv[1], encoding='utf-8').read()
sys.exit(0 if 'a\ufffdb\ufffdc \u00e9 &lt;&amp;&gt;' in t else 'title not found')" "$TMP/ctl.svg" 2>&1)
[ "$RC" -eq 0 ] && [ -z "$why" ] && pass "plot/a title with control characters and invalid UTF-8: well-formed, U+FFFD for them" \
    || fail "plot/a title with control characters and invalid UTF-8" "exit $RC: $why $ERR"

# --- --x time: a point at the seconds its run's steps took up to it (500, 500, 1000, 2000 ms: evaluations
# after steps 2 and 4 at 1 s and 4 s); a log without a line per step is refused ---
printf '%s\n' '{"step":1,"loss":1,"lr":0.1,"step_ms":500}' '{"step":2,"loss":0.9,"lr":0.1,"step_ms":500}' \
    '{"step":2,"test_loss":1,"accuracy":0.5}' '{"step":3,"loss":0.8,"lr":0.1,"step_ms":1000}' \
    '{"step":4,"loss":0.7,"lr":0.1,"step_ms":2000}' '{"step":4,"test_loss":0.9,"accuracy":0.6}' >"$TMP/time.jsonl"
run 30 "$MICROPP" plot "$TMP/time.jsonl" --x time --svg "$TMP/time.svg"
why=$(python3 - "$TMP/time.svg" 2>&1 <<'PY'
import sys, xml.etree.ElementTree as ET
NS = "{http://www.w3.org/2000/svg}"
acc = [g for g in ET.parse(sys.argv[1]).getroot().iter(NS + "g") if g.get("data-panel") == "test accuracy (%)"][0]
x0 = [float(t.get("x")) for t in acc.iter(NS + "text") if t.text == "0"][0]
pts = [float(p.split(",")[0]) for p in next(acc.iter(NS + "polyline")).get("points").split()]
texts = [t.text for t in acc.iter(NS + "text")]
print("" if len(pts) == 2 and abs((pts[0] - x0) / (pts[1] - x0) - 0.25) < 0.01 and "seconds of steps" in texts
      else "points %s, 0 at %s, texts %s" % (pts, x0, texts))
PY
) || why="the check itself failed: ${why:-no output}"
[ "$RC" -eq 0 ] && [ -z "$why" ] && pass "plot/--x time: the evaluations at 1 s and 4 s of steps" || fail "plot/--x time" "exit $RC: $why $ERR"
grep -v '"step":3,' "$TMP/time.jsonl" >"$TMP/gap.jsonl"
expect_user_error "plot/--x time needs a line per step" "gap.jsonl has no line for step 3: train with --metrics-every 1" 30 \
    "$MICROPP" plot "$TMP/gap.jsonl" --x time --svg "$TMP/gap.svg"

# --- the pictures the pages show (drawn by bubble and plot, committed) keep every text inside too ---
bad="" n=0
for f in "$ROOT"/docs/*.svg "$ROOT"/bench/*.svg; do
    [ -e "$f" ] || continue
    n=$((n + 1)); why=$(python3 "$ROOT/tests/svg_check.py" "$f" 2>&1) || bad="$bad ${f#$ROOT/}: $(head -n 1 <<<"$why");"
done
[ "$n" -ge 3 ] && [ -z "$bad" ] && pass "svg/the $n pictures in docs/ and bench/ keep every text inside" \
    || fail "svg/the pictures in docs/ and bench/ keep every text inside" "$n checked;$bad"
