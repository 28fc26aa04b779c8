# tests/t_schedule_file.sh: schedules as files. `micropp bubble --dump-csv` writes every built-in
# schedule in PyTorch's action notation; `train --schedule-file` runs it back with the same losses
# as the built-in schedule, and `bubble --schedule-file` simulates it alike. Every bad file (empty,
# bad token, wrong rank count, placement, an action missing, repeated, out of order, a deadlock) is
# refused before anything runs, with one line naming rank, column and action, and exit 2.
source "$(dirname "$0")/lib.sh"
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
bad "bad token" "rank 1, column 2: '1X0' is not an action: write \{stage\}\{F\|I\|B\|W\}\{micro-batch\}" '0F0,0B0\n1F0,1X0\n'
bad "token with a sign" "rank 0, column 1: '-0F0' is not an action" '-0F0,0B0\n1F0,1B0\n'
bad "missing action" "rank 0, column 4 \(the end of its row\): '0B1' \(or its I and W\) is missing" '0F0,0F1,0B0\n1F0,1B0,1F1,1B1\n'
bad "missing W" "rank 1, column 6 \(the end of its row\): '1W1' is missing" '0F0,0B0,0F1,0B1\n1F0,1I0,1W0,1F1,1I1\n'
bad "repeated action" "rank 1, column 3: '1F0' is repeated \(stage 1's forward of micro-batch 0 is already at column 1\)" '0F0,0B0\n1F0,1B0,1F0\n'
bad "B after I" "rank 1, column 3: '1B0' is repeated" '0F0,0B0\n1F0,1I0,1B0,1W0\n'
bad "out of dependency order" "rank 1, column 1: '1B0' comes before '1F0' \(out of dependency order\)" '0F0,0B0\n1B0,1F0\n'
bad "W before I" "rank 0, column 2: '0W0' comes before '0I0'" '0F0,0W0,0I0\n1F0,1B0\n'
bad "deadlock" "rank 0, column 2: '0B0' waits for stage 1's gradient of micro-batch 0 \(rank 1\), which never comes: the schedule deadlocks" '0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n'
bad "placement" "rank 0, column 1: '1F0' puts stage 1 on rank 0, which is neither the loop" '1F0,1B0\n0F0,0B0\n'
bad "too large" "more than micropp runs" '0F0,0B0,0F999999,0B999999\n65000F0\n'
expect_user_error "bad/missing file" "cannot read --schedule-file '$TMP/none.csv': No such file or directory" 10 "$MICROPP" bubble --schedule-file "$TMP/none.csv"
expect_user_error "bad/--schedule-file with --stages" "--schedule-file fixes the schedule, its stages and micro-batches: drop --stages" 10 "$MICROPP" bubble --schedule-file "$TMP/hand.csv" --stages 2
expect_user_error "bad/--dump-csv of many rows" "--dump-csv writes one schedule, and this asks for 2 rows" 10 "$MICROPP" bubble --schedule 1f1b --stages 2 --micro-batches 4,8 --dump-csv "$TMP/x.csv"

# train: the same checks on every rank, exit 2 and no hang; the file's shape against the run's
"$MICROPP" bubble --schedule 1f1b --stages 3 --micro-batches 3 --dump-csv "$TMP/three.csv" > /dev/null
P="$MICROPP train --mode pp --layers 8 --hidden 16 --batch 24 --steps 2"
printf '0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n' > "$TMP/dead.csv"
expect_user_error "train-bad/deadlock" "train: .*dead.csv: rank 0, column 2: '0B0' waits for stage 1's gradient" 30 mpiexec -n 2 $P --schedule-file "$TMP/dead.csv"
expect_user_error "train-bad/wrong rank count" "--schedule-file '.*three.csv' has 3 rows \(one per rank\) but the pipeline has 2 stages: run it on 3 ranks or write 2 rows" 30 mpiexec -n 2 $P --schedule-file "$TMP/three.csv"
expect_user_error "train-bad/missing file" "train: cannot read --schedule-file '$TMP/none.csv'" 30 mpiexec -n 2 $P --schedule-file "$TMP/none.csv"
expect_user_error "train-bad/--micro-batches differs" "--micro-batches 4 but --schedule-file '.*hand.csv' runs micro-batches 0..1: drop --micro-batches or give 2" 30 mpiexec -n 2 $P --schedule-file "$TMP/hand.csv" --micro-batches 4
expect_user_error "train-bad/--schedule and --schedule-file" "--schedule and --schedule-file both name the schedule: give one of them" 30 mpiexec -n 2 $P --schedule-file "$TMP/hand.csv" --schedule 1f1b
expect_user_error "train-bad/outside a pipeline" "--schedule-file applies to --mode pp or hybrid, not --mode monolith" 20 "$MICROPP" train --schedule-file "$TMP/hand.csv"
