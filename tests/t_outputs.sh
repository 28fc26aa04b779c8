#!/usr/bin/env bash
# tests/t_outputs.sh: every file micropp writes for a user, by the kind of path it is given (new or
# regular file, symlink, dangling symlink, FIFO, character device, "-", folder), as root and as an
# ordinary user; an empty value for any option; standard output that cannot be written.
# run.sh: waits (most of its time is outputs refused after their readers' timeouts: about 16 CPU s in 53)
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
cd "$TMP"
# As root, the writers also run as user nobody, from a copy of micropp that nobody can reach.
as_nobody=0
if nobody_micropp; then as_nobody=1; fi

# The writers: WRITER PATH runs micropp writing its file to PATH (stdout to $TMP/stdout): bubble's
# --svg, train's --trace, --timeline and --metrics (a log written in place as the run goes), plot's --svg.
svg() { timeout -k 5 60 $WHO "${BIN:-$MICROPP}" bubble --stages 2 --micro-batches 2 --svg "$1" > "$TMP/stdout" 2>"$TMP/stderr"; }
trace() { timeout -k 5 120 $WHO mpiexec -n 2 "${BIN:-$MICROPP}" train --mode pp --layers 2 --hidden 8 --steps 2 --trace "$1" > "$TMP/stdout" 2>"$TMP/stderr" </dev/null; }
timeline() { timeout -k 5 120 $WHO mpiexec -n 2 "${BIN:-$MICROPP}" train --mode pp --layers 2 --hidden 8 --steps 2 --timeline "$1" > "$TMP/stdout" 2>"$TMP/stderr" </dev/null; }
metrics() { timeout -k 5 60 $WHO "${BIN:-$MICROPP}" train --layers 2 --hidden 8 --steps 2 --metrics "$1" > "$TMP/stdout" 2>"$TMP/stderr" </dev/null; }
printf '{"step":1,"loss":0.7,"lr":0.001,"step_ms":1,"samples_s":3200}\n' > "$TMP/run.jsonl"; chmod 644 "$TMP/run.jsonl"
plot() { timeout -k 5 60 $WHO "${BIN:-$MICROPP}" plot "$TMP/run.jsonl" --svg "$1" > "$TMP/stdout" 2>"$TMP/stderr"; }
first_bytes() { head -c 40 "$1" 2>/dev/null; }
expect_start() { case "$1" in svg|timeline|plot) echo "<?xml" ;; trace|metrics) echo "{" ;; esac; }
# What a writer may replace: --metrics only an earlier metrics log (a file that is not one is refused
# and left as it was, below), the others any regular file.
old_of() { case "$1" in metrics) echo '{"step":1,"loss":0.7}' ;; *) echo old ;; esac; }

