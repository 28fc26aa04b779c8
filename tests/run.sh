#!/usr/bin/env bash
# tests/run.sh: runs every test (C unit tests in tests/bin, then tests/t_*.sh), TEST_JOBS files side by
# side, the slowest first; prints each file's output whole, in name order, then the per-file timings
# and last the line "N passed, N failed, N skipped". Exit status is nonzero when any test failed.
# A file whose first lines hold "# run.sh: alone (WHY)" (its timing checks or a daemon need the machine
# to itself) runs after the others, with nothing beside it; one that holds "# run.sh: waits (WHY)" (it
# spends most of its time waiting: watchdog timeouts, daemons) runs in a lane of its own beside the
# TEST_JOBS, so its waits do not hold a core idle. `bash tests/run.sh NAME` runs the files whose name
# contains NAME.
set -u
shopt -s nullglob
cd "$(dirname "$0")/.."
# How many files at a time: on 2 cores, 3 lets one file's waits (watchdog timeouts, FIFOs, sleeps,
# single-threaded steps) be filled by another's ranks; more only adds ranks spinning in MPI's waits.
JOBS=${TEST_JOBS:-3}
# Durations (seconds) of the last run's files, slowest first, to start the slowest first: this
# machine's own (written by every run; tests/bin is a build output) or, in a fresh clone, the ones
# recorded in the repository (TIMINGS_RECORD=1 rewrites them from this run).
TIMINGS=tests/bin/timings.txt RECORDED=tests/expected/timings.txt
only=${1:-}
files=()
for t in "${UNIT_DIR:-tests/bin}"/unit_* tests/t_*.sh; do  # UNIT_DIR: make test-asan's sanitized builds
    [[ $t == *.sh ]] || [ -x "$t" ] || continue
    [ -n "$only" ] && [[ "$t" != *"$only"* ]] && continue
    files+=("$t")
