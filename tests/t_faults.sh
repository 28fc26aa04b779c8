#!/usr/bin/env bash
# tests/t_faults.sh: a rank that fails (abort, SIGKILL, allocation failure, NaN loss, I/O error in a
# save) ends the whole job within 10 s with a nonzero exit and the failing rank's message, leaves no
# process behind, prints no completion marker, and leaves the last committed checkpoint loadable
# (resuming it repeats the uninterrupted losses bit for bit). Faults come from the test-only
# MICROPP_FAULT=rank:step:kind.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
A="--layers 8 --hidden 32 --classes 4 --batch 16 --samples 64 --micro-batches 4 --json --log-every 0"
M="--layers 8 --hidden 32 --classes 4 --batch 16 --samples 64 --json --log-every 0"
slice() { python3 -c "import json,sys; print(json.dumps(json.loads(sys.argv[1])[int(sys.argv[2]):int(sys.argv[3])]))" "$1" "$2" "$3"; }
manifest_step() { python3 -c "import json,sys; print(json.load(open(sys.argv[1] + '/manifest.json'))['step'])" "$1" 2>/dev/null || echo none; }

# fault NAME RANKS FAULT PATTERN [train args...]: the job must end nonzero within 10 s, stderr+stdout
# matching PATTERN, no micropp of it left; the checkpoint in $TMP/NAME must be at step 2 and, resumed
# in the same layout, repeat the uninterrupted run's losses of steps 3-4.
declare -A REF  # the uninterrupted run's losses, by ranks and arguments
fault() {
    local name=$1 n=$2 spec=$3 pat=$4; shift 4
    local dir="$TMP/$name" t0 t1 secs ref
    ref=${REF["$n $*"]:-}
    if [ -z "$ref" ]; then  # the uninterrupted run, once per layout (it is deterministic: tests/t_layouts.sh)
        run 60 mpiexec -n "$n" "$MICROPP" train "$@"
        ref=$(json_get '["losses"]' 2>/dev/null)
        REF["$n $*"]=$ref
    fi
    t0=$(date +%s.%N)
    run 30 env MICROPP_FAULT="$spec" mpiexec -n "$n" "$MICROPP" train "$@" --save "$dir" --save-every 1
    t1=$(date +%s.%N)
    secs=$(python3 -c "print('%.1f' % ($t1 - $t0))")
    sleep 0.2
    local left; left=$(left_behind "$dir")
    if [ "$RC" -eq 0 ]; then fail "faults/$name" "exit 0 after injecting $spec"
    elif python3 -c "import sys; sys.exit(not $secs >= 10)"; then fail "faults/$name" "took ${secs}s (limit 10s), exit $RC"
    elif ! printf '%s\n%s' "$ERR" "$OUT" | grep -qE -- "$pat"; then fail "faults/$name" "output does not match /$pat/: $(printf '%s' "$ERR" | head -c 400)"
    elif [ -n "$left" ]; then fail "faults/$name" "processes left behind: $left"
    elif printf '%s' "$OUT" | grep -q '"completed"\|run completed'; then fail "faults/$name" "the completion marker was printed: $(printf '%s' "$OUT" | tail -c 200)"
    else pass "faults/$name: $spec ends all $n ranks in ${secs}s, exit $RC"; fi
    local step; step=$(manifest_step "$dir")
    run 60 mpiexec -n "$n" "$MICROPP" train "$@" --resume "$dir"
    local got; got=$(json_get '["losses"]' 2>/dev/null)
    if [ "$step" = 2 ] && [ "$RC" -eq 0 ] && [ -n "$ref" ] && [ "$got" = "$(slice "$ref" 2 4)" ]; then pass "faults/$name: the step-2 checkpoint survives and resumes exactly"
    else fail "faults/$name: the step-2 checkpoint survives and resumes exactly" "manifest step $step, resume exit $RC, losses $got: $(printf '%s' "$ERR" | head -c 300)"; fi
}

fault abort 4 2:3:abort '\[rank 2\] .*injected fault \(MICROPP_FAULT\): abort at step 3' --mode pp $A --steps 4
fault kill 4 2:3:kill '\[rank 2\] injected fault \(MICROPP_FAULT\): SIGKILL at step 3' --mode pp $A --steps 4
fault kill-rank0 4 0:3:kill '\[rank 0\] injected fault \(MICROPP_FAULT\): SIGKILL at step 3' --mode pp $A --steps 4
fault nangrad 4 2:3:nangrad "step 3's update left layers\.[0-9]+\.weight\[[0-9]+\] of stage 2 not finite" --mode pp $A --steps 4
fault alloc 4 1:3:alloc '\[rank 1\] .*out of memory allocating' --mode pp $A --steps 4
fault nan 4 3:3:nan 'the loss became NaN at step 3' --mode pp $A --steps 4
fault nan-first-stage 4 0:3:nan 'the loss became NaN at step 3' --mode pp $A --steps 4
fault io 4 2:3:io '\[rank 2\] .*writing .*stage-02-of-04.safetensors.tmp: Input/output error' --mode pp $A --steps 4
fault io-rank0 4 0:3:io '\[rank 0\] .*writing .*stage-00-of-04.safetensors.tmp: Input/output error' --mode pp $A --steps 4
fault io-manual 1 0:3:io '\[rank 0\] .*writing .*stage-00-of-03.safetensors.tmp: Input/output error' --mode manual --parts 3 $M --steps 4
fault abort-monolith 1 0:3:abort '\[rank 0\] .*abort at step 3' $M --steps 4

# After the interrupted save, a save into the same folder removes the partial files of step 3.
run 60 mpiexec -n 2 "$MICROPP" train --mode pp $A --steps 4 --resume "$TMP/io" --save "$TMP/io"
n=$(ls "$TMP/io" | grep -c safetensors)
if [ "$RC" -eq 0 ] && [ "$n" = 2 ] && [ "$(manifest_step "$TMP/io")" = 4 ]; then pass "faults/the next save clears what the interrupted one left"
else fail "faults/the next save clears what the interrupted one left" "exit $RC, files: $(ls "$TMP/io" | tr '\n' ' ')"; fi

expect_user_error "faults/malformed MICROPP_FAULT -> one line, exit 2" "MICROPP_FAULT='2:x:abort' is not RANK:STEP:KIND" 30 env MICROPP_FAULT=2:x:abort mpiexec -n 2 "$MICROPP" train --mode pp $A --steps 2
expect_user_error "faults/unknown MICROPP_FAULT kind -> one line, exit 2" "unknown kind 'melt'" 30 env MICROPP_FAULT=1:1:melt "$MICROPP" train $M --steps 2
expect_user_error "faults/MICROPP_FAULT step 0 is for stall only -> one line, exit 2" "MICROPP_FAULT='1:0:abort': step 0 \(the set-up\) takes only the kind stall" 30 env MICROPP_FAULT=1:0:abort mpiexec -n 2 "$MICROPP" train --mode pp $A --steps 2
