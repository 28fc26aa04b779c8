#!/usr/bin/env bash
# tests/t_wait_cpu.sh: --wait-policy passive spends less CPU than active where a rank waits (comms/watchdog.c):
# a 2-rank pipeline whose second stage holds one layer of eight, so it waits most of each step; active spins
# there (2 ranks on 2 cores: not crowded), passive sleeps.
# run.sh: alone (it compares CPU seconds: other files' processes would take the spinning rank's core)
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
unset MICROPP_WAIT  # (it overrides any policy)
export MICROPP_PEAK_GFLOPS=100  # (no peak measured: the same start-up either way, and less of it)
cpu_of() {  # CMD...: the user + system CPU seconds of CMD and its children
    ( "$@" > /dev/null 2>&1; times ) | awk 'NR == 2 { split($1, u, /[ms]/); split($2, y, /[ms]/); print u[1] * 60 + u[2] + y[1] * 60 + y[2] }'
}
PIPE=(timeout 120 mpiexec -n 2 "$MICROPP" train --mode pp --partition 7,1 --layers 8 --hidden 512 --batch 64 --steps 120
      --micro-batches 4 --log-every 0)
active=$(cpu_of "${PIPE[@]}" --wait-policy active) passive=$(cpu_of "${PIPE[@]}" --wait-policy passive)
if awk -v a="$active" -v p="$passive" 'BEGIN { exit !(p > 0 && p < 0.75 * a) }'; then
    pass "wait/passive: a 2-rank pipeline with a waiting stage, CPU ${passive} s, active ${active} s (under 75%)"
else fail "wait/passive spends less CPU than active" "${passive} CPU s passive, ${active} s active: expected under 75%"; fi
