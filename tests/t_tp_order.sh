#!/usr/bin/env bash
# tests/t_tp_order.sh: the rule the tensor-parallel group's NCCL all-reduce needs (issue 22 item 4):
# NCCL pairs a communicator's collectives by order alone, so every rank of a group must issue the
# same collectives (op, floats, group) in the same order. The CPU build issues exactly the calls a
# GPU run hands to NCCL (axes/tensor.c records each before dispatching it: MICROPP_COLLECTIVE_LOG), so
# runs of --tp 2 alone and pp 2 x tp 2 under several schedules prove it here, with no GPU.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)

M=(--layers 6 --hidden 32 --inputs 24 --classes 4 --batch 16 --log-every 0 --json --steps 3)

# same_per_group DIR WORLD T: "" when every rank of each group of T adjacent ranks wrote the same
# non-empty log whose lines name that group; else why not.
same_per_group() {
    local dir=$1 world=$2 T=$3 r g first
    for ((r = 0; r < world; r++)); do
        g=$((r / T)) first=$((r - r % T))
        [ -s "$dir/rank$r.log" ] || { echo "rank $r wrote no log"; return; }
        if grep -vqE "^(allreduce|allgather) [0-9]+ group $g\$" "$dir/rank$r.log"; then
            echo "rank $r: a line not of group $g: $(grep -vE " group $g\$" "$dir/rank$r.log" | head -n 1)"; return
        fi
        if ! cmp -s "$dir/rank$first.log" "$dir/rank$r.log"; then
            echo "rank $r differs from rank $first: $(diff "$dir/rank$first.log" "$dir/rank$r.log" | sed -n 2,3p | tr '\n' ' ')"
            return
        fi
    done
}

# The check itself fails on logs that differ (one all-reduce's size, or the order), so a pass means something.
mkdir -p "$TMP/fake"
printf 'allreduce 512 group 0\nallreduce 384 group 0\n' >"$TMP/fake/rank0.log"
printf 'allreduce 384 group 0\nallreduce 512 group 0\n' >"$TMP/fake/rank1.log"
why=$(same_per_group "$TMP/fake" 2 2)
if [[ "$why" == "rank 1 differs from rank 0"* ]]; then pass "tp_order/the check finds two ranks' orders differ"
else fail "tp_order/the check finds two ranks' orders differ" "said '$why'"; fi
printf 'allreduce 512 group 0\nallreduce 384 group 0\n' >"$TMP/fake/rank1.log"
why=$(same_per_group "$TMP/fake" 2 2)
[ -z "$why" ] && pass "tp_order/the check accepts two identical logs" || fail "tp_order/the check accepts two identical logs" "$why"

# order_case NAME RANKS T ARGS...: the run succeeds, each rank logged at least the all-reduces the
# --json counts for its steps, and every group's ranks logged the same sequence.
order_case() {
    local name=$1 n=$2 T=$3 dir="$TMP/log$RANDOM"; shift 3
    mkdir -p "$dir"
    run 240 env MICROPP_COLLECTIVE_LOG="$dir" mpiexec -n "$n" "$MICROPP" train "${M[@]}" "$@"
    if [ "$RC" -ne 0 ]; then fail "$name" "exit $RC: $(printf '%s' "$ERR" | tail -c 300)"; return; fi
    local per_step logged why
    per_step=$(json_get '["tp_allreduces_per_step"]')
    logged=$(grep -c '^allreduce ' "$dir/rank0.log" 2>/dev/null)
    if [ -z "$per_step" ] || [ "${logged:-0}" -lt $((3 * per_step)) ] || [ "$per_step" -lt 1 ]; then
        fail "$name" "rank 0 logged ${logged:-no} all-reduces, the run counts $per_step per step x 3 steps"; return
    fi
    why=$(same_per_group "$dir" "$n" "$T")
    [ -z "$why" ] && pass "$name ($logged all-reduces on rank 0)" || fail "$name" "$why"
}

order_case "tp_order/--tp 2 alone: both ranks issue the same collectives" 2 2 --tp 2 --allreduce mpi
order_case "tp_order/--tp 4 alone" 4 4 --tp 4 --allreduce mpi
for s in naive gpipe 1f1b interleaved zb-h1; do
    order_case "tp_order/pp 2 x tp 2, $s" 4 2 --mode pp --tp 2 --schedule $s --micro-batches 4
done
order_case "tp_order/pp 2 x tp 2, 1f1b, --tp-message slice (all-gathers too)" 4 2 --mode pp --tp 2 --schedule 1f1b \
    --micro-batches 4 --tp-message slice
order_case "tp_order/pp 2 x tp 2, gpipe, --tp-message auto (the timed all-gathers too)" 4 2 --mode pp --tp 2 \
    --schedule gpipe --micro-batches 2
order_case "tp_order/hybrid 2 x 2 x 2, 1f1b" 8 2 --mode hybrid --pp 2 --dp 2 --tp 2 --micro-batches 2 --allreduce mpi
