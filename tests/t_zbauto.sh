# tests/t_zbauto.sh: --schedule zb-auto, the schedule searched for over the simulator (schedule_auto.c).
# bubble: its row, no worse than zb-h2 at zb-h2's memory and zb-h1 at zb-h1's, the paper's ZB-2p
# (0.0029) with 2K of room and its memory model, at most 0.01 at F = I = W, --max-inflight obeyed, --dump-csv; train: zb-auto passes --verify on 2 and
# 4 ranks, and its dumped file runs back with the same losses; misuse is one line and exit 2.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
T="--mode pp --layers 8 --hidden 32 --batch 24 --steps 3 --log-every 0 --json"
PAPER="--cost-f 29.718 --cost-b 49.371 --cost-w 19.927 --cost-comm 0.527"

# the paper's costs (Table 9, 6.2B model, 8 stages): zb-auto with zb-h2's room (15) against zb-h2,
# with zb-h1's (8) against zb-h1; and F = I = W with room for 2K on 4 stages
run 60 "$MICROPP" bubble --schedule zb-h2,zb-auto --stages 8 --micro-batches 24 $PAPER --max-inflight 15 --json
python3 - "$OUT" <<'PY' && pass "bubble/zb-auto with 15 of room: overlapped and synchronous bubble no worse than zb-h2's, peak <= 15" || fail "bubble/zb-auto vs zb-h2" "rc $RC $OUT $ERR"
import json, sys
h2, a = json.loads(sys.argv[1])["rows"]
assert a["schedule"] == "zb-auto" and h2["schedule"] == "zb-h2"
assert a["bubble_overlapped_steps"] <= h2["bubble_overlapped_steps"] and a["bubble_simulated"] <= h2["bubble_simulated"]
assert max(a["peak_inflight"]) <= 15 and a["bubble_formula"] is None
PY
run 60 "$MICROPP" bubble --schedule zb-h1,zb-auto --stages 8 --micro-batches 24 $PAPER --max-inflight 8 --json
python3 - "$OUT" <<'PY' && pass "bubble/zb-auto with 8 of room (the paper's ZB-1p): no worse than zb-h1" || fail "bubble/zb-auto vs zb-h1" "rc $RC $OUT $ERR"
import json, sys
h1, a = json.loads(sys.argv[1])["rows"]
assert a["bubble_overlapped_steps"] <= h1["bubble_overlapped_steps"] and max(a["peak_inflight"]) <= 8
PY
# room for 2p (16): with micropp's memory (a deferred W keeps a whole micro-batch) below zb-h2's
# 0.0698; with the paper's (its W keeps 32h of 34h+5as bytes: 0.4324 at h 4096, 32 heads) its ZB-2p, 0.0029
run 60 "$MICROPP" bubble --schedule zb-h2,zb-auto --stages 8 --micro-batches 24 $PAPER --json
python3 - "$OUT" <<'PY' && pass "bubble/zb-auto with room for 2p at the paper's costs: overlapped bubble 0.0607, below zb-h2's 0.0698" || fail "bubble/zb-auto 2p" "rc $RC $OUT $ERR"
import json, sys
h2, a = json.loads(sys.argv[1])["rows"]
assert round(a["bubble_overlapped_steps"], 4) == 0.0607 < h2["bubble_overlapped_steps"], a
PY
run 60 "$MICROPP" bubble --schedule zb-auto --stages 8 --micro-batches 24 $PAPER --w-memory 0.4324 --json
b=$(json_get '["rows"][0]["bubble_overlapped_steps"]')
python3 -c "import sys; sys.exit(0 if round($b, 4) == 0.0029 else 1)" 2>/dev/null \
    && pass "bubble/zb-auto --w-memory 0.4324, room for 2p: the paper's ZB-2p, overlapped bubble $b <= 0.01" \
    || fail "bubble/zb-auto the paper's ZB-2p" "got '$b' rc $RC $ERR"
for km in "4 8" "4 16" "8 24"; do
    set -- $km
    run 60 "$MICROPP" bubble --schedule zb-auto --stages "$1" --micro-batches "$2" --json
    b=$(json_get '["rows"][0]["bubble_overlapped_steps"]')
    python3 -c "import sys; sys.exit(0 if $b <= 0.01 else 1)" 2>/dev/null \
        && pass "bubble/zb-auto K=$1 M=$2, F = I = W, room for 2K: overlapped bubble $b <= 0.01" \
        || fail "bubble/zb-auto K=$1 M=$2 <= 0.01" "got '$b' rc $RC $ERR"
done

# --max-inflight 1: one micro-batch at a time on every stage
run 30 "$MICROPP" bubble --schedule zb-auto --stages 3 --micro-batches 4 --max-inflight 1 --dump-csv -
[ "$RC" -eq 0 ] && [ "$(head -1 <<<"$OUT")" = "0F0,0I0,0W0,0F1,0I1,0W1,0F2,0I2,0W2,0F3,0I3,0W3" ] \
    && pass "bubble/zb-auto --max-inflight 1 --dump-csv: rank 0 runs F I W of one micro-batch at a time" \
    || fail "bubble/zb-auto --max-inflight 1" "rc $RC $OUT $ERR"
