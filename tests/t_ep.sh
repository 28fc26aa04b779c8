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
