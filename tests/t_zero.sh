#!/usr/bin/env bash
# tests/t_zero.sh: ZeRO-2 (gradients sharded) and ZeRO-3 (parameters too) against plain ddp: --verify
# passes and 20 losses equal ddp's to 1e-6, in ddp and hybrid (1f1b, zb-h1's split backward,
# interleaved, checkpointing), with --tp, fp32 and bf16, shm, mpi and ring; bad combinations exit 2 with one line.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)

MODEL=(--layers 4 --hidden 32 --batch 32 --steps 20 --log-every 0 --json)
SMALL=(--bucket-mb 0.004)  # 4 KiB ~ one layer per bucket: several buckets, so several gathers per pass

close() { losses_close "$1" "$2" "$3" ddp; }  # (tests/lib.sh)

# zero_case NAME REF RANKS ARGS...: --verify passes and the losses equal REF's (a ddp run's JSON) to 1e-6
zero_case() {
    local name=$1 ref=$2 n=$3; shift 3
    run 240 mpiexec -n "$n" "$MICROPP" train "${MODEL[@]}" --verify "$@"
    if [ "$RC" -ne 0 ]; then fail "$name" "exit $RC: $(printf '%s' "$ERR" | head -c 300)"; return 1; fi
    if [ "$(json_get '["verify_ok"]')" != "True" ]; then fail "$name" "verify: $(json_get '["verify_max_rel_err"]')"; return 1; fi
    local why
    if ! why=$(close "$OUT" "$ref" 1e-6); then fail "$name" "$why"; return 1; fi
    pass "$name"
}

# ---- ddp: 2 and 4 replicas, fp32 and bf16, gradient accumulation, the ring ----
for n in 2 4; do
    run 240 mpiexec -n $n "$MICROPP" train "${MODEL[@]}" --mode ddp
    REF=$OUT
    [ $n = 2 ] && REF2=$OUT
    for z in 2 3; do
        zero_case "zero/ddp $n ranks zero-$z: verify + 20 losses = ddp" "$REF" $n --mode ddp --zero $z "${SMALL[@]}"
        [ $n = 2 ] && AUTO[$z]=$OUT
    done
done
# --allreduce shm (auto's pick on one node: the 2-rank runs above ran on it, and are checked again here):
# every collective of a step runs in the shared windows (the working buckets and ZeRO-2's parameters are
# windows), none falls back to mpi; and MPI's own collectives, asked for, give the same losses
for z in 2 3; do
    OUT=${AUTO[$z]}
    if [ "$(json_get '["allreduce"]' 2>/dev/null)" = shm ] && close "$OUT" "$REF2" 1e-6 >/dev/null; then
        pass "zero/ddp 2 ranks zero-$z --allreduce shm (auto's pick) = ddp"
    else fail "zero/ddp 2 ranks zero-$z --allreduce shm (auto's pick) = ddp" "allreduce $(json_get '["allreduce"]' 2>&1 | head -c 100)"; continue; fi
    got=$(json_get '["shm_collectives"]') per=$(json_get '["collectives_per_step"]')
    python3 -c "import sys; sys.exit(0 if $got >= 20 * $per > 0 else 1)" \
        && pass "zero/zero-$z --allreduce shm: every collective in the windows ($got >= 20 steps x $per)" \
        || fail "zero/zero-$z --allreduce shm: every collective in the windows" "$got in shm, $per a step"
    zero_case "zero/ddp 2 ranks zero-$z --allreduce mpi = ddp" "$REF2" 2 --mode ddp --zero $z --allreduce mpi "${SMALL[@]}"
done
run 240 mpiexec -n 2 "$MICROPP" train "${MODEL[@]}" --mode ddp --precision bf16
REF_BF16=$OUT
run 240 mpiexec -n 2 "$MICROPP" train "${MODEL[@]}" --mode ddp --grad-accum 3
REF_ACC=$OUT
for z in 2 3; do
    zero_case "zero/ddp bf16 zero-$z = ddp bf16" "$REF_BF16" 2 --mode ddp --precision bf16 --zero $z "${SMALL[@]}"
    zero_case "zero/ddp grad-accum 3 ring zero-$z = ddp" "$REF_ACC" 2 --mode ddp --grad-accum 3 --allreduce ring \
        --zero $z "${SMALL[@]}"
done

