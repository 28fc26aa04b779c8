# tests/t_schedule_file.sh: schedules as files. `micropp bubble --dump-csv` writes every built-in
# schedule in PyTorch's action notation; `train --schedule-file` runs it back with the same losses
# as the built-in schedule, and `bubble --schedule-file` simulates it alike. Every bad file (empty,
# bad token, wrong rank count, chunk order, an action missing, repeated, out of order, a deadlock) is
# refused before anything runs, with one line naming rank, column and action, and exit 2.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
T="--mode pp --layers 8 --hidden 32 --batch 24 --steps 3 --log-every 0 --json"

# round trips: K=2 (and K=4 for the V and the loop), the losses bit for bit
roundtrip() {  # NAME RANKS M SCHEDULE-ARGS...
    local name=$1 n=$2 m=$3; shift 3
    local csv="$TMP/$name-$n.csv"
    run 30 "$MICROPP" bubble --stages "$n" --micro-batches "$m" "$@" --dump-csv "$csv" --json; local sim_a=$(json_get '["rows"][0]["bubble_simulated"]')
    run 30 "$MICROPP" bubble --schedule-file "$csv" --json; local sim_b=$(json_get '["rows"][0]["bubble_simulated"]')
    run 120 mpiexec -n "$n" "$MICROPP" train $T --micro-batches "$m" "$@"; local a=$(json_get '["losses"]')
    run 120 mpiexec -n "$n" "$MICROPP" train $T --schedule-file "$csv"; local b=$(json_get '["losses"]') sched=$(json_get '["schedule"]')
    if [ "$RC" -eq 0 ] && [ -n "$a" ] && [ "$a" = "$b" ] && [ "$sched" = file ] && [ -n "$sim_a" ] && [ "$sim_a" = "$sim_b" ]; then
        pass "roundtrip/$name K=$n M=$m: dumped, run back with the same losses $b, simulated bubble $sim_b"
    else fail "roundtrip/$name K=$n M=$m" "built-in $a file $b ($sched) sim $sim_a vs $sim_b rc $RC $(printf '%s' "$ERR" | tail -2)"; fi
}
for s in naive gpipe 1f1b zb-h1 zb-h2 zb-v dualpipev; do roundtrip "$s" 2 4 --schedule "$s"; done
roundtrip interleaved 2 4 --schedule interleaved --virtual-stages 2
roundtrip interleaved-v3 2 3 --schedule interleaved --virtual-stages 3
roundtrip zb-v 4 6 --schedule zb-v
roundtrip interleaved 4 4 --schedule interleaved --virtual-stages 2

# the file under --verify, uneven, checkpointed
run 120 mpiexec -n 2 "$MICROPP" train $T --schedule-file "$TMP/zb-v-2.csv" --partition 3,1,2,2 --checkpoint-activations --verify
[ "$RC" -eq 0 ] && [ "$(json_get '["verify_ok"]')" = True ] && pass "file/zb-v file, uneven 3,1,2,2, checkpointed: --verify" \
    || fail "file/verify" "rc $RC $(printf '%s' "$ERR" | tail -2)"

# a rank may run some backwards whole (B) and split others (I, W), another only B: the summary's
# simulated bubble is a number on every rank (a B-only rank: half its B as I and as W), no nan
printf '0F0,0F1,0I0,0W0,0B1\n1F0,1B0,1F1,1B1\n' > "$TMP/mix.csv"
run 120 mpiexec -n 2 "$MICROPP" train $T --schedule-file "$TMP/mix.csv"
python3 - "$OUT" <<'PY' && pass "file/B mixed with I and W: simulated bubble and backward medians are numbers, I and W null where none ran" || fail "file/B mixed with I and W" "rc $RC $(printf '%s' "$OUT$ERR" | tail -c 400)"
import json, math, sys
d = json.loads(sys.argv[1])
num = lambda x: isinstance(x, (int, float)) and math.isfinite(x)
sim, b, i, w = d["bubble_simulated"], d["backward_ms_median"], d["backward_input_ms_median"], d["backward_weight_ms_median"]
sys.exit(0 if len(sim) == 2 and all(map(num, sim + b)) and num(i[0]) and num(w[0]) and i[1] is None and w[1] is None else 1)
PY
run 120 mpiexec -n 2 "$MICROPP" train ${T% --json} --schedule-file "$TMP/mix.csv"
if [ "$RC" -ne 0 ]; then fail "file/B mixed: the text summary" "rc $RC $ERR"
elif grep -qi nan <<<"$OUT"; then fail "file/B mixed: the text summary" "prints nan: $(grep -i nan <<<"$OUT")"
elif ! grep -q '^(stage 1 ran full backwards only, no I or W: simulated with half its median B as each)' <<<"$OUT"; then fail "file/B mixed: the text summary" "no note on stage 1"
else pass "file/B mixed: the text summary has no nan, and says stage 1 ran full backwards only"; fi

