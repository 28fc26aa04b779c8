#!/usr/bin/env bash
# tests/t_ep.sh: expert parallelism's exchange. The all-to-all of comms/alltoall.c (tests/bin/mpi_alltoall
# under 1 to 4 ranks: counts, then rows by mpi, pair and shm with uneven counts and zeros, staged, in
# half-world groups); micropp alltoall's table, its checks and its refusals.
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
e() { expect_user_error "$@"; }
e "ep/alltoall on one rank is refused like pingpong" "alltoall: needs 2 ranks or more, got 1.*mpiexec -n 2" 20 "$MICROPP" alltoall
e "ep/alltoall --algo nccl is train's" "alltoall: --algo nccl exchanges GPU buffers.*use --algo mpi, pair, shm or all" 20 \
    mpiexec -n 2 "$MICROPP" alltoall --algo nccl
e "ep/alltoall -b above -e" "alltoall: --min-bytes 1024 is above --max-bytes 4: swap them" 20 mpiexec -n 2 "$MICROPP" alltoall -b 1K -e 4
e "ep/alltoall --size not whole floats" "alltoall: --size 6 is not a whole number of floats" 20 mpiexec -n 2 "$MICROPP" alltoall --size 6
