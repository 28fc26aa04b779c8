#!/usr/bin/env bash
# tests/t_ep.sh: expert parallelism (--ep, axes/expert.c; docs/experts.md). The all-to-all of comms/alltoall.c
# (tests/bin/mpi_alltoall under 1 to 4 ranks: counts, then rows by mpi, pair and shm with uneven counts and
# zeros, staged, in half-world groups); micropp alltoall's table, its checks and its refusals; train --ep:
# --verify on 2 and 4 ranks (ep alone by each all-to-all, drops, ddp x ep, ZeRO-1, pp x ep under 1f1b and
# gpipe, bf16, bf16 pp x ep; an MoE pipeline of one micro-batch equal to its bf16 monolith), the same losses
# and --clip-grad norms as data parallelism alone, --json's keys, a rank's memory holding E/N experts,
# checkpoints (every expert whole) across expert layouts, and every rule's one line (exit 2).
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)

A2A=$ROOT/tests/bin/mpi_alltoall

# ---- the collective, under several world sizes ----
if [ ! -x "$A2A" ]; then
    fail "ep/mpi_alltoall" "$A2A is missing: build it with 'make test' (or make tests/bin/mpi_alltoall)"
else
    for n in 1 2 3 4; do
        run 120 mpiexec -n $n "$A2A"
        printf '%s\n' "$OUT" | grep -E '^(PASS|FAIL|SKIP) '
        npass=$(printf '%s\n' "$OUT" | grep -c '^PASS ')
        want=15; [ $n = 4 ] && want=29
        if [ "$RC" -ne 0 ] || [ "$npass" -lt $want ]; then
            fail "ep/mpi_alltoall -n $n" "exit $RC, $npass PASS lines (want $want): $(printf '%s' "$ERR" | head -c 300)"
        fi
    done
fi

e() { expect_user_error "$@"; }

# ---- micropp alltoall: the table, nccl-tests' sizes, checked results, refusals ----
sizes() { printf '%s' "$OUT" | python3 -c "import json,sys; d=json.load(sys.stdin); print(sorted({int(r['bytes']) for r in d['results']}), sorted({r['algo'] for r in d['results']}), sum(r['wrong'] for r in d['results']))" 2>/dev/null; }
run 60 mpiexec -n 2 "$MICROPP" alltoall -b 8 -e 128 -f 4 --iters 2 --warmup 0 --json
[ $RC -eq 0 ] && [ "$(sizes)" = "[8, 32, 128] ['mpi', 'pair', 'shm'] 0" ] \
    && pass "ep/alltoall -b 8 -e 128 -f 4: 8, 32, 128 bytes by mpi, pair and shm, nothing wrong" \
    || fail "ep/alltoall -b -e -f" "rc $RC: $(sizes) ${ERR:0:200}"
run 60 mpiexec -n 3 "$MICROPP" alltoall --size 12K --algo pair --iters 2 --warmup 0 --json
[ $RC -eq 0 ] && [ "$(sizes)" = "[12288] ['pair'] 0" ] && pass "ep/alltoall on 3 ranks, one algorithm" \
    || fail "ep/alltoall on 3 ranks" "rc $RC: $(sizes) ${ERR:0:200}"
run 60 mpiexec -n 4 "$MICROPP" alltoall -b 16 -e 64K -f 64 --iters 2 --warmup 0
w=$(printf '%s\n' "$OUT" | tail -1)
nrows=$(printf '%s\n' "$OUT" | grep -cE '^ +[0-9]+ +[0-9]+ +(mpi|pair|shm) +[0-9.]+ +[0-9.]+ +[0-9.]+ +0$')
[ $RC -eq 0 ] && [ "$nrows" = 9 ] && printf '%s' "$w" | grep -qE "^# fastest: (mpi|pair|shm) at 16 " \
    && pass "ep/alltoall on 4 ranks: 9 rows, each right, the fastest per size last" \
    || fail "ep/alltoall table" "rc $RC, $nrows rows: last line '$w'"

