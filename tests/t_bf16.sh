#!/usr/bin/env bash
# tests/t_bf16.sh: --precision bf16 end to end: bad values refused (exit 2, one line), the header
# and --json name oneDNN's kernel, every mode and schedule passes --verify against the bf16
# monolith reference, and checkpoints (fp32 master weights) resume bf16 -> bf16 exactly and
# bf16 <-> fp32 across precisions.
source "$(dirname "$0")/lib.sh"
S="--layers 6 --hidden 32 --classes 4 --batch 16 --log-every 0"

if ! run 60 "$MICROPP" train $S --steps 1 --precision bf16 || [ "$RC" -ne 0 ]; then
    if printf '%s' "$ERR" | grep -q "built without oneDNN"; then
        expect_user_error "bf16/a build without oneDNN names the package" "libdnnl-dev" 30 "$MICROPP" train $S --precision bf16
        skip "bf16/the rest" "this micropp was built without oneDNN"
        exit 0
    fi
fi

# ---- bad input ----
expect_user_error "bf16/--precision fp16 refused" "precision.*fp16.*fp32.bf16" 30 "$MICROPP" train $S --precision fp16
echo '{"precision": "half"}' >"$TMP/bad.json"
expect_user_error "bf16/config key precision: half refused" "precision.*half" 30 "$MICROPP" train $S --config "$TMP/bad.json"
expect_user_error "bf16/--precision fp16 refused on every rank of a pipeline" "precision.*fp16" 60 mpiexec -n 2 "$MICROPP" train $S --mode pp --precision fp16

# ---- what the run says ----
run 60 "$MICROPP" train $S --steps 2 --precision bf16
if [ "$RC" -eq 0 ] && printf '%s' "$OUT" | grep -qE "^precision bf16: .*onednn [0-9]+\.[0-9]+\.[0-9]+ [a-z]"; then pass "bf16/header names the oneDNN version and kernel"
else fail "bf16/header names the oneDNN version and kernel" "exit $RC: $(printf '%s' "$OUT" | head -c 400)"; fi
run 60 "$MICROPP" train $S --steps 2 --precision bf16 --json
if [ "$RC" -eq 0 ] && [ "$(json_get '["precision"]')" = bf16 ] && json_get '["onednn"]' | grep -q "^onednn "; then pass "bf16/--json precision and onednn keys"
else fail "bf16/--json precision and onednn keys" "exit $RC: $(printf '%s' "$OUT" | head -c 400)"; fi
BF=$(json_get '["losses"]')
run 60 "$MICROPP" train $S --steps 2 --json
FP=$(json_get '["losses"]')
if [ "$(json_get '["precision"]')" = fp32 ] && [ "$BF" != "$FP" ]; then pass "bf16/fp32 stays the default, and bf16 really rounds (losses differ)"
else fail "bf16/fp32 stays the default, and bf16 really rounds (losses differ)" "fp32 $FP bf16 $BF"; fi

# ---- every mode passes --verify against the bf16 reference ----
verify() {  # verify NAME RANKS ARGS...
    local name=$1 n=$2; shift 2
    if [ "$n" = 1 ]; then run 120 "$MICROPP" train $S --steps 1 --precision bf16 --verify --json "$@"
    else run 120 mpiexec -n "$n" "$MICROPP" train $S --steps 1 --precision bf16 --verify --json "$@"; fi
    local ok; ok=$([ "$RC" -eq 0 ] && json_get '["verify_ok"]' 2>/dev/null)
    if [ "$ok" = True ]; then pass "bf16/verify $name"
    else fail "bf16/verify $name" "exit $RC: $(printf '%s' "$OUT$ERR" | tail -c 400)"; fi
}
verify "monolith, grad-accum 2" 1 --grad-accum 2
verify "manual 3 parts" 1 --mode manual --parts 3
verify "pp naive" 2 --mode pp --schedule naive
verify "pp gpipe, checkpointing" 2 --mode pp --schedule gpipe --checkpoint-activations
verify "pp 1f1b M=4" 2 --mode pp --schedule 1f1b --micro-batches 4
verify "pp interleaved v=2" 2 --mode pp --schedule interleaved --virtual-stages 2 --micro-batches 4
verify "pp zb-h1, checkpointing" 2 --mode pp --schedule zb-h1 --micro-batches 4 --checkpoint-activations
verify "pp zb-v" 2 --mode pp --schedule zb-v --micro-batches 4
verify "pp dualpipev" 2 --mode pp --schedule dualpipev --micro-batches 4
verify "ddp bucketed" 2 --mode ddp
verify "ddp naive, ZeRO-1" 2 --mode ddp --ddp-sync naive --zero 1
verify "hybrid 2x2" 4 --mode hybrid --pp 2 --dp 2 --micro-batches 2

