#!/usr/bin/env bash
# tests/t_cli.sh: a command line that fits the habits people bring (issue 38): no option is taken
# from an abbreviation, a mistyped flag, choice or config key gets the name meant, other tools'
# flags (Megatron-LM, DeepSpeed, torchrun) are answered with micropp's, and choices take any case.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
cd "$TMP"
e() { expect_user_error "$@"; }

# No abbreviations: getopt_long took --micro-batch 8 for --micro-batches 8 (a count, not a size).
e "cli/--micro-batch is refused and micro-batches explained as a count" \
    "unknown option '--micro-batch' \(names are not abbreviated\): did you mean --micro-batches M, a count, not a size: M = --batch / micro-batch size" \
    10 "$MICROPP" train --micro-batch 8 --steps 1
e "cli/a prefix of one option is refused (--ste for --steps)" "unknown option '--ste': did you mean --steps\?" 10 \
    "$MICROPP" train --ste 2
e "cli/a long prefix is refused with its row (--checkpoint for --checkpoint-activations)" \
    "unknown option '--checkpoint' \(names are not abbreviated\): did you mean --checkpoint-activations\?" 10 \
    "$MICROPP" train --checkpoint
e "cli/bubble: a prefix is refused (--micro 4)" "unknown option '--micro'.*did you mean --micro-batches\?" 10 \
    "$MICROPP" bubble --micro 4
run 10 "$MICROPP" train --steps=2 --log_every 1 -L2 -H8 --json
[ $RC -eq 0 ] && printf '%s' "$OUT" | grep -q '"steps":2' && pass "cli/exact names, --name=value, underscores and -L2 still work" \
    || fail "cli/exact names" "rc $RC: ${ERR:0:200}"

# Did you mean: flags, choices, config keys; one line, exit 2.
e "cli/did you mean a flag" "train: unknown option '--microbatches': did you mean --micro-batches\? \(see 'train --help'\)" 10 \
    "$MICROPP" train --microbatches 8
e "cli/did you mean a choice" "--schedule = 'zbh1' is not one of .*: did you mean zb-h1\?" 10 "$MICROPP" train --schedule zbh1
e "cli/did you mean a schedule in a list (bubble)" "--schedule 'gpipe,1fb1' is not .*: did you mean 1f1b\?" 10 \
    "$MICROPP" bubble --schedule gpipe,1fb1
printf '{\n  "layers": 2,\n    "hiden": 8}' > unknown.json
e "cli/did you mean a config key" "unknown.json:3:5: unknown key 'hiden': did you mean hidden\?" 10 "$MICROPP" train -c unknown.json
e "cli/nothing near: no guess" "train: unknown option '--zzzzzz' \(see 'train --help'\)$" 10 "$MICROPP" train --zzzzzz

# Other tools' names, answered with micropp's and the arithmetic.
e "cli/Megatron --micro-batch-size" "'--micro-batch-size' is Megatron-LM's name; micropp's is --micro-batches M, a count, not a size: M = --batch / micro-batch size" \
    10 "$MICROPP" train --micro-batch-size 8
e "cli/Megatron --global-batch-size" "'--global-batch-size' is Megatron-LM's name; micropp's is --batch B, the global batch" 10 \
    "$MICROPP" train --global-batch-size 64
e "cli/Megatron --tensor-model-parallel-size" "'--tensor-model-parallel-size' is Megatron-LM's name; micropp's is --tp T" 10 \
    "$MICROPP" train --tensor-model-parallel-size 2
e "cli/Megatron --pipeline-model-parallel-size" "'--pipeline-model-parallel-size' is Megatron-LM's name; micropp's is --pp P" 10 \
    "$MICROPP" train --pipeline-model-parallel-size 4
e "cli/torchrun --nproc-per-node (underscores too)" "'--nproc_per_node' is torchrun's name; micropp's is mpiexec -n N micropp" 10 \
    "$MICROPP" train --nproc_per_node 4
e "cli/DeepSpeed --zero-stage" "'--zero-stage' is DeepSpeed's name; micropp's is --zero Z" 10 "$MICROPP" train --zero-stage 1
printf '{"micro_batch_size": 2}' > mbs.json
e "cli/a foreign config key" "mbs.json:1:2: 'micro_batch_size' is Megatron-LM's name; micropp's is --micro-batches M" 10 \
    "$MICROPP" train -c mbs.json