# a /dev/shm too small for shm's windows (MICROPP_SHM_FREE: its free bytes; the default 64 MiB per rank needs 256 MB,
# which Docker's 64 MB tmpfs met with SIGBUS): all leaves shm out and says why, --algo shm is refused in one line
run 60 env MICROPP_SHM_FREE=100000 mpiexec -n 2 "$MICROPP" alltoall -e 1M --iters 2 --warmup 0
[ $RC -eq 0 ] && grep -q "^# shm left out: a node's /dev/shm is too small for its windows at this --size$" <<<"$OUT" &&
    ! grep -qE '^ +[0-9]+ +[0-9]+ +shm ' <<<"$OUT" && grep -qE '^ +[0-9]+ +[0-9]+ +pair ' <<<"$OUT" \
    && pass "ep/alltoall on a small /dev/shm: shm left out, said why" || fail "ep/alltoall on a small /dev/shm" "rc $RC: $(tail -3 <<<"$OUT$ERR")"
e "ep/alltoall --algo shm on a small /dev/shm" "alltoall: --algo shm needs 4.21 MB of /dev/shm for the windows of the 2 ranks of this node at --size 1.00 MiB, and 100 kB are free: a smaller --size \(or -e\), a larger /dev/shm, or --algo mpi$" 20 \
    env MICROPP_SHM_FREE=100000 mpiexec -n 2 "$MICROPP" alltoall -e 1M --algo shm
e "ep/alltoall on one rank is refused like pingpong" "alltoall: needs 2 ranks or more, got 1.*mpiexec -n 2" 20 "$MICROPP" alltoall
# (here no rank has a GPU: --algo nccl is refused in one line; tests/t_gpu.sh runs it on 2 GPUs)
e "ep/alltoall --algo nccl without a GPU" "alltoall: --algo nccl runs train's all-to-all over NCCL between GPUs, and rank 0 has no CUDA device.*use --algo mpi, pair, shm or all" 20 \
    mpiexec -n 2 "$MICROPP" alltoall --algo nccl
e "ep/alltoall -b above -e" "alltoall: --min-bytes 1024 is above --max-bytes 4: swap them" 20 mpiexec -n 2 "$MICROPP" alltoall -b 1K -e 4
e "ep/alltoall --size not whole floats" "alltoall: --size 6 is not a whole number of floats" 20 mpiexec -n 2 "$MICROPP" alltoall --size 6

# ---- train --ep: --verify against the monolith, the same losses as without --ep, the report ----
M=(--layers 4 --hidden 16 --batch 32 --log-every 0 --experts 4 --steps 3)
while IFS='|' read -r name n args; do
    # shellcheck disable=SC2086
    run 240 mpiexec -n "$n" "$MICROPP" train "${M[@]}" --verify $args </dev/null  # (mpiexec reads stdin)
    if [ "$RC" = 0 ] && grep -q -- "-> ok" <<<"$OUT" && grep -q "^expert parallelism: groups of" <<<"$OUT"; then
        pass "ep/--verify $name"
    else fail "ep/--verify $name" "rc $RC: $(tail -c 400 <<<"$OUT$ERR")"; fi
done <<'EOF2'
ep 2 alone (dp 2)|2|--dp 2 --ep 2
ep 2 alone, capacity 0.5 (drops), top-1|2|--dp 2 --ep 2 --capacity-factor 0.5 --top-k 1
ep 2 by pairwise messages|2|--dp 2 --ep 2 --alltoall pair
ep 2 by MPI_Alltoallv|2|--dp 2 --ep 2 --alltoall mpi
ep 4 (dp 4)|4|--dp 4 --ep 4
ddp x ep: dp 4, two groups of ep 2|4|--dp 4 --ep 2
ddp x ep with ZeRO-1|4|--dp 4 --ep 2 --zero 1
pp 2 x ep 2 under 1f1b|4|--pp 2 --dp 2 --ep 2 --schedule 1f1b --micro-batches 4
pp 2 x ep 2 under gpipe, --moe-every 2|4|--pp 2 --dp 2 --ep 2 --schedule gpipe --micro-batches 2 --moe-every 2
ep 2, bf16|2|--dp 2 --ep 2 --precision bf16
ep 2 with ZeRO-2 (dp 2)|2|--dp 2 --ep 2 --zero 2
ep 2 with ZeRO-2, --ep-overlap off|2|--dp 2 --ep 2 --zero 2 --ep-overlap off
ddp x ep with ZeRO-2: dp 4, ep 2|4|--dp 4 --ep 2 --zero 2
ddp x ep with ZeRO-2, --ep-overlap off|4|--dp 4 --ep 2 --zero 2 --ep-overlap off
ddp x ep with ZeRO-2, a bucket per tensor's layer (--bucket-mb 0.001)|4|--dp 4 --ep 2 --zero 2 --bucket-mb 0.001
ddp x ep with ZeRO-3: dp 4, ep 2|4|--dp 4 --ep 2 --zero 3
ep 2 with ZeRO-3 (dp 2), --ep-overlap off|2|--dp 2 --ep 2 --zero 3 --ep-overlap off
pp 2 x ep 2 with ZeRO-3 under 1f1b|4|--pp 2 --dp 2 --ep 2 --zero 3 --schedule 1f1b --micro-batches 4
pp 2 x ep 2, bf16, under 1f1b|4|--pp 2 --dp 2 --ep 2 --precision bf16 --schedule 1f1b --micro-batches 4
pp 2 x ep 2, bf16, ZeRO-1 under zb-v|4|--pp 2 --dp 2 --ep 2 --precision bf16 --zero 1 --schedule zb-v --micro-batches 4
EOF2

