#!/usr/bin/env bash
# tests/t_hang.sh: no hang. Ranks started differently (MPMD launches) end at once with exit 2 naming
# the first option that differs and the ranks on each side; a stalled rank (MICROPP_FAULT stall, or
# SIGSTOP) ends the job within --timeout + 10 s with the watchdog's line and every waiting rank's
# position; SIGINT/SIGTERM to mpiexec or to one rank end every rank with one line and 130/143, and
# the checkpoint being written stays loadable.
# It runs beside other files (tests/run.sh): every signal waits for the ranks to be past a step (step 2's
# line, or the --json runs' first checkpoint), not for a fixed time, and the bounds (--timeout + 10 s,
# 5 s for a signal) leave seconds of margin over the watchdog's and handlers' own waits.
# run.sh: waits (most of its time is the watchdog's --timeout and the signals' hold-backs: about 9 CPU s in 57)
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
A="--layers 8 --hidden 32 --classes 4 --batch 16 --samples 64 --log-every 0"
P="--mode pp $A --micro-batches 4"
elapsed() { python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$(date +%s.%N)"; }

# The process listing that every check for leftovers uses (tests/lib.sh): it sees a process by its
# command line and a child by its parent, and a table it cannot read makes it say so (a check that
# wants an empty answer then fails) where a missing pgrep used to answer "none".
bash -c 'sleep 30; :' "$TMP/procs-marker" & sp=$!
for _ in $(seq 50); do kids=$(procs_children "$sp"); [ -n "$kids" ] && break; sleep 0.1; done
found=$(left_behind "$TMP/procs-marker")
if [ "$found" = "$sp" ] && [ -n "$kids" ] && [ "$(tr '\0' ' ' < "/proc/$kids/cmdline")" = "sleep 30 " ]; then
    pass "hang/procs: left_behind finds a live process by its command line, procs_children its child"
else fail "hang/procs: left_behind finds a live process by its command line, procs_children its child" "found '$found' (want $sp), children '$kids'"; fi
kill -KILL "$sp" $kids 2>/dev/null; wait "$sp" 2>/dev/null
mkdir -p "$TMP/fakeproc/1"
for root in /nonexistent "$TMP/fakeproc"; do
    what="PROC=/nonexistent"; [ "$root" = /nonexistent ] || what="PROC a folder that is not the process table"
    found=$(PROC=$root left_behind "$TMP/procs-marker"); rc=$?
    if [ "$rc" -eq 1 ] && [[ "$found" == "cannot list processes: "* ]]; then pass "hang/procs: with $what, left_behind says so and fails"
    else fail "hang/procs: with $what, left_behind says so and fails" "exit $rc, printed '$found'"; fi
done

# mismatch NAME PATTERN MPIEXEC-ARGS...: exit 2 within 5 s (the agreement itself takes well under a
# second; mpiexec's start-up is most of it), one line on stderr matching PATTERN.
mismatch() {
    local name=$1 pat=$2 t0 secs; shift 2
    t0=$(date +%s.%N)
    run 30 mpiexec "$@"
    secs=$(elapsed "$t0")
    local lines; lines=$(printf '%s\n' "$ERR" | grep -c .)
    if [ "$RC" -ne 2 ]; then fail "hang/launch: $name" "exit $RC, expected 2: $(printf '%s' "$ERR" | head -c 300)"
    elif ! printf '%s' "$ERR" | grep -qE -- "$pat"; then fail "hang/launch: $name" "stderr does not match /$pat/: $(printf '%s' "$ERR" | head -c 300)"
    elif [ "$lines" -ne 1 ]; then fail "hang/launch: $name" "expected one line on stderr, got $lines: $(printf '%s' "$ERR" | head -c 300)"
    elif python3 -c "import sys; sys.exit(not $secs >= 5)"; then fail "hang/launch: $name" "took ${secs}s"
    else pass "hang/launch: $name -> exit 2 in ${secs}s"; fi
}
mismatch "--steps 2 : --steps 5" 'started differently: --steps is 2 on rank 0 and 5 on rank 1' \
    -n 1 "$MICROPP" train $P --steps 2 : -n 1 "$MICROPP" train $P --steps 5
mismatch "train : pingpong" "the command is 'train' on rank 0 and 'pingpong' on rank 1" \
    -n 1 "$MICROPP" train $P --steps 2 : -n 1 "$MICROPP" pingpong
mismatch "pp : ddp" '--mode is pp on rank 0 and ddp on rank 1' \
    -n 1 "$MICROPP" train --mode pp $A --steps 2 : -n 1 "$MICROPP" train --mode ddp $A --steps 2
mismatch "gpipe : naive (ran and exited 0 before)" '--schedule is gpipe on rank 0 and naive on rank 1' \
    -n 1 "$MICROPP" train $P --schedule gpipe --steps 2 : -n 1 "$MICROPP" train $P --schedule naive --steps 2
mismatch "--save on one rank of 4" "--save is not given on ranks 0-1,3 and $TMP/ck on rank 2" \
    -n 2 "$MICROPP" train $P --steps 2 : -n 1 "$MICROPP" train $P --steps 2 --save "$TMP/ck" : -n 1 "$MICROPP" train $P --steps 2
# The same words, different config files (two "hosts": each rank in its own working directory).
mkdir -p "$TMP/h1" "$TMP/h2"
echo '{"steps": 3, "lr": 0.001}' > "$TMP/h1/job.json"
echo '{"steps": 3, "lr": 0.002}' > "$TMP/h2/job.json"
mismatch "one --config, read differently on two hosts" "resolved different options: --lr is '0.001' on rank 0 and '0.002' on rank 1" \
    -n 1 -wdir "$TMP/h1" "$MICROPP" train $P --config job.json : -n 1 -wdir "$TMP/h2" "$MICROPP" train $P --config job.json
# Two different builds of micropp (the same binary without its build id stands in for another build).
if objcopy --remove-section=.note.gnu.build-id "$MICROPP" "$TMP/micropp-other" 2>/dev/null; then
    mismatch "two builds of micropp" 'the binary differs: micropp build [0-9a-f]{12} on rank 0 and unknown on rank 1' \
        -n 1 "$MICROPP" train $P --steps 2 : -n 1 "$TMP/micropp-other" train $P --steps 2
else skip "hang/launch: two builds of micropp" "objcopy could not strip the build id"; fi
run 60 mpiexec -n 2 "$MICROPP" train $P --steps 2 --timeout 30 --json
if [ "$RC" -eq 0 ] && [ "$(printf '%s' "$OUT" | grep -c .)" = 1 ]; then pass "hang/launch: ranks started alike agree and train"
else fail "hang/launch: ranks started alike agree and train" "exit $RC: $(printf '%s' "$ERR" | head -c 300)"; fi
expect_user_error "hang/--timeout -1 -> one line, exit 2" "--timeout = -1 is out of range" 30 mpiexec -n 2 "$MICROPP" train $P --timeout -1

# stall NAME PATTERN... -- CMD: the job must end nonzero within --timeout (3 s) + 10 s, its stderr
# matching every PATTERN, with no process of it left.
stall() {
    local name=$1 t0 secs pats=(); shift
    while [ "$1" != -- ]; do pats+=("$1"); shift; done; shift
    t0=$(date +%s.%N)
    run 60 "$@"
    secs=$(elapsed "$t0")
    sleep 0.3
    local miss="" p; for p in "${pats[@]}"; do printf '%s' "$ERR" | grep -qE -- "$p" || miss="$miss /$p/"; done
    local left; left=$(left_behind "$TMP/stall")
    if [ "$RC" -ne 1 ]; then fail "hang/watchdog: $name" "exit $RC, expected 1: $(printf '%s' "$ERR" | head -c 400)"
    elif python3 -c "import sys; sys.exit(not $secs >= 13)"; then fail "hang/watchdog: $name" "took ${secs}s (limit 13 s)"
    elif [ -n "$miss" ]; then fail "hang/watchdog: $name" "stderr lacks$miss: $(printf '%s' "$ERR" | head -c 600)"
    elif [ -n "$left" ]; then fail "hang/watchdog: $name" "processes left behind: $left"
    else pass "hang/watchdog: $name ends in ${secs}s"; fi
}
W='\[rank [0-9]\] watchdog: waited 3\.[0-9] s \(--timeout 3\) for rank [0-9] \(a receive\) in RECV_(ACT|GRAD) of micro-batch [0-9] \(stage [0-9], virtual stage [0-9], chunk 0\) in step 3; last completed: '
stall "MICROPP_FAULT stall of rank 1 in a 4-stage 1F1B" "$W" \
    "\[rank [023]\] ended by rank [023]'s watchdog: waiting .* in step 3; last completed: " 'stalling in step 3' -- \
    env MICROPP_FAULT=1:3:stall mpiexec -n 4 "$MICROPP" train $P --steps 5 --timeout 3 --save "$TMP/stall"
stall "MICROPP_FAULT stall in ddp (the all-reduce waits)" \
    '\[rank 1\] watchdog: waited 3\.[0-9] s \(--timeout 3\) for the other ranks \(an all-reduce of the data-parallel group\) in the gradient all-reduce in step 3; last completed: B of micro-batch 0' -- \
    env MICROPP_FAULT=0:3:stall mpiexec -n 2 "$MICROPP" train --mode ddp $A --steps 5 --timeout 3 --save "$TMP/stall"

# The GPU's host waits (kernels.cu polls its queue, nccl.cu NCCL's events, through comm_device_wait): a
# queue that never drains ends the job at --timeout, naming this rank's GPU and the action, and every
# rank runs the wd_at_end hook first (where the NCCL transport aborts its communicators).
DEVWAIT=$ROOT/tests/bin/mpi_devwait
if [ -x "$DEVWAIT" ]; then
    stall "a GPU wait that never ends (comm_device_wait, no GPU needed)" \
        '\[rank 0\] watchdog: waited 3\.[0-9] s \(--timeout 3\) for this rank.s GPU \(its queued work, then the loss\) in the test.s device wait in step 3' \
        '\[rank 0\] mpi_devwait: wd_at_end ran' "\[rank 1\] ended by rank 0's watchdog" '\[rank 1\] mpi_devwait: wd_at_end ran' \
        -- mpiexec -n 2 "$DEVWAIT" "$TMP/stall"
else fail "hang/watchdog: a GPU wait that never ends" "$DEVWAIT is missing: make tests/bin/mpi_devwait"; fi

# SIGSTOP to one rank of a running pipeline: the rank is alive but silent, as a swapped-out node.
# rank_pid MPIEXEC-PID RANK: the pid of that rank (Hydra gives each its PMI_RANK), or nothing.
rank_pid() {
    local proxy p
    for proxy in $(procs_children "$1"); do
        for p in $(procs_children "$proxy"); do
            if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "PMI_RANK=$2"; then echo "$p"; return; fi
        done
    done
}
# start_job N ARGS...: mpiexec in the background ($JOB), once every rank has passed step 1 (the
# job's log shows step 2; its files are emptied first: the previous job's "step 2/" would otherwise
# pass for this one's before mpiexec had even started a rank). Returns 1 with $JWHY when it did not
# get there (the job is ended).
start_job() {
    local n=$1 a prev="" args=(); shift
    for a in "$@"; do [ "$prev" = --log-every ] && a=1; args+=("$a"); prev=$a; done  # every step logged (a flag is given once)
    [[ " ${args[*]} " == *" --log-every "* ]] || args+=(--log-every 1)
    : > "$TMP/job.out"; : > "$TMP/job.err"
    mpiexec -n "$n" "$MICROPP" train "${args[@]}" >>"$TMP/job.out" 2>>"$TMP/job.err" &
    JOB=$!
    for _ in $(seq 600); do
        grep -q '^step 2/' "$TMP/job.out" && return 0
        kill -0 "$JOB" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$JOB" 2>/dev/null; wait "$JOB" 2>/dev/null
    JWHY="the job ended, or was stopped after 60 s, before step 2 (exit $?): $(head -c 300 "$TMP/job.err")"
    return 1
}
# job_rank_pid RANK: rank_pid of $JOB, asked until Hydra's tree shows it (the ranks are past step 1,
# so at once, barring a listing that cannot be read); nothing when it never does.
job_rank_pid() {
    local p; for _ in $(seq 50); do p=$(rank_pid "$JOB" "$1"); [ -n "$p" ] && break; sleep 0.1; done
    echo "$p"
}
# end_job: waits for $JOB (at most 30 s); JRC, JSECS (since $T0), JERR.
end_job() {
    local i; for i in $(seq 300); do kill -0 "$JOB" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$JOB" 2>/dev/null && kill -KILL "$JOB" 2>/dev/null
    wait "$JOB" 2>/dev/null; JRC=$?
    JSECS=$(elapsed "$T0")
    JERR=$(cat "$TMP/job.err")
}
if ! start_job 3 $P --steps 1000000 --timeout 3; then fail "hang/watchdog: SIGSTOP of rank 1" "$JWHY"
elif stopped=$(job_rank_pid 1); [ -z "$stopped" ]; then
    fail "hang/watchdog: SIGSTOP of rank 1" "could not find rank 1's process: $(procs_readable)"; kill -TERM "$JOB" 2>/dev/null; wait "$JOB" 2>/dev/null
else
    T0=$(date +%s.%N); kill -STOP "$stopped"; end_job
    kill -CONT "$stopped" 2>/dev/null; kill -KILL "$stopped" 2>/dev/null
    if [ "$JRC" -ne 1 ]; then fail "hang/watchdog: SIGSTOP of rank 1" "exit $JRC: $(printf '%s' "$JERR" | head -c 400)"
    elif python3 -c "import sys; sys.exit(not $JSECS >= 13)"; then fail "hang/watchdog: SIGSTOP of rank 1" "took ${JSECS}s"
    elif ! printf '%s' "$JERR" | grep -qE -- "watchdog: waited 3\.[0-9] s \(--timeout 3\) for rank 1 \(a (receive|send)\)|watchdog: waited 3\.[0-9] s \(--timeout 3\) for the other ranks \(an? (barrier|all-reduce)\) in (the step's barrier|the loss all-reduce)"; then
        fail "hang/watchdog: SIGSTOP of rank 1" "no watchdog line naming rank 1 (or, in a collective, the other ranks): $(printf '%s' "$JERR" | head -c 400)"
    else pass "hang/watchdog: SIGSTOP of rank 1 ends the job in ${JSECS}s: $(printf '%s' "$JERR" | grep -m1 -o 'watchdog: waited.*in step [0-9]*')"; fi
fi

# Signals. sig NAME TARGET SIGNAL CODE PATTERN: TARGET is mpiexec or a rank number.
# HOLD (a rank number) is stopped for 0.5 s around the signal, as a loaded machine may leave a rank
# unscheduled.
sig() {
    local name=$1 target=$2 s=$3 code=$4 pat=$5 hold=${6:-}
    start_job 3 $P --steps 1000000 --save "$TMP/sig" --save-every 1 || { fail "hang/signals: $name" "$JWHY"; return; }
    local pid=$JOB held=""
    [ "$target" != mpiexec ] && pid=$(job_rank_pid "$target")
    [ -n "$hold" ] && held=$(job_rank_pid "$hold")
    if [ -z "$pid" ] || { [ -n "$hold" ] && [ -z "$held" ]; }; then
        fail "hang/signals: $name" "could not find rank $target's or $hold's process: $(procs_readable)"
        kill -KILL "$JOB" 2>/dev/null; wait "$JOB" 2>/dev/null; return
    fi
    T0=$(date +%s.%N)
    if [ -n "$held" ]; then kill -STOP "$held"; kill -"$s" "$pid"; sleep 0.5; kill -CONT "$held"; else kill -"$s" "$pid"; fi
    end_job
    local ours; ours=$(printf '%s\n' "$JERR" | grep -c 'micropp:')
    if [ "$JRC" -ne "$code" ]; then fail "hang/signals: $name" "exit $JRC, expected $code: $(printf '%s' "$JERR" | head -c 300)"
    elif ! printf '%s' "$JERR" | grep -qE -- "$pat"; then fail "hang/signals: $name" "stderr does not match /$pat/: $(printf '%s' "$JERR" | head -c 300)"
    elif [ "$ours" -ne 1 ]; then fail "hang/signals: $name" "$ours lines of micropp's, expected one: $(printf '%s' "$JERR" | head -c 300)"
    elif python3 -c "import sys; sys.exit(not $JSECS >= 5)"; then fail "hang/signals: $name" "took ${JSECS}s"
    else pass "hang/signals: $name -> exit $code in ${JSECS}s"; fi
}
sig "SIGINT to mpiexec" mpiexec INT 130 'micropp: interrupted by signal 2 on rank 0 \(sent to every rank\)'
sig "SIGTERM to mpiexec" mpiexec TERM 143 'micropp: interrupted by signal 15 on rank 0 \(sent to every rank\)'
sig "SIGTERM to rank 2" 2 TERM 143 'micropp: interrupted by signal 15 on rank 2$'
sig "SIGINT to rank 1" 1 INT 130 'micropp: interrupted by signal 2 on rank 1$'
# Rank 0 speaks for every rank: the others wait for it. Had they left at once, Hydra would have killed
# rank 0 before its handler ran (exit 130 with nothing said, or exit 9), as once in a bare chroot.
sig "SIGINT to mpiexec, rank 0 held back 0.5 s" mpiexec INT 130 'micropp: interrupted by signal 2 on rank 0 \(sent to every rank\)' 0
sig "SIGTERM to mpiexec, rank 0 held back 0.5 s" mpiexec TERM 143 'micropp: interrupted by signal 15 on rank 0 \(sent to every rank\)' 0
# A single process (no mpiexec), signalled by another process than its parent: its line, and 143 (the
# job's MPI_Abort, from the watchdog's thread, crashed the computing main thread: exit 139).
: > "$TMP/job.out"; : > "$TMP/job.err"
"$MICROPP" train ${A/--log-every 0/--log-every 1} --steps 100000000 >>"$TMP/job.out" 2>>"$TMP/job.err" &
JOB=$!
for _ in $(seq 300); do grep -q '^step 2/' "$TMP/job.out" && break; sleep 0.1; done
T0=$(date +%s.%N); bash -c "kill -TERM $JOB"; end_job
if [ "$JRC" -eq 143 ] && [ "$JERR" = "micropp: interrupted by signal 15 on rank 0" ]; then pass "hang/signals: SIGTERM to a single process -> its line, exit 143 in ${JSECS}s"
else fail "hang/signals: SIGTERM to a single process" "exit $JRC, expected 143 and one line: $(printf '%s' "$JERR" | head -c 300)"; fi
# Every run above was killed while saving at every step: the last committed checkpoint still loads.
step=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1] + '/manifest.json'))['step'])" "$TMP/sig" 2>/dev/null || echo none)
run 60 mpiexec -n 3 "$MICROPP" train $P --resume "$TMP/sig" --steps $((step + 1)) --json
if [ "$RC" -eq 0 ] && [ "$step" != none ]; then pass "hang/signals: the checkpoint written when the signals came stays loadable (step $step resumes)"
else fail "hang/signals: the checkpoint written when the signals came stays loadable" "manifest step $step, resume exit $RC: $(printf '%s' "$ERR" | head -c 300)"; fi
left=$(left_behind "$TMP/sig")
if [ -z "$left" ]; then pass "hang/signals: no process left behind"; else fail "hang/signals: no process left behind" "$left"; fi

