#!/usr/bin/env bash
# tests/t_ep.sh: expert parallelism (--ep, axes/expert.c; docs/experts.md). The all-to-all of comms/alltoall.c
# (tests/bin/mpi_alltoall under 1 to 4 ranks: counts, then rows by mpi, pair and shm with uneven counts and
# zeros, staged, in half-world groups); micropp alltoall's table, its checks and its refusals; train --ep:
# --verify on 2 and 4 ranks (ep alone by each all-to-all, drops, ddp x ep, ZeRO-1, pp x ep under 1f1b and
# gpipe, bf16), the same losses as data parallelism alone, --json's keys, checkpoints across expert layouts,
# and every rule's one line (exit 2).
source "$(dirname "$0")/lib.sh"

A2A=$ROOT/tests/bin/mpi_alltoall

# ---- the collective, under several world sizes ----
if [ ! -x "$A2A" ]; then
    fail "ep/mpi_alltoall" "$A2A is missing: build it with 'make test' (or make tests/bin/mpi_alltoall)"
else
    for n in 1 2 3 4; do
        run 120 mpiexec -n $n "$A2A"
        printf '%s\n' "$OUT" | grep -E '^(PASS|FAIL|SKIP) '
        npass=$(printf '%s\n' "$OUT" | grep -c '^PASS ')
        want=11; [ $n = 4 ] && want=21
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

e "ep/alltoall on one rank is refused like pingpong" "alltoall: needs 2 ranks or more, got 1.*mpiexec -n 2" 20 "$MICROPP" alltoall
e "ep/alltoall --algo nccl is train's" "alltoall: --algo nccl exchanges GPU buffers.*use --algo mpi, pair, shm or all" 20 \
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
EOF2

# The exchange changes where an expert runs, not what it computes: --ep's losses are data parallelism's.
L=(--layers 4 --hidden 16 --batch 32 --log-every 0 --experts 4 --steps 8 --json)
for lay in "4|--dp 4|--ep 2" "4|--dp 4|--ep 4" "4|--pp 2 --dp 2 --micro-batches 4|--ep 2"; do
    IFS='|' read -r n base ep <<<"$lay"
    # shellcheck disable=SC2086
    run 240 mpiexec -n "$n" "$MICROPP" train "${L[@]}" $base; REF=$OUT
    # shellcheck disable=SC2086
    run 240 mpiexec -n "$n" "$MICROPP" train "${L[@]}" $base $ep; GOT=$OUT
    why=$(losses_close "$GOT" "$REF" 1e-5 "$base")
    keys=$(printf '%s' "$GOT" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['ep'], d['alltoall'], d['alltoall_bytes_per_step'] > 0, d['alltoall_ms_per_step'] >= 0)" 2>/dev/null)
    if [ "$RC" = 0 ] && [ -z "$why" ] && [ "$keys" = "${ep#--ep } shm True True" ]; then
        pass "ep/$base $ep: 8 steps of losses within 1e-5 of $base alone; --json's ep, alltoall, bytes and ms"
    else fail "ep/$base $ep: losses" "rc $RC: $why; keys '$keys' ${ERR:0:200}"; fi
done
run 120 mpiexec -n 2 "$MICROPP" train "${L[@]}" --dp 2
[ "$RC" = 0 ] && ! grep -q '"ep"\|alltoall' <<<"$OUT" && pass "ep/a run without --ep keeps its --json keys" \
    || fail "ep/without --ep" "rc $RC: $(grep -o '"ep[^,]*\|"alltoall[^,]*' <<<"$OUT" | head -3)"

# Checkpoints: every replica holds the whole model, so a checkpoint of --ep 2 resumes on the monolith and one
# of plain ddp resumes under --ep 2, each continuing as the run that never stopped (no drops and no auxiliary
# loss, so that the routing groups, a replica's rows or the whole batch, do not matter).
C=(--layers 4 --hidden 16 --batch 32 --log-every 0 --experts 4 --capacity-factor 4 --aux-loss 0)
last4() { python3 -c "import json,sys; l=json.loads(sys.argv[1])['losses']; print(json.dumps({'losses': l[-4:]}))" "$1"; }
run 120 mpiexec -n 2 "$MICROPP" train "${C[@]}" --dp 2 --ep 2 --steps 8 --json; WHOLE=$(last4 "$OUT")
for way in "ep 2 -> monolith|mpiexec -n 2 $MICROPP train --dp 2 --ep 2|$MICROPP train" \
           "ddp -> ep 2|mpiexec -n 2 $MICROPP train --dp 2|mpiexec -n 2 $MICROPP train --dp 2 --ep 2"; do
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
e "ep/--ep with ZeRO-2" "train: --experts with --zero 2: .* use --zero 1 or 0" \
    60 mpiexec -n 2 "$MICROPP" train "${T[@]}" --experts 4 --dp 2 --ep 2 --zero 2
e "ep/--alltoall shm across nodes" "train: --alltoall shm needs every expert group on one node" \
    60 mpiexec -launcher fork -hosts a:1,b:1 -n 2 "$MICROPP" train "${T[@]}" --experts 4 --dp 2 --ep 2 --alltoall shm

# --alltoall auto typed out is the default: shm on one node (it was the index of nccl, and aborted), and
# train --help names the default.
run 60 mpiexec -n 2 "$MICROPP" train "${T[@]}" --experts 4 --dp 2 --ep 2 --alltoall auto
if [ "$RC" -eq 0 ] && printf '%s' "$OUT" | grep -q "all-to-all shm"; then pass "ep/--alltoall auto typed out picks shm on one node"
else fail "ep/--alltoall auto typed out" "rc $RC: $(printf '%s' "$OUT$ERR" | tail -3)"; fi
"$MICROPP" train --help | tr -s ' \n' ' ' | grep -q "pair|shm|auto\] (auto)" && pass "ep/--help names --alltoall's default" ||
    fail "ep/--help names --alltoall's default" "$("$MICROPP" train --help | grep -A4 -- --alltoall)"