# Each kind of path for one writer, in folder D (world-writable when run as nobody).
kinds() {
    local w=$1 who=$2 D=$3 want; want=$(expect_start "$w")
    local tag="outputs/$w ($who)"
    rm -rf "$D"/*
    "$w" "$D/new.out" && [[ "$(first_bytes "$D/new.out")" == "$want"* ]] && [ -z "$(ls "$D" | grep tmp)" ] \
        && pass "$tag: a new file is written whole, no temporary left" || fail "$tag: new file" "rc $? $(cat "$TMP/stderr")"
    old_of "$w" > "$D/reg.out"
    "$w" "$D/reg.out" && [[ "$(first_bytes "$D/reg.out")" == "$want"* ]] \
        && pass "$tag: a regular file is replaced" || fail "$tag: regular file" "$(cat "$TMP/stderr")"
    old_of "$w" > "$D/target.out"; ln -s target.out "$D/link.out"
    "$w" "$D/link.out" && [ -L "$D/link.out" ] && [[ "$(first_bytes "$D/target.out")" == "$want"* ]] \
        && pass "$tag: a symlink is followed: its target is written, the link stays" || fail "$tag: symlink" "$(ls -l "$D") $(cat "$TMP/stderr")"
    ln -s made.out "$D/dangling.out"
    "$w" "$D/dangling.out" && [ -L "$D/dangling.out" ] && [[ "$(first_bytes "$D/made.out")" == "$want"* ]] \
        && pass "$tag: a dangling symlink creates its target" || fail "$tag: dangling symlink" "$(ls -l "$D") $(cat "$TMP/stderr")"
    mkfifo "$D/fifo.out"; chmod 666 "$D/fifo.out"
    (timeout 60 cat "$D/fifo.out" > "$D/from-fifo" &)
    "$w" "$D/fifo.out"; local rc=$?; sleep 0.3
    [ $rc -eq 0 ] && [ -p "$D/fifo.out" ] && [[ "$(first_bytes "$D/from-fifo")" == "$want"* ]] \
        && pass "$tag: a FIFO is written in place and stays a FIFO" || fail "$tag: FIFO" "rc $rc $(ls -l "$D") $(cat "$TMP/stderr")"
    mkdir "$D/folder.out"
    "$w" "$D/folder.out"; rc=$?
    [ $rc -eq 2 ] && grep -q "Is a directory" "$TMP/stderr" && pass "$tag: a folder is refused (exit 2)" || fail "$tag: folder" "rc $rc $(cat "$TMP/stderr")"
}

for w in svg trace timeline metrics plot; do
    D=$TMP/root-$w; mkdir -p "$D"; WHO=""; kinds "$w" root "$D"
    if [ "$(id -u)" -eq 0 ]; then
        mknod "$D/null" c 1 3; mknod "$D/full" c 1 7
        "$w" "$D/null" && [ -c "$D/null" ] && pass "outputs/$w (root): a character device is written in place, not replaced" \
            || fail "outputs/$w (root): character device" "$(ls -l "$D/null") $(cat "$TMP/stderr")"
        "$w" "$D/full"; rc=$?
        [ $rc -ne 0 ] && [ -c "$D/full" ] && grep -q "No space left" "$TMP/stderr" \
            && pass "outputs/$w (root): a device that fails the write (full) ends nonzero, and stays a device" \
            || fail "outputs/$w (root): full device" "rc $rc $(ls -l "$D/full") $(cat "$TMP/stderr")"
    fi
    if [ $as_nobody -eq 1 ]; then
        D=$TMP/nobody-$w; mkdir -p "$D"; chmod 777 "$D" "$TMP"; WHO=$NOBODY BIN=$NOBODY_MICROPP; kinds "$w" nobody "$D"
        "$w" /dev/null && [ -c /dev/null ] && pass "outputs/$w (nobody): /dev/null is written in place" || fail "outputs/$w (nobody): /dev/null" "$(cat "$TMP/stderr")"
        WHO="" BIN=""
    else skip "outputs/$w as an ordinary user" "$NOBODY_WHY"; fi
done

WHO=""
svg - && [[ "$(head -c 5 "$TMP/stdout")" == "<?xml" ]] && pass "outputs/bubble --svg - writes the picture alone on standard output" \
    || fail "outputs/--svg -" "$(head -c 80 "$TMP/stdout")"
expect_user_error "outputs/bubble --svg - with --json" "--svg - writes the picture on standard output, and --json prints there too" 10 "$MICROPP" bubble --svg - --json
expect_user_error "outputs/train --trace -" "--trace - would mix the file into the summary" 60 mpiexec -n 2 "$MICROPP" train --mode pp --trace -
expect_user_error "outputs/train --timeline -" "--timeline - would mix" 60 mpiexec -n 2 "$MICROPP" train --mode pp --timeline -

# ---- no output is an input or another output of the same command: refused, every file left as it was ----
# (by the file named: through a symlink, "./" or "x/.." alike; the checkpoint folder's own names)
mkdir -p "$TMP/clash/sub" && cd "$TMP/clash"
printf '{"steps": 2}' > cfg.json; cp "$TMP/run.jsonl" log.jsonl; ln -s cfg.json cfg-link
clash() {  # NAME PATTERN CMD...: refused with exit 2 and one line; cfg.json and log.jsonl untouched
    local name=$1 pat=$2; shift 2
    expect_user_error "clash/$name" "$pat" 60 "$@"
    [ "$(cat cfg.json)" = '{"steps": 2}' ] && cmp -s log.jsonl "$TMP/run.jsonl" \
        || fail "clash/$name: the files left as they were" "$(ls -l; head -c 100 cfg.json log.jsonl)"
}
clash "plot --svg is its own metrics log" "plot: --svg 'sub/../log.jsonl' is also the metrics log 'log.jsonl', which plot reads.*give --svg another file" \
    "$MICROPP" plot log.jsonl --svg sub/../log.jsonl
clash "train --metrics is its --config (through a symlink)" "train: --metrics 'cfg-link' is also --config 'cfg.json', which train reads.*give --metrics another file" \
    "$MICROPP" train --config cfg.json --metrics cfg-link
clash "train --metrics X --trace X" "train: --metrics 'x.json' and --trace './x.json' name the same file, and each would replace the other: give them different names" \
    mpiexec -n 2 "$MICROPP" train --mode pp --steps 2 --metrics x.json --trace ./x.json
clash "train --trace X --timeline X" "train: --trace 'x.svg' and --timeline 'x.svg' name the same file" \
    mpiexec -n 2 "$MICROPP" train --mode pp --steps 2 --trace x.svg --timeline x.svg
clash "train --save D --metrics D/manifest.json" "train: --metrics 'ck/manifest.json' is a file of the checkpoint folder --save 'ck/': give --metrics a path outside it" \
    "$MICROPP" train --steps 2 --save ck/ --metrics ck/manifest.json
[ ! -e x.json ] && [ ! -e x.svg ] && [ ! -e ck ] && pass "clash/nothing was written by the refused runs" || fail "clash/nothing written" "$(ls)"
run 60 "$MICROPP" train --steps 2 --save ck --metrics ck/metrics.jsonl
[ "$RC" -eq 0 ] && [ -s ck/manifest.json ] && [ -s ck/metrics.jsonl ] && pass "clash/a log of another name inside --save's folder is fine" \
    || fail "clash/a log of another name inside --save's folder" "exit $RC: $ERR"
s0=$(cksum < ck/manifest.json)
clash "train --resume D --metrics D/manifest.json" "train: --metrics 'ck/manifest.json' is a file of the checkpoint folder --resume 'ck'" \
    "$MICROPP" train --steps 4 --resume ck --metrics ck/manifest.json
[ "$(cksum < ck/manifest.json)" = "$s0" ] && pass "clash/the checkpoint's manifest is left as it was" || fail "clash/the manifest is left" "changed"
cd "$TMP"

# ---- an empty value is an error, never "not given" ----
for opt in config resume save trace timeline metrics partition data labels; do
    expect_user_error "empty/--$opt ''" "train: --$opt is empty: give a value, or leave the option out" 10 "$MICROPP" train --$opt ""
done
for opt in schedule pp micro-batches svg; do  # (--stages is --pp's alias: the message names --pp)
    expect_user_error "empty/bubble --$opt ''" "bubble: --$opt is empty" 10 "$MICROPP" bubble --$opt ""
done
expect_user_error "empty/plot --svg ''" "plot: --svg is empty" 10 "$MICROPP" plot "$TMP/run.jsonl" --svg ""
for key in resume save data labels partition trace; do
    printf '{"%s": ""}' "$key" > "$TMP/empty.json"
    expect_user_error "empty/JSON \"$key\": \"\"" "empty.json:1:2: key '$key' is empty" 10 "$MICROPP" train --config "$TMP/empty.json"
done

# ---- standard output that cannot be written ends nonzero, with one line on stderr ----
full_stdout() {
    local name=$1; shift
    timeout -k 5 120 "$@" > /dev/full 2>"$TMP/stderr" </dev/null; local rc=$?
    [ $rc -ne 0 ] && grep -q "writing standard output failed" "$TMP/stderr" && pass "stdout/$name > /dev/full exits $rc" \
        || fail "stdout/$name > /dev/full" "rc $rc: $(head -c 300 "$TMP/stderr")"
}
full_stdout "train --json" "$MICROPP" train --json --steps 2
full_stdout "train (text)" "$MICROPP" train --steps 2
full_stdout "bubble" "$MICROPP" bubble
full_stdout "micropp --help" "$MICROPP" --help
full_stdout "train --help" "$MICROPP" train --help
full_stdout "selftest" "$MICROPP" selftest --device cpu
timeout -k 5 120 mpiexec -n 2 "$MICROPP" train --mode pp --json --steps 2 > /dev/full 2>/dev/null </dev/null; rc=$?
[ $rc -ne 0 ] && pass "stdout/mpiexec train --mode pp --json > /dev/full exits $rc" || fail "stdout/mpiexec > /dev/full" "exit 0"

# ---- FIFOs and devices named as inputs: refused at once (opening a FIFO waits for a writer) ----
mkfifo "$TMP/in.fifo"
FIFO_WHY="it is a FIFO \(named pipe\), not a regular file: give a regular file"
expect_user_error "inputs/train --config FIFO" "cannot read config '$TMP/in.fifo': $FIFO_WHY" 10 "$MICROPP" train --config "$TMP/in.fifo"
expect_user_error "inputs/train --data FIFO (2 ranks)" "--data $TMP/in.fifo: cannot open: $FIFO_WHY" 20 \
    mpiexec -n 2 "$MICROPP" train --mode ddp --data "$TMP/in.fifo" --labels "$TMP/in.fifo"
python3 -c "import struct,sys; open(sys.argv[1],'wb').write(struct.pack('>IIII', 0x803, 4, 2, 2) + bytes(16))" "$TMP/img.idx"
expect_user_error "inputs/train --labels FIFO" "--labels $TMP/in.fifo: cannot open: $FIFO_WHY" 10 "$MICROPP" train --data "$TMP/img.idx" --labels "$TMP/in.fifo" --inputs 4
expect_user_error "inputs/train --data /dev/zero (a character device)" "--data /dev/zero: cannot open: it is a character device, not a regular file" 10 \
    "$MICROPP" train --data /dev/zero --labels /dev/zero
expect_user_error "inputs/train --schedule-file FIFO (2 ranks)" "cannot read --schedule-file '$TMP/in.fifo': $FIFO_WHY" 20 \
    mpiexec -n 2 "$MICROPP" train --mode pp --schedule-file "$TMP/in.fifo"
expect_user_error "inputs/bubble --schedule-file FIFO" "cannot read --schedule-file '$TMP/in.fifo': $FIFO_WHY" 10 "$MICROPP" bubble --schedule-file "$TMP/in.fifo"
mkdir -p "$TMP/ck"; mkfifo "$TMP/ck/manifest.json"
expect_user_error "inputs/train --resume DIR whose manifest.json is a FIFO" "--resume $TMP/ck: cannot open $TMP/ck/manifest.json: $FIFO_WHY" 20 \
    mpiexec -n 2 "$MICROPP" train --mode pp --resume "$TMP/ck" --steps 3

# ---- outputs on a FIFO nobody reads: refused after a short wait, not blocked on forever ----
# (with a reader the picture is written in place: the kinds above; train's --trace and --timeline
# still wait for their reader, as a late one must lose nothing: the watchdog bounds that wait, below)
mkfifo "$TMP/out.fifo"
for opt in svg dump-csv; do
    start=$(date +%s)
    expect_user_error "outputs/bubble --$opt FIFO that no process reads" \
        "cannot write --$opt '$TMP/out.fifo': No such device or address \(it is a FIFO that no process opened for reading within 2 s: start its reader first" 10 \
        "$MICROPP" bubble --schedule 1f1b --stages 2 --micro-batches 2 --$opt "$TMP/out.fifo"
    echo "# bubble --$opt: refused after $(( $(date +%s) - start )) s"
done
run 120 "$MICROPP" plan --calibrate --layers 2 --hidden 16 --batch 8 --out "$TMP/out.fifo"  # (its progress on stderr too)
[ "$RC" -eq 2 ] && [ "$(tail -n 1 <<<"$ERR")" = "micropp: plan: cannot write --out '$TMP/out.fifo': No such device or address: $(
    echo "it is a FIFO that no process opened for reading within 2 s: start its reader first, or give a file name")" ] \
    && pass "outputs/plan --calibrate --out FIFO that no process reads: exit 2, one line" \
    || fail "outputs/plan --calibrate --out FIFO that no process reads" "exit $RC: $(tail -c 300 <<<"$ERR")"
# ... and a FIFO named as --profile, an input, is refused at once (opening it would wait for a writer)
expect_user_error "inputs/plan --auto --profile FIFO" "plan: --profile cannot open $TMP/out.fifo: it is a FIFO \(named pipe\), not a regular file" 10 \
    "$MICROPP" plan --auto --world 2 --profile "$TMP/out.fifo"
expect_user_error "inputs/train --auto --profile FIFO (2 ranks)" "train: --profile cannot open $TMP/out.fifo: it is a FIFO" 30 \
    mpiexec -n 2 "$MICROPP" train --auto --profile "$TMP/out.fifo"
expect_user_error "inputs/plan --auto --profile a folder" "plan: --profile cannot open $TMP: it is a folder, not a regular file" 10 \
    "$MICROPP" plan --auto --world 2 --profile "$TMP"

# ---- what rank 0 writes last: every rank waits for it (bounded by --timeout alone), and the exit is
# 0 only when all of it is written; the completion marker ends the output only then ----
PP="--mode pp --layers 2 --hidden 16 --steps 2"
last_line() { printf '%s\n' "$OUT" | tail -n 1; }
run 120 "$MICROPP" train --steps 2 --log-every 0
[ "$RC" -eq 0 ] && [ "$(last_line)" = "micropp: run completed" ] && pass "completed/the text ends with 'micropp: run completed'" \
    || fail "completed/the text ends with 'micropp: run completed'" "exit $RC, last line '$(last_line)'"
run 120 mpiexec -n 2 "$MICROPP" train $PP --json
[ "$RC" -eq 0 ] && [ "$(json_get '["completed"]')" = True ] && [ "$(json_get '.popitem()[0]')" = completed ] \
    && pass "completed/--json's last key is \"completed\": true" || fail "completed/--json's last key is \"completed\": true" "exit $RC: $(last_line | tail -c 200)"
# A FIFO read only after 9 s, past MPI_Finalize's 7 s backstop: rank 0 was killed mid-write with exit 0 before.
for f in trace timeline; do
    rm -f "$TMP/late.fifo" "$TMP/late.out"; mkfifo "$TMP/late.fifo"
    (sleep 9; timeout 60 cat "$TMP/late.fifo" > "$TMP/late.out") &
    run 120 mpiexec -n 2 "$MICROPP" train $PP --$f "$TMP/late.fifo"; wait
    whole=$(python3 -c "import json,sys; d=open(sys.argv[1]).read(); sys.exit(0 if (json.loads(d) if sys.argv[2] == 'trace' else d.rstrip().endswith('</svg>')) else 1)" "$TMP/late.out" $f 2>/dev/null && echo yes)
    if [ "$RC" -eq 0 ] && [ "$whole" = yes ] && printf '%s' "$OUT" | grep -q '^final loss' && [ "$(last_line)" = "micropp: run completed" ]; then
        pass "completed/--$f to a FIFO read late (9 s): exit 0, the file whole, the summary and the marker printed"
    else fail "completed/--$f to a FIFO read late" "exit $RC, whole '$whole', $(wc -c < "$TMP/late.out") bytes, last line '$(last_line)': $(printf '%s' "$ERR" | head -c 300)"; fi
done
# A FIFO nobody reads: the watchdog ends the job at --timeout, one line naming rank 0, the file and the fix.
rm -f "$TMP/nobody.fifo"; mkfifo "$TMP/nobody.fifo"
t0=$(date +%s.%N)
run 60 mpiexec -n 2 "$MICROPP" train $PP --trace "$TMP/nobody.fifo" --timeout 2
secs=$(python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$(date +%s.%N)")
ours=$(printf '%s\n' "$ERR" | grep -c 'micropp\|watchdog')
if [ "$RC" -eq 1 ] && [ "$ours" -eq 1 ] && printf '%s' "$ERR" | grep -qE "watchdog: waited 2\.[0-9] s \(--timeout 2\) for rank 0 \(writing its outputs \(--trace '$TMP/nobody.fifo', the summary\): .*raise --timeout" \
    && ! printf '%s' "$OUT" | grep -q "run completed" && python3 -c "import sys; sys.exit(not $secs < 12)"; then
    pass "completed/--trace to a FIFO nobody reads: exit 1 in ${secs}s, one line naming the file and --timeout, no marker"
else fail "completed/--trace to a FIFO nobody reads" "exit $RC in ${secs}s, $ours lines of ours: $(printf '%s' "$ERR" | head -c 400)"; fi
# A reader that leaves after 100 bytes: the write fails (EPIPE, not a SIGPIPE death): one line, exit 1 on every rank.
for mode in text json; do
    rm -f "$TMP/cut.fifo"; mkfifo "$TMP/cut.fifo"
    (timeout 60 head -c 100 "$TMP/cut.fifo" > /dev/null) &
    J=""; [ $mode = json ] && J=--json
    run 120 mpiexec -n 2 "$MICROPP" train --mode pp --layers 2 --hidden 16 --steps 300 --log-every 0 --trace "$TMP/cut.fifo" $J; wait
    ours=$(printf '%s\n' "$ERR" | grep -c .)
    completed=no; [ $mode = json ] && completed=$(json_get '["completed"]' 2>/dev/null)
    if [ "$RC" -eq 1 ] && [ "$ours" -eq 1 ] && printf '%s' "$ERR" | grep -q "^micropp: train: writing --trace '$TMP/cut.fifo' failed: Broken pipe: its reader closed it before the end" \
        && ! printf '%s' "$OUT" | grep -q "run completed" && { [ $mode = text ] || [ "$completed" = False ]; }; then
        pass "completed/--trace cut by its reader ($mode): exit 1, one line naming the file, no marker"
    else fail "completed/--trace cut by its reader ($mode)" "exit $RC, $ours lines, completed '$completed': $(printf '%s' "$ERR" | head -c 400)"; fi
done