# ---- --timeout's floor, and a collective's watchdog names the ranks that have not arrived ----
for t in 0.001:0.001 1e-9:1e-09 0.5:0.5; do  # given:shown
    expect_user_error "hang/--timeout ${t%%:*} -> one line naming the 1 s minimum, exit 2" \
        "train: --timeout ${t#*:} is below the 1 s minimum: .*use 1 or more, or 0 to wait forever" 30 mpiexec -n 2 "$MICROPP" train $P --timeout "${t%%:*}"
done
echo '{"timeout": 0.01}' > "$TMP/short-timeout.json"
expect_user_error "hang/config \"timeout\": 0.01 -> exit 2" "--timeout 0.01 is below the 1 s minimum" 30 "$MICROPP" train --config "$TMP/short-timeout.json"
run 60 "$MICROPP" train $A --steps 2 --timeout 1
[ "$RC" -eq 0 ] && pass "hang/--timeout 1 (the minimum) runs" || fail "hang/--timeout 1 (the minimum) runs" "exit $RC: $(printf '%s' "$ERR" | head -c 300)"
run 60 "$MICROPP" train $A --steps 2 --timeout 0
[ "$RC" -eq 0 ] && pass "hang/--timeout 0 (no bound) runs" || fail "hang/--timeout 0 (no bound) runs" "exit $RC: $(printf '%s' "$ERR" | head -c 300)"
SILENT='\(silent for 1 s: stopped, busy outside MPI, or gone; look at its host\)'
stall "a rank stalled in the set-up is named by the ranks waiting in the first agreement" \
    "\[rank [02]\] watchdog: waited 3\.[0-9] s \(--timeout 3\) for the other ranks \(agreeing on a verdict\) in the set-up; last completed: none yet; not arrived: rank 1 $SILENT" \
    'stalling in the set-up' -- \
    env MICROPP_FAULT=1:0:stall mpiexec -n 3 "$MICROPP" train $P --steps 5 --timeout 3 --save "$TMP/stall"