# a hand-written file: blanks, an empty cell (PyTorch's idle slot), a final newline missing
printf '0F0, 0F1,,0B0,0B1\n1F0,1B0 ,1F1,1B1' > "$TMP/hand.csv"
run 30 "$MICROPP" bubble --schedule-file "$TMP/hand.csv" --gantt
[ "$RC" -eq 0 ] && grep -q '^file | 2 stages | 2 micro-batches' <<<"$OUT" && pass "file/hand-written: blanks and an empty cell accepted" || fail "file/hand-written" "$OUT $ERR"

# bad files: one line, exit 2, before anything runs
bad() {  # NAME PATTERN CONTENT
    printf -- "$3" > "$TMP/bad.csv"
    expect_user_error "bad/$1" "$2" 10 "$MICROPP" bubble --schedule-file "$TMP/bad.csv"
}
bad "empty file" "bad.csv is empty: write one row per rank" ''
bad "blank lines only" "bad.csv is empty" '\n  \n'
bad "bad token" "line 2 \(rank 1\), column 2: '1X0' is not an action: write \{stage\}\{F\|I\|B\|W\}\{micro-batch\}" '0F0,0B0\n1F0,1X0\n'
bad "token with a sign" "line 1 \(rank 0\), column 1: '-0F0' is not an action" '-0F0,0B0\n1F0,1B0\n'
bad "missing action" "line 1 \(rank 0\), column 4 \(the end of its row\): '0B1' \(or its I and W\) is missing" '0F0,0F1,0B0\n1F0,1B0,1F1,1B1\n'
bad "missing W" "line 2 \(rank 1\), column 6 \(the end of its row\): '1W1' is missing" '0F0,0B0,0F1,0B1\n1F0,1I0,1W0,1F1,1I1\n'
bad "repeated action" "line 2 \(rank 1\), column 3: '1F0' is repeated \(stage 1's forward of micro-batch 0 is already at column 1\)" '0F0,0B0\n1F0,1B0,1F0\n'
bad "B after I" "line 2 \(rank 1\), column 3: '1B0' is repeated" '0F0,0B0\n1F0,1I0,1B0,1W0\n'
bad "out of dependency order" "line 2 \(rank 1\), column 1: '1B0' comes before '1F0' \(out of dependency order\)" '0F0,0B0\n1B0,1F0\n'
bad "W before I" "line 1 \(rank 0\), column 2: '0W0' comes before '0I0'" '0F0,0W0,0I0\n1F0,1B0\n'
bad "deadlock" "line 1 \(rank 0\), column 2: '0B0' waits for stage 1's gradient of micro-batch 0 \(rank 1\), which never comes: the schedule deadlocks" '0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n'
bad "chunk order" "line 1 \(rank 0\), column 1: '1F0' puts stage 1 on rank 0, which is neither the loop" '1F0,1B0\n0F0,0B0\n'
bad "too large" "more than micropp runs" '0F0,0B0,0F999999,0B999999\n65000F0\n'
# the first error in file order, on its own line: a mistyped stage or micro-batch is named where it
# stands (not as actions missing on another rank), and of the loop and the V the chunk order nearer the file
bad "a stage typo on rank 1" "line 2 \(rank 1\), column 7: '5F3' is on stage 5, but only 1 of the stages 4..5 \(a chunk: one stage per rank\) have actions, and the file's 2 rows hold stages 0..1: fix the stage number" \
    '0F0,0F1,0B0,0F2,0B1,0F3,0B2,0B3\n1F0,1B0,1F1,1B1,1F2,1B2,5F3,1B3\n'
bad "a micro-batch typo on rank 1" "line 2 \(rank 1\), column 7: '1F30' names micro-batch 30, which only 1 of the 2 stages run \(the others run micro-batches 0..3\)" \
    '0F0,0F1,0B0,0F2,0B1,0F3,0B2,0B3\n1F0,1B0,1F1,1B1,1F2,1B2,1F30,1B3\n'
bad "a V with one stage off" "line 2 \(rank 1\), column 2: '3F0' puts stage 3 on rank 1, which is neither the loop" \
    '0F0,0F1,3F0,3I0,3W0,3F1,3I1,3W1,0I0,0W0,0I1,0W1\n1F0,3F0,1F1,2F1,2I0,2W0,1I0,1W0,2I1,2W1,1I1,1W1\n'