# Choices in any case: 1F1B is 1f1b.
run 10 "$MICROPP" bubble --schedule 1F1B,GPipe --stages 4 --micro-batches 8
[ $RC -eq 0 ] && printf '%s' "$OUT" | grep -q "^1f1b " && printf '%s' "$OUT" | grep -q "^gpipe " \
    && pass "cli/bubble --schedule 1F1B,GPipe" || fail "cli/bubble 1F1B" "rc $RC: ${ERR:0:200}"
run 30 mpiexec -n 2 "$MICROPP" train --pp 2 --schedule 1F1B --steps 2 -L4 -H16 --json
[ $RC -eq 0 ] && printf '%s' "$OUT" | grep -q '"schedule":"1f1b"' && pass "cli/train --schedule 1F1B" \
    || fail "cli/train 1F1B" "rc $RC: ${ERR:0:200} ${OUT:0:200}"

# One name and one grammar per concept: --pp (the pipeline degree, as train spells it) in bubble and
# plan, --stages kept as an alias (help names it once); plan's lists take bubble's ranges.
run 10 "$MICROPP" bubble --pp 2:3 --micro-batches 4 --schedule gpipe --json
a=$OUT; run 10 "$MICROPP" bubble --stages 2,3 --micro-batches 4 --schedule gpipe --json
[ "$a" = "$OUT" ] && [ -n "$a" ] && pass "cli/bubble --pp 2:3 = --stages 2,3" || fail "cli/bubble --pp" "${ERR:0:200}"
run 10 "$MICROPP" plan --pp 1:4 --dp 1:2 --zero 0:1 --device-memory 1G --json
a=$OUT; run 10 "$MICROPP" plan --stages 1,2,3,4 --dp 1,2 --zero 0,1 --device-memory 1G --json
[ "$a" = "$OUT" ] && [ -n "$a" ] && pass "cli/plan takes ranges: --pp 1:4 --dp 1:2 --zero 0:1 = the lists" \
    || fail "cli/plan ranges" "${ERR:0:200}"
for cmd in bubble plan train; do
    run 10 "$MICROPP" $cmd --help
    n=$(printf '%s\n' "$OUT" | grep -c -- "--stages")
    printf '%s\n' "$OUT" | tr '\n' ' ' | tr -s ' ' | grep -qE -- "--pp [A-Z]+ .*\(also --stages, --parts\)" && [ "$n" -eq 1 ] \
        && pass "cli/$cmd --help: --pp, --stages named once as its alias" || fail "cli/$cmd --help alias" "$n lines name --stages"
done
e "cli/--pp and --stages together are one option given twice" "bubble: --pp given twice \(4 and 2\)" 10 \
    "$MICROPP" bubble --pp 4 --stages 2
printf '{"stages": 2, "pp": 4}' > both.json
e "cli/config keys stages and pp are one key" "both.json:1:15: key 'pp' is given twice" 10 "$MICROPP" bubble -c both.json
e "cli/did you mean names the alias too" "unknown option '--stagse': did you mean --stages\?" 10 "$MICROPP" bubble --stagse 4

# One name for the pipeline's stages in train too: --mode manual's parts are --pp (--parts is its old
# spelling, the same option); -n, which after 'mpiexec -n N' reads as ranks, is --steps with a note.
pick() { printf '%s' "$OUT" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['mode'], d['degrees']['pp'], d['parts'], d['steps'], d['losses'])" 2>/dev/null; }
run 30 "$MICROPP" train --mode manual --pp 3 --steps 2 -L6 -H8 --json
a=$(pick); run 30 "$MICROPP" train --mode manual --parts 3 --steps 2 -L6 -H8 --json
[ -n "$a" ] && [ "$a" = "$(pick)" ] && [ "${a#manual 3 3 2 }" != "$a" ] \
    && pass "cli/train --mode manual --pp 3 = --parts 3 (3 parts in one process, the same losses)" \
    || fail "cli/manual --pp" "'$a' vs '$(pick)' ${ERR:0:200}"
run 30 "$MICROPP" train --mode manual --steps 2 -L6 -H8 --json
[ "$(pick | cut -d' ' -f1-3)" = "manual 2 2" ] && pass "cli/train --mode manual without --pp: 2 parts" \
    || fail "cli/manual default parts" "$(pick) ${ERR:0:200}"
e "cli/--parts and --pp are one option" "train: --pp given twice \(3 and 2\)" 10 "$MICROPP" train --mode manual --pp 3 --parts 2
e "cli/--parts without --mode manual is --pp on ranks, and names manual" \
    "train: --pp 2 runs a stage per rank, and 1 rank was started: run 'mpiexec -n 2 .*', or add --mode manual" 10 \
    "$MICROPP" train --parts 2