stall "a rank stalled before the ddp all-reduce is named" \
    "\[rank 1\] watchdog: waited 3\.[0-9] s \(--timeout 3\) for the other ranks \(an all-reduce of the data-parallel group\) in the gradient all-reduce in step 3; last completed: .*; not arrived: rank 0 $SILENT" -- \
    env MICROPP_FAULT=0:3:stall mpiexec -n 2 "$MICROPP" train --mode ddp $A --steps 5 --timeout 3 --save "$TMP/stall"
# hybrid 2 x 2, replicas placed side by side: rank 1 (stage 0, replica 1) stops inside its pipeline;
# whichever rank fires first names it, and one waiting in the world's loss all-reduce names rank 0 too,
# which answers from the data-parallel all-reduce it waits in.
stall "hybrid: the stalled rank is named, a rank waiting elsewhere says where" \
    "watchdog: waited 3\.[0-9] s \(--timeout 3\) for the other ranks \(an all-reduce.*; not arrived: (rank 0 \(waiting for the other ranks \(an all-reduce of the data-parallel group\) in the gradient all-reduce in step 3\); )?rank 1 $SILENT" -- \
    env MICROPP_FAULT=1:3:stall mpiexec -n 4 "$MICROPP" train --mode hybrid --pp 2 --dp 2 --placement replicas --micro-batches 2 $A --steps 5 --timeout 3 --save "$TMP/stall"

