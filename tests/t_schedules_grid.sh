#!/usr/bin/env bash
# tests/t_schedules_grid.sh: the schedules beyond 1F1B over MPI, the half of tests/t_schedules.sh that
# needs no monolith: every (K, M) zb-h1, interleaved and looped-bfs accept runs to the end; the text and
# JSON summaries (chunks per rank, theory, I and W medians); one line and exit 2 for what they cannot run;
# micropp bubble's charts of them; the trace's chunk names; checkpoints per chunk resumed across layouts.
# (Split from t_schedules.sh so that the two halves run side by side: issue 37, make test.)
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
SMALL="--hidden 32 --batch 24 --steps 2 --log-every 0"

# every (K, M) the schedules accept runs to the end
bad=""
for n in 2 3 4; do for m in 1 2 3 5 6 8; do
    run 60 mpiexec -n $n "$MICROPP" train --mode pp --schedule zb-h1 --micro-batches $m --layers 8 --hidden 16 --batch 120 --steps 2 --log-every 0 --json
    [ "$RC" -eq 0 ] || bad="$bad zb-h1/K=$n/M=$m(rc=$RC)"
    if [ $((m % n)) -eq 0 ]; then for v in 2 3; do
        [ $((n * v)) -le 8 ] || continue
        run 60 mpiexec -n $n "$MICROPP" train --mode pp --schedule interleaved --virtual-stages $v --micro-batches $m --layers 8 --hidden 16 --batch 120 --steps 2 --log-every 0 --json
        [ "$RC" -eq 0 ] || bad="$bad interleaved/K=$n/M=$m/v=$v(rc=$RC)"
    done; fi
    run 60 mpiexec -n $n "$MICROPP" train --mode pp --schedule looped-bfs --virtual-stages 2 --micro-batches $m --layers 8 --hidden 16 --batch 120 --steps 2 --log-every 0 --json
    [ "$RC" -eq 0 ] || bad="$bad looped-bfs/K=$n/M=$m(rc=$RC)"
done; done
[ -z "$bad" ] && pass "grid/zb-h1 and looped-bfs (v=2) for K in 2..4, M in {1,2,3,5,6,8}; interleaved for every M % K == 0, v in {2,3}" || fail "grid" "$bad"

# the text summary: chunks per rank in the header and the table
run 60 mpiexec -n 2 "$MICROPP" train --mode pp --schedule interleaved --virtual-stages 2 --micro-batches 4 --layers 8 --hidden 32 --batch 24 --steps 3 --partition 3,2,2,1
if [ "$RC" -eq 0 ] && grep -qE '^  stage 0: layers 0-2 \| 5-6 \(virtual stages 0, 2\)$' <<<"$OUT" && grep -qE '^  stage 1: layers 3-4 \| 7-7 \(virtual stages 1, 3\) \+ head$' <<<"$OUT" \
   && grep -qE '^1 +3-4,7-7 +[0-9.]+ +0\.111 ' <<<"$OUT"; then pass "summary/interleaved: chunks per rank, theory 1/9"
else fail "summary/interleaved: chunks per rank" "$OUT"; fi
run 60 mpiexec -n 2 "$MICROPP" train --mode pp --schedule zb-h1 --micro-batches 4 --layers 8 --hidden 32 --batch 24 --steps 3
if [ "$RC" -eq 0 ] && grep -qE '^stage +layers +measured +theory +simulated +F ms +I ms +W ms +peak in-flight +peak deferred W +peak activations' <<<"$OUT" \
   && grep -qE '^1 +4-7 +[0-9.]+ +0\.077 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +1 +2 ' <<<"$OUT"; then pass "summary/zb-h1: theory 1/13, I and W medians, deferred W column"
else fail "summary/zb-h1" "$OUT"; fi