run 30 mpiexec -n 2 "$MICROPP" train -n 2 -L2 -H8 --json
[ $RC -eq 0 ] && printf '%s' "$OUT" | grep -q '"steps":2,' \
    && [ "$ERR" = "train: note: -n is --steps, and after mpiexec -n N (the ranks) it reads as a count of ranks: spell it --steps (-n still works)" ] \
    && pass "cli/train -n 2 still runs 2 steps, with one note (rank 0's) naming --steps" \
    || fail "cli/train -n" "rc $RC: $(pick) stderr '${ERR:0:300}'"
run 10 "$MICROPP" train --help
! printf '%s\n' "$OUT" | grep -qE -- "-n, --steps" && printf '%s\n' "$OUT" | grep -qE -- "^ +--steps N" \
    && pass "cli/train --help names --steps alone" || fail "cli/train --help -n" "$(printf '%s\n' "$OUT" | grep -- "--steps" | head -2)"
run 30 mpiexec -n 2 "$MICROPP" pingpong -n 3 -b 4 -e 4 --json
[ $RC -eq 0 ] && [ -z "$ERR" ] && pass "cli/pingpong -n (nccl-tests' iterations) keeps its letter, no note" \
    || fail "cli/pingpong -n" "rc $RC: ${ERR:0:200}"

# plan --help: each option once (--zero and --tp were listed twice), and no train mode it lacks.
run 10 "$MICROPP" plan --help
d=$(printf '%s\n' "$OUT" | grep -oE '^( {2}-., | {6})--[a-z-]+' | sed 's/.*--//' | sort | uniq -d | tr '\n' ' ')
[ $RC -eq 0 ] && [ -z "$d" ] && pass "cli/plan --help names each option once" || fail "cli/plan --help duplicates" "rc $RC, twice: $d"
! printf '%s\n' "$OUT" | grep -q "pp/hybrid" && pass "cli/plan --help speaks of --pp, not of train's modes" \
    || fail "cli/plan --help modes" "$(printf '%s\n' "$OUT" | grep "pp/hybrid" | head -2)"

# allreduce: auto as train's --allreduce, nccl-tests' -b/-e/-f, refused on one rank, a winner line.
sizes() { printf '%s' "$OUT" | python3 -c "import json,sys; d=json.load(sys.stdin); print(sorted({int(r['bytes']) for r in d['results']}), sorted({r['algo'] for r in d['results']}))" 2>/dev/null; }
run 60 mpiexec -n 2 "$MICROPP" allreduce -b 4 -e 64 -f 4 --algo mpi --iters 2 --warmup 0 --json
[ $RC -eq 0 ] && [ "$(sizes)" = "[4, 16, 64] ['mpi']" ] && pass "cli/allreduce -b 4 -e 64 -f 4: 4, 16, 64 bytes" \
    || fail "cli/allreduce -b -e -f" "rc $RC: $(sizes) ${ERR:0:200}"
run 60 mpiexec -n 2 "$MICROPP" allreduce -b 1K --algo ring --iters 2 --warmup 0 --json
[ $RC -eq 0 ] && [ "$(sizes)" = "[1024] ['ring']" ] && pass "cli/allreduce -b alone is one size, as --size was" \
    || fail "cli/allreduce -b alone" "rc $RC: $(sizes) ${ERR:0:200}"
run 60 mpiexec -n 2 "$MICROPP" allreduce --algo AUTO --size 1K --iters 2 --warmup 0 --json
[ $RC -eq 0 ] && [ "$(sizes)" = "[1024] ['shm']" ] && pass "cli/allreduce --algo auto takes shm on one node" \
    || fail "cli/allreduce --algo auto" "rc $RC: $(sizes) ${ERR:0:200}"
run 60 env MICROPP_SHM_FREE=1000 mpiexec -n 2 "$MICROPP" allreduce --algo auto --size 1M --iters 2 --warmup 0 --json
[ $RC -eq 0 ] && [ "$(sizes)" = "[1048576] ['mpi']" ] && pass "cli/allreduce --algo auto takes mpi without /dev/shm room" \
    || fail "cli/allreduce --algo auto without room" "rc $RC: $(sizes) ${ERR:0:200}"