# bf16: an MoE layer reads its input and its output gradient rounded to bf16 (moe.c read_rows), as every
# reader of a stash or a pipeline message does, so a pipeline of one micro-batch (every product the
# monolith's shape, so the same kernel and order) equals its bf16 monolith exactly, the stage boundary
# (a rounded message in, a rounded gradient back) an MoE layer on each side. (Before: 4.96e-03 and 7.85e-03.)
for sched in 1f1b zb-v; do
    run 240 mpiexec -n 2 "$MICROPP" train "${M[@]}" --verify --pp 2 --micro-batches 1 --schedule $sched \
        --precision bf16 </dev/null
    if [ "$RC" = 0 ] && grep -qE "^verify .*per (stage|chunk [^:]*): (0\.00e\+00 )+-> ok" <<<"$OUT"; then
        pass "ep/--verify bf16: an MoE pipeline of one micro-batch ($sched) is its monolith exactly"
    else fail "ep/--verify bf16 pipeline = monolith ($sched)" "rc $RC: $(grep -A3 '^verify' <<<"$OUT$ERR" |
        head -c 400)"; fi
done

# The exchange changes where an expert runs, not what it computes: --ep's losses are data parallelism's.
# ZeRO-2 and 3 reduce-scatter each bucket over the group that sums it (the experts' over their holders):
# their losses are ZeRO-2's and 3's alone. --clip-grad's global norm counts every parameter once: the
# experts on one holder each, the rest on replica 0 (without ZeRO; with ZeRO-1 each rank its shards): the
# norms of --ep equal data parallelism's alone. A row checks the losses, the norms (under --clip-grad 0.01,
# the same run checked both ways), or both; its two runs' --json stay in RUNS for the memory checks below.
L=(--layers 4 --hidden 16 --batch 32 --log-every 0 --experts 4 --steps 8 --json)
norms() { python3 -c "import json,sys; print(' '.join('%.6e' % v for v in json.loads(sys.argv[1])['grad_norms']))" "$1"; }
declare -A RUNS
for lay in "4|--dp 4|--ep 2|losses" "4|--dp 4|--ep 4|losses norms" \
    "4|--pp 2 --dp 2 --micro-batches 4|--ep 2|losses" "4|--dp 4 --zero 2|--ep 2|losses norms" \
    "4|--dp 4 --zero 3|--ep 4|losses" "4|--pp 2 --dp 2 --micro-batches 4 --zero 2|--ep 2|losses" \
    "2|--dp 2|--ep 2|norms" "4|--dp 4 --zero 1|--ep 2|norms" "4|--dp 4 --zero 3|--ep 2|norms"; do
    IFS='|' read -r n base ep checks <<<"$lay"
    clip=(); [[ $checks == *norms* ]] && clip=(--clip-grad 0.01)
    # shellcheck disable=SC2086
    run 240 mpiexec -n "$n" "$MICROPP" train "${L[@]}" $base "${clip[@]}"; REF=$OUT RUNS[$base]=$OUT
    # shellcheck disable=SC2086
    run 240 mpiexec -n "$n" "$MICROPP" train "${L[@]}" $base $ep "${clip[@]}"; GOT=$OUT RUNS[$base $ep]=$OUT
    if [[ $checks == *losses* ]]; then
        why=$(losses_close "$GOT" "$REF" 1e-5 "$base")
        keys=$(printf '%s' "$GOT" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['ep'], d['alltoall'], d['alltoall_bytes_per_step'] > 0, d['alltoall_ms_per_step'] >= 0)" 2>/dev/null)
        if [ "$RC" = 0 ] && [ -z "$why" ] && [ "$keys" = "${ep#--ep } shm True True" ]; then
            pass "ep/$base $ep: 8 steps of losses within 1e-5 of $base alone; --json's ep, alltoall, bytes and ms"
        else fail "ep/$base $ep: losses" "rc $RC: $why; keys '$keys' ${ERR:0:200}"; fi
    fi
    if [[ $checks == *norms* ]]; then
        why=$(python3 -c "import sys; a, b = [list(map(float, x.split())) for x in sys.argv[1:]]; print('' if a and len(a) == len(b) and all(abs(x - y) <= 1e-5 * y for x, y in zip(a, b)) else 'norms %s against %s' % (a, b))" "$(norms "$GOT")" "$(norms "$REF")")
        [ -z "$why" ] && pass "ep/$base $ep --clip-grad: the gradient norms of $base alone" || fail "ep/$base $ep --clip-grad" "$why"
    fi
