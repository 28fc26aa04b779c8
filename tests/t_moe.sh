#!/usr/bin/env bash
# tests/t_moe.sh: mixture-of-experts layers (--experts, moe.c; docs/experts.md). The same model in PyTorch
# (tests/moe_torch.py: micropp's weights, the same rows and routing rule) trains to the same losses and
# weights on the monolith, a pipeline and ddp; --verify passes on the layouts whose every expert is local
# (pp 1f1b, gpipe, interleaved, zb-h1, zb-v, dualpipev, checkpointing, ddp, ZeRO-1, grad-accum, manual
# parts, hybrids, bf16, --moe-every 2);
# checkpoints save and resume MoE layers across layouts and refuse another expert count; the layouts
# it does not run (--tp, ZeRO-2/3 under split backwards without --ep, --deterministic) and bad values are one line, exit 2.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
B=(--layers 4 --hidden 16 --batch 32 --log-every 0)  # the model; M: it with 4 experts, 3 steps
M=("${B[@]}" --experts 4 --steps 3)

# ---- PyTorch: the same model, routing and losses ----
if /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; then
    while IFS='|' read -r name args <&3; do  # (fd 3: mpiexec reads stdin)
        # shellcheck disable=SC2086  # (args: words)
        r=$(/usr/bin/python3 "$ROOT/tests/moe_torch.py" "$MICROPP" "$TMP" $args 2>&1)
        if python3 -c 'import json,sys; r=json.loads(sys.argv[1]); sys.exit(0 if r["loss_rel"] < 2e-6 and
r["weights_rel"] < 5e-5 and r["tensors"] == r["expected"] else 1)' "$r" 2>/dev/null; then
            pass "moe/$name: PyTorch's losses (within 2e-6) and weights after 6 Adam steps (within 5e-5 of each tensor's largest)"
        else fail "moe/$name: equals PyTorch" "$r"; fi
    done 3<<'EOF'