e "cli/allreduce on one rank is refused like pingpong" "allreduce: needs 2 ranks or more, got 1.*mpiexec -n 2" 20 "$MICROPP" allreduce
e "cli/allreduce --size with -e" "allreduce: --size is one size and -b/-e a range" 20 mpiexec -n 2 "$MICROPP" allreduce --size 1K -e 4K
e "cli/allreduce -b above -e" "allreduce: --min-bytes 1024 is above --max-bytes 4: swap them" 20 mpiexec -n 2 "$MICROPP" allreduce -b 1K -e 4
run 60 mpiexec -n 2 "$MICROPP" allreduce -b 4 -e 16 -f 4 --iters 2 --warmup 0
w=$(printf '%s\n' "$OUT" | tail -1)
[ $RC -eq 0 ] && printf '%s' "$w" | grep -qE "^# fastest: (mpi|ring|shm) at 4( \.\. 16)? B" && pass "cli/allreduce ends its table with the fastest per size" \
    || fail "cli/allreduce winner line" "rc $RC: last line '$w'"

# micropp help CMD is micropp CMD --help (it printed the general help); a mistyped command is named.
for cmd in train bubble plan plot pingpong allreduce selftest; do
    run 20 "$MICROPP" help $cmd; a=$OUT; ra=$RC
    run 20 "$MICROPP" $cmd --help
    [ $ra -eq 0 ] && [ "$a" = "$OUT" ] && printf '%s' "$a" | grep -q "^Usage: .*micropp $cmd" && pass "cli/micropp help $cmd = $cmd --help" \
        || fail "cli/help $cmd" "rc $ra, differs from $cmd --help"
done
e "cli/a mistyped command" "unknown command 'trian' \(did you mean train\?\)" 10 "$MICROPP" trian

# Adam's betas and eps, and the cosine's floor, as flags: the defaults are the constants they replace.
losses() { printf '%s' "$OUT" | python3 -c "import json,sys; print(json.load(sys.stdin)['losses'])" 2>/dev/null; }
run 60 "$MICROPP" train -L3 -H16 --steps 4 --json; l0=$(losses)
run 60 "$MICROPP" train -L3 -H16 --steps 4 --json --adam-beta1 0.9 --adam-beta2 0.999 --adam-eps 1e-8; l1=$(losses)
run 60 "$MICROPP" train -L3 -H16 --steps 4 --json --adam-beta2 0.9; l2=$(losses)
[ -n "$l0" ] && [ "$l0" = "$l1" ] && [ "$l0" != "$l2" ] && pass "cli/--adam-beta1/2/--adam-eps: the defaults are bit for bit today's, another beta2 changes the run" \
    || fail "cli/adam flags" "default $l0, given $l1, beta2 0.9 $l2"
run 60 "$MICROPP" train -L3 -H16 --steps 5 --lr-schedule cosine --min-lr 1e-4 --log-every 1 --metrics m.jsonl
last=$(python3 -c "import json; print([j for j in map(json.loads, open('m.jsonl')) if 'lr' in j][-1]['lr'])" 2>/dev/null)
[ $RC -eq 0 ] && python3 -c "import sys; sys.exit(abs(float('$last') - 1e-4) > 1e-12)" 2>/dev/null \
    && pass "cli/--min-lr: the cosine ends there ($last)" || fail "cli/--min-lr" "rc $RC, last lr '$last': ${ERR:0:200}"
e "cli/--min-lr without cosine" "min-lr 0.0001 is where --lr-schedule cosine ends: add --lr-schedule cosine" 10 \
    "$MICROPP" train --min-lr 1e-4
e "cli/--min-lr above --lr" "min-lr 0.1 is above --lr 0.001" 10 "$MICROPP" train --min-lr 0.1 --lr-schedule cosine

# --help in sections, wrapped to the terminal ($COLUMNS, 80 without it, 100 at most; examples verbatim).
for cmd in train bubble plan pingpong allreduce selftest plot; do
    for cols in "" 100 300; do
        run 10 env COLUMNS=$cols "$MICROPP" $cmd --help
        want=${cols:-80}; [ "$want" -gt 100 ] && want=100
        long=$(printf '%s\n' "$OUT" | sed '/^Examples:/,$d' | awk -v w="$want" 'length > w' | head -1)
        [ $RC -eq 0 ] && [ -z "$long" ] || { fail "cli/$cmd --help fits ${cols:-80} columns" "rc $RC: '$long'"; continue 2; }
    done
    pass "cli/$cmd --help fits 80 columns, \$COLUMNS up to 100"
done
run 10 "$MICROPP" train --help
for t in "The run and the model:" "Optimizer:" "Pipeline (--pp):" "Data parallelism (--dp):" "Degrees: ranks = P x D x T:"; do
    printf '%s\n' "$OUT" | grep -qxF "$t" || { fail "cli/train --help sections" "no '$t'"; break; }
