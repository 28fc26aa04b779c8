# tests/t_schedules.sh: the schedules beyond 1F1B for real, over MPI: interleaved 1F1B, ZB-H1 (and ZB-H2,
# ZB-V, DualPipeV, looped BFS) pass --verify on 2 and 4 ranks (with checkpointing, uneven layers across
# chunks), train exactly like the monolith and report the memory the theory says. The rest (every (K, M)
# they accept, their summaries and refusals, charts, traces, checkpoints): tests/t_schedules_grid.sh.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
SMALL="--hidden 32 --batch 24 --steps 2 --log-every 0"

# MPI progress while computing (the executor polls its sends between layers). Timed by the clock:
# beside other jobs a rank may be left unscheduled for a while, so a miss (over 150 ms where a sender
# that does not poll takes the whole 400 ms) is measured again, up to three times.
UNIT=$ROOT/${UNIT_DIR:-tests/bin}/unit_schedules
if [ -x "$UNIT" ]; then
    for _ in 1 2 3; do
        run 60 mpiexec -n 2 "$UNIT" --mpi-progress
        [ "$RC" -eq 0 ] && grep -q '^PASS ' <<<"$OUT" && break
    done
    if [ "$RC" -eq 0 ] && grep -q '^PASS ' <<<"$OUT"; then printf '%s\n' "$OUT" | grep -E '^(PASS|FAIL) '
    else fail "comms/progress while computing" "rc $RC: $OUT $(printf '%s' "$ERR" | tail -2)"; fi
else fail "comms/progress while computing" "$UNIT not built (make test builds it)"; fi

# 20 steps of training: the losses are the monolith's (checked on the --verify runs below of 8 layers
# of 32, batch 24, and on two runs of their own)
run 60 "$MICROPP" train --layers 8 --hidden 32 --batch 24 --steps 20 --json; mono="$OUT"
mono_close() {  # LABEL: $OUT's 20 losses are the monolith's
    python3 - "$mono" "$OUT" <<'PY' && pass "$1" || fail "$1" "rc $RC $(printf '%s' "$ERR" | tail -2)"
import json, sys
a = json.loads(sys.argv[1])["losses"]; b = json.loads(sys.argv[2])["losses"]
sys.exit(0 if len(a) == len(b) == 20 and all(abs(x - y) <= 1e-4 * abs(x) + 1e-6 for x, y in zip(a, b)) else 1)
PY
}