monolith|
pp 1f1b 2 M=4 (groups of 16 rows)|-n 2 --group 16 --mode pp --micro-batches 4
ddp 2 (groups of 32 rows)|-n 2 --group 32 --mode ddp
pp zb-v 2 M=4 (split backward: an MoE layer's whole backward at I)|-n 2 --group 16 --mode pp --schedule zb-v --micro-batches 4
EOF
else skip "moe/equals PyTorch" "no torch for /usr/bin/python3 (apt-get install python3-torch)"; fi

# ---- --verify on every layout whose experts are all local ----
while IFS='|' read -r name n args <&3; do  # (fd 3: mpiexec reads stdin)
    # shellcheck disable=SC2086
    if [ "$n" -gt 1 ]; then run 240 mpiexec -n "$n" "$MICROPP" train "${M[@]}" --verify $args
    else run 240 "$MICROPP" train "${M[@]}" --verify $args; fi
    if [ "$RC" = 0 ] && grep -q -- "-> ok" <<<"$OUT"; then pass "moe/--verify $name"
    else fail "moe/--verify $name" "rc $RC: $(tail -c 400 <<<"$OUT$ERR")"; fi
done 3<<'EOF'
monolith|1|
monolith capacity 0.5 (drops)|1|--capacity-factor 0.5
monolith --moe-every 2 --top-k 1|1|--moe-every 2 --top-k 1
monolith bf16|1|--precision bf16
grad-accum 2|1|--grad-accum 2
manual 2 parts|1|--mode manual --parts 2
pp 1f1b 2 M=4|2|--mode pp --micro-batches 4
pp gpipe 2 M=4|2|--mode pp --schedule gpipe --micro-batches 4
pp 1f1b 2 checkpoint-activations|2|--mode pp --micro-batches 4 --checkpoint-activations
pp interleaved 2 x 2|2|--mode pp --schedule interleaved --micro-batches 4
ddp 2|2|--mode ddp
ddp 2 ZeRO-1|2|--mode ddp --zero 1
ddp 2 ZeRO-2|2|--mode ddp --zero 2
ddp 2 ZeRO-3|2|--mode ddp --zero 3
hybrid pp 2 x dp 2|4|--pp 2 --dp 2 --micro-batches 2
pp zb-h1 2 M=4 (split backward)|2|--mode pp --schedule zb-h1 --micro-batches 4
pp zb-v 2 M=4|2|--mode pp --schedule zb-v --micro-batches 4
pp dualpipev 2 M=4|2|--mode pp --schedule dualpipev --micro-batches 4
hybrid pp 2 x dp 2 zb-h1 (buckets fire at W)|4|--pp 2 --dp 2 --schedule zb-h1 --micro-batches 2
EOF

# ---- the layer trains: an MoE model's losses differ from the dense one's, and fall ----
run 120 "$MICROPP" train --layers 4 --hidden 16 --batch 32 --steps 30 --log-every 0 --json
dense=$(json_get '["losses"][-1]')
run 120 "$MICROPP" train "${B[@]}" --experts 4 --steps 30 --json
moe_first=$(json_get '["losses"][0]'); moe_last=$(json_get '["losses"][-1]')
if python3 -c 'import sys; d, a, b = map(float, sys.argv[1:4]); sys.exit(0 if d != b and b < a else 1)' \
    "$dense" "$moe_first" "$moe_last" 2>/dev/null; then pass "moe/an MoE model trains (its loss falls) and is not the dense one"
else fail "moe/an MoE model trains" "dense $dense, moe $moe_first -> $moe_last"; fi

# ---- checkpoints: save and resume MoE layers, across layouts ----
run 120 "$MICROPP" train "${B[@]}" --experts 4 --steps 6 --json
straight=$OUT
run 120 "$MICROPP" train "${B[@]}" --experts 4 --steps 3 --save "$TMP/ck"
run 120 "$MICROPP" train "${B[@]}" --experts 4 --steps 6 --json --resume "$TMP/ck"
if [ "$RC" = 0 ] && [ "$(json_get '["losses"]')" = "$(OUT=$straight json_get '["losses"][3:]')" ]; then
    pass "moe/save at step 3 and resume: the losses of the straight run, bit for bit"
else fail "moe/save and resume" "rc $RC: $(json_get '["losses"]' 2>&1) vs $(OUT=$straight json_get '["losses"][3:]')"; fi
run 120 mpiexec -n 2 "$MICROPP" train "${B[@]}" --experts 4 --steps 3 --mode pp --micro-batches 1 --save "$TMP/ckpp"
run 120 "$MICROPP" train "${B[@]}" --experts 4 --steps 6 --json --resume "$TMP/ckpp"
if [ "$RC" = 0 ] && losses_close "$OUT" "{\"losses\": $(OUT=$straight json_get '["losses"][3:]')}" 1e-5 >/dev/null; then
    pass "moe/a pipeline's checkpoint (2 stages) resumes on the monolith: its losses within 1e-5"
else fail "moe/pp checkpoint resumes on the monolith" "rc $RC: $ERR $(json_get '["losses"]' 2>&1)"; fi
before=$(ls "$TMP/ck" | sort | tr '\n' ' ')
expect_user_error "moe/a checkpoint of another expert count: one line, exit 2" \
    "checkpoint has --experts 4 but this run has --experts 2" 60 \
    "$MICROPP" train "${B[@]}" --experts 2 --steps 6 --resume "$TMP/ck" --save "$TMP/ck"
[ "$(ls "$TMP/ck" | sort | tr '\n' ' ')" = "$before" ] && pass "moe/... and nothing written" ||
    fail "moe/... and nothing written" "$(ls "$TMP/ck")"

# ---- what it does not run, and bad values: one line, exit 2, on every rank ----
R=(mpiexec -n 2 "$MICROPP" train "${B[@]}" --steps 3)
expect_user_error "moe/--tp 2 refused" "--experts with --tp 2" 60 "${R[@]}" --experts 4 --tp 2
expect_user_error "moe/--zero 2 under zb-h1 without --ep (gradients at I, a bucket shared with dense layers) refused" \
    "--experts with --zero 2 under --schedule zb-h1 without --ep: .* add --ep N .* use --zero 1" \
    60 mpiexec -n 4 "$MICROPP" train "${B[@]}" --steps 3 --experts 4 --pp 2 --dp 2 --schedule zb-h1 --zero 2
expect_user_error "moe/--deterministic refused" "--experts with --deterministic" 60 "${R[@]}" --experts 4 --mode ddp \
    --deterministic
expect_user_error "moe/--experts 1" "--experts 1: top-k routing over one expert" 60 "${R[@]}" --mode ddp --experts 1
expect_user_error "moe/--top-k 5 > E 4" "--top-k 5 with --experts 4" 60 "${R[@]}" --experts 4 --mode ddp --top-k 5
expect_user_error "moe/--capacity-factor 0" "--capacity-factor = 0 is out of range" 60 "${R[@]}" --experts 4 --mode ddp \
    --capacity-factor 0
expect_user_error "moe/--capacity-factor nan" "--capacity-factor expects a number" 60 "${R[@]}" --experts 4 --mode ddp \
    --capacity-factor nan
expect_user_error "moe/--capacity-factor 5 > E 4" "--capacity-factor 5 with --experts 4" 60 "${R[@]}" --experts 4 --mode ddp \
    --capacity-factor 5
expect_user_error "moe/--moe-every 0" "--moe-every = 0 is out of range" 60 "${R[@]}" --experts 4 --mode ddp --moe-every 0
expect_user_error "moe/--moe-every 4 with 4 layers: no MoE layer" "--moe-every 4 with --layers 4" 60 "${R[@]}" --experts 4 \
    --mode ddp --moe-every 4
expect_user_error "moe/--aux-loss -1" "--aux-loss = -1 is out of range" 60 "${R[@]}" --experts 4 --mode ddp --aux-loss -1
expect_user_error "moe/--aux-loss nan" "--aux-loss expects a number" 60 "${R[@]}" --experts 4 --mode ddp --aux-loss nan

# ---- bad input writes nothing: each refusal above, with a new --save folder and a --metrics file ----
while IFS='|' read -r name n pat args <&3; do  # (fd 3: mpiexec reads stdin; CK: the 4 experts' checkpoint)
    rm -rf "$TMP/new.ck" "$TMP/new.jsonl"
    args=${args//CK/$TMP/ck}
    # shellcheck disable=SC2086
    if [ "$n" -gt 1 ]; then run 60 mpiexec -n "$n" "$MICROPP" train "${B[@]}" --steps 6 $args --save "$TMP/new.ck" \
        --metrics "$TMP/new.jsonl"
    else run 60 "$MICROPP" train "${B[@]}" --steps 6 $args --save "$TMP/new.ck" --metrics "$TMP/new.jsonl"; fi
    if [ "$RC" = 2 ] && grep -qE -- "$pat" <<<"$ERR" && [ "$(grep -c . <<<"$ERR")" = 1 ] &&
        [ ! -e "$TMP/new.ck" ] && [ ! -e "$TMP/new.jsonl" ]; then
        pass "moe/$name: one line, exit 2, no --save folder and no --metrics file"
    else fail "moe/$name writes nothing" "rc $RC: $(head -c 300 <<<"$ERR") | $(ls -d "$TMP"/new.* 2>&1)"; fi
done 3<<'EOF'
a checkpoint of another expert count|1|checkpoint has --experts 4 but this run has --experts 2|--experts 2 --resume CK
a checkpoint of other MoE layers (--moe-every)|1|checkpoint has --moe-every 1 but this run has --moe-every 2|--experts 4 --moe-every 2 --resume CK
a checkpoint of experts, a dense run|1|checkpoint has --experts 4 but this run has --experts 0|--resume CK
the same on 2 ranks (ddp x ep 2)|2|checkpoint has --experts 4 but this run has --experts 2|--experts 2 --dp 2 --ep 2 --resume CK
E not divisible by N|2|--experts 3 over --ep 2: .* use --ep 1 \(none\), or --experts 2 or 4|--experts 3 --dp 2 --ep 2
--top-k above E|1|--top-k 5 with --experts 4: .* use --top-k 4 or fewer|--experts 4 --top-k 5
--capacity-factor 0|1|--capacity-factor = 0 is out of range|--experts 4 --capacity-factor 0
--capacity-factor 1e9|1|--capacity-factor = 1e9 is out of range|--experts 4 --capacity-factor 1e9
--capacity-factor nan|1|--capacity-factor expects a number, got 'nan'|--experts 4 --capacity-factor nan
top-k routing over one expert|1|--experts 1: top-k routing over one expert|--experts 1 --top-k 1
--top-k without --experts|1|--top-k without --experts: .* add --experts E \(2 or more\) or drop --top-k|--top-k 1
--moe-every without --experts|1|--moe-every without --experts: .* drop --moe-every|--moe-every 2
--capacity-factor without --experts|1|--capacity-factor without --experts: .* drop --capacity-factor|--capacity-factor 2
--aux-loss without --experts|1|--aux-loss without --experts: .* drop --aux-loss|--aux-loss 0
--alltoall without --experts (ddp)|2|--alltoall without --experts: .* drop --alltoall|--dp 2 --alltoall mpi
--ep-overlap without --experts (ddp)|2|--ep-overlap without --experts: .* drop --ep-overlap|--dp 2 --ep-overlap off
--ep 1 without --experts (ddp)|2|--ep without --experts: .* drop --ep|--dp 2 --ep 1
--ep 2 without --experts (ddp)|2|--ep 2 shards the experts of MoE layers, and this model has none|--dp 2 --ep 2
EOF

# ... but as config keys they are a shared base's, as any option that does not apply to the run: a dense run of
# configs/fashion.json's keys (its capacity factor serves its MoE run) trains as without them
echo '{"top-k": 1, "capacity-factor": 2, "moe-every": 2}' >"$TMP/moe-keys.json"
run 60 "$MICROPP" train "${B[@]}" --steps 3 --json; plain=$(json_get '["losses"]')
run 60 "$MICROPP" train --config "$TMP/moe-keys.json" "${B[@]}" --steps 3 --json
[ "$RC" = 0 ] && [ "$(json_get '["losses"]')" = "$plain" ] &&
    pass "moe/MoE options as config keys of a dense run: accepted, the losses of the run without them" ||
    fail "moe/MoE options as config keys of a dense run" "rc $RC: ${ERR:0:200}"

# ---- the report: --json's moe part, the summary's line, --metrics' keys ----
moe_json_ok() {  # every step: the rows kept plus the dropped are the assignments, rows x k x MoE layers
    python3 -c 'import json,sys; m=json.loads(sys.stdin.read().strip().splitlines()[-1])["moe"]
ok = all(sum(l) + d == a == 32 * 2 * 3 for l, d, a in zip(m["rows_per_expert"], m["dropped"], m["assigned"]))
ok = ok and len(m["aux_loss"]) == 3 and all(0 < x < 1 for x in m["aux_loss"]) and len(m["mean_rows_per_expert"]) == 4
sys.exit(0 if ok else 1)' <<<"$OUT"
}
run 120 "$MICROPP" train "${M[@]}" --json
moe_json_ok && pass "moe/--json: rows per expert + dropped = rows x k x layers every step; aux loss per step" ||
    fail "moe/--json's moe part" "$(head -c 600 <<<"$OUT")"
run 120 mpiexec -n 2 "$MICROPP" train "${M[@]}" --json --mode pp --micro-batches 4
moe_json_ok && pass "moe/--json on a pipeline: the stages' MoE layers summed" ||
    fail "moe/--json on a pipeline" "$(head -c 600 <<<"$OUT")"
run 120 "$MICROPP" train "${M[@]}" --metrics "$TMP/moe.jsonl"
if grep -qE '^moe: 4 experts, top-2 \| rows per expert per step .*\| dropped .*% \| aux loss' <<<"$OUT" &&
    python3 -c 'import json,sys; s=[json.loads(l) for l in open(sys.argv[1]) if "\"loss\"" in l]
sys.exit(0 if len(s) == 3 and all(len(x["moe_load"]) == 4 and "moe_dropped" in x and x["moe_aux"] > 0 for x in s) else 1)' \
        "$TMP/moe.jsonl"; then pass "moe/the summary's line, and --metrics' moe_load, moe_dropped, moe_aux per step"
else fail "moe/the summary's line and --metrics" "$(grep moe <<<"$OUT") $(head -c 300 "$TMP/moe.jsonl")"; fi
