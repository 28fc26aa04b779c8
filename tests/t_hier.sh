#!/usr/bin/env bash
# tests/t_hier.sh: the hierarchical collectives (comms/hier.c, --allreduce hier) on fake hosts (Hydra's
# -launcher fork -hosts nodeA:2,nodeB:2: MPI sees two nodes): the collectives against MPI's and a sum in
# double (tests/bin/mpi_ring, every row, on even, uneven and three-node layouts); ddp and ZeRO 1-3 with
# --allreduce hier give MPI's losses (within 1e-5; bit for bit with one rank per node) and pass --verify;
# auto takes hier there; `micropp allreduce
# --algo hier` sums right; and one line, exit 2, where hier cannot run as meant.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
A=(--layers 6 --hidden 32 --classes 4 --batch 32 --samples 128 --steps 8 --log-every 0 --json)
TWO=(-launcher fork -hosts nodeA:2,nodeB:2)

RING=$ROOT/tests/bin/mpi_ring
if [ ! -x "$RING" ]; then fail "hier/mpi_ring" "$RING is missing: build it with 'make test' (or make tests/bin/mpi_ring)"
else
    for h in nodeA:2,nodeB:2 nodeA:3,nodeB:1 nodeA:2,nodeB:2,nodeC:2; do
        n=$(( $(printf '%s' "$h" | tr ',' '\n' | cut -d: -f2 | paste -sd+) ))
        run 300 mpiexec -launcher fork -hosts "$h" -n "$n" "$RING"
        bad=$(printf '%s\n' "$OUT" | grep '^FAIL ' | head -3)
        nh=$(printf '%s\n' "$OUT" | grep -c '^PASS collective/hier')
        if [ "$RC" -eq 0 ] && [ -z "$bad" ] && [ "$nh" -ge 60 ]; then pass "hier/mpi_ring on $h: every row's sums, $nh of hier's"
        else fail "hier/mpi_ring on $h" "exit $RC, $nh hier PASS lines: $bad $(printf '%s' "$ERR" | head -c 300)"; fi
    done
fi

run 120 mpiexec "${TWO[@]}" -n 4 "$MICROPP" train --mode ddp "${A[@]}" --allreduce mpi
REF=$OUT
for z in 0 1 2 3; do
    name="hier/ddp --zero $z --allreduce hier on nodeA:2,nodeB:2: --verify, MPI's losses"
    run 180 mpiexec "${TWO[@]}" -n 4 "$MICROPP" train --mode ddp "${A[@]}" --zero $z --allreduce hier --verify
    if [ "$RC" -ne 0 ]; then fail "$name" "exit $RC: $(printf '%s' "$ERR" | head -c 300)"; continue; fi
    got=$(json_get '["allreduce"]') ok=$(json_get '["verify_ok"]')
    if [ "$got" != hier ] || [ "$ok" != True ]; then fail "$name" "allreduce '$got', verify '$ok'"; continue; fi
    if why=$(losses_close "$OUT" "$REF" 1e-5 "mpi"); then pass "$name"; else fail "$name" "$why"; fi
done
# One rank per node: hier is a ring of 2 across, whose sums (a + b) are MPI's bit for bit.
run 120 mpiexec -launcher fork -hosts nodeA:1,nodeB:1 -n 2 "$MICROPP" train --mode ddp "${A[@]}" --allreduce mpi
l_mpi=$(json_get '["losses"]' 2>/dev/null)
run 120 mpiexec -launcher fork -hosts nodeA:1,nodeB:1 -n 2 "$MICROPP" train --mode ddp "${A[@]}" --allreduce hier
l_hier=$(json_get '["losses"]' 2>/dev/null)
if [ "$RC" -eq 0 ] && [ -n "$l_mpi" ] && [ "$l_mpi" = "$l_hier" ]; then pass "hier/ddp on nodeA:1,nodeB:1: losses = mpi's bit for bit"
else fail "hier/ddp on nodeA:1,nodeB:1: losses = mpi's bit for bit" "exit $RC: mpi $l_mpi vs hier $l_hier"; fi
run 180 mpiexec "${TWO[@]}" -n 4 "$MICROPP" train --mode hybrid --pp 2 --dp 2 --micro-batches 4 --placement stages \
    "${A[@]}" --allreduce hier --verify