done
RUN=$(mktemp -d /tmp/micropp-run.XXXXXX)
stop() {  # on the way out, a file still running is ended (its timeout passes the signal on)
    local p
    [ "${lane:-0}" -gt 0 ] && kill -TERM "$lane" 2>/dev/null  # (the waiting lane starts no more files)
    for p in "$RUN"/*.pid; do [ -e "${p%.pid}.done" ] || kill -TERM "$(cat "$p")" 2>/dev/null; done
    rm -rf "$RUN"
}
trap stop EXIT
trap 'exit 130' INT TERM

# start I: runs files[I] in the background, its input /dev/null; its output (stdout and stderr) goes
# to $RUN/I.out and, once it has ended, "WALL CPU" (seconds: its own clock, and the user + system time
# of it and its children) to $RUN/I.done.
start() {
    local t=${files[$1]} limit=3600 cmd  # (every command of a file has its own timeout: this is a backstop)
    [[ $t == *.sh ]] && cmd=(bash "$t") || { cmd=("$t"); limit=300; }
    (
        s=${EPOCHREALTIME/./}
        timeout -k 5 "$limit" "${cmd[@]}" < /dev/null > "$RUN/$1.out" 2>&1 &
        echo $! > "$RUN/$1.pid"
        wait $!
        rc=$?
        [ -n "$(tail -c 1 "$RUN/$1.out")" ] && echo >> "$RUN/$1.out"  # (a last line without its newline)
        [ $rc -ne 0 ] && echo "FAIL $t: exited $rc" >> "$RUN/$1.out"
        e=${EPOCHREALTIME/./}
        times > "$RUN/$1.times"  # this shell's, then its children's: "0m1.500s 0m0.200s"
        { read -r _ _; read -r cu cs; } < "$RUN/$1.times"
        echo "$((e - s)) $cu $cs" | awk '{ split($2, u, /[ms]/); split($3, y, /[ms]/)
            printf "%.1f %.1f\n", $1 / 1e6, u[1] * 60 + u[2] + y[1] * 60 + y[2] }' > "$RUN/$1.tmp"
        mv "$RUN/$1.tmp" "$RUN/$1.done"
    ) &
}
pass=0 failed=0 skipped=0 shown=0
# show: prints the finished files at the head of the name order, each whole, and tallies their lines.
show() {
    local line
    while [ "$shown" -lt "${#files[@]}" ] && [ -e "$RUN/$shown.done" ]; do
        echo "# ${files[$shown]}"
        while IFS= read -r line; do
            echo "$line"
            case "$line" in
                PASS\ *) pass=$((pass + 1)) ;;
                FAIL\ *) failed=$((failed + 1)) ;;
                SKIP\ *) skipped=$((skipped + 1)) ;;
            esac
        done < "$RUN/$shown.out"
        shown=$((shown + 1))
    done
}
recorded() {  # recorded FILE: its last duration in seconds; a file never timed counts as the slowest
    local f
    for f in "$TIMINGS" "$RECORDED"; do
        [ -r "$f" ] && awk -v t="$1" '$NF == t { print int($1); found = 1; exit } END { exit !found }' "$f" && return
    done
    echo 100000
}
pool=() alone=() waits=()
for i in "${!files[@]}"; do
    if [[ ${files[$i]} == *.sh ]] && head -n 20 "${files[$i]}" | grep -q '^# run\.sh: alone'; then alone+=("$i")
    elif [[ ${files[$i]} == *.sh ]] && head -n 20 "${files[$i]}" | grep -q '^# run\.sh: waits'; then waits+=("$i")
    else pool+=("$(recorded "${files[$i]}") $i"); fi
done
t0=${EPOCHREALTIME/./}
# The waiting files' lane: one after another, beside the pool (counted as one of its jobs while it runs).
lane=0
if [ ${#waits[@]} -gt 0 ]; then
    ( for i in "${waits[@]}"; do start "$i"; wait; done ) &
    lane=$!
fi
lanes() { [ "$lane" -gt 0 ] && kill -0 "$lane" 2>/dev/null && echo 1 || echo 0; }
# Files side by side outnumber the cores with their ranks: their waiting ranks sleep (tests/lib.sh's
# MICROPP_WAIT_POLICY=passive); the files run alone set active where they time by the clock.
while read -r _ i; do
    [ -n "$i" ] || continue  # (no file matched)
    while [ "$(jobs -rp | wc -l)" -ge $((JOBS + $(lanes))) ]; do wait -n; show; done
    start "$i"
done < <(printf '%s\n' "${pool[@]+"${pool[@]}"}" | sort -rn)
wait; show
for i in "${alone[@]+"${alone[@]}"}"; do start "$i"; wait; show; done
wall=$(( (${EPOCHREALTIME/./} - t0) / 1000000 ))

# The per-file timings, slowest first, so that growth is seen; then kept for the next run's order.
{
    for i in "${!files[@]}"; do echo "$(cat "$RUN/$i.done") ${files[$i]}"; done | sort -rn > "$RUN/timings"
    echo "# timings: wall and CPU seconds of each file (${#pool[@]} files $JOBS at a time, ${#waits[@]} in the" \
        "waiting lane, ${#alone[@]} alone)," \
        "and its wall in the last whole run:"
    last=/dev/null
    for f in "$TIMINGS" "$RECORDED"; do [ -r "$f" ] && { last=$f; break; }; done
    awk 'FILENAME == ARGV[1] { if ($1 !~ /^#/) was[$3] = $1; next }
         { printf "#   %7.1f %7.1f  %7s  %s\n", $1, $2, ($3 in was) ? sprintf("%.1f", was[$3]) : "-", $3 }' \
        "$last" "$RUN/timings"
    awk -v w="$wall" '{ c += $2 } END { printf "# all: %d s wall, %.0f s CPU\n", w, c }' "$RUN/timings"
}
if [ -z "$only" ] && [ -d tests/bin ]; then
    { echo "# wall CPU file: tests/run.sh's last whole run (seconds)"; cat "$RUN/timings"; } > "$TIMINGS"
    [ "${TIMINGS_RECORD:-0}" = 1 ] && cp "$TIMINGS" "$RECORDED"
fi
echo "$pass passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