# bad input: one line, exit 2, quickly, on every rank
P="$MICROPP train --mode pp --layers 8 --hidden 16 --batch 24 --steps 2"
expect_user_error "bad/--virtual-stages 0" "--virtual-stages = 0 is out of range: use a value in \[1, 64\]" 20 mpiexec -n 2 $P --schedule interleaved --virtual-stages 0
expect_user_error "bad/--virtual-stages with 1f1b" "--virtual-stages applies to --schedule interleaved or looped-bfs, not 1f1b: drop it or add --schedule interleaved" 20 mpiexec -n 2 $P --schedule 1f1b --virtual-stages 2
expect_user_error "bad/--virtual-stages with zb-h1" "--virtual-stages applies to --schedule interleaved or looped-bfs, not zb-h1" 20 mpiexec -n 2 $P --schedule zb-h1 --virtual-stages 2
expect_user_error "bad/--virtual-stages outside pp" "--virtual-stages applies to a pipeline \(--pp > 1\), and this run is pp 1 x dp 1 x tp 1" 20 "$MICROPP" train --virtual-stages 2
expect_user_error "bad/interleaved with 1 chunk" "interleaved needs --virtual-stages >= 2 \(got 1; .*use --schedule 1f1b\)" 20 mpiexec -n 2 $P --schedule interleaved --virtual-stages 1
expect_user_error "bad/looped-bfs with 1 chunk" "looped-bfs needs --virtual-stages >= 2 \(got 1; with 1 chunk per rank it is gpipe: use --schedule gpipe\)" 20 mpiexec -n 2 $P --schedule looped-bfs --virtual-stages 1
expect_user_error "bad/dualpipev M < 2K" "dualpipev needs --micro-batches >= 2 x 4 ranks = 8 \(DualPipeV's own limit\), got 6: use --micro-batches 8 or --schedule zb-v" 30 mpiexec -n 4 $P --schedule dualpipev --micro-batches 6
expect_user_error "bad/zb-v more chunks than layers" "zb-v holds 2 chunks per rank: 4 ranks x 2 = 8 chunks but only 6 layers" 30 mpiexec -n 4 ${P/--layers 8/--layers 6} --schedule zb-v --micro-batches 4
expect_user_error "bad/--virtual-stages with zb-v" "--virtual-stages applies to --schedule interleaved or looped-bfs, not zb-v" 20 mpiexec -n 2 $P --schedule zb-v --virtual-stages 2
expect_user_error "bad/more chunks than layers" "4 ranks x 2 virtual stages = 8 chunks but only 6 layers" 30 mpiexec -n 4 ${P/--layers 8/--layers 6} --schedule interleaved --micro-batches 4
expect_user_error "bad/partition per stage under interleaved" "has 2 entries but 2 ranks x 2 virtual stages make 4 chunks: give one layer count per chunk" 20 mpiexec -n 2 $P --schedule interleaved --micro-batches 4 --partition 4,4
expect_user_error "bad/partition empty chunk" "chunk 2 gets 0 layers; every chunk needs at least 1" 20 mpiexec -n 2 $P --schedule interleaved --micro-batches 4 --partition 4,3,0,1