# --verify: every chunk's gradients against the monolith reference
verify() {  # [-l LABEL] NAME RANKS ARGS...: with -l, 20 steps, whose losses must be the monolith's (LABEL: that check)
    local label="" steps=2
    [ "$1" = -l ] && { label=$2 steps=20; shift 2; }
    local name=$1 n=$2; shift 2
    run 90 mpiexec -n "$n" "$MICROPP" train --mode pp ${SMALL/--steps 2/--steps $steps} "$@" --verify --json
    if [ "$RC" -eq 0 ] && [ "$(json_get '["verify_ok"]')" = True ]; then
        pass "$name (err $(json_get '["verify_max_rel_err"]'), $(json_get '["verify_stage_rel_err"]' | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))') chunks checked)"
    else fail "$name" "exit $RC $(printf '%s' "$ERR" | tail -2)"; fi
    [ -z "$label" ] || mono_close "$label"
}
vl() {  # LABEL NAME RANKS ARGS...: verify; on the first pass (no $ck) also the losses of 20 steps, as LABEL
    local label=$1; shift
    if [ -z "$ck" ]; then verify -l "$label" "$@"; else verify "$@"; fi
}
L="matches the monolith over 20 steps"
for ck in "" "--checkpoint-activations"; do
    c=${ck:+ckpt }
    vl "losses/K=2 interleaved $L" "interleaved/verify K=2 v=2 ${c}even" 2 --schedule interleaved --virtual-stages 2 --micro-batches 4 --layers 8 $ck
    verify "interleaved/verify K=2 v=2 ${c}uneven 3,2,2,1" 2 --schedule interleaved --virtual-stages 2 --micro-batches 4 --layers 8 --partition 3,2,2,1 $ck
    verify "interleaved/verify K=2 v=3 ${c}remainder (7 layers over 6 chunks)" 2 --schedule interleaved --virtual-stages 3 --micro-batches 2 --layers 7 $ck
    verify "interleaved/verify K=4 v=2 ${c}uneven 2,1,2,1,1,2,1,2" 4 --schedule interleaved --virtual-stages 2 --micro-batches 4 --layers 12 --partition 2,1,2,1,1,2,1,2 $ck
    vl "losses/K=2 zb-h1 $L" "zb-h1/verify K=2 ${c}even" 2 --schedule zb-h1 --micro-batches 4 --layers 8 $ck
    verify "zb-h1/verify K=2 ${c}uneven 5,3" 2 --schedule zb-h1 --micro-batches 4 --layers 8 --partition 5,3 $ck
    vl "losses/K=4 zb-h1 $L" "zb-h1/verify K=4 ${c}uneven 3,2,2,1" 4 --schedule zb-h1 --micro-batches 6 --layers 8 --partition 3,2,2,1 $ck
    verify "zb-h1/verify K=4 M=2 < K ${c}" 4 --schedule zb-h1 --micro-batches 2 --layers 8 $ck
    vl "losses/K=4 interleaved $L" "interleaved/verify K=4 M=6 (M % K != 0) ${c}" 4 --schedule interleaved --virtual-stages 2 --micro-batches 6 --layers 8 $ck
    verify "interleaved/verify K=2 M=3 v=3 (M % K != 0) ${c}uneven" 2 --schedule interleaved --virtual-stages 3 --micro-batches 3 --layers 8 --partition 2,1,1,2,1,1 $ck
    vl "losses/K=2 zb-v $L" "zb-v/verify K=2 ${c}even" 2 --schedule zb-v --micro-batches 4 --layers 8 $ck
    verify "zb-v/verify K=2 ${c}uneven 3,1,2,2" 2 --schedule zb-v --micro-batches 3 --layers 8 --partition 3,1,2,2 $ck
    verify "zb-v/verify K=4 ${c}uneven 2,1,2,1,1,2,1,2" 4 --schedule zb-v --micro-batches 6 --layers 12 --partition 2,1,2,1,1,2,1,2 $ck
    vl "losses/K=2 dualpipev $L" "dualpipev/verify K=2 ${c}uneven 3,2,2,1" 2 --schedule dualpipev --micro-batches 4 --layers 8 --partition 3,2,2,1 $ck
    verify "dualpipev/verify K=4 M=8 ${c}uneven" 4 --schedule dualpipev --micro-batches 8 --layers 12 --partition 1,2,1,2,2,1,2,1 $ck
    vl "losses/K=2 zb-h2 $L" "zb-h2/verify K=2 ${c}uneven 5,3" 2 --schedule zb-h2 --micro-batches 4 --layers 8 --partition 5,3 $ck
    vl "losses/K=4 zb-h2 $L" "zb-h2/verify K=4 M=8 ${c}uneven 3,2,2,1" 4 --schedule zb-h2 --micro-batches 8 --layers 8 --partition 3,2,2,1 $ck
    verify "zb-h2/verify K=4 M=3 < 2K-1 ${c}" 4 --schedule zb-h2 --micro-batches 3 --layers 8 $ck
    vl "losses/K=2 looped-bfs $L" "looped-bfs/verify K=2 v=2 ${c}uneven 3,2,2,1" 2 --schedule looped-bfs --virtual-stages 2 --micro-batches 4 --layers 8 --partition 3,2,2,1 $ck
    verify "looped-bfs/verify K=2 v=3 ${c}remainder (7 layers over 6 chunks)" 2 --schedule looped-bfs --virtual-stages 3 --micro-batches 3 --layers 7 $ck
    verify "looped-bfs/verify K=4 v=2 ${c}uneven 2,1,2,1,1,2,1,2" 4 --schedule looped-bfs --virtual-stages 2 --micro-batches 6 --layers 12 --partition 2,1,2,1,1,2,1,2 $ck
    vl "losses/K=4 looped-bfs $L" "looped-bfs/verify K=4 v=2 M=3 < K ${c}" 4 --schedule looped-bfs --virtual-stages 2 --micro-batches 3 --layers 8 $ck
done

# hybrid PP x DP
for sched in "interleaved --virtual-stages 2" zb-h1; do
    for ck in "" "--checkpoint-activations"; do
        run 120 mpiexec -n 4 "$MICROPP" train --mode hybrid --pp 2 --dp 2 --schedule $sched --micro-batches 2 --layers 8 $SMALL $ck --verify --json
        name="hybrid/verify 2x2 ${sched%% *} ${ck:+ckpt}"
        if [ "$RC" -eq 0 ] && [ "$(json_get '["verify_ok"]')" = True ]; then pass "$name (err $(json_get '["verify_max_rel_err"]'))"
        else fail "$name" "exit $RC $(printf '%s' "$ERR" | tail -2)"; fi
    done