# --max-inflight 0 is the default its help names (2 x stages), given or not (issue 37: it was refused)
run 30 "$MICROPP" bubble --schedule zb-auto --stages 3 --micro-batches 8 --dump-csv -
dflt=$OUT
run 30 "$MICROPP" bubble --schedule zb-auto --stages 3 --micro-batches 8 --max-inflight 0 --dump-csv -
[ "$RC" -eq 0 ] && [ -n "$dflt" ] && [ "$OUT" = "$dflt" ] && pass "bubble/zb-auto --max-inflight 0: the default, 2 x stages" \
    || fail "bubble/zb-auto --max-inflight 0" "rc $RC $ERR"
run 60 mpiexec -n 2 "$MICROPP" train --mode pp --schedule zb-auto --micro-batches 4 --max-inflight 0 --steps 1 --layers 4 --hidden 16 --batch 8 --log-every 0
[ "$RC" -eq 0 ] && pass "train/--max-inflight 0 (the default) accepted" || fail "train/--max-inflight 0 (the default) accepted" "rc $RC $ERR"

# train runs it: --verify on 2 and 4 ranks (uneven on 4)
run 120 mpiexec -n 2 "$MICROPP" train $T --schedule zb-auto --micro-batches 4 --verify
[ "$RC" -eq 0 ] && [ "$(json_get '["verify_ok"]')" = True ] && [ "$(json_get '["schedule"]')" = zb-auto ] \
    && pass "train/zb-auto K=2 M=4: --verify" || fail "train/zb-auto K=2 --verify" "rc $RC $(printf '%s' "$ERR" | tail -2)"
run 120 mpiexec -n 4 "$MICROPP" train $T --schedule zb-auto --micro-batches 8 --partition 3,2,2,1 --verify
[ "$RC" -eq 0 ] && [ "$(json_get '["verify_ok"]')" = True ] \
    && pass "train/zb-auto K=4 M=8 uneven 3,2,2,1: --verify" || fail "train/zb-auto K=4 --verify" "rc $RC $(printf '%s' "$ERR" | tail -2)"
# train --max-inflight: the search's limit; less room, less activation memory, a larger bubble
run 120 mpiexec -n 4 "$MICROPP" train $T --schedule zb-auto --micro-batches 8; wide=$OUT
run 120 mpiexec -n 4 "$MICROPP" train $T --schedule zb-auto --micro-batches 8 --max-inflight 2 --verify
python3 - "$wide" "$OUT" <<'PY' && pass "train/zb-auto --max-inflight 2: --verify, at most 2 in flight, less activation memory and more bubble than with 2K" || fail "train/zb-auto --max-inflight 2" "rc $RC $(printf '%s' "$ERR" | tail -2)"
import json, sys
wide, tight = (json.loads(a) for a in sys.argv[1:3])
assert tight["verify_ok"] is True and max(tight["peak_inflight"]) <= 2 < max(wide["peak_inflight"])
assert all(t < w for t, w in zip(tight["peak_activation_bytes"], wide["peak_activation_bytes"]))
assert tight["bubble_theory"] > wide["bubble_theory"]
PY
expect_user_error "bad/train --max-inflight without zb-auto" "--max-inflight is zb-auto's memory limit, not 1f1b's" 60 \
    mpiexec -n 2 "$MICROPP" train $T --micro-batches 4 --max-inflight 2
run 120 mpiexec -n 4 "$MICROPP" train ${T/--mode pp/--mode hybrid} --pp 2 --dp 2 --schedule zb-auto --micro-batches 4 --verify
[ "$RC" -eq 0 ] && [ "$(json_get '["verify_ok"]')" = True ] \
    && pass "train/zb-auto hybrid 2 x 2: --verify (every replica builds the same lists)" || fail "train/zb-auto hybrid" "rc $RC $(printf '%s' "$ERR" | tail -2)"

# bubble's lists, dumped, run in train as a file: the losses of train's own zb-auto (every W runs in
# micro-batch order, so the gradients sum alike whatever the order found)
run 120 mpiexec -n 2 "$MICROPP" train $T --schedule zb-auto --micro-batches 6; a=$(json_get '["losses"]')
run 30 "$MICROPP" bubble --schedule zb-auto --stages 2 --micro-batches 6 --dump-csv "$TMP/auto.csv"
run 120 mpiexec -n 2 "$MICROPP" train $T --schedule-file "$TMP/auto.csv"; b=$(json_get '["losses"]')
[ "$RC" -eq 0 ] && [ -n "$a" ] && [ "$a" = "$b" ] && pass "train/zb-auto dumped by bubble, run as a file: the losses of train --schedule zb-auto, $b" \
    || fail "train/zb-auto as a file" "zb-auto $a file $b rc $RC $(printf '%s' "$ERR" | tail -2)"

