#!/usr/bin/env bash
# tests/t_outputs.sh: every file micropp writes for a user, by the kind of path it is given (new or
# regular file, symlink, dangling symlink, FIFO, character device, "-", folder), as root and as an
# ordinary user; an empty value for any option; standard output that cannot be written.
source "$(dirname "$0")/lib.sh"
cd "$TMP"
# As root, the writers also run as user nobody, from a copy of micropp that nobody can reach.
as_nobody=0
if nobody_micropp; then as_nobody=1; fi

# The three writers: WRITER PATH runs micropp writing its file to PATH (stdout to $TMP/stdout).
svg() { timeout -k 5 60 $WHO "${BIN:-$MICROPP}" bubble --stages 2 --micro-batches 2 --svg "$1" > "$TMP/stdout" 2>"$TMP/stderr"; }
trace() { timeout -k 5 120 $WHO mpiexec -n 2 "${BIN:-$MICROPP}" train --mode pp --layers 2 --hidden 8 --steps 2 --trace "$1" > "$TMP/stdout" 2>"$TMP/stderr" </dev/null; }
timeline() { timeout -k 5 120 $WHO mpiexec -n 2 "${BIN:-$MICROPP}" train --mode pp --layers 2 --hidden 8 --steps 2 --timeline "$1" > "$TMP/stdout" 2>"$TMP/stderr" </dev/null; }
first_bytes() { head -c 40 "$1" 2>/dev/null; }
expect_start() { case "$1" in svg|timeline) echo "<?xml" ;; trace) echo "{" ;; esac; }

# Each kind of path for one writer, in folder D (world-writable when run as nobody).
kinds() {
    local w=$1 who=$2 D=$3 want; want=$(expect_start "$w")
    local tag="outputs/$w ($who)"
    rm -rf "$D"/*
    "$w" "$D/new.out" && [[ "$(first_bytes "$D/new.out")" == "$want"* ]] && [ -z "$(ls "$D" | grep tmp)" ] \
        && pass "$tag: a new file is written whole, no temporary left" || fail "$tag: new file" "rc $? $(cat "$TMP/stderr")"
    echo old > "$D/reg.out"
    "$w" "$D/reg.out" && [[ "$(first_bytes "$D/reg.out")" == "$want"* ]] \
        && pass "$tag: a regular file is replaced" || fail "$tag: regular file" "$(cat "$TMP/stderr")"
    echo old > "$D/target.out"; ln -s target.out "$D/link.out"
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

for w in svg trace timeline; do
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

# ---- an empty value is an error, never "not given" ----
for opt in config resume save trace timeline partition data labels; do
    expect_user_error "empty/--$opt ''" "train: --$opt is empty: give a value, or leave the option out" 10 "$MICROPP" train --$opt ""
done
for opt in schedule stages micro-batches svg; do
    expect_user_error "empty/bubble --$opt ''" "bubble: --$opt is empty" 10 "$MICROPP" bubble --$opt ""
done
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