done && pass "cli/train --help is in sections"

# More ranks x threads than cores: one line says the times measure the contention.
cores=$(getconf _NPROCESSORS_ONLN)
run 60 "$MICROPP" train -L2 -H8 --steps 1 --threads $((cores + 1))
printf '%s\n' "$OUT" | grep -qE "^note: 1 rank x $((cores + 1)) threads on this node share $cores cores?: the ranks take turns" \
    && pass "cli/a note when ranks x threads exceed the cores" || fail "cli/cores note" "rc $RC: $(printf '%s' "$OUT" | head -4)"
run 60 "$MICROPP" train -L2 -H8 --steps 1 --threads 1
! printf '%s\n' "$OUT" | grep -q "^note: .* cores" && pass "cli/no note when they fit" || fail "cli/cores note when fitting" "$OUT"

# bubble --gantt --width N: each chart's rows fit N columns (they took 150 and more).
run 10 "$MICROPP" bubble --schedule 1f1b,gpipe --pp 4 --micro-batches 8 --gantt --width 60
long=$(printf '%s\n' "$OUT" | grep -E '^(stage|time)' | awk 'length > 60' | head -1)
[ $RC -eq 0 ] && [ -z "$long" ] && [ "$(printf '%s\n' "$OUT" | grep -c '^stage 3 ')" -eq 2 ] \
    && pass "cli/bubble --gantt --width 60: every row fits" || fail "cli/bubble --width" "rc $RC: '$long'"
run 10 "$MICROPP" bubble --schedule 1f1b --pp 4 --micro-batches 8 --gantt
w=$(printf '%s\n' "$OUT" | grep '^stage 0 ' | awk '{ print length }')
[ "${w:-0}" -gt 60 ] && pass "cli/bubble --gantt without --width on a pipe keeps its full width ($w)" || fail "cli/bubble width default" "$w"

# A hint that names a launch echoes the user's whole command with the fix applied, every other flag
# kept (it once said only 'mpiexec -n 3', and the user had to retype the rest).
expect_user_error "cli/a launch hint echoes the whole command, the ranks fixed" \
    "use --pp 1, 2 or 4, or 'mpiexec -n 3 [^ ]*micropp(-cpu)? train --pp 3 --hidden 64 --data \"a b\\.npy\"'$" 60 \
    mpiexec -n 4 "$MICROPP" train --pp 3 --hidden 64 --data "a b.npy"
expect_user_error "cli/a hint to drop mpiexec echoes the command without it" \
    "but 2 were started: run '[^ ]*micropp(-cpu)? train --mode manual -L 2' \(without mpiexec\), or run the parts" 60 \
    mpiexec -n 2 "$MICROPP" train --mode manual -L 2
expect_user_error "cli/pingpong's launch hint keeps its flags" \
    "run it as 'mpiexec -n 2 [^ ]*micropp(-cpu)? pingpong --sweep'$" 10 "$MICROPP" pingpong --sweep

# train --gantt --width N: each chart's rows fit N columns (they took 306-365); a slice too short for its
# label is drawn as its kind's letter, never a label cut to "F2]"; the step's loss all-reduce at the end
# of a pipeline's step is named for what it is, a loss wait (it was drawn as "all-reduce"); a step whose
# loss wait is too short to draw has no '_' and no legend entry for it (the shown step varies with timing).
run 120 mpiexec -n 2 "$MICROPP" train --pp 2 --micro-batches 4 --layers 8 --hidden 256 --batch 128 --steps 4 --log-every 0 --gantt --width 72
rows=$(printf '%s\n' "$OUT" | grep -E '^(rank [0-9]|stage [0-9]|time) ')
long=$(awk 'length > 72' <<<"$rows" | head -1)
cut=$(grep -E '^(rank|stage) [0-9]' <<<"$rows" | grep -oE '(^|[^[A-Za-z0-9])[FBIW][0-9]+\]' | head -1)
if [ "$RC" -eq 0 ] && [ "$(grep -c . <<<"$rows")" -ge 6 ] && [ -z "$long" ] && [ -z "$cut" ] \
   && { ! grep -qE '^rank [0-9]+ .*_' <<<"$rows" || printf '%s\n' "$OUT" | grep -q '_ loss wait'; } \
   && ! printf '%s\n' "$OUT" | grep -q '= all-reduce'; then
    pass "cli/train --gantt --width 72: every row fits, no cut labels, the loss wait named"
else fail "cli/train --gantt --width" "rc $RC, long '$long', cut '$cut': $(printf '%s' "$OUT" | tail -14)"; fi
