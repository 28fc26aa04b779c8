#!/usr/bin/env bash
# tests/t_crossover.sh: bench/crossover.sh's logic (issue 36's measured crossover against the predicted one):
# bench/crossover.py's interpolation on step medians made of two lines in 1/rate (an exact crossing), its
# "none" lines, the script's dry run (the plan's line, ddp and the method taking turns at each rate), and where
# root can make the hosts, a tiny real run whose summary has the table and the three lines' shape.
source "$(dirname "$0")/lib.sh"
PY=$ROOT/bench/crossover.py
SH=$ROOT/bench/crossover.sh

# ddp = 50 + 80000 / B, the method = 250 + 20000 / B (ms, B in Mb/s): equal at B = 60000 / 200 = 300 Mb/s.
python3 -c "
for b in (100, 200, 400, 800): print(b, 'ddp', 50 + 80000 / b); print(b, 'powersgd:128', 250 + 20000 / b)" > "$TMP/rows"
echo "crossover: --compress powersgd:128 beats ddp on links below 0.33 Gb/s a rank (its host work priced, its accuracy not)" > "$TMP/plan"
run 20 python3 "$PY" summary "$TMP/rows" "$TMP/plan"
if [ "$RC" -eq 0 ] && grep -qx 'measured crossover: 300 Mb/s (between 200 and 400 Mb/s)' <<<"$OUT" &&
   grep -q '^predicted crossover: 330 Mb/s (crossover: --compress powersgd:128' <<<"$OUT" &&
   grep -qx 'predicted / measured: 1.10' <<<"$OUT" && [ "$(grep -c '^[0-9]' <<<"$OUT")" = 4 ] && ! grep -q after <<<"$OUT"; then
    pass "crossover.py: two lines in 1/rate crossing at 300 Mb/s -> 300 (between 200 and 400), ratio 1.10, 4 rows"
else fail "crossover.py: the interpolation in 1/rate" "exit $RC: $OUT $ERR"; fi
sed 's/0.33 Gb/0.24 Gb/' "$TMP/plan" > "$TMP/after"
run 20 python3 "$PY" summary "$TMP/rows" "$TMP/plan" "$TMP/after"
if [ "$RC" -eq 0 ] && [ "$(tail -n 1 <<<"$OUT")" = 'predicted, calibrated after the runs: 240 Mb/s (/ measured: 0.80)' ]; then
    pass "crossover.py: a second plan (calibrated after the runs) -> its own line and ratio"
else fail "crossover.py: a second plan's line" "exit $RC: $OUT $ERR"; fi

python3 -c "
for b in (100, 200): print(b, 'ddp', 900); print(b, 'sign', 100)" > "$TMP/rows2"
echo "crossover: --compress sign beats ddp at every link bandwidth (its accuracy not priced)" > "$TMP/plan2"
run 20 python3 "$PY" summary "$TMP/rows2" "$TMP/plan2"
if [ "$RC" -eq 0 ] && grep -qx 'measured crossover: none in 100-200 Mb/s (sign faster than ddp at every rate)' <<<"$OUT" &&
   grep -q '^predicted crossover: none (crossover: --compress sign beats ddp at every' <<<"$OUT" && ! grep -q '^predicted /' <<<"$OUT"; then
    pass "crossover.py: a method faster at every rate -> 'none in 100-200 Mb/s', no ratio"
else fail "crossover.py: a method faster at every rate" "exit $RC: $OUT $ERR"; fi
printf 'step 12.5 ms (median) | 1k samples/s\n' > "$TMP/train"
run 20 python3 "$PY" median "$TMP/train"
if [ "$RC" -eq 0 ] && [ "$OUT" = 12.5 ]; then pass "crossover.py median: reads train's 'step X ms (median)'"
else fail "crossover.py median" "exit $RC: $OUT $ERR"; fi

run 60 env RATES="100 200" "$SH" --dry-run "$TMP/dry"
runs=$(grep '^run ' <<<"$OUT" | awk '{ print $2, $3 }' | tr '\n' ' ')
if [ "$RC" -eq 0 ] && grep -q '^crossover: --compress powersgd:128 beats ddp on links below [0-9.]* Gb/s' <<<"$OUT" &&
   [ "$runs" = "100 ddp: 100 powersgd:128: 200 ddp: 200 powersgd:128: " ] &&
   grep -q -- '--rate 200mbit -- -n 2 .*train .* --dp 2 --allreduce mpi .*--compress powersgd:128$' <<<"$OUT"; then
    pass "crossover.sh --dry-run: the plan's crossover line, then ddp and powersgd:128 taking turns at each rate"
else fail "crossover.sh --dry-run" "exit $RC, runs '$runs': $OUT $ERR"; fi
run 20 "$SH" --rates 100
if [ "$RC" -eq 2 ] && grep -q "unknown argument '--rates'" <<<"$ERR"; then pass "crossover.sh: an unknown argument -> exit 2"
else fail "crossover.sh: an unknown argument -> exit 2" "exit $RC: $ERR"; fi

for bad in "STEPS=x|STEPS must be a positive integer, not 'x'" "RATES=100 1g|RATES must be whole Mb/s above 0 (as 100 150 200), not '1g'" \
           "RATES=100|RATES must name 2 rates or more, not '100'"; do
    run 20 env "${bad%%|*}" "$SH" --dry-run "$TMP/bad"
    if [ "$RC" -eq 2 ] && [ "$ERR" = "bench/crossover.sh: ${bad#*|}" ] && [ -z "$OUT" ]; then pass "crossover.sh: ${bad%%|*} -> one line, exit 2"
    else fail "crossover.sh: ${bad%%|*} -> one line, exit 2" "exit $RC: $ERR $OUT"; fi
done

# A tiny real run on the hosts (root): 2 rates, 3 steps each, a small model calibrated first.
if [ "$(id -u)" != 0 ]; then skip "crossover.sh: a tiny run on 2 throttled hosts" "not root (the hosts are network namespaces)"; exit 0; fi
run 300 env RATES="50 400" STEPS=3 MODEL="--layers 1 --hidden 64 --inputs 64 --batch 32" METHOD=powersgd:8 "$SH" "$TMP/real"
if [ "$RC" -eq 3 ]; then skip "crossover.sh: a tiny run on 2 throttled hosts" "$(grep -m1 unavailable <<<"$ERR")"
elif [ "$RC" -eq 0 ] && [ "$(wc -l < "$TMP/real/rows.txt")" = 4 ] && [ "$(grep -c '^[0-9]' "$TMP/real/summary.txt")" = 2 ] &&
     grep -q '^measured crossover: ' "$TMP/real/summary.txt" && grep -q '^predicted crossover: ' "$TMP/real/summary.txt" &&
     grep -q '^predicted, calibrated after the runs: ' "$TMP/real/summary.txt" &&
     grep -q '"ortho_s_per_op"' "$TMP/real/profile.json"; then
    pass "crossover.sh: a tiny run on 2 throttled hosts: 4 medians, the table, measured and predicted lines ($(grep '^measured' "$TMP/real/summary.txt"))"
else fail "crossover.sh: a tiny run on 2 throttled hosts" "exit $RC: $(tail -c 600 <<<"$ERR$OUT")"; fi
