#!/usr/bin/env bash
# tests/t_run.sh: tests/run.sh itself, on a copy that runs made-up test files: files run side by side
# (TEST_JOBS), the slowest of the last run first, a file marked "# run.sh: alone" after the others with
# nothing beside it, one marked "# run.sh: waits" in a lane of its own beside the TEST_JOBS; each file's output printed whole in name order, a file that exits nonzero counted
# as a failure (its last line counted too when it lacks its newline), the per-file timings, and last
# the "N passed, N failed, N skipped" line; NAME filters.
source "$(dirname "$0")/lib.sh"
R=$TMP/repo
mkdir -p "$R/tests/bin" "$R/tests/expected"
cp "$ROOT/tests/run.sh" "$R/tests/"
LOG=$R/log  # each file appends "start NAME" and "end NAME"
# fake NAME BODY: a test file running BODY; BODY logs "start NAME" itself (the wrapper logs the end)
fake() { printf '%s\necho "end %s" >> %s\n' "$2" "$1" "$LOG" > "$R/tests/$1.sh"; }
# waits_for NAME: waits up to 20 s for NAME to have started (t_a and t_b wait for each other: only
# side by side can both pass)
waits_for() { echo 'for i in $(seq 200); do grep -q "start '"$1"'" '"$LOG"' && break; sleep 0.1; done
grep -q "start '"$1"'" '"$LOG"' && echo "PASS saw '"$1"' running" || echo "FAIL saw '"$1"' running: it never started"'; }
fake t_a "echo 'start t_a' >> $LOG
$(waits_for t_b)
echo 'PASS a/second line'"
fake t_b "sleep 1; echo 'start t_b' >> $LOG  # (late: t_c, started with it, logs first)
$(waits_for t_a)
echo 'SKIP b/two: why'"
fake t_c "echo 'start t_c' >> $LOG; echo 'end t_c' >> $LOG; printf 'PASS c/one'; exit 3"  # (no newline)
fake t_d "# run.sh: alone (the test of alone)
echo 'start t_d' >> $LOG
n=\$(grep -c '^end' $LOG); [ \"\$n\" -eq 4 ] && echo 'PASS d/ran after the 4 others' || echo \"FAIL d/ran after the 4 others: \$n ended\""
# t_e waits in the lane: it sees t_a and t_b both running, which only TEST_JOBS=2 beside it allow (in the
# pool, with t_b waiting for t_a, t_a would start only once t_e or t_b had ended)
fake t_e "# run.sh: waits (the test of the lane)
echo 'start t_e' >> $LOG
$(waits_for t_a)
$(waits_for t_b)"
printf '# wall CPU file\n1.0 1.0 tests/t_a.sh\n2.0 1.0 tests/t_b.sh\n9.0 1.0 tests/t_c.sh\n' > "$R/tests/bin/timings.txt"

run 120 env TEST_JOBS=2 bash "$R/tests/run.sh"
last=$(printf '%s\n' "$OUT" | tail -n 1)
if [ "$RC" -eq 1 ] && [ "$last" = "7 passed, 1 failed, 1 skipped" ]; then pass "run/counts every file's lines and a nonzero exit as a failure: $last"
else fail "run/counts every file's lines and a nonzero exit as a failure" "exit $RC, last line '$last': $(head -c 400 <<<"$OUT$ERR" | tr '\n' '|')"; fi
body=$(printf '%s\n' "$OUT" | grep -v '^#   \|^# timings\|^# all' | head -n -1)
want='# tests/t_a.sh
PASS saw t_b running
PASS a/second line
# tests/t_b.sh
PASS saw t_a running
SKIP b/two: why
# tests/t_c.sh
PASS c/one
FAIL tests/t_c.sh: exited 3
# tests/t_d.sh
PASS d/ran after the 4 others
# tests/t_e.sh
PASS saw t_a running
PASS saw t_b running'
[ "$body" = "$want" ] && pass "run/each file's output whole, in name order; side by side; a waiting lane; alone after the others" ||
    fail "run/each file's output whole, in name order; side by side; a waiting lane; alone after the others" "got: $(head -c 400 <<<"$body" | tr '\n' '|')"
first=$(grep -m1 '^start t_[abc]' "$LOG")  # (t_e starts in its lane at once)
[ "$first" = "start t_c" ] && pass "run/the slowest of the last run starts first" || fail "run/the slowest of the last run starts first" "$first"
rows=$(printf '%s\n' "$OUT" | grep -E '^#  +[0-9]+\.[0-9] +[0-9]+\.[0-9]  +([0-9]+\.[0-9]|-)  tests/t_[abcde]\.sh$')
was=$(printf '%s\n' "$rows" | awk '{ print $4 $5 }' | sort | tr '\n' ' ')  # the last run's walls, as recorded
rows=$(printf '%s\n' "$rows" | grep -c .)
if [ "$rows" -eq 5 ] && [ "$was" = "-tests/t_d.sh -tests/t_e.sh 1.0tests/t_a.sh 2.0tests/t_b.sh 9.0tests/t_c.sh " ] && grep -q '^# all: [0-9]* s wall' <<<"$OUT" && [ "$(grep -c 'tests/t_' "$R/tests/bin/timings.txt")" -eq 5 ]; then
    pass "run/prints each file's wall and CPU seconds beside its last one, and keeps them for the next run"
else fail "run/prints each file's wall and CPU seconds and keeps them" "$rows rows, last walls '$was': $(grep '^#' <<<"$OUT" | tail -6 | tr '\n' '|')"; fi

: > "$LOG"
run 60 bash "$R/tests/run.sh" t_d
if [ "$RC" -eq 1 ] && [ "$(tail -n 1 <<<"$OUT")" = "0 passed, 1 failed, 0 skipped" ] && [ "$(tr '\n' ' ' < "$LOG")" = "start t_d end t_d " ]; then
    pass "run/NAME runs only the files whose name holds it"
else fail "run/NAME runs only the files whose name holds it" "exit $RC: $(tail -n 1 <<<"$OUT"), log: $(tr '\n' ' ' < "$LOG")"; fi

# MICROPP_TEST_PROFILE=1: tests/lib.sh's run() logs each command's CPU seconds (its whole process tree),
# its wall seconds and its file; without it, nothing is logged
cat > "$TMP/t_prof.sh" <<PROF
source "$ROOT/tests/lib.sh"
run 20 bash -c 'x=0; while [ \$x -lt 300000 ]; do x=\$((x + 1)); done'
run 20 bash -c 'sleep 0.3 & wait'
PROF
run 60 env MICROPP_TEST_PROFILE=1 MICROPP_TEST_PROFILE_LOG="$TMP/prof.txt" bash "$TMP/t_prof.sh"
run 60 env -u MICROPP_TEST_PROFILE MICROPP_TEST_PROFILE_LOG="$TMP/noprof.txt" bash "$TMP/t_prof.sh"
why=$(awk 'NR == 1 && !($1 >= 0.1 && $3 == "t_prof.sh" && $4 == "bash" && $5 == "-c") { print "busy: " $0 }
           NR == 2 && !($1 < 0.1 && $2 >= 0.3) { print "sleep: " $0 } END { if (NR != 2) print NR " lines" }' "$TMP/prof.txt" 2>&1)
[ -z "$why" ] && [ ! -e "$TMP/noprof.txt" ] && pass "run/MICROPP_TEST_PROFILE=1 logs each command's CPU and wall seconds, its file and command" ||
    fail "run/MICROPP_TEST_PROFILE=1 logs each command's CPU and wall seconds" "$why; log: $(tr '\n' '|' < "$TMP/prof.txt" 2>&1)"