done
OUT=${RUNS[--dp 2]}
[ -n "$OUT" ] && ! grep -q '"ep"\|alltoall' <<<"$OUT" && pass "ep/a run without --ep keeps its --json keys" \
    || fail "ep/without --ep" "$(grep -o '"ep[^,]*\|"alltoall[^,]*' <<<"$OUT" | head -3)"

# A rank holds the router and its E/N experts (moe.h's moe_held): --json's weights, gradients and optimizer
# state shrink by half the experts' floats at --ep 2 (4 experts of 16 x 16 + 16 floats on each of the 3 MoE
# layers: 2 x 3 x 272 floats fewer), and ZeRO-1 shards the rest of the optimizer state over dp.
# (The runs of the table above, their --clip-grad aside.)
mem() { python3 -c "import json,sys; m=json.loads(sys.argv[1])['memory_per_rank']; print(m['weights'], m['grads'], m['optimizer'])" "$1" 2>/dev/null; }
ONE=$(mem "${RUNS[--dp 2]}") TWO=$(mem "${RUNS[--dp 2 --ep 2]}")
less=$((2 * 3 * 272 * 4))
read -r w1 g1 o1 <<<"$ONE"; read -r w2 g2 o2 <<<"$TWO"
[ -n "$w2" ] && [ $((w1 - w2)) = $less ] && [ $((g1 - g2)) = $less ] && [ $((o1 - o2)) = $((2 * less)) ] &&
    pass "ep/--ep 2 holds half the experts: weights $w1 -> $w2 bytes, gradients and Adam's moments alike" ||
    fail "ep/--ep 2 holds half the experts" "ep 1: $ONE, ep 2: $TWO (expected $less bytes fewer)"
# ZeRO-2 shards the gradients, 3 the weights too, each bucket over the group that sums it: on dp 4 with --ep 2
# a rank holds a quarter of the router and dense layers and half of its experts (each bucket's shard rounded
# up to whole floats: within 16 bytes a bucket)
Z1=$(mem "${RUNS[--dp 4 --zero 1 --ep 2]}") Z2=$(mem "${RUNS[--dp 4 --zero 2 --ep 2]}")
Z3=$(mem "${RUNS[--dp 4 --zero 3 --ep 2]}")
read -r w1 g1 o1 <<<"$Z1"; read -r w2 g2 o2 <<<"$Z2"; read -r w3 g3 o3 <<<"$Z3"
experts=$((3 * 2 * 272 * 4))  # bytes of a rank's experts (3 MoE layers, 2 experts each)
want=$(((w1 - experts) / 4 + experts / 2))
near() { [ -n "$1" ] && [ "$1" -ge "$2" ] && [ "$1" -le $(($2 + 16 * 12)) ]; }
near "$g2" "$want" && [ "$w2" = "$w1" ] && near "$g3" "$want" && near "$w3" "$want" && [ "$o2" = "$o1" ] && [ "$o3" = "$o1" ] &&
    pass "ep/--ep 2 on dp 4: ZeRO-2's gradients $g1 -> $g2 bytes (dense / 4 + experts / 2), ZeRO-3's weights $w1 -> $w3" ||
    fail "ep/--ep 2 with ZeRO-2, 3: the shards" "zero 1: $Z1, zero 2: $Z2, zero 3: $Z3 (expected about $want)"