# ---- hybrid 2x2: every kind of backward (whole, split I/W, interleaved chunks, recomputed) ----
HY=(--mode hybrid --pp 2 --dp 2 --micro-batches 4)
run 240 mpiexec -n 4 "$MICROPP" train "${MODEL[@]}" "${HY[@]}"
REF_HY=$OUT
for z in 2 3; do
    for s in 1f1b zb-h1 interleaved; do
        extra=()
        [ $s = interleaved ] && extra=(--virtual-stages 2)
        zero_case "zero/hybrid 2x2 $s zero-$z = hybrid ddp" "$REF_HY" 4 "${HY[@]}" --schedule $s "${extra[@]}" \
            --zero $z "${SMALL[@]}"
    done
done
run 240 mpiexec -n 4 "$MICROPP" train "${MODEL[@]}" "${HY[@]}" --checkpoint-activations --precision bf16
REF_HYC=$OUT
zero_case "zero/hybrid 2x2 checkpointing bf16 zero-3 = hybrid ddp" "$REF_HYC" 4 "${HY[@]}" --checkpoint-activations \
    --precision bf16 --zero 3 "${SMALL[@]}"

# ---- with --tp: each rank shards its tensor-parallel part of every layer over its dp group (the ranks of
# its stage and tp rank); the losses equal --zero 1 --tp's, ddp D=2 x T=2 and hybrid pp 2 x dp 2 x tp 2 ----
run 240 mpiexec -n 4 "$MICROPP" train "${MODEL[@]}" --mode ddp --dp 2 --tp 2 --zero 1
REF_TP=$OUT
for z in 2 3; do
    zero_case "zero/ddp 2 x tp 2 zero-$z = zero-1 --tp 2" "$REF_TP" 4 --mode ddp --dp 2 --tp 2 --zero $z "${SMALL[@]}"
done
zero_case "zero/ddp 2 x tp 2 zero-3 --allreduce mpi = zero-1 --tp 2" "$REF_TP" 4 --mode ddp --dp 2 --tp 2 --zero 3 \
    --allreduce mpi "${SMALL[@]}"
run 300 mpiexec -n 8 "$MICROPP" train "${MODEL[@]}" "${HY[@]}" --tp 2 --zero 1
REF_HTP=$OUT
zero_case "zero/hybrid 2 x 2 x tp 2 zero-3 = zero-1 --tp 2" "$REF_HTP" 8 "${HY[@]}" --tp 2 --zero 3 "${SMALL[@]}"

# ---- checkpoints: every level saves the unsharded files (Adam's moments included) and resumes in any layout ----
# slice JSON A B: the losses of steps A+1..B of a run's JSON, as a JSON object with "losses"
slice() { python3 -c "import json,sys; print(json.dumps({'losses': json.loads(sys.argv[1])['losses'][$2:$3]}))" "$1"; }
CK=(--layers 4 --hidden 32 --batch 32 --log-every 0 --json)
run 240 mpiexec -n 2 "$MICROPP" train "${CK[@]}" --steps 20 --mode ddp
REF_CK=$OUT
# ckpt_case NAME SAVE_RANKS "SAVE ARGS" RESUME_RANKS RESUME ARGS...: 10 steps saved, then 10 resumed = the
# uninterrupted ddp run's steps 11-20
ckpt_case() {
    local name=$1 n1=$2 a1=$3 n2=$4 why; shift 4
    rm -rf "$TMP/ck"
    # shellcheck disable=SC2086
    run 240 mpiexec -n "$n1" "$MICROPP" train "${CK[@]}" --steps 10 $a1 --save "$TMP/ck"
    if [ "$RC" -ne 0 ]; then fail "$name" "save: exit $RC: $(printf '%s' "$ERR" | head -c 300)"; return; fi
    if ! why=$(close "$OUT" "$(slice "$REF_CK" 0 10)" 1e-6); then fail "$name" "the saving run: $why"; return; fi
    run 240 mpiexec -n "$n2" "$MICROPP" train "${CK[@]}" --steps 20 --resume "$TMP/ck" "$@"
    if [ "$RC" -ne 0 ]; then fail "$name" "resume: exit $RC: $(printf '%s' "$ERR" | head -c 300)"; return; fi
    if why=$(close "$OUT" "$(slice "$REF_CK" 10 20)" 1e-6); then pass "$name"; else fail "$name" "resumed: $why"; fi
}
ckpt_case "zero/ckpt: zero-3 ddp -> monolith" 2 "--mode ddp --zero 3 --bucket-mb 0.004" 1
ckpt_case "zero/ckpt: monolith -> zero-3 ddp" 1 "" 2 --mode ddp --zero 3 --bucket-mb 0.004
ckpt_case "zero/ckpt: zero-1 ddp -> zero-2 ddp" 2 "--mode ddp --zero 1" 2 --mode ddp --zero 2
ckpt_case "zero/ckpt: zero-2 hybrid 2x2 -> zero-3 ddp 4" 4 "--mode hybrid --pp 2 --dp 2 --micro-batches 2 --zero 2" \
    4 --mode ddp --zero 3 --bucket-mb 0.004
