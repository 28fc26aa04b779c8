#!/usr/bin/env bash
# tests/t_clip.sh: --clip-grad NORM, the gradients' global L2 norm clipped before the optimizer step.
# The monolith equals PyTorch's clip_grad_norm_ (tests/clip_torch.py: the same weights and rows); every
# layout (pp, ddp, ZeRO 1-3, tp 2, hybrids) finds the same norm and trains to the same losses as the
# monolith (within float noise, and bit for bit where the layouts are bit-identical without clipping:
# tests/t_layouts.sh), so every parameter is counted once over stages, replicas, shards and the
# tensor-parallel group; a clipping run differs from an unclipped one, a NORM that never bites changes
# nothing; --json, --metrics and the summary report it; a bad NORM is one line and exit 2 on every rank.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
M=(--layers 8 --hidden 32 --batch 32 --steps 4 --log-every 0 --json)

# field N JSONKEY ARGS...: the run's JSON key (17 digits a number: every bit), or "exit RC: why"
field() {
    local n=$1 key=$2; shift 2
    if [ "$n" -gt 1 ]; then run 240 mpiexec -n "$n" "$MICROPP" train "${M[@]}" "$@"
    else run 240 "$MICROPP" train "${M[@]}" "$@"; fi
    if [ "$RC" -ne 0 ]; then echo "exit $RC: $(head -c 200 <<<"$ERR" | tr '\n' ' ')"; return; fi
    python3 -c 'import json,sys; v=json.loads(sys.stdin.read().strip().splitlines()[-1])[sys.argv[1]]
print(" ".join(repr(x) for x in v) if isinstance(v, list) else repr(v))' "$key" <<<"$OUT"
}
# close A B: the same numbers within 2e-6 relative (float noise of another summation order)
close() {
    python3 -c 'import sys; a, b = [list(map(float, s.split())) for s in sys.argv[1:3]]
sys.exit(0 if len(a) == len(b) > 0 and all(abs(x - y) <= 2e-6 * abs(y) for x, y in zip(a, b)) else 1)' "$1" "$2"
}

# ---- PyTorch's clip_grad_norm_ on the monolith ----
if /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; then
    for opt in adam sgd; do
        r=$(/usr/bin/python3 "$ROOT/tests/clip_torch.py" "$MICROPP" "$TMP" "$opt" 2>&1)
        if python3 -c 'import json,sys; r=json.loads(sys.argv[1]); sys.exit(0 if r["loss_rel"] < 2e-5 and
r["norm_rel"] < 2e-5 and r["clipped"] == r["torch_clipped"] and 0 < r["steps_clipped"] < len(r["clipped"]) else 1)' \
            "$r" 2>/dev/null; then
            pass "clip/$opt: the monolith equals PyTorch's clip_grad_norm_ (losses and norms within 2e-5, the same steps clipped)"
        else fail "clip/$opt: the monolith equals PyTorch's clip_grad_norm_" "$r"; fi
    done
else skip "clip/the monolith equals PyTorch's clip_grad_norm_" "no torch for /usr/bin/python3 (apt-get install python3-torch)"; fi

# ---- every layout: the monolith's norm and losses ----
P=(--optimizer sgd --lr 0.5)  # (sgd: Adam's update hardly moves when every gradient is scaled alike)
C=("${P[@]}" --clip-grad 0.01)  # below every step's norm here (0.014 to 0.024): every step clips
ref_loss=$(field 1 losses "${C[@]}")
ref_norm=$(field 1 grad_norms "${C[@]}")
plain=$(field 1 losses "${P[@]}")
n_clipped=$(field 1 steps_clipped "${C[@]}")
[ "$n_clipped" = 4 ] && pass "clip/--json: steps_clipped 4 of 4 at NORM 0.01" ||
    fail "clip/--json: steps_clipped 4 of 4 at NORM 0.01" "$n_clipped"
if [ -n "$plain" ] && [[ "$ref_loss" != exit* ]] && [ "${ref_loss#* }" != "${plain#* }" ] &&
   [ "${ref_loss%% *}" = "${plain%% *}" ]; then pass "clip/clipping changes the losses after step 1"
