#!/usr/bin/env bash
# tests/t_degrees.sh: a run described by its degrees alone (as Megatron, DeepSpeed and torchrun users write
# it) trains exactly as its --mode spelling does: the same losses, bit for bit, on 2, 4 and 8 ranks; the
# header and --json describe the run by degrees (--json keeps "mode" for scripts); a degree that does not
# divide the world, or a flag whose axes the degrees leave inactive, is refused in one line naming the
# numbers or the degree to set; --mode and the degrees agree when both are given.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
T=(--layers 8 --hidden 32 --batch 32 --steps 3 --log-every 0)
M=("${T[@]}" --json)

# losses N ARGS...: the run's "losses" (17 digits each: every bit), or "exit RC: why"
losses() {
    local n=$1; shift
    run 240 mpiexec -n "$n" "$MICROPP" train "${M[@]}" "$@"
    if [ "$RC" -ne 0 ]; then echo "exit $RC: $(head -c 200 <<<"$ERR")"; return; fi
    python3 -c 'import json,sys; print(" ".join(repr(x) for x in json.loads(sys.stdin.read().strip().splitlines()[-1])["losses"]))' <<<"$OUT"
}
# same NAME N "DEGREES" "MODE SPELLING": both train alike, bit for bit
same() {
    local name=$1 n=$2 a b
    read -ra deg <<<"$3"; read -ra spelled <<<"$4"
    a=$(losses "$n" "${deg[@]}")
    b=$(losses "$n" "${spelled[@]}")
    if [ "$a" = "$b" ] && [[ "$a" != exit* ]]; then pass "degrees/$name: the losses of $4, bit for bit"
    else fail "degrees/$name: the losses of $4, bit for bit" "degrees [$a], spelled [$b]"; fi
}
same "no degree on 2 ranks is dp 2" 2 "" "--mode ddp"
same "--pp 2 on 2 ranks" 2 "--pp 2" "--mode pp"
same "--mode pp --pp 2 agrees" 2 "--mode pp --pp 2" "--mode pp"
same "--dp 4 --zero 1" 4 "--dp 4 --zero 1" "--mode ddp --zero 1"
same "--pp 2 --dp 2 on 4 ranks" 4 "--pp 2 --dp 2" "--mode hybrid --pp 2 --dp 2"
same "--pp 2 on 4 ranks is dp 2" 4 "--pp 2" "--mode hybrid --pp 2 --dp 2"
same "--tp 2 on 4 ranks is dp 2" 4 "--tp 2 --zero 3" "--mode ddp --tp 2 --zero 3"
same "--pp 2 --tp 2 on 8 ranks is dp 2" 8 "--pp 2 --tp 2" "--mode hybrid --pp 2 --dp 2 --tp 2"

# --json: the degrees beside the mode's name; the header speaks degrees
run 240 mpiexec -n 8 "$MICROPP" train "${M[@]}" --pp 2 --tp 2 --zero 1
got=$(python3 -c 'import json,sys; o=json.loads(sys.stdin.read().strip().splitlines()[-1]); print(o["mode"], o["degrees"])' <<<"$OUT" 2>&1)
[ "$got" = "hybrid {'pp': 2, 'dp': 2, 'tp': 2, 'zero': 1}" ] && pass "degrees/--json carries the degrees (and mode)" ||
    fail "degrees/--json carries the degrees (and mode)" "exit $RC: $got"
run 240 mpiexec -n 2 "$MICROPP" train "${T[@]}" --tp 2
line=$(printf '%s\n' "$OUT" | head -n 1)
[ "$line" = "micropp train | pp 1 x dp 1 x tp 2 = 2 ranks" ] && pass "degrees/the header of --tp 2 names the degrees" ||
    fail "degrees/the header of --tp 2 names the degrees" "exit $RC: [$line]"
run 60 "$MICROPP" train "${T[@]}" --mode manual --parts 2
line=$(printf '%s\n' "$OUT" | head -n 1)
[ "$line" = "micropp train | --mode manual (2 parts in one process)" ] && pass "degrees/the header of --mode manual" ||
    fail "degrees/the header of --mode manual" "exit $RC: [$line]"

# refusals: one line, exit 2, every rank alike
E=expect_user_error
$E "degrees/a degree that does not divide the world names the ones that do" \
    'train: --pp 4 does not divide the 6 ranks: use --pp 1, 2, 3 or 6, or .mpiexec -n 4.' 60 mpiexec -n 6 "$MICROPP" train --pp 4
$E "degrees/--tp that does not divide the world" \
    'train: --tp 4 makes groups of 4 adjacent ranks, and 6 ranks were started: use --tp 1, 2, 3 or 6' 60 \
    mpiexec -n 6 "$MICROPP" train --tp 4
$E "degrees/the generic rule names the flag and the degree to set" \
    'train: --schedule applies to a pipeline \(--pp > 1\), and this run is pp 1 x dp 2 x tp 1: drop it or set --pp' 60 \
    mpiexec -n 2 "$MICROPP" train --schedule gpipe
$E "degrees/the generic rule, an option of two axes" \
    'train: --placement applies to a pipeline \(--pp > 1\) with data parallelism \(--dp > 1\), and this run is pp 4 x dp 1 x tp 1: drop it or set --dp' 60 \
    mpiexec -n 4 "$MICROPP" train --pp 4 --placement replicas
$E "degrees/--mode pp and --pp disagree" 'train: --mode pp runs a stage per rank, so --pp 4 needs 4 ranks, but 2 were started' 60 \
    mpiexec -n 2 "$MICROPP" train --mode pp --pp 4
