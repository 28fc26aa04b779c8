#!/usr/bin/env bash
# tests/t_localsgd.sh: --sync-every H, local SGD / DiLoCo (axes/localsgd.c). H = 1 with --outer-lr 1 and
# --outer-momentum 0 under plain SGD is ddp (the replicas' mean move is ddp's step), on ddp and dp x tp;
# the default outer optimizer (Nesterov 0.7, 0.9) and H > 1 train otherwise; --verify checks step 1's loss
# and the replicas' averaged gradients against the monolith, and a wrong gradient fails it; a run resumed
# from an outer step's checkpoint repeats the uninterrupted losses bit for bit (the outer momentum and every
# replica's Adam moments in the rank's file); a checkpoint without them is refused, or resumed with
# --fresh-state (the momentum from zero); bad input is one line and exit 2.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
M=(--layers 4 --hidden 32 --batch 32 --samples 1024 --log-every 0 --json)
SGD=(--optimizer sgd --lr 0.1)
MEAN=(--outer-lr 1 --outer-momentum 0)

# ---- H = 1, outer lr 1, momentum 0, plain SGD: ddp ----
for layout in "--dp 2" "--dp 2 --tp 2"; do
    n=2; [[ $layout == *tp* ]] && n=4
    ddp=$(train_json $n $layout "${SGD[@]}" --steps 8)
    one=$(train_json $n $layout "${SGD[@]}" --steps 8 --sync-every 1 "${MEAN[@]}")
    if why=$(losses_close "$one" "$ddp" 1e-6 ddp); then pass "sync-every 1 is ddp ($layout)"
    else fail "sync-every 1 is ddp ($layout)" "$why ($one)"; fi
done
ddp=$(train_json 2 --dp 2 "${SGD[@]}" --steps 8)
nest=$(train_json 2 --dp 2 "${SGD[@]}" --steps 8 --sync-every 1)
if ! losses_close "$nest" "$ddp" 1e-4 ddp >/dev/null; then pass "the outer Nesterov step is no mean"
else fail "the outer Nesterov step is no mean" "its losses are ddp's"; fi
four=$(train_json 2 --dp 2 "${SGD[@]}" --steps 8 --sync-every 4 "${MEAN[@]}")
if ! losses_close "$four" "$ddp" 1e-4 ddp >/dev/null; then pass "H 4 steps alone"
else fail "H 4 steps alone" "its losses are ddp's"; fi

# ---- the report: outer steps every H, and the run's last ----
OUT=$(train_json 2 --dp 2 --steps 10 --sync-every 4)
got=$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(d["sync_every"], d["outer_steps"], d["outer_lr"], d["outer_momentum"], d["outer_bytes"])' "$OUT" 2>&1)
[ "$got" = "4 3 0.7 0.9 17160" ] && pass "json: sync_every 4, outer steps at 4, 8 and the last, 4290 floats each" \
    || fail "json: outer steps" "got '$got'"
run 120 mpiexec -n 2 "$MICROPP" train --dp 2 --layers 4 --hidden 32 --batch 32 --steps 10 --log-every 0 --sync-every 4
grep -q "local SGD: an outer step every 4 steps (Nesterov, lr 0.7, momentum 0.9)" <<<"$OUT" &&
    grep -q "^local SGD: 3 outer steps (every 4 steps)" <<<"$OUT" && pass "text: the header's and the summary's lines" \
    || fail "text: local SGD's lines" "$(head -c 600 <<<"$OUT")"

# ---- --verify: the replicas' averaged gradients against the monolith's ----
for layout in "--dp 2" "--dp 2 --pp 2 --micro-batches 2"; do
    n=2; [[ $layout == *pp* ]] && n=4
    run 120 mpiexec -n $n "$MICROPP" train "${M[@]}" $layout --steps 2 --sync-every 2 --verify
    [ "$RC" -eq 0 ] && python3 -c 'import json,sys; assert json.loads(sys.argv[1])["verify_ok"] is True' \
        "$(tail -n 1 <<<"$OUT")" 2>/dev/null && pass "verify ok ($layout)" || fail "verify ($layout)" "exit $RC: $ERR"
done
run 120 env MICROPP_FAULT=0:1:grad mpiexec -n 2 "$MICROPP" train "${M[@]}" --dp 2 --steps 2 --sync-every 2 --verify
[ "$RC" -eq 1 ] && pass "verify fails on a wrong gradient" || fail "verify fails on a wrong gradient" "exit $RC"

# ---- checkpoints: an outer step's resumes bit for bit ----
whole=$(train_json 2 --dp 2 --steps 14 --sync-every 4)
train_json 2 --dp 2 --steps 8 --sync-every 4 --save "$TMP/ck" >/dev/null
ls "$TMP/ck"/localsgd-rank-00000.safetensors "$TMP/ck"/localsgd-rank-00001.safetensors >/dev/null 2>&1 &&
    pass "a file per rank" || fail "a file per rank" "$(ls "$TMP/ck")"
rest=$(train_json 2 --dp 2 --steps 14 --sync-every 4 --resume "$TMP/ck")
python3 -c 'import json,sys; a, b = json.loads(sys.argv[1])["losses"], json.loads(sys.argv[2])["losses"]
sys.exit(0 if a[8:] == b and len(b) == 6 else 1)' "$whole" "$rest" 2>/dev/null &&
    pass "resume: steps 9-14 bit for bit" || fail "resume: steps 9-14 bit for bit" "$whole vs $rest"