ckpt_case "zero/ckpt: zero-3 ddp 4 -> zero-1 hybrid 2x2" 4 "--mode ddp --zero 3" \
    4 --mode hybrid --pp 2 --dp 2 --micro-batches 2 --zero 1
ckpt_case "zero/ckpt: zero-3 ddp 2 x tp 2 -> monolith" 4 "--mode ddp --dp 2 --tp 2 --zero 3 --bucket-mb 0.004" 1
ckpt_case "zero/ckpt: monolith -> zero-2 hybrid 2 x 2 x tp 2" 1 "" 8 --mode hybrid --pp 2 --dp 2 --tp 2 \
    --micro-batches 2 --zero 2 --bucket-mb 0.004

# ---- the shards' traffic per step = the formula of docs/data-parallel.md ----
# P: the stage's parameters (4 layers of 32: 4290; hybrid 2x2: the head's stage, 2 x 1056 + 66 = 2178);
# B: backward passes per step (ddp: --grad-accum, hybrid: micro-batches). One bucket per stage here.
# bytes NAME "EXPECTED AG" "EXPECTED RS" RANKS ARGS...
SHORT=(--layers 4 --hidden 32 --batch 32 --steps 3 --log-every 0 --json)
bytes() {
    local name=$1 ag=$2 rs=$3 n=$4; shift 4
    run 240 mpiexec -n "$n" "$MICROPP" train "${SHORT[@]}" --bucket-mb 25 "$@"
    local got
    got="$(json_get '["allgather_bytes_per_step"]' 2>/dev/null) $(json_get '["reduce_scatter_bytes_per_step"]' 2>/dev/null)"
    if [ "$RC" -eq 0 ] && [ "$got" = "$ag $rs" ]; then pass "$name ($got)"
    else fail "$name" "exit $RC, all-gather + reduce-scatter $got, expected $ag $rs: $(printf '%s' "$ERR" | head -c 200)"; fi
}
bytes "zero/bytes: zero-1 all-gathers 4P, reduce-scatters 4P" 17160 17160 2 --mode ddp --zero 1
bytes "zero/bytes: zero-2 grad-accum 3 all-gathers 4P, reduce-scatters 4PB" 17160 51480 2 --mode ddp --zero 2 --grad-accum 3
bytes "zero/bytes: zero-3 all-gathers 2 x 4PB, reduce-scatters 4PB" 34320 17160 2 --mode ddp --zero 3
bytes "zero/bytes: zero-3 hybrid 2x2 M=4, the head's stage" 69696 34848 4 "${HY[@]}" --zero 3
bytes "zero/bytes: zero-3 checkpointing recomputes: 3 x 4PB" 104544 34848 4 "${HY[@]}" --zero 3 --checkpoint-activations

# ---- ZeRO-3 prefetches: with 4 buckets the forward starts 3 gathers ahead, the backward 2 (layer 0's
# weights, alone in its bucket, are not read by a backward without an input gradient) ----
run 240 mpiexec -n 2 "$MICROPP" train "${SHORT[@]}" --mode ddp --zero 3 "${SMALL[@]}"
got=$(json_get '["prefetched_gathers_per_step"]' 2>/dev/null)
[ "$RC" -eq 0 ] && [ "$(json_get '["bucket_count"]')" = 4 ] && [ "$got" = 5 ] \
    && pass "zero/zero-3 prefetches the next bucket's gather (5 a step with 4 buckets)" \
    || fail "zero/zero-3 prefetches the next bucket's gather" "exit $RC, $got prefetches, $(json_get '["bucket_count"]') buckets"