# measured costs: a run's --json summary gives bubble each stage's F, I and W (--costs-from); its
# zb-auto list, dumped, runs back in train under --verify
run 120 mpiexec -n 4 "$MICROPP" train $T --schedule zb-h1 --micro-batches 8 --partition 3,2,2,1
printf '%s' "$OUT" > "$TMP/run.json"
run 60 "$MICROPP" bubble --costs-from "$TMP/run.json" --schedule zb-h2,zb-auto --json
python3 - "$TMP/run.json" "$OUT" <<'PY' && pass "bubble/--costs-from a train run: each stage's medians, its stages and micro-batches; zb-auto no worse than zb-h2" || fail "bubble/--costs-from" "rc $RC $OUT $ERR"
import json, sys
run, b = json.load(open(sys.argv[1])), json.loads(sys.argv[2])
assert b["stage_f"] == run["forward_ms_median"] and b["stage_w"] == run["backward_weight_ms_median"]
h2, a = b["rows"]
assert a["stages"] == 4 and a["micro_batches"] == 8 and a["bubble_overlapped_steps"] <= h2["bubble_overlapped_steps"]
PY
run 60 "$MICROPP" bubble --costs-from "$TMP/run.json" --schedule zb-auto --dump-csv "$TMP/measured.csv"
run 120 mpiexec -n 4 "$MICROPP" train $T --schedule-file "$TMP/measured.csv" --partition 3,2,2,1 --verify
[ "$RC" -eq 0 ] && [ "$(json_get '["verify_ok"]')" = True ] \
    && pass "train/zb-auto from measured costs, as a file: --verify" || fail "train/measured zb-auto" "rc $RC $(printf '%s' "$ERR" | tail -2)"
expect_user_error "bad/--costs-from missing" "cannot read --costs-from '.*nope.json': No such file" 30 \
    "$MICROPP" bubble --costs-from "$TMP/nope.json" --schedule zb-auto
# a run whose schedule does not split the backward (1f1b here) has no I and W: each is half its B (issue 37)
printf '{"stages": 2, "micro_batches": 4, "forward_ms_median": [1, 2], "backward_ms_median": [2, 6]}' > "$TMP/whole.json"
run 30 "$MICROPP" bubble --costs-from "$TMP/whole.json" --schedule 1f1b,zb-auto --json
[ "$RC" -eq 0 ] && [ "$(json_get '["stage_i"]')" = "[1, 3]" ] && [ "$(json_get '["stage_w"]')" = "[1, 3]" ] \
    && pass "bubble/--costs-from a 1f1b run (no I, W medians): I = W = B/2" || fail "bubble/--costs-from a 1f1b run" "rc $RC $ERR"
printf '{"stages": 2, "forward_ms_median": [1, 2]}' > "$TMP/half.json"
expect_user_error "bad/--costs-from without the backward medians" "has no backward_ms_median of 2 positive numbers" 30 \
    "$MICROPP" bubble --costs-from "$TMP/half.json" --schedule zb-auto
expect_user_error "bad/--costs-from with --stages" "--costs-from gives each stage's costs and the stages: drop --pp" 30 \
    "$MICROPP" bubble --costs-from "$TMP/run.json" --stages 4
expect_user_error "bad/--costs-from with --schedule-file" "drop --costs-from" 30 \
    "$MICROPP" bubble --costs-from "$TMP/run.json" --schedule-file "$TMP/measured.csv"

# misuse
expect_user_error "bad/--max-inflight without zb-auto" "--max-inflight is zb-auto's memory limit: add zb-auto" 30 \
    "$MICROPP" bubble --schedule zb-h2 --stages 4 --micro-batches 8 --max-inflight 4
expect_user_error "bad/--w-memory without zb-auto" "--w-memory is zb-auto's memory limit: add zb-auto" 30 \
    "$MICROPP" bubble --schedule 1f1b --stages 4 --micro-batches 8 --w-memory 0.5
expect_user_error "bad/--w-memory 2" "w-memory" 30 \
    "$MICROPP" bubble --schedule zb-auto --stages 4 --micro-batches 8 --w-memory 2
expect_user_error "bad/--max-inflight -1 (0 is the default, 2 x stages)" "--max-inflight = -1 is out of range: use a value in \[0," 30 \
    "$MICROPP" bubble --schedule zb-auto --stages 4 --micro-batches 8 --max-inflight -1
run 30 "$MICROPP" bubble --stages 4 --micro-batches 8 --json
[ "$RC" -eq 0 ] && ! grep -q zb-auto <<<"$OUT" && pass "bubble/--schedule all leaves zb-auto out (a search, asked by name)" \
    || fail "bubble/all without zb-auto" "rc $RC"
