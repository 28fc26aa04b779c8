#!/usr/bin/env bash
# tests/t_slurm.sh: micropp under Slurm, on throwaway clusters started on this machine (root only):
# first one node, then two (two slurmd on one host, each its own node). docs/slurm.md's examples run
# on them (tests/doc_examples.py, directive "slurm NODES"): pp, ddp and hybrid under srun and sbatch
# (with srun, with mpiexec, and configs/slurm-job.sh), each with --verify, the header's job
# line. Here too: "slurm" in --json; srun --mpi=none refused in one line naming --mpi=pmi2, exit 2; a
# rank killed under srun ends the job step within seconds (the guard, slurm.c), on one node and across
# two, and a rank's MPI_Abort too, the guard silent; a job requeued in mid-run resumes from its last
# checkpoint and repeats the uninterrupted losses exactly. The daemons (munged on a private socket,
# slurmctld, slurmd) run in the foreground of this script, with their config, state and logs under
# $TMP and private ports, and are stopped by their PIDs on exit, even a failing one; nothing started
# under the cluster may be left (read from /proc). Slurm's packages: `make test` installs them as root
# (make deps-slurm).
# run.sh: waits (most of its time is the daemons starting and jobs queued: about 6 CPU s in 49)
source "$(dirname "$0")/lib.sh"
PATH=$PATH:/usr/sbin:/sbin  # (the daemons live there; a root shell without them on PATH is no reason to skip)
A="--layers 8 --hidden 32 --classes 4 --batch 16 --samples 64 --log-every 0"
elapsed() { python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$(date +%s.%N)"; }

if [ "$(id -u)" -ne 0 ]; then skip "slurm" "not root: the throwaway cluster's daemons (munged, slurmctld, slurmd) run as root"; exit 0; fi
missing=""
for c in munged slurmctld slurmd srun sbatch scontrol scancel sinfo squeue; do command -v "$c" >/dev/null || missing="$missing $c"; done
if [ -n "$missing" ]; then skip "slurm" "not installed:$missing (make deps-slurm installs Slurm and munge; make test does, as root)"; exit 0; fi
# slurmd initialises its cgroup plugin whatever the config says (Slurm 22.05): without a cgroup file
# system (a chroot that bound /sys but not its submounts) it cannot start, so the cluster cannot exist
if ! awk '$2 == "/sys/fs/cgroup" { f = 1 } END { exit !f }' /proc/mounts; then
    skip "slurm" "no cgroup file system mounted on /sys/fs/cgroup: slurmd cannot start (mount it, or bind /sys with --rbind)"
    exit 0
fi
if [ ! -x "$MICROPP" ]; then fail "slurm" "$MICROPP is not built (make)"; exit 0; fi

# ---- the throwaway cluster ----
C=$TMP/cluster
DAEMONS=()  # the PIDs of the daemons this script started (each runs in the foreground, its child)

# Ports nothing listens on (/proc/net/tcp*: state 0A is LISTEN): N consecutive from a random base.
free_ports() {
    local n=$1 used base p ok f
    used=" $(for f in /proc/net/tcp /proc/net/tcp6; do [ -r "$f" ] && tail -n +2 "$f"; done \
        | while read -r _ l _ st _; do [ "$st" = 0A ] && echo $((16#${l##*:})); done | tr '\n' ' ') "
    for _ in $(seq 50); do
        base=$((20000 + RANDOM % 30000)) ok=1
        for ((p = base; p < base + n; p++)); do [[ "$used" == *" $p "* ]] && ok=0; done
        [ "$ok" = 1 ] && { echo "$base"; return 0; }
    done
    return 1
}

# start_cluster NODES: munged, slurmctld and NODES slurmd (n1, n2, ...; 2 CPUs each) on 127.0.0.1;
# exports SLURM_CONF. Returns 1 with the reason in WHY. (Called in this shell, never in a $(...):
# the daemons are its children and DAEMONS its record.)
start_cluster() {
    local nodes=$1 port host i list
    rm -rf "$C" && mkdir -p "$C/munge" "$C/state" "$C/log" "$C/spool" && chmod 700 "$C/munge"
    head -c 1024 /dev/urandom > "$C/munge/munge.key" && chmod 400 "$C/munge/munge.key"
    munged -F --force --socket="$C/munge/sock" --key-file="$C/munge/munge.key" --log-file="$C/log/munged.log" \
        --pid-file="$C/munge/pid" --seed-file="$C/munge/seed" </dev/null >>"$C/log/munged.out" 2>&1 &
    DAEMONS+=($!)
    port=$(free_ports $((nodes + 1))) || { WHY="no free ports"; return 1; }
    host=$(hostname -s)
    list=$(seq -s, -f 'n%g' 1 "$nodes")
    {
        echo "ClusterName=micropptest"
        echo "SlurmctldHost=$host(127.0.0.1)"
        echo "SlurmctldPort=$port"
        echo "SlurmUser=root"
        echo "SlurmdUser=root"
        echo "AuthType=auth/munge"
        echo "AuthInfo=socket=$C/munge/sock"
        echo "CredType=cred/munge"
        echo "StateSaveLocation=$C/state"
        echo "SlurmdSpoolDir=$C/spool/%n"
        echo "SlurmctldPidFile=$C/slurmctld.pid"
        echo "SlurmdPidFile=$C/slurmd-%n.pid"
        echo "SlurmctldLogFile=$C/log/slurmctld.log"
        echo "SlurmdLogFile=$C/log/slurmd-%n.log"
        echo "MpiDefault=none"  # Slurm's own default: the tests name --mpi=pmi2 as a user must
        echo "ProctrackType=proctrack/linuxproc"
        echo "TaskPlugin=task/none"
        echo "SelectType=select/cons_tres"
        echo "SelectTypeParameters=CR_CPU"
        echo "SlurmdParameters=config_overrides"
        echo "JobCompType=jobcomp/none"
        echo "JobAcctGatherType=jobacct_gather/none"
        echo "AccountingStorageType=accounting_storage/none"
        echo "ReturnToService=2"
        # Between a step's SIGTERM and its SIGKILL (30 s by default): longer than a rank takes to end on
        # SIGTERM (micropp's MPI_Abort, bounded by a 3 s alarm), so that a guard which outlived its rank
        # would have time to speak up on a requeue.
        echo "KillWait=8"
        echo "InactiveLimit=0"
        # sbatch --wait polls a job every 2 s, then 8, then 32, while that stays under MinJobAge/2 (300 by
        # default): a job of 12 s took 42. At 4 s it stays at 2 (a finished job's record then goes after 4 s).
        echo "MinJobAge=4"
        for ((i = 1; i <= nodes; i++)); do
            echo "NodeName=n$i NodeAddr=127.0.0.1 NodeHostname=$host Port=$((port + i)) CPUs=2 RealMemory=1000 State=UNKNOWN"
        done
        echo "PartitionName=test Nodes=$list Default=YES MaxTime=INFINITE State=UP"
    } > "$C/slurm.conf"
    export SLURM_CONF=$C/slurm.conf
    for _ in $(seq 50); do [ -S "$C/munge/sock" ] && break; sleep 0.1; done
    slurmctld -D -f "$SLURM_CONF" </dev/null >>"$C/log/slurmctld.out" 2>&1 &
    DAEMONS+=($!)
    for ((i = 1; i <= nodes; i++)); do
        mkdir -p "$C/spool/n$i"
        slurmd -D -f "$SLURM_CONF" -N "n$i" </dev/null >>"$C/log/slurmd-n$i.out" 2>&1 &
        DAEMONS+=($!)
    done
    for _ in $(seq 100); do  # every node idle: registered with the controller
        [ "$(sinfo -h -t idle -o '%D' 2>/dev/null)" = "$nodes" ] && return 0
        sleep 0.2
    done
    WHY="the nodes did not come up in 20 s: $(sinfo 2>&1 | tr '\n' ' '); $(tail -n 3 "$C"/log/*.log 2>/dev/null | tr '\n' ' ')"
    return 1
}

# Ends every job, then each daemon by its PID (TERM, then KILL after 5 s); LEFT: what stayed behind,
# a daemon, or a process started under this cluster (a task or slurmstepd: SLURM_CONF in its environment).
stop_cluster() {
    local pid left="" d t found
    if [ -n "${SLURM_CONF:-}" ] && [ ${#DAEMONS[@]} -gt 0 ]; then
        scancel --quiet --user=root 2>/dev/null
        for _ in $(seq 30); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.2; done
    fi
    for pid in "${DAEMONS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
    for pid in "${DAEMONS[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && { kill -KILL "$pid" 2>/dev/null; left="$left daemon:$pid"; }
        wait "$pid" 2>/dev/null
    done
    DAEMONS=()
    for d in /proc/[0-9]*; do
        t=$({ tr '\0' '\n' < "$d/environ"; } 2>/dev/null | grep -xF "SLURM_CONF=$C/slurm.conf") || continue
        [ -n "$t" ] && [ "${d##*/}" != "$BASHPID" ] && [ "${d##*/}" != "$$" ] && left="$left ${d##*/}:$(tr '\0' ' ' < "$d/cmdline" | head -c 60)"
    done
    # and any process whose command line names the cluster's folder (a daemon whose PID was lost)
    found=$(procs_matching "$C/") || { left="$left ($found)"; found=""; }
    for pid in $found; do left="$left $pid:$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | head -c 60)"; done
    unset SLURM_CONF
    LEFT=${left# }
}
trap 'stop_cluster; rm -rf "$TMP"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The stderr lines micropp itself wrote (srun and slurmstepd add their own).
micropp_lines() { printf '%s\n' "$ERR" | grep -E '^(micropp|\[rank)'; }
# job_state JOB: PENDING, RUNNING, COMPLETED, ...
job_state() { scontrol show job "$1" 2>/dev/null | grep -oE 'JobState=[A-Z_]+' | cut -d= -f2; }
# The last JSON object of a file (a job's output: its echo lines, then micropp's --json, one line).
last_json() { python3 -c "
import json, sys
objs = [l for l in open(sys.argv[1]) if l.startswith('{')]
print(json.dumps(json.loads(objs[-1])) if objs else '')" "$1" 2>/dev/null; }

# docs NODES: docs/slurm.md's examples for a cluster of NODES nodes (tests/doc_examples.py, its
# directive "slurm NODES"), run on this one: their PASS and FAIL lines, and one that says at least
# MIN of them ran (the others' SKIP lines are t_docs.sh's to print).
docs() {
    local nodes=$1 min=$2 n
    MICROPP_DOC_SLURM_NODES=$nodes python3 "$ROOT/tests/doc_examples.py" --micropp "$MICROPP" "$ROOT/docs/slurm.md" \
        | grep -v '^SKIP ' > "$TMP/docs.out"
    cat "$TMP/docs.out"
    n=$(grep -cE '^(PASS|FAIL) ' "$TMP/docs.out")
    [ "$n" -ge "$min" ] && pass "slurm/$nodes node(s): docs/slurm.md's $n examples for this cluster ran" \
        || fail "slurm/$nodes node(s): docs/slurm.md's examples for this cluster ran" "$n ran, expected at least $min"
}

# run_after PATTERN T CMD...: run (lib.sh) in the background, and AFTER: the seconds from when a
# line of stderr matched PATTERN (grep -E) to CMD's end ("" when none did). A step's end is timed
# from the fault, not from the start: the start-up before it is slow on a loaded machine.
run_after() {
    local pat=$1 t=$2 pid t0=""; shift 2
    timeout -k 5 "$t" "$@" >"$TMP/out" 2>"$TMP/err" &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        [ -z "$t0" ] && grep -qE -- "$pat" "$TMP/err" && t0=$(date +%s.%N)
        sleep 0.05
    done
    wait "$pid"
    RC=$? AFTER="" OUT=$(cat "$TMP/out") ERR=$(cat "$TMP/err")
    [ -n "$t0" ] && AFTER=$(elapsed "$t0")
}

# killed NAME RANK CMD...: MICROPP_FAULT kills RANK at step 3 (default --timeout 300 s): the step must
# end within 10 s of the kill, nonzero, with the guard's line, no completion marker and no process
# of it left (found by the --save folder added to CMD).
killed() {
    local name=$1 rank=$2 left mark=$TMP/killed-$RANDOM; shift 2
    run_after "^\[rank $rank\] injected fault \(MICROPP_FAULT\): SIGKILL" 90 env MICROPP_FAULT="$rank:3:kill" "$@" --save "$mark"
    local secs=$AFTER
    sleep 0.5
    left=$(left_behind "$mark")
    local pat="micropp: rank $rank \(task $rank of job step [0-9]+\.0 on node n[0-9], pid [0-9]+\) ended without a word \(killed by a signal, or crashed\): its guard ends the job step with 'scancel [0-9]+\.0'"
    if [ "$RC" -eq 0 ]; then fail "slurm/$name" "exit 0 after rank $rank was killed"
    elif [ -z "$secs" ]; then fail "slurm/$name" "rank $rank never said it was killed (exit $RC): $(printf '%s' "$ERR" | tail -c 300)"
    elif python3 -c "import sys; sys.exit(not $secs >= 10)"; then fail "slurm/$name" "ended ${secs}s after the kill (limit 10 s; the watchdog's --timeout is 300): $(printf '%s' "$ERR" | tail -c 300)"
    elif ! printf '%s' "$ERR" | grep -qE -- "$pat"; then fail "slurm/$name" "no guard line /$pat/: $(printf '%s' "$ERR" | head -c 500)"
    elif [ "$(printf '%s\n' "$ERR" | grep -c 'ended without a word')" -ne 1 ]; then fail "slurm/$name" "the guard's line more than once: $ERR"
    elif [ -n "$left" ]; then fail "slurm/$name" "processes left behind: $left"
    elif printf '%s' "$OUT" | grep -q 'run completed'; then fail "slurm/$name" "the completion marker was printed"
    else pass "slurm/$name: rank $rank killed, the step ended ${secs}s after (exit $RC) with the guard's line"; fi
}

# MICROPP for configs/slurm-job.sh's requeue: its first run stalls rank 0 halfway through step 5.
cat > "$TMP/stall-first.sh" <<EOF
#!/bin/bash
[ "\${SLURM_RESTART_COUNT:-0}" = 0 ] && export MICROPP_FAULT=0:5:stall
exec "$MICROPP" "\$@"
EOF
chmod +x "$TMP/stall-first.sh"

# ---- one node ----
if ! start_cluster 1; then fail "slurm/one node: the cluster starts" "$WHY"; exit 0; fi
pass "slurm/one node: munged, slurmctld and slurmd started on private ports and socket"

# --json carries the same as an object.
run 120 srun -n 2 --mpi=pmi2 "$MICROPP" train --mode ddp $A --steps 3 --verify --json
got=$(json_get '["slurm"]' 2>/dev/null)
if [ "$RC" -eq 0 ] && python3 -c "
import json, sys; s = json.loads(sys.argv[1])
sys.exit(not (s['launcher'] == 'srun' and s['tasks'] == 2 and s['nodes'] == 'n1' and s['num_nodes'] == 1 and s['step_id'] == '0'
              and s['job_name'] == 'micropp' and s['restart_count'] == 0 and s['job_id'].isdigit()))" "$got" && [ "$(json_get '["verify_ok"]')" = True ]; then
    pass "slurm/one node: srun ddp --verify --json: \"slurm\": $got"
else fail "slurm/one node: srun ddp --verify --json" "exit $RC, slurm $got: $(printf '%s' "$ERR" | tail -c 300)"; fi

# Slurm's default launch (--mpi=none) makes every task a world of 1: refused in one line, exit 2.
run 60 srun -n 2 --mpi=none "$MICROPP" train --mode pp $A --steps 3
lines=$(micropp_lines)
if [ "$RC" -eq 2 ] && [ "$(printf '%s\n' "$lines" | grep -c .)" -eq 1 ] && [ -z "$OUT" ] \
   && [[ "$lines" == "micropp: train: srun started 2 tasks, but MPI sees each as a world of 1 rank"*"start it with 'srun --mpi=pmi2 ...'"* ]]; then
    pass "slurm/one node: srun --mpi=none -> one line naming srun --mpi=pmi2, exit 2"
else fail "slurm/one node: srun --mpi=none -> one line naming srun --mpi=pmi2, exit 2" "exit $RC, micropp's lines: $lines; stdout: $(printf '%s' "$OUT" | head -c 200)"; fi
# ... before any subcommand's own rule: a monolith would otherwise run twice, silently.
run 60 srun -n 2 --mpi=none "$MICROPP" train $A --steps 3
lines=$(micropp_lines)
if [ "$RC" -eq 2 ] && [ "$(printf '%s\n' "$lines" | grep -c .)" -eq 1 ] && [[ "$lines" == *"srun --mpi=pmi2"* ]] && [ -z "$OUT" ]; then
    pass "slurm/one node: srun -n 2 --mpi=none of a monolith -> refused too (it would run twice)"
else fail "slurm/one node: srun -n 2 --mpi=none of a monolith -> refused too" "exit $RC, micropp's lines: $lines; stdout: $(printf '%s' "$OUT" | head -c 200)"; fi
run 60 srun -n 1 --mpi=none "$MICROPP" train $A --steps 3
[ "$RC" -eq 0 ] && [ "$(printf '%s\n' "$OUT" | tail -n 1)" = "micropp: run completed" ] && pass "slurm/one node: srun -n 1 --mpi=none of a monolith runs" \
    || fail "slurm/one node: srun -n 1 --mpi=none of a monolith runs" "exit $RC: $(printf '%s' "$ERR" | head -c 300)"

killed "one node: srun -n 4 pp, a rank killed" 2 srun -n 4 --overcommit --mpi=pmi2 "$MICROPP" train --mode pp $A --micro-batches 4 --steps 6

# A rank that fails on purpose (MPI_Abort, having said why): the abort itself ends the step, in
# seconds; the guard, told so, says nothing.
run_after 'injected fault \(MICROPP_FAULT\): abort at step 3' 90 env MICROPP_FAULT=1:3:abort srun -n 2 --mpi=pmi2 "$MICROPP" train --mode pp $A --micro-batches 4 --steps 6
secs=$AFTER
if [ "$RC" -ne 0 ] && [ -n "$secs" ] && python3 -c "import sys; sys.exit(not $secs < 10)" \
   && ! printf '%s' "$ERR" | grep -qE 'ended without a word|called MPI_Abort, which had not'; then
    pass "slurm/one node: srun -n 2 pp, a rank's MPI_Abort ends the step ${secs}s after (exit $RC), the guard silent"
else fail "slurm/one node: srun -n 2 pp, a rank's MPI_Abort ends the step within 10 s" "exit $RC, ${secs:-(no abort line)} s after the abort: $(printf '%s' "$ERR" | head -c 500)"; fi

# A requeued job resumes: configs/slurm-job.sh on 2 tasks, saving every 2 steps; its first run stalls
# in step 5 (after the save of step 4) and is requeued; the second resumes from step 4.
run 60 mpiexec -n 2 "$MICROPP" train --mode pp $A --micro-batches 4 --steps 8 --json
ref=$(json_get '["losses"]' 2>/dev/null)
JD=$TMP/jobs/requeue && mkdir -p "$JD"
jid=$(MICROPP=$TMP/stall-first.sh SAVE_EVERY=2 sbatch --parsable --job-name=requeue --nodes=1 --ntasks-per-node=2 \
      --output="$JD/job.out" --chdir="$JD" "$ROOT/configs/slurm-job.sh" --mode pp $A --micro-batches 4 --steps 8 --json 2>&1)
step=none
for _ in $(seq 150); do  # the checkpoint of step 4, rank 0 stalled
    step=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['step'])" "$JD/checkpoints/requeue/manifest.json" 2>/dev/null)
    [ "$step" = 4 ] && grep -q 'stalling in step 5' "$JD/job.out" 2>/dev/null && break
    sleep 0.2
done
requeued=""
if [ "$step" = 4 ] && scontrol requeue "$jid" 2>/dev/null; then
    for _ in $(seq 100); do [ "$(job_state "$jid")" = PENDING ] && break; sleep 0.2; done
    scontrol update JobId="$jid" StartTime=now 2>/dev/null  # (a requeued job waits 2 minutes otherwise)
    for _ in $(seq 300); do s=$(job_state "$jid"); [ "$s" = COMPLETED ] || [ "$s" = FAILED ] && break; sleep 0.2; done
    requeued=$(job_state "$jid")
fi
got=$(last_json "$JD/job.out")
OUT=$got
if [ "$requeued" != COMPLETED ]; then fail "slurm/one node: a requeued job resumes from its last checkpoint" "job '$jid': checkpoint step $step, state after requeue '$requeued': $(tail -c 600 "$JD/job.out" 2>/dev/null)"
elif [ -z "$ref" ] || [ "$(json_get '["losses"]' 2>/dev/null)" != "$(python3 -c "import json,sys; print(json.dumps(json.loads(sys.argv[1])[4:8]))" "$ref")" ]; then
    fail "slurm/one node: a requeued job resumes from its last checkpoint" "losses $(json_get '["losses"]' 2>/dev/null), uninterrupted $ref: $(tail -c 400 "$JD/job.out")"
elif [ "$(json_get '["start_step"]')" != 4 ] || [ "$(json_get '["slurm"]["restart_count"]')" != 1 ] || [ "$(json_get '["completed"]')" != True ] \
     || ! grep -q "restart 1: --resume checkpoints/requeue" "$JD/job.out"; then
    fail "slurm/one node: a requeued job resumes from its last checkpoint" "start_step $(json_get '["start_step"]'), slurm $(json_get '["slurm"]'): $(head -c 400 "$JD/job.out")"
elif grep -qE 'ended without a word|called MPI_Abort, which had not' "$JD/job.out"; then
    fail "slurm/one node: a requeued job resumes from its last checkpoint" "a guard spoke while Slurm itself ended the step: $(grep -E 'ended without|which had not' "$JD/job.out")"
elif grep -q "Alarm clock" "$JD/job.out"; then  # (issue 37: the requeue's SIGTERM ends a rank with its own status)
    fail "slurm/one node: a requeued job resumes from its last checkpoint" "a rank ended by SIGALRM: $(grep "Alarm clock" "$JD/job.out")"
else pass "slurm/one node: configs/slurm-job.sh requeued in step 5 resumes from step 4 (restart_count 1); steps 5-8 repeat the uninterrupted losses exactly"; fi

# pp, ddp and hybrid under srun with --verify, srun --mpi=none, a killed rank, sbatch with srun.
docs 1 7

stop_cluster
[ -z "$LEFT" ] && pass "slurm/one node: every daemon stopped by its PID, nothing of the cluster left" \
               || fail "slurm/one node: every daemon stopped by its PID, nothing of the cluster left" "left: $LEFT"

# ---- two nodes (two slurmd on this host) ----
if ! start_cluster 2; then fail "slurm/two nodes: the cluster starts" "$WHY"; exit 0; fi
pass "slurm/two nodes: munged, slurmctld and two slurmd (n1, n2) started"

# hybrid under srun, pp by sbatch with mpiexec and with configs/slurm-job.sh; each with --verify.
docs 2 6

# One rank per node: the dead rank has no neighbour on its node; the guard still ends the step.
killed "two nodes: srun -N 2 -n 2 pp, the rank on n2 killed" 1 srun -N 2 -n 2 --mpi=pmi2 "$MICROPP" train --mode pp $A --micro-batches 4 --steps 6

stop_cluster
[ -z "$LEFT" ] && pass "slurm/two nodes: every daemon stopped by its PID, nothing of the cluster left" \
               || fail "slurm/two nodes: every daemon stopped by its PID, nothing of the cluster left" "left: $LEFT"