# line ends LF, CR LF or CR alike; a UTF-8 byte-order mark skipped; bytes that are not text named
for ends in crlf cr bom; do
    case $ends in crlf) printf '0F0,0F1,0B0,0B1\r\n1F0,1B0,1F1,1B1\r\n' ;; cr) printf '0F0,0F1,0B0,0B1\r1F0,1B0,1F1,1B1\r' ;;
                  bom) printf '\xef\xbb\xbf0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n' ;; esac > "$TMP/$ends.csv"
    run 30 "$MICROPP" bubble --schedule-file "$TMP/$ends.csv" --json
    [ "$RC" -eq 0 ] && [ "$(json_get '["rows"][0]["stages"]')" = 2 ] && [ "$(json_get '["rows"][0]["micro_batches"]')" = 2 ] \
        && pass "file/$ends: read as 2 rows of 2 micro-batches" || fail "file/$ends" "rc $RC $ERR"
done
bad "a byte-order mark inside, shown" "line 2 \(rank 1\), column 1: '\\\\xEF\\\\xBB\\\\xBF1F0' is not an action" '0F0,0B0\n\xef\xbb\xbf1F0,1B0\n'
head -c 1024 /dev/zero > "$TMP/zeros.bin"
expect_user_error "bad/binary: 1 KB of zeros" "zeros.bin is not a text schedule file \(byte 0x00 at offset 0\)" 10 "$MICROPP" bubble --schedule-file "$TMP/zeros.bin"
bad "binary: a control byte" "bad.csv is not a text schedule file \(byte 0x01 at offset 12\)" '0F0,0B0\n1F0,\x01B0\n'
bad "binary: not UTF-8" "bad.csv is not a text schedule file \(byte 0xFF at offset 15\)" '0F0,0B0\n1F0,1B0\xff\n'
expect_user_error "bad/missing file" "cannot read --schedule-file '$TMP/none.csv': No such file or directory" 10 "$MICROPP" bubble --schedule-file "$TMP/none.csv"
expect_user_error "bad/--schedule-file with --stages" "--schedule-file fixes the schedule, its stages and micro-batches: drop --pp" 10 "$MICROPP" bubble --schedule-file "$TMP/hand.csv" --stages 2
expect_user_error "bad/--dump-csv of many rows" "--dump-csv writes one schedule, and this asks for 2 rows" 10 "$MICROPP" bubble --schedule 1f1b --stages 2 --micro-batches 4,8 --dump-csv "$TMP/x.csv"

# train: the same checks on every rank, exit 2 and no hang; the file's shape against the run's
"$MICROPP" bubble --schedule 1f1b --stages 3 --micro-batches 3 --dump-csv "$TMP/three.csv" > /dev/null
P="$MICROPP train --mode pp --layers 8 --hidden 16 --batch 24 --steps 2"
printf '0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n' > "$TMP/dead.csv"
expect_user_error "train-bad/deadlock" "train: .*dead.csv: line 1 \(rank 0\), column 2: '0B0' waits for stage 1's gradient" 30 mpiexec -n 2 $P --schedule-file "$TMP/dead.csv"
expect_user_error "train-bad/wrong rank count" "--schedule-file '.*three.csv' has 3 rows \(one per rank\) but the pipeline has 2 stages: run it on 3 ranks or write 2 rows" 30 mpiexec -n 2 $P --schedule-file "$TMP/three.csv"
expect_user_error "train-bad/missing file" "train: cannot read --schedule-file '$TMP/none.csv'" 30 mpiexec -n 2 $P --schedule-file "$TMP/none.csv"
expect_user_error "train-bad/--micro-batches differs" "--micro-batches 4 but --schedule-file '.*hand.csv' runs micro-batches 0..1: drop --micro-batches or give 2" 30 mpiexec -n 2 $P --schedule-file "$TMP/hand.csv" --micro-batches 4
expect_user_error "train-bad/3 chunks per rank, too few layers" "--schedule-file '.*interleaved-v3-2.csv' holds 3 chunks per rank: 2 ranks x 3 = 6 chunks but only 4 layers: use --layers >= 6" \
    30 mpiexec -n 2 ${P/--layers 8/--layers 4} --schedule-file "$TMP/interleaved-v3-2.csv"
expect_user_error "train-bad/--schedule and --schedule-file" "--schedule and --schedule-file both name the schedule: give one of them" 30 mpiexec -n 2 $P --schedule-file "$TMP/hand.csv" --schedule 1f1b
expect_user_error "train-bad/outside a pipeline" "--schedule-file applies to a pipeline \(--pp > 1\), and this run is pp 1 x dp 1 x tp 1: drop it or set --pp" 20 "$MICROPP" train --schedule-file "$TMP/hand.csv"