# ---- the trace of a ZeRO-3 step: every bucket's gather and reduce-scatter on the rank's collectives
# track, overlapping the forward and backward (whether a gather and a reduce-scatter are in flight at
# once depends on when MPI finds each done: a bare-machine run found none on one rank, so not asserted) ----
run 240 mpiexec -n 2 "$MICROPP" train "${SHORT[@]}" --mode ddp --zero 3 "${SMALL[@]}" --trace "$TMP/z3.json"
why=$(python3 - "$TMP/z3.json" "$OUT" <<'EOF'
import json, sys
try: t = json.load(open(sys.argv[1]))["traceEvents"]; s = json.loads(sys.argv[2])
except Exception as e: print("no trace or summary: %s" % e); sys.exit()
x = [e for e in t if e["ph"] == "X" and e["args"]["step"] == 2]
bad = []
for r in (0, 1):
    ev = [e for e in x if e["pid"] == r]
    g = [e for e in ev if e["name"] == "all-gather"]
    rs = [e for e in ev if e["name"] == "reduce-scatter"]
    comp = [e for e in ev if e["name"] in ("F0", "B0")]
    if sum(e["args"]["bytes"] for e in g) != s["allgather_bytes_per_step"]: bad.append("rank %d: gathered bytes differ from the summary's" % r)
    if sum(e["args"]["bytes"] for e in rs) != s["reduce_scatter_bytes_per_step"]: bad.append("rank %d: reduce-scattered bytes differ" % r)
    if any(e["tid"] == e["pid"] for e in g + rs): bad.append("rank %d: collectives on the compute track" % r)
    inside = lambda a, b: a["ts"] < b["ts"] + b["dur"] and b["ts"] < a["ts"] + a["dur"]
    if not any(inside(a, c) for a in g for c in comp): bad.append("rank %d: no gather overlaps compute" % r)
print("; ".join(bad))
EOF
)
[ "$RC" -eq 0 ] && [ -z "$why" ] && pass "zero/--trace: ZeRO-3's gathers and reduce-scatters, overlapping compute" \
    || fail "zero/--trace: ZeRO-3's gathers and reduce-scatters" "exit $RC $why $(printf '%s' "$ERR" | head -c 200)"

# ---- memory: D=2 ZeRO-3 holds at most 0.55x ddp's weights + gradients + optimizer state, as allocated
# and as the processes' max RSS (less a tiny model's RSS, the process itself, and the working buckets) ----
BIGM=(--batch 8 --steps 2 --eval-samples 8 --log-every 0 --json --allreduce mpi --mode ddp)
run 300 mpiexec -n 2 "$MICROPP" train "${BIGM[@]}" --layers 2 --hidden 64
base=$(json_get '["memory_per_rank"]' 2>/dev/null)
run 300 mpiexec -n 2 "$MICROPP" train "${BIGM[@]}" --layers 8 --hidden 2048
ddp=$(json_get '["memory_per_rank"]' 2>/dev/null)
run 300 mpiexec -n 2 "$MICROPP" train "${BIGM[@]}" --layers 8 --hidden 2048 --zero 3 --bucket-mb 16
z3=$(json_get '["memory_per_rank"]' 2>/dev/null)
why=$(python3 - "$base" "$ddp" "$z3" <<'EOF'
import json, sys
base, ddp, z3 = (json.loads(a) for a in sys.argv[1:])
state = lambda m: m["weights"] + m["grads"] + m["optimizer"]
alloc = state(z3) / state(ddp)
rss = (z3["max_rss"] - base["max_rss"] - z3["working"]) / (ddp["max_rss"] - base["max_rss"])
print("allocated %.3f, max RSS %.3f (working buckets %.1f MB apart)" % (alloc, rss, z3["working"] / 1e6))
sys.exit(0 if alloc <= 0.55 and rss <= 0.55 else 1)
EOF
) && pass "zero/D=2 zero-3 state <= 0.55x ddp's: $why" || fail "zero/D=2 zero-3 state <= 0.55x ddp's" "$why"

# ---- refused ----
expect_user_error "zero/--zero 2 with --ddp-sync naive" "--zero 2 reduce-scatters buckets .* drop --ddp-sync naive" 60 \
    mpiexec -n 2 "$MICROPP" train --mode ddp --zero 2 --ddp-sync naive
expect_user_error "zero/--zero 4" "zero" 60 "$MICROPP" train --mode ddp --zero 4