# Checkpoints hold every expert whole: a save gathers them from the first expert group (its rank 0 writes),
# a resume cuts each rank's out, so a checkpoint of --ep 2 resumes on the monolith, one of plain ddp under --ep
# 2, and one of a hybrid pp 2 x dp 2 --ep 2 with ZeRO-1 on plain ddp, each continuing as the run that never
# stopped (no drops and no auxiliary loss, so that the routing groups, a replica's rows or the whole batch, do
# not matter).
C=(--layers 4 --hidden 16 --batch 32 --log-every 0 --experts 4 --capacity-factor 4 --aux-loss 0)
last4() { python3 -c "import json,sys; l=json.loads(sys.argv[1])['losses']; print(json.dumps({'losses': l[-4:]}))" "$1"; }
run 120 mpiexec -n 2 "$MICROPP" train "${C[@]}" --dp 2 --ep 2 --steps 8 --json; WHOLE=$(last4 "$OUT")
for way in "ep 2 -> monolith|mpiexec -n 2 $MICROPP train --dp 2 --ep 2|$MICROPP train" \
           "ddp -> ep 2|mpiexec -n 2 $MICROPP train --dp 2|mpiexec -n 2 $MICROPP train --dp 2 --ep 2" \
           "hybrid ep 2 ZeRO-1 -> ddp|mpiexec -n 4 $MICROPP train --pp 2 --dp 2 --ep 2 --zero 1|mpiexec -n 2 $MICROPP train --dp 2" \
           "ep 2 ZeRO-2 -> monolith|mpiexec -n 2 $MICROPP train --dp 2 --ep 2 --zero 2|$MICROPP train" \
           "dp 4 ep 2 ZeRO-3 -> monolith|mpiexec -n 4 $MICROPP train --dp 4 --ep 2 --zero 3|$MICROPP train" \
           "monolith -> dp 4 ep 2 ZeRO-3|$MICROPP train|mpiexec -n 4 $MICROPP train --dp 4 --ep 2 --zero 3"; do
    IFS='|' read -r name save resume <<<"$way"
    rm -rf "$TMP/ck"
    # shellcheck disable=SC2086
    run 120 $save "${C[@]}" --steps 4 --save "$TMP/ck"; rc1=$RC
    # shellcheck disable=SC2086
    run 120 $resume "${C[@]}" --steps 8 --resume "$TMP/ck" --json
    why=$(losses_close "$(last4 "$OUT")" "$WHOLE" 1e-6 "--ep 2 without a stop")
    [ "$rc1" = 0 ] && [ "$RC" = 0 ] && [ -z "$why" ] && pass "ep/checkpoint $name: steps 5-8 as the run that never stopped" \
        || fail "ep/checkpoint $name" "rc $rc1/$RC: $why ${ERR:0:200}"
done

# ---- the rules: one line each, exit 2 ----
T=(--layers 4 --hidden 16 --batch 32 --steps 1 --log-every 0)
e "ep/--ep without --experts" "train: --ep 2 shards the experts of MoE layers, and this model has none: add --experts E" \
    60 mpiexec -n 2 "$MICROPP" train "${T[@]}" --dp 2 --ep 2
e "ep/--ep not dividing dp names the values that work" "train: --ep 3 with dp 4: .* N must divide dp: use --ep 2, 4" \
    60 mpiexec -n 4 "$MICROPP" train "${T[@]}" --experts 4 --dp 4 --ep 3
e "ep/E not divisible by N names --ep and --experts that work" \
    "train: --experts 6 over --ep 4: .* 6 is not a multiple of 4: use --ep 2, or --experts 4 or 8" \
    60 mpiexec -n 4 "$MICROPP" train "${T[@]}" --experts 6 --dp 4 --ep 4