# ---- an interrupted run never prints the completion marker (Hydra may still exit 0: the marker is
# what a script can trust) ----
zeros=0 bad=""
for i in 1 2 3; do
    for s in INT TERM; do
        if [ "$s" = INT ]; then start_job 3 $P --steps 1000000  # text: killed after step 2
        else  # --json: no step lines to wait for, so killed once step 1's checkpoint is written (the ranks are
            # up: a fixed 2 s, beside other files on 2 cores, once landed before them and mpiexec exited 15)
            rm -rf "$TMP/json-ck"
            mpiexec -n 3 "$MICROPP" train $P --steps 1000000 --json --save "$TMP/json-ck" --save-every 1 \
                >"$TMP/job.out" 2>"$TMP/job.err" &
            JOB=$!
            for _ in $(seq 600); do [ -e "$TMP/json-ck/manifest.json" ] && break; kill -0 "$JOB" 2>/dev/null || break; sleep 0.1; done
        fi
        T0=$(date +%s.%N); kill -"$s" "$JOB"; end_job
        [ "$JRC" -eq 0 ] && zeros=$((zeros + 1))
        if grep -q 'run completed\|"completed"' "$TMP/job.out"; then bad="$bad; SIG$s run $i printed the marker (exit $JRC)"
        elif [ "$JRC" -ne 0 ] && [ "$JRC" -ne $((128 + $(kill -l "$s"))) ]; then bad="$bad; SIG$s run $i: exit $JRC"; fi
    done
done
if [ -z "$bad" ]; then pass "hang/signals: 6 interrupted runs, none printed the completion marker ($zeros exited 0: Hydra's race)"
else fail "hang/signals: interrupted runs never print the completion marker" "${bad#; }"; fi