done

# the two schedules whose K=4 --verify runs above have 12 layers: 20 steps of their own
for sched in zb-v dualpipev; do
    m=4; [ "$sched" = dualpipev ] && m=8
    run 120 mpiexec -n 4 "$MICROPP" train --mode pp --schedule $sched --micro-batches $m --layers 8 --hidden 32 --batch 24 --steps 20 --json
    mono_close "losses/K=4 $sched $L"
done

# memory and theory, K=4, M=8: zb-h1 stashes what 1f1b does (K-s between F and I), defers s+1
# weight passes, and pays for them in bytes; interleaved stashes Megatron's warm-up + 1 chunk passes
J="--mode pp --micro-batches 8 --layers 8 $SMALL --json"
run 90 mpiexec -n 4 "$MICROPP" train $J --schedule 1f1b; one="$OUT"
run 90 mpiexec -n 4 "$MICROPP" train $J --schedule zb-h1; zb="$OUT"
run 90 mpiexec -n 4 "$MICROPP" train $J --schedule zb-h1 --checkpoint-activations; zbc="$OUT"
run 90 mpiexec -n 4 "$MICROPP" train $J --schedule interleaved --virtual-stages 2; il="$OUT"
run 90 mpiexec -n 4 "$MICROPP" train $J --schedule looped-bfs --virtual-stages 2; bfs="$OUT"
python3 - "$one" "$zb" "$zbc" "$il" "$bfs" <<'PY'
import json, sys
one, zb, zbc, il, bfs = (json.loads(x) for x in sys.argv[1:])
K, M, v = 4, 8, 2
def check(name, ok, why):
    print(("PASS %s" % name) if ok else ("FAIL %s: %s" % (name, why)))
check("memory/zb-h1 peak in-flight == 1f1b's min(K-s, M)", zb["peak_inflight"] == one["peak_inflight"] == [min(K - s, M) for s in range(K)], (zb["peak_inflight"], one["peak_inflight"]))
check("memory/zb-h1 stage s defers s+1 weight passes, 1f1b none", zb["peak_deferred_w"] == [s + 1 for s in range(K)] and one["peak_deferred_w"] == [0] * K, (zb["peak_deferred_w"], one["peak_deferred_w"]))
# the honest price in an MLP: a deferred micro-batch keeps its layers' inputs and dz (2 tensors per layer)
check("memory/zb-h1 counts the deferred W state: more peak bytes than 1f1b on the last stage", zb["peak_activation_bytes"][-1] > one["peak_activation_bytes"][-1], (zb["peak_activation_bytes"], one["peak_activation_bytes"]))
check("memory/checkpointing cuts zb-h1's peak bytes on the first stage (where stashes dominate)", zbc["peak_activation_bytes"][0] < zb["peak_activation_bytes"][0], (zbc["peak_activation_bytes"], zb["peak_activation_bytes"]))
want = [min(2 * (K - s - 1) + (v - 1) * K + 1, v * M) for s in range(K)]
check("memory/interleaved rank s stashes 2(K-s-1)+(v-1)K+1 chunk passes", il["peak_inflight"] == want, (il["peak_inflight"], want))
check("theory/interleaved K=4 M=8 v=2: 3/19, zb-h1 3/27, 1f1b 3/11", abs(il["bubble_theory"] - 3 / 19) < 1e-12 and abs(zb["bubble_theory"] - 3 / 27) < 1e-12 and abs(one["bubble_theory"] - 3 / 11) < 1e-12,
      (il["bubble_theory"], zb["bubble_theory"], one["bubble_theory"]))
check("memory/looped-bfs: every rank holds every micro-batch of both chunks at its peak (v*M chunk passes)", bfs["peak_inflight"] == [v * M] * K, bfs["peak_inflight"])
check("theory/looped-bfs K=4 M=8 v=2: interleaved's 3/19", abs(bfs["bubble_theory"] - 3 / 19) < 1e-12 and bfs["virtual_stages"] == 2, (bfs["bubble_theory"], bfs["virtual_stages"]))
check("json/interleaved reports 8 chunks' partition and virtual_stages 2", il["partition"] == [1] * 8 and il["virtual_stages"] == 2, (il["partition"], il["virtual_stages"]))
PY
