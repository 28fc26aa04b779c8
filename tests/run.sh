#!/usr/bin/env bash
# tests/run.sh: runs every test (C unit tests in tests/bin, then tests/t_*.sh) and ends with the
# line "N passed, N failed, N skipped". Exit status is nonzero when any test failed.
set -u
shopt -s nullglob
cd "$(dirname "$0")/.."
pass=0 failed=0 skipped=0
count() {  # reads PASS/FAIL/SKIP lines from stdin, echoes them, tallies
    while IFS= read -r line; do
        echo "$line"
        case "$line" in
            PASS\ *) pass=$((pass + 1)) ;;
            FAIL\ *) failed=$((failed + 1)) ;;
            SKIP\ *) skipped=$((skipped + 1)) ;;
        esac
    done
}
only=${1:-}
for t in "${UNIT_DIR:-tests/bin}"/unit_*; do  # UNIT_DIR: make test-asan's sanitized builds
    [ -x "$t" ] || continue
    [ -n "$only" ] && [[ "$t" != *"$only"* ]] && continue
    echo "# $t"
    count < <(timeout -k 5 300 "$t"; rc=$?; [ $rc -ne 0 ] && echo "FAIL $t: exited $rc")
done
for t in tests/t_*.sh; do
    [ -n "$only" ] && [[ "$t" != *"$only"* ]] && continue
    echo "# $t"
    count < <(timeout -k 5 900 bash "$t"; rc=$?; [ $rc -ne 0 ] && echo "FAIL $t: exited $rc")
done
echo "$pass passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