# ---- checkpoints: fp32 master weights, so precision may change at a resume ----
C="$S --samples 64 --json"
losses() { json_get '["losses"]'; }
run 120 "$MICROPP" train $C --steps 8 --precision bf16; REF_BF=$(losses)
run 120 "$MICROPP" train $C --steps 8; REF_FP=$(losses)
run 120 "$MICROPP" train $C --steps 4 --precision bf16 --save "$TMP/bf"
run 120 "$MICROPP" train $C --steps 8 --precision bf16 --resume "$TMP/bf"
want=$(python3 -c "import json,sys; print(json.dumps(json.loads(sys.argv[1])[4:]))" "$REF_BF")
if [ "$RC" -eq 0 ] && [ "$(losses)" = "$want" ]; then pass "bf16/resume bf16 -> bf16: 4+4 steps == 8 steps, bit for bit"
else fail "bf16/resume bf16 -> bf16: 4+4 steps == 8 steps, bit for bit" "exit $RC: $(losses) vs $want"; fi
close() {  # close NAME GOT_JSON REF_JSON RTOL: element-wise within RTOL
    python3 -c "
import json,sys
a,b=json.loads(sys.argv[1]),json.loads(sys.argv[2])
sys.exit(0 if len(a)==len(b) and all(abs(x-y)<=float(sys.argv[3])*abs(y) for x,y in zip(a,b)) else 1)" "$2" "$3" "$4"
}
run 120 "$MICROPP" train $C --steps 8 --resume "$TMP/bf"
got=$(losses); want=$(python3 -c "import json,sys; print(json.dumps(json.loads(sys.argv[1])[4:]))" "$REF_FP")
if [ "$RC" -eq 0 ] && [ "$(json_get '["precision"]')" = fp32 ] && close x "$got" "$want" 0.02; then pass "bf16/resume bf16 checkpoint in fp32: within 2% of the fp32 run"
else fail "bf16/resume bf16 checkpoint in fp32: within 2% of the fp32 run" "exit $RC: $got vs $want $(printf '%s' "$ERR" | head -c 200)"; fi
run 120 "$MICROPP" train $C --steps 4 --save "$TMP/fp"
run 120 "$MICROPP" train $C --steps 8 --precision bf16 --resume "$TMP/fp"
got=$(losses); want=$(python3 -c "import json,sys; print(json.dumps(json.loads(sys.argv[1])[4:]))" "$REF_BF")
if [ "$RC" -eq 0 ] && close x "$got" "$want" 0.02; then pass "bf16/resume fp32 checkpoint in bf16: within 2% of the bf16 run"
else fail "bf16/resume fp32 checkpoint in bf16: within 2% of the bf16 run" "exit $RC: $got vs $want $(printf '%s' "$ERR" | head -c 200)"; fi
run 120 mpiexec -n 2 "$MICROPP" train $C --mode pp --micro-batches 4 --steps 8 --precision bf16 --resume "$TMP/bf"
got=$(losses)
if [ "$RC" -eq 0 ] && close x "$got" "$(python3 -c "import json,sys; print(json.dumps(json.loads(sys.argv[1])[4:]))" "$REF_BF")" 0.02; then pass "bf16/resume a monolith bf16 checkpoint as a bf16 pipeline"
else fail "bf16/resume a monolith bf16 checkpoint as a bf16 pipeline" "exit $RC: $got $(printf '%s' "$ERR" | head -c 200)"; fi