# micropp bubble shows them: zb-h1's cells where the schedule puts them (F = I = W = 1, 4 characters a time unit)
run 30 "$MICROPP" bubble --schedule zb-h1 --stages 4 --micro-batches 8 --gantt
why=$(printf '%s\n' "$OUT" | python3 -c '
import re, sys
rows = [l for l in sys.stdin.read().splitlines() if l.startswith("stage ")]
want = {  # stage 0: 3 warm-up forwards + 1, waits for I0 from below, then F I W rounds; stage 3: F I (W deferred) from the start
 0: "F0 0,F1 1,F2 2,F3 3,I0 7,W0 8,F4 9,I1 10,W1 11,F5 12,I2 13,W2 14,F6 15,I3 16,W3 17,F7 18,I4 19,W4 20,I5 21,W5 22,I6 23,W6 24,I7 25,W7 26",
 3: "F0 3,I0 4,F1 5,I1 6,F2 7,I2 8,F3 9,I3 10,W0 11,F4 12,I4 13,W1 14,F5 15,I5 16,W2 17,F6 18,I6 19,W3 20,F7 21,I7 22,W4 23,W5 24,W6 25,W7 26",
}
bad = [] if len(rows) == 4 else ["%d rows" % len(rows)]
for s, cells in want.items():
    body = rows[s][len("stage 0 "):]
    got = ",".join("%s %d" % (m.group(1), m.start() // 4) for m in re.finditer(r"\[([FIW]\d+) *\]", body))
    if got != cells: bad.append("stage %d: %s" % (s, got))
print("; ".join(bad))')
[ "$RC" -eq 0 ] && [ -z "$why" ] && grep -q 'bubble 0.1111 simulated, 0.1111 formula' <<<"$OUT" && grep -q 'I backward input, W backward weight' <<<"$OUT" \
    && pass "bubble/zb-h1 K=4 M=8 Gantt: I and W cells where the schedule puts them, bubble 3/27" || fail "bubble/zb-h1 Gantt" "$why $OUT $ERR"
# zb-h2's parallelogram: stage s starts at s and ends at 3M+s, no idle cell in between (F = I = W = 1)
run 30 "$MICROPP" bubble --schedule zb-h2 --stages 4 --micro-batches 8 --gantt
why=$(printf '%s\n' "$OUT" | python3 -c '
import re, sys
rows = [l[len("stage 0 "):] for l in sys.stdin.read().splitlines() if l.startswith("stage ")]
bad = [] if len(rows) == 4 else ["%d rows" % len(rows)]
for s, body in enumerate(rows):
    cells = [m.start() // 4 for m in re.finditer(r"\[[FIW]\d+ *\]", body)]
    if cells != list(range(s, 24 + s)): bad.append("stage %d: cells at %s" % (s, cells))
print("; ".join(bad))')
[ "$RC" -eq 0 ] && [ -z "$why" ] && grep -q 'bubble 0.1111 simulated, 0.1111 formula | peak in-flight 7,5,3,1' <<<"$OUT" \
    && pass "bubble/zb-h2 K=4 M=8 Gantt: stage s busy from s to 24+s without a gap, bubble 3/27, peak in-flight 7,5,3,1" || fail "bubble/zb-h2 Gantt" "$why $OUT $ERR"
run 60 mpiexec -n 4 "$MICROPP" train --mode pp --schedule zb-h2 --micro-batches 8 --layers 8 $SMALL --json
python3 - "$OUT" <<'PY' && pass "summary/zb-h2 json: theory 3/27, peak in-flight 2(K-s-1)+1, 2s+1 deferred W" || fail "summary/zb-h2 json" "rc $RC $OUT $(printf '%s' "$ERR" | tail -2)"
import json, sys
d = json.loads(sys.argv[1])
sys.exit(0 if abs(d["bubble_theory"] - 3 / 27) < 1e-12 and d["peak_inflight"] == [7, 5, 3, 1] and d["peak_deferred_w"] == [1, 3, 5, 7] else 1)
PY
run 30 "$MICROPP" bubble --schedule interleaved --stages 2 --micro-batches 4 --gantt
[ "$RC" -eq 0 ] && grep -q '2 stages x 2 virtual stages' <<<"$OUT" && grep -qE '^stage 1 \.+\[F0 *\]\[F1 *\]\[F0\.1\]\[B0\.1 *\]' <<<"$OUT" \
    && grep -q 'bubble 0.1111 simulated, 0.1111 formula' <<<"$OUT" && grep -q "(.c: on the rank's chunk c)" <<<"$OUT" \
    && pass "bubble/interleaved K=2 M=4 Gantt: chunk 1 passes labelled .1, bubble 1/9" || fail "bubble/interleaved Gantt" "$OUT $ERR"
# looped-bfs breadth first: every forward of chunk 0, then of chunk 1, then the backwards from the last chunk, each
# chunk's micro-batches in reverse (PyTorch's order); rank 1 turns at once, rank 0 waits for the gradient (3 half-units)
run 30 "$MICROPP" bubble --schedule looped-bfs --stages 2 --micro-batches 4 --gantt
why=$(printf '%s\n' "$OUT" | python3 -c '
import re, sys
rows = [l[len("stage 0 "):] for l in sys.stdin.read().splitlines() if l.startswith("stage ")]
order = "F0 F1 F2 F3 F0.1 F1.1 F2.1 F3.1 B3.1 B2.1 B1.1 B0.1 B3 B2 B1 B0"
starts = {0: [0, 1, 2, 3, 4, 5, 6, 7, 11, 13, 15, 17, 19, 21, 23, 25], 1: [1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 13, 15, 17, 19, 21, 23]}
bad = [] if len(rows) == 2 else ["%d rows" % len(rows)]
for s, body in enumerate(rows):
    cells = [(m.group(1), m.start() // 6) for m in re.finditer(r"\[([FB][0-9.]+) *\]", body)]
    if " ".join(c for c, _ in cells) != order or [t for _, t in cells] != starts[s]: bad.append("stage %d: %r" % (s, cells))
print("; ".join(bad))')
[ "$RC" -eq 0 ] && [ -z "$why" ] && grep -q 'looped-bfs | 2 stages x 2 virtual stages | 4 micro-batches' <<<"$OUT" \
    && grep -q 'bubble 0.1111 simulated, 0.1111 formula | peak in-flight 8,8' <<<"$OUT" \
    && pass "bubble/looped-bfs K=2 M=4 Gantt: breadth first, backwards reversed, bubble 1/9 (interleaved's), 8 chunk passes in flight" \
    || fail "bubble/looped-bfs Gantt" "$why $OUT $ERR"
run 30 "$MICROPP" bubble --schedule interleaved,zb-h1 --stages 4 --micro-batches 8 --virtual-stages 3 --cost-b 3 --cost-w 1 --json
python3 - "$OUT" <<'PY' && pass "bubble/json: virtual_stages, zb-h1 I = cost-b - cost-w and its deferred W, no zb-h1 formula for unequal costs" || fail "bubble/json" "$OUT $ERR"
import json, sys
d = json.loads(sys.argv[1]); il, zb = d["rows"]
ok = (il["virtual_stages"] == 3 and il["bubble_formula"] == 3 / 27 == il["bubble_simulated"] and zb["bubble_formula"] is None
      and zb["peak_deferred_w"] == [1, 2, 3, 4] and d["cost_w"] == 1 and zb["bubble_simulated"] < 3 / 11)
sys.exit(0 if ok else 1)
PY
B="$MICROPP bubble --stages 4 --micro-batches 8"
expect_user_error "bubble-bad/--virtual-stages without interleaved" "--virtual-stages applies to --schedule interleaved" 10 $B --schedule 1f1b --virtual-stages 3
expect_user_error "bubble-bad/interleaved with 1 chunk" "interleaved needs --virtual-stages >= 2" 10 $B --schedule interleaved --virtual-stages 1
expect_user_error "bubble-bad/looped-bfs with 1 chunk" "looped-bfs needs --virtual-stages >= 2 \(with 1 chunk per rank it is gpipe\)" 10 $B --schedule looped-bfs --virtual-stages 1
expect_user_error "bubble-bad/dualpipev, no M >= 2K" "dualpipev needs --micro-batches >= 2 x --pp .*no \(K, M\) given qualifies" 10 ${B/--micro-batches 8/--micro-batches 6} --schedule dualpipev
expect_user_error "bubble-bad/--cost-w not below --cost-b" "--cost-w 2 is the weight part of the backward: use a value above 0 and below --cost-b 2" 10 $B --schedule zb-h1 --cost-w 2

# train shows them: the trace names chunks, the summary the I and W medians
run 120 mpiexec -n 2 "$MICROPP" train --mode pp --schedule interleaved --micro-batches 2 --layers 4 $SMALL --trace "$TMP/il.json" --json
python3 - "$TMP/il.json" <<'PY' && pass "trace/interleaved: every chunk pass named (F1.1), with a chunk arg" || fail "trace/interleaved" "rc $RC $(printf '%s' "$ERR" | tail -2)"
import json, sys
x = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X"]
names = {(e["pid"], e["name"]) for e in x}
ok = all((r, n) in names for r in (0, 1) for n in ("F0", "F1", "F0.1", "F1.1", "B0", "B0.1"))
ok = ok and all(e["args"].get("chunk") == 1 for e in x if e["name"] == "F1.1") and (0, "SEND_ACT 0 (chunk 1)") in names
sys.exit(0 if ok else 1)
PY
run 120 mpiexec -n 2 "$MICROPP" train --mode pp --schedule zb-h1 --micro-batches 4 --layers 4 $SMALL --json
python3 - "$OUT" <<'PY' && pass "summary/zb-h1 json: I and W medians, B = I + W, simulated from them" || fail "summary/zb-h1 json" "$OUT"
import json, sys
d = json.loads(sys.argv[1])
i, w, b = d["backward_input_ms_median"], d["backward_weight_ms_median"], d["backward_ms_median"]
sys.exit(0 if len(i) == len(w) == 2 and all(x > 0 for x in i + w) and all(abs(b[k] - i[k] - w[k]) < 1e-9 for k in range(2))
         and len(d["bubble_simulated"]) == 2 else 1)
PY

# checkpoints: interleaved writes a file per chunk (virtual stage); resuming it, in the same layout
# or another (zb-h1 on 2 ranks), continues the uninterrupted run
CK="--layers 8 --hidden 32 --classes 4 --batch 16 --samples 64 --micro-batches 4 --json --log-every 0"
run 90 mpiexec -n 2 "$MICROPP" train --mode pp --schedule interleaved $CK --steps 6; ref=$(json_get '["losses"]')
run 90 mpiexec -n 2 "$MICROPP" train --mode pp --schedule interleaved $CK --steps 3 --save "$TMP/il"
files=$(ls "$TMP/il" | grep -c 'safetensors$')
run 90 mpiexec -n 2 "$MICROPP" train --mode pp --schedule interleaved $CK --steps 6 --resume "$TMP/il"; same=$(json_get '["losses"]')
run 90 mpiexec -n 2 "$MICROPP" train --mode pp --schedule zb-h1 $CK --steps 6 --resume "$TMP/il"; other=$(json_get '["losses"]')
python3 - "$ref" "$same" "$other" "$files" <<'PY' && pass "ckpt/interleaved: 4 chunk files; resume == the uninterrupted run bit for bit, and within 1e-5 under zb-h1" || fail "ckpt/interleaved" "$ref | $same | $other | $files files $ERR"
import json, sys
ref, same, other = (json.loads(x) for x in sys.argv[1:4])
ok = int(sys.argv[4]) == 4 and same == ref[3:] and len(other) == 3 and all(abs(a - b) <= 1e-5 * abs(b) for a, b in zip(other, ref[3:]))
sys.exit(0 if ok else 1)
PY

# zb-v: the summary shows the V (rank 0 holds the first and the last chunk, and the head), and a
# checkpoint written under zb-v (a file per chunk, named by virtual stage) resumes under 1f1b and back,
# continuing the uninterrupted run (interleaved's, above)
run 60 mpiexec -n 2 "$MICROPP" train --mode pp --schedule zb-v --micro-batches 4 --layers 8 --hidden 32 --batch 24 --steps 2
if [ "$RC" -eq 0 ] && grep -qE '^  stage 0: layers 0-1 \| 6-7 \(virtual stages 0, 3\) \+ head$' <<<"$OUT" && grep -qE '^  stage 1: layers 2-3 \| 4-5 \(virtual stages 1, 2\)$' <<<"$OUT" \
   && grep -qE '^0 +0-1,6-7 +[0-9.]+ +0\.040 ' <<<"$OUT"; then pass "summary/zb-v: the V on the ranks, head on rank 0, theory 1/25"
else fail "summary/zb-v" "$OUT $ERR"; fi
CK2=$CK  # (the uninterrupted run: interleaved's above, which 1f1b's equals to 1e-5)
run 90 mpiexec -n 2 "$MICROPP" train --mode pp --schedule zb-v $CK2 --steps 3 --save "$TMP/zbv"
files=$(ls "$TMP/zbv" | grep -c 'safetensors$')
run 90 mpiexec -n 2 "$MICROPP" train --mode pp --schedule 1f1b $CK2 --steps 6 --resume "$TMP/zbv"; to1=$(json_get '["losses"]')
run 90 mpiexec -n 2 "$MICROPP" train --mode pp --schedule 1f1b $CK2 --steps 3 --save "$TMP/one"
run 90 mpiexec -n 2 "$MICROPP" train --mode pp --schedule zb-v $CK2 --steps 6 --resume "$TMP/one"; tov=$(json_get '["losses"]')
python3 - "$ref" "$to1" "$tov" "$files" <<'PY' && pass "ckpt/zb-v: 4 chunk files; zb-v -> 1f1b and 1f1b -> zb-v resumes continue the uninterrupted run (1e-5)" || fail "ckpt/zb-v" "$ref | $to1 | $tov | $files files $ERR"
import json, sys
ref, a, b = (json.loads(x) for x in sys.argv[1:4])
close = lambda xs: len(xs) == 3 and all(abs(x - y) <= 1e-5 * abs(y) for x, y in zip(xs, ref[3:]))
sys.exit(0 if int(sys.argv[4]) == 4 and close(a) and close(b) else 1)
PY