e "ep/--ep without data parallelism" "train: --ep applies to data parallelism \(--dp > 1\), and this run is pp 2 x dp 1" \
    60 mpiexec -n 2 "$MICROPP" train "${T[@]}" --experts 4 --pp 2 --ep 2
e "ep/--ep with --tp" "train: --experts with --tp 2: MoE layers are not split over a tensor-parallel group" \
    60 mpiexec -n 4 "$MICROPP" train "${T[@]}" --experts 4 --dp 2 --tp 2 --ep 2
e "ep/--ep with local SGD" "train: --ep with --sync-every: .* each expert lives on dp/--ep of them" \
    60 mpiexec -n 2 "$MICROPP" train "${T[@]}" --experts 4 --dp 2 --ep 2 --sync-every 2
e "ep/--ep with --compress" "train: --ep with --compress: .* drop --ep or --compress" \
    60 mpiexec -n 2 "$MICROPP" train "${T[@]}" --experts 4 --dp 2 --ep 2 --compress topk:0.1
e "ep/--alltoall shm across nodes" "train: --alltoall shm needs every expert group on one node" \
    60 mpiexec -launcher fork -hosts a:1,b:1 -n 2 "$MICROPP" train "${T[@]}" --experts 4 --dp 2 --ep 2 --alltoall shm

# auto where one group sits on a node and another spans two (ranks 0-2 on a, 3 on b): each group its own
# algorithm, and every rank through the same set-up collectives (a rank of the spanning group left them early
# and the job hung)
run 60 mpiexec -launcher fork -hosts a:3,b:1 -n 4 "$MICROPP" train "${T[@]}" --experts 4 --dp 4 --ep 2
if [ "$RC" -eq 0 ] && printf '%s' "$OUT" | grep -q "all-to-all shm"; then pass "ep/auto with one group on a node, one across two"
else fail "ep/auto with one group on a node, one across two" "rc $RC: $(printf '%s' "$OUT$ERR" | tail -3)"; fi

# --alltoall auto typed out is the default: shm on one node (it was the index of nccl, and aborted), and
# train --help names the default.
run 60 mpiexec -n 2 "$MICROPP" train "${T[@]}" --experts 4 --dp 2 --ep 2 --alltoall auto
if [ "$RC" -eq 0 ] && printf '%s' "$OUT" | grep -q "all-to-all shm"; then pass "ep/--alltoall auto typed out picks shm on one node"
else fail "ep/--alltoall auto typed out" "rc $RC: $(printf '%s' "$OUT$ERR" | tail -3)"; fi
# /dev/shm too small for the experts' windows (MICROPP_SHM_FREE stands in for its free bytes; a 64 MB tmpfs, Docker's
# default, ended such a job with SIGBUS): --alltoall shm refused in one line with the room it needs, auto takes mpi
e "ep/--alltoall shm on a /dev/shm too small" \
    "train: --alltoall shm needs [0-9.]+ [kMG]?B of /dev/shm for the experts' windows of the 2 ranks of this node, and 10 kB are free: enlarge it \(docker run --shm-size\) or use --alltoall mpi$" \
    60 env MICROPP_SHM_FREE=10000 mpiexec -n 2 "$MICROPP" train "${T[@]}" --experts 4 --dp 2 --ep 2 --alltoall shm
run 60 env MICROPP_SHM_FREE=10000 mpiexec -n 2 "$MICROPP" train "${T[@]}" --experts 4 --dp 2 --ep 2
if [ "$RC" -eq 0 ] && printf '%s' "$OUT" | grep -q "all-to-all mpi"; then pass "ep/auto on a /dev/shm too small takes mpi"
else fail "ep/auto on a /dev/shm too small takes mpi" "rc $RC: $(printf '%s' "$OUT$ERR" | tail -3)"; fi
"$MICROPP" train --help | tr -s ' \n' ' ' | grep -q "pair|shm|auto\] (auto)" && pass "ep/--help names --alltoall's default" ||
    fail "ep/--help names --alltoall's default" "$("$MICROPP" train --help | grep -A4 -- --alltoall)"
