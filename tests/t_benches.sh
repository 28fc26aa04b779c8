#!/usr/bin/env bash
# tests/t_benches.sh: the CPU benchmark scripts that docs quote (bench/tp.sh, its --tcp mode, bench/overlap.sh
# and bench/zero.sh) run end to end on a small model and print every way and every ratio the docs show;
# bad input is exit 2 with one line. Figures are not judged here (the docs say where they were measured).
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
SMALL=$TMP/small.json
echo '{"layers": 4, "hidden": 64, "inputs": 64, "classes": 4, "batch": 32, "optimizer": "adam"}' > "$SMALL"

run 600 env STEPS=2 CONFIG="$SMALL" MICROPP="$MICROPP" bash "$ROOT/bench/tp.sh" 1
miss=""
for w in mono-1t mono-2t tp-2 pp-2 tp-2-b16 pp-2-b16 tp-2-narrow pp-2-narrow msg-full msg-slice; do
    grep -qE "^$w +[0-9]+ " "$TMP/out" || miss="$miss [$w]"
done
for l in "tp-2 / mono-1t = [0-9.]+x \| tp-2 / mono-2t = [0-9.]+x \| tp-2's all-reduce: [0-9]+% of the step" \
         "tp-2 / pp-2 = [0-9.]+x at batch 256 \| [0-9.]+x at batch 16 \| [0-9.]+x narrow" "msg-slice / msg-full = [0-9.]+x"; do
    grep -qE "$l" "$TMP/out" || miss="$miss [line $l]"
done
if [ "$RC" -eq 0 ] && [ -z "$miss" ]; then pass "benches/tp.sh: every way and ratio"
else fail "benches/tp.sh: every way and ratio" "exit $RC, missing$miss: $(tail -c 300 "$TMP/err") $(tail -3 "$TMP/out" | tr '\n' ' ')"; fi

run 600 env STEPS=3 CONFIG="$SMALL" MICROPP="$MICROPP" bash "$ROOT/bench/tp.sh" --tcp 1
miss=""
for w in mono-1t tp-shm tp-mpi tp-tcp pp-tcp; do grep -qE "^$w +[0-9]+ " "$TMP/out" || miss="$miss [$w]"; done
for l in "^link \(pingpong over TCP" "across the two hosts: tp-tcp / pp-tcp = [0-9.]+x" "tp-tcp all-reduce per step: "; do
    grep -qE "$l" "$TMP/out" || miss="$miss [line $l]"
done
if [ "$RC" -eq 0 ] && [ -z "$miss" ]; then pass "benches/tp.sh --tcp: two fake hosts, every way and line"
else fail "benches/tp.sh --tcp: two fake hosts, every way and line" "exit $RC, missing$miss: $(tail -c 300 "$TMP/err") $(tail -3 "$TMP/out" | tr '\n' ' ')"; fi

expect_user_error "benches/tp.sh: REPS must be a number" "REPS must be a positive integer, not 'x'" 20 bash "$ROOT/bench/tp.sh" x
expect_user_error "benches/tp.sh: CONFIG must be readable" "CONFIG '$TMP/none.json' is not a readable file" 20 \
    env CONFIG="$TMP/none.json" bash "$ROOT/bench/tp.sh" 1

run 600 env REPS=1 STEPS=3 CONFIG="$SMALL" RESULTS="$TMP/zero.jsonl" MICROPP="$MICROPP" bash "$ROOT/bench/zero.sh"
miss=""
for j in ddp zero-1 zero-2 zero-3; do grep -qE "^$j +[0-9]+ " "$TMP/out" || miss="$miss [$j]"; done
grep -qE "zero-2 / zero-1: [0-9.]+x \(target >= 0.95\); zero-3 / ddp: [0-9.]+x \(target >= 0.85\)" "$TMP/out" || miss="$miss [ratios]"
[ "$(wc -l < "$TMP/zero.jsonl")" -eq 4 ] || miss="$miss [4 raw runs in RESULTS]"
if [ "$RC" -eq 0 ] && [ -z "$miss" ]; then pass "benches/zero.sh: four jobs and both ratios"
else fail "benches/zero.sh: four jobs and both ratios" "exit $RC, missing$miss: $(tail -c 300 "$TMP/err") $(tail -3 "$TMP/out" | tr '\n' ' ')"; fi

# bench/det_cost.sh: the four layouts' lines, each with its two medians and their ratio (--det-rows 8: the
# small model's micro-batches of 8 rows)
run 600 env REPS=1 STEPS=2 DET_ROWS=8 CONFIG="$SMALL" MICROPP="$MICROPP" bash "$ROOT/bench/det_cost.sh"
miss=""
for w in "monolith" "1f1b 2 ranks" "ddp 2 ranks" "tp 2"; do
    grep -qE "^$w +[0-9.]+ \([0-9.-]+\) +[0-9.]+ \([0-9.-]+\) +[0-9.]+$" "$TMP/out" || miss="$miss [$w]"
done
if [ "$RC" -eq 0 ] && [ -z "$miss" ]; then pass "benches/det_cost.sh: four layouts, each a ratio"
else fail "benches/det_cost.sh: four layouts, each a ratio" "exit $RC, missing$miss: $(tail -c 300 "$TMP/err") $(tail -5 "$TMP/out" | tr '\n' ' ')"; fi
expect_user_error "benches/det_cost.sh: REPS must be a number" "REPS must be a positive integer, not 'x'" 20 \
    env REPS=x bash "$ROOT/bench/det_cost.sh"

# bench/overlap.sh: per schedule, a synchronous and a --post-validate run, each row its measured bubble across
# steps (also with the optimizer steps out of the windows), the simulator's overlapped figure for that run's
# costs, and their difference
PIPE=$TMP/pipe.json
echo '{"layers": 4, "hidden": 32, "inputs": 32, "classes": 4, "batch": 32, "micro_batches": 4}' > "$PIPE"
run 600 env STEPS=4 CONFIG="$PIPE" MICROPP="$MICROPP" bash "$ROOT/bench/overlap.sh" 2 "zb-h2 zb-v"
miss=""
for s in zb-h2 zb-v; do for m in synchronous post-validate; do
    grep -qE "^$s +$m +[0-9.]+ +[01]\.[0-9]{4} +[01]\.[0-9]{4} +0\.[0-9]{4} +[-+][01]\.[0-9]{4}$" "$TMP/out" || miss="$miss [$s $m]"
done; done
if [ "$RC" -eq 0 ] && [ -z "$miss" ]; then pass "benches/overlap.sh: measured and theory for each schedule, both ways"
else fail "benches/overlap.sh: measured and theory for each schedule, both ways" "exit $RC, missing$miss: $(tail -c 300 "$TMP/err") $(tail -3 "$TMP/out" | tr '\n' ' ')"; fi
expect_user_error "benches/overlap.sh: STEPS must be 4 or more" "STEPS '3' must be 4 or more" 20 \
    env STEPS=3 bash "$ROOT/bench/overlap.sh"
expect_user_error "benches/overlap.sh: CONFIG must be readable" "CONFIG '$TMP/none.json' is not a readable file" 20 \
    env CONFIG="$TMP/none.json" bash "$ROOT/bench/overlap.sh"