# without the moments each replica kept, the resumed run is another
cp -r "$TMP/ck" "$TMP/ck1" && cp "$TMP/ck1/localsgd-rank-00000.safetensors" "$TMP/ck1/localsgd-rank-00001.safetensors"
other=$(train_json 2 --dp 2 --steps 14 --sync-every 4 --resume "$TMP/ck1")
python3 -c 'import json,sys; a, b = json.loads(sys.argv[1])["losses"], json.loads(sys.argv[2])["losses"]
sys.exit(0 if a[8:] != b else 1)' "$whole" "$other" 2>/dev/null &&
    pass "resume: replica 1 reads its own moments" || fail "resume: replica 1 reads its own moments" "$other"
run 120 mpiexec -n 2 "$MICROPP" train "${M[@]}" --dp 2 --steps 10 --resume "$TMP/ck"
[ "$RC" -eq 0 ] && pass "ddp resumes local SGD's checkpoint" || fail "ddp resumes local SGD's checkpoint" "$ERR"

# ---- bad input: one line, exit 2 ----
B=(--dp 2 --layers 4 --hidden 32 --batch 32 --steps 4 --log-every 0)
train_json 2 --dp 2 --steps 8 --save "$TMP/plain" >/dev/null
expect_user_error "a checkpoint without local SGD's state" "holds no local SGD state.*rank.*or with --fresh-state" 120 \
    mpiexec -n 2 "$MICROPP" train --dp 2 --layers 4 --hidden 32 --batch 32 --samples 1024 --steps 10 --sync-every 2 --resume "$TMP/plain"
# --fresh-state: the outer momentum starts at zero, so the plain checkpoint resumes, and the local SGD one trains
# otherwise than when its momentum is read
fresh=$(train_json 2 --dp 2 --steps 10 --sync-every 2 --resume "$TMP/plain" --fresh-state)
[[ $fresh == "{"* ]] && pass "--fresh-state resumes a checkpoint without local SGD's state" ||
    fail "--fresh-state resumes a checkpoint without local SGD's state" "$fresh"
fresh=$(train_json 2 --dp 2 --steps 14 --sync-every 4 --resume "$TMP/ck" --fresh-state)
python3 -c 'import json,sys; a, b = json.loads(sys.argv[1])["losses"], json.loads(sys.argv[2])["losses"]
sys.exit(0 if a[8:] != b and len(b) == 6 else 1)' "$whole" "$fresh" 2>/dev/null &&
    pass "--fresh-state reads no outer momentum" || fail "--fresh-state reads no outer momentum" "$fresh"
expect_user_error "--fresh-state without --resume" "--fresh-state starts the state of --compress or --sync-every afresh" \
    60 mpiexec -n 2 "$MICROPP" train "${B[@]}" --sync-every 2 --fresh-state
expect_user_error "H 0" "--sync-every = 0 is out of range" 60 mpiexec -n 2 "$MICROPP" train "${B[@]}" --sync-every 0
expect_user_error "outer flags without H" "add --sync-every H" 60 mpiexec -n 2 "$MICROPP" train "${B[@]}" --outer-lr 0.5
expect_user_error "with ZeRO" "--zero 1 shards it" 60 mpiexec -n 2 "$MICROPP" train "${B[@]}" --sync-every 2 --zero 1
expect_user_error "with --bucket-mb" "in no buckets: drop --bucket-mb and --ddp-sync" 60 \
    mpiexec -n 2 "$MICROPP" train "${B[@]}" --sync-every 2 --bucket-mb 4
expect_user_error "with --clip-grad" "--clip-grad" 60 mpiexec -n 2 "$MICROPP" train "${B[@]}" --sync-every 2 --clip-grad 1
expect_user_error "save-every off the outer steps" "use --save-every 8" 60 \
    mpiexec -n 2 "$MICROPP" train "${B[@]}" --sync-every 4 --save "$TMP/x" --save-every 6
expect_user_error "without replicas" "--sync-every applies to data parallelism" 60 \
    "$MICROPP" train --layers 4 --hidden 32 --steps 4 --sync-every 2

# ---- the price (planner/predict.c): the whole model all-reduced once every H steps, exposed (so H 1 costs
# more than ddp, whose buckets hide behind the backward; whether H 4 beats ddp depends on the profile's link) ----
pred() {
    run 240 mpiexec -n 2 "$MICROPP" train --profile "$ROOT/configs/profiles/cpu-2ranks.json" --config "$ROOT/configs/medium.json" \
        --dp 2 --steps 1 --eval-samples 64 --log-every 0 --json "$@"
    [ "$RC" -eq 0 ] && json_get '["predicted_step_ms"]' || echo "exit $RC"
}
p_ddp=$(pred) p1=$(pred --sync-every 1) p2=$(pred --sync-every 2) p4=$(pred --sync-every 4)
python3 -c 'import sys; d, a, b, c = map(float, sys.argv[1:5])
sys.exit(0 if c < b < a and abs((a - b) - 2 * (b - c)) < 1e-6 * a and a > d else 1)' "$p_ddp" "$p1" "$p2" "$p4" 2>/dev/null &&
    pass "price: the outer all-reduce / H (H 1, 2, 4: $p1 $p2 $p4 ms; ddp $p_ddp)" ||
    fail "price: the outer all-reduce / H" "ddp $p_ddp, H 1 $p1, 2 $p2, 4 $p4"