else fail "clip/clipping changes the losses after step 1" "clipped [$ref_loss], plain [$plain]"; fi
a=$(field 1 losses --clip-grad 100); b=$(field 2 losses --mode ddp --zero 2 --clip-grad 100)
c=$(field 2 losses --mode ddp --zero 2); plain_adam=$(field 1 losses)
if [ "$a" = "$plain_adam" ] && [ "$b" = "$c" ] && [[ "$b" != exit* ]]; then
    pass "clip/a NORM above every norm changes nothing, bit for bit (monolith, ZeRO-2)"
else fail "clip/a NORM above every norm changes nothing" "monolith [$a] vs [$plain_adam], zero 2 [$b] vs [$c]"; fi

declare -A LOSS
layout() {  # layout NAME N ARGS...: the norm and losses equal the monolith's within float noise
    local name=$1 n=$2; shift 2
    local norm loss
    norm=$(field "$n" grad_norms "${C[@]}" "$@")
    loss=$(field "$n" losses "${C[@]}" "$@")
    LOSS[$name]=$loss
    if close "$norm" "$ref_norm" && close "$loss" "$ref_loss"; then
        pass "clip/$name: the monolith's norms and losses"
    else fail "clip/$name: the monolith's norms and losses" "norms [$norm] vs [$ref_norm], losses [$loss] vs [$ref_loss]"; fi
}
layout "manual 2 parts" 1 --mode manual --parts 2
layout "pp 1f1b 2" 2 --mode pp --micro-batches 4
layout "pp zb-v 2" 2 --mode pp --schedule zb-v --micro-batches 4
layout "pp 1f1b 4 M=8" 4 --mode pp --micro-batches 8
layout "ddp 2" 2 --mode ddp
layout "ddp 2 zero 1" 2 --mode ddp --zero 1
layout "ddp 2 zero 2" 2 --mode ddp --zero 2
layout "ddp 2 zero 3" 2 --mode ddp --zero 3
layout "tp 2" 2 --tp 2
layout "pp 2 x tp 2" 4 --mode pp --tp 2
layout "hybrid pp 2 x dp 2 zero 1" 4 --mode hybrid --pp 2 --dp 2 --zero 1
layout "ddp 2 x tp 2 zero 3" 4 --mode ddp --tp 2 --zero 3
# bit for bit where the layouts are without clipping (tests/expected/layouts.txt)
same() {
    if [ "${LOSS[$1]}" = "${LOSS[$2]}" ] && [[ "${LOSS[$1]}" != exit* ]]; then pass "clip/$1 = $2, bit for bit"
    else fail "clip/$1 = $2, bit for bit" "[${LOSS[$1]}] vs [${LOSS[$2]}]"; fi
}
[ "${LOSS[manual 2 parts]}" = "$ref_loss" ] && pass "clip/manual 2 parts = monolith, bit for bit" ||
    fail "clip/manual 2 parts = monolith, bit for bit" "[${LOSS[manual 2 parts]}] vs [$ref_loss]"
same "pp zb-v 2" "pp 1f1b 2"
for z in 1 2 3; do same "ddp 2 zero $z" "ddp 2"; done

# ---- what it reports ----
run 120 "$MICROPP" train --layers 4 --hidden 16 --steps 3 --log-every 1 --clip-grad 0.005 --metrics "$TMP/m.jsonl"
if [ "$RC" = 0 ] && grep -q '^step 2/3 | .* | grad norm [0-9.e-]* (clipped)$' <<<"$OUT" &&
   grep -q '^final loss [0-9.]* (first [0-9.]*) | clipped 3 of 3 steps (--clip-grad 0.005) | ' <<<"$OUT" &&
   [ "$(grep -c '"grad_norm":[0-9.e-]*,"clipped":true}' "$TMP/m.jsonl")" = 3 ]; then
    pass "clip/the step lines, the summary line and --metrics report the norm and the clipping"
else fail "clip/the step lines, the summary line and --metrics report the norm and the clipping" "rc $RC: $OUT $(cat "$TMP/m.jsonl")"; fi

# ---- bad input: one line, exit 2, on every rank ----
for v in 0 -1 nan inf; do
    run 60 mpiexec -n 2 "$MICROPP" train --mode ddp --clip-grad "$v"
    lines=$(grep -c . <<<"$ERR")
    if [ "$RC" = 2 ] && [ "$lines" = 1 ] && grep -q -- "--clip-grad" <<<"$ERR"; then
        pass "clip/--clip-grad $v: one line, exit 2 on 2 ranks"
    else fail "clip/--clip-grad $v: one line, exit 2 on 2 ranks" "rc $RC: $ERR"; fi
done
