#!/usr/bin/env bash
# tests/t_fuzz_replay.sh: replays every fuzz target over its seed corpus and the crash inputs that
# `make fuzz` kept (tests/fuzz/regressions/TARGET/), with the plain driver `make test` builds
# (AddressSanitizer + UBSan when the compiler has them): a crash, a sanitizer report or a leak fails.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
for t in config npy safetensors; do
    bin=tests/bin/replay_$t
    if [ ! -x "$bin" ]; then fail "fuzz/replay $t" "$bin is missing: run 'make test' (it builds the replay drivers)"; continue; fi
    shopt -s nullglob
    seeds=(tests/fuzz/corpus/$t/*)
    inputs=("${seeds[@]}" tests/fuzz/regressions/$t/*)
    shopt -u nullglob
    # A corpus that moved or emptied would replay nothing and pass without looking.
    if [ ${#seeds[@]} -eq 0 ]; then fail "fuzz/replay $t" "no seed inputs in tests/fuzz/corpus/$t/"; continue; fi
    # The config reader exits through user_error in the real program; the harness jumps out of it
    # instead, so what it had allocated is left behind by design: no leak check for that target.
    leaks=1; [ $t = config ] && leaks=0
    run 120 env ASAN_OPTIONS=detect_leaks=$leaks:abort_on_error=0 "$bin" "${inputs[@]}"
    if [ "$RC" -eq 0 ] && [ "$OUT" = "replayed ${#inputs[@]} inputs" ]; then pass "fuzz/replay $t: ${#inputs[@]} inputs"
    else fail "fuzz/replay $t" "exit $RC: $(printf '%s' "$ERR" | grep -m3 -E 'ERROR|runtime error|fatal' | tr '\n' ' ')"; fi
done
