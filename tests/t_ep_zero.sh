#!/usr/bin/env bash
# tests/t_ep_zero.sh: ZeRO-2 and 3 with --ep under schedules that split backwards (docs/experts.md; model.c
# stage_backward_input, axes/zero.c on_layer_grad): an MoE layer's bucket is reduce-scattered when its I ends.
# pp 2 x dp 2 --ep 2 under zb-h1, zb-v and dualpipev at ZeRO-2 and 3: --verify passes against the monolith,
# the losses equal the same level's under 1F1B bit for bit and ZeRO-1's of the same schedule within 1e-5
# (t_ep's standard: ZeRO-1 sums a replica's micro-batches before the reduce-scatter, 2 and 3 after). (Without
# --ep, where an MoE layer's bucket holds dense layers too, it is still refused: tests/t_moe.sh.)
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)

L=(--layers 4 --hidden 16 --batch 32 --log-every 0 --experts 4 --steps 8 --json --verify --pp 2 --dp 2 --ep 2
   --micro-batches 4)
bits() { python3 -c "import json,sys; print([x.hex() for x in json.loads(sys.argv[1])['losses']])" "$1" 2>/dev/null; }
verified() { python3 -c "import json,sys; print(json.loads(sys.argv[1])['verify_ok'])" "$1" 2>/dev/null; }
declare -A RUNS
train() {  # train SCHEDULE ZERO: the run's --json in RUNS[SCHEDULE ZERO]
    run 240 mpiexec -n 4 "$MICROPP" train "${L[@]}" --schedule "$1" --zero "$2" </dev/null  # (mpiexec reads stdin)
    RUNS[$1 $2]=$OUT
    [ "$RC" = 0 ] || fail "ep_zero/$1 --zero $2 runs" "rc $RC: $(tail -c 300 <<<"$ERR")"
}
for z in 2 3; do train 1f1b $z; done
for sched in zb-h1 zb-v dualpipev; do
    train $sched 1
    for z in 2 3; do
        train $sched $z
        got=${RUNS[$sched $z]}
        [ "$(verified "$got")" = True ] && pass "ep_zero/--verify pp 2 x dp 2 --ep 2 --zero $z under $sched" \
            || fail "ep_zero/--verify --zero $z under $sched" "verify_ok '$(verified "$got")'"
        [ -n "$(bits "$got")" ] && [ "$(bits "$got")" = "$(bits "${RUNS[1f1b $z]}")" ] \
            && pass "ep_zero/--zero $z under $sched: 8 steps' losses those of 1f1b bit for bit" \
            || fail "ep_zero/--zero $z under $sched = 1f1b" "$(bits "$got") vs $(bits "${RUNS[1f1b $z]}")"
        why=$(losses_close "$got" "${RUNS[$sched 1]}" 1e-5 "--zero 1")
        [ -n "$got" ] && [ -z "$why" ] && pass "ep_zero/--zero $z under $sched: the losses of --zero 1 within 1e-5" \
            || fail "ep_zero/--zero $z under $sched = --zero 1" "$why"
    done
done