if [ "$RC" -eq 0 ] && [ "$(json_get '["verify_ok"]')" = True ]; then pass "hier/hybrid 2x2, one replica of a stage per node (a ring across): --verify"
else fail "hier/hybrid 2x2, one replica of a stage per node: --verify" "exit $RC: $(printf '%s' "$ERR" | head -c 300)"; fi
run 180 mpiexec "${TWO[@]}" -n 4 "$MICROPP" train --tp 2 --dp 2 "${A[@]}" --allreduce hier --verify
if [ "$RC" -eq 0 ] && [ "$(json_get '["verify_ok"]')" = True ] && [ "$(json_get '["tp_allreduce"]')" = hier ]; then
    pass "hier/--tp 2 --dp 2: the tensor-parallel group (one node) and the replicas (across) by hier: --verify"
else fail "hier/--tp 2 --dp 2 --allreduce hier: --verify" "exit $RC, tp_allreduce '$(json_get '["tp_allreduce"]' 2>/dev/null)': $(printf '%s' "$ERR" | head -c 300)"; fi
run 120 mpiexec "${TWO[@]}" -n 4 "$MICROPP" train --mode ddp "${A[@]}"
if [ "$RC" -eq 0 ] && [ "$(json_get '["allreduce"]')" = hier ]; then pass "hier/auto: ddp with 2 replicas on each of 2 nodes takes hier"
else fail "hier/auto: ddp with 2 replicas on each of 2 nodes takes hier" "exit $RC, '$(json_get '["allreduce"]' 2>/dev/null)'"; fi

run 120 mpiexec "${TWO[@]}" -n 4 "$MICROPP" allreduce --algo hier --size 1000004 --iters 2 --warmup 1 --json
got=$(printf '%s' "$OUT" | python3 -c "import json,sys; r=json.load(sys.stdin)['results']; print(len(r), r[0]['algo'], r[0]['wrong'])" 2>/dev/null)
if [ "$RC" -eq 0 ] && [ "$got" = "1 hier 0" ]; then pass "hier/allreduce --algo hier on nodeA:2,nodeB:2: 0 wrong"
else fail "hier/allreduce --algo hier on nodeA:2,nodeB:2: 0 wrong" "exit $RC, '$got': $(printf '%s' "$ERR" | head -c 300)"; fi
run 120 mpiexec -n 2 "$MICROPP" allreduce --size 64K --iters 2 --json
got=$(printf '%s' "$OUT" | python3 -c "import json,sys; print(' '.join(r['algo'] for r in json.load(sys.stdin)['results']))" 2>/dev/null)
if [ "$RC" -eq 0 ] && [ "$got" = "mpi ring shm" ]; then pass "hier/allreduce --algo all on one node leaves hier out"
else fail "hier/allreduce --algo all on one node leaves hier out" "exit $RC, '$got'"; fi

expect_user_error "hier/allreduce --algo hier on one node -> one line, exit 2" \
    "allreduce: --algo hier needs the replicas on 2 or more nodes, and all 2 share one: use --algo shm or ring" 60 \
    mpiexec -n 2 "$MICROPP" allreduce --algo hier --size 64K
expect_user_error "hier/allreduce --algo hier on nodes of 3 and 1 -> one line, exit 2" \
    "--algo hier needs the 4 ranks of each data-parallel group in equal runs, node after node" 60 \
    mpiexec -launcher fork -hosts nodeA:3,nodeB:1 -n 4 "$MICROPP" allreduce --algo hier --size 64K
expect_user_error "hier/train --allreduce hier on one node -> one line, exit 2" \
    "train: --allreduce hier needs the replicas on 2 or more nodes, and the 2 of rank 0's stage share one" 60 \
    mpiexec -n 2 "$MICROPP" train --mode ddp --allreduce hier --steps 1
expect_user_error "hier/train --allreduce hier on nodes of 3 and 1 -> one line, exit 2" \
    "train: --allreduce hier needs the 4 replicas of each stage in equal runs, node after node" 60 \
    mpiexec -launcher fork -hosts nodeA:3,nodeB:1 -n 4 "$MICROPP" train --mode ddp --allreduce hier --steps 1
