#!/usr/bin/env bash
# tests/t_lint.sh: `make lint` (cppcheck over every C source of ours, Makefile's LINT_SRCS) has no
# findings; and the lint is not toothless: with the same flags it flags a planted bug, and it
# knows that fatal()/CHECK() do not return (no false alarm on a checked index; the same file with
# the flag that tells cppcheck so left out is flagged, so the case cannot pass without looking).
# SKIP without cppcheck (make deps installs it; DEPS=0 machines may lack it).
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
if ! command -v cppcheck >/dev/null; then
    skip "lint/cppcheck" "cppcheck not installed (make deps, or apt-get install cppcheck)"
    exit 0
fi
# A make of our own: not the jobserver of a `make -j test` that runs this script.
lint() { run 300 env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s --no-print-directory DEPS=0 lint "$@"; }

lint
findings=$(grep -E '\[[A-Za-z0-9_]+\]$' <<<"$ERR")
if [ "$RC" -eq 0 ] && [ -z "$findings" ]; then pass "lint/cppcheck: $(sed 's/^make lint: //' <<<"$OUT")"
else
    [ -n "$findings" ] && sed 's/^/    /' <<<"$findings"
    fail "lint/cppcheck" "exit $RC, $(grep -c . <<<"$findings") findings (listed above; fix them, or '// cppcheck-suppress ID ; why' a false one)"
fi

cat >"$TMP/planted.c" <<'EOF'
int planted(int k);
int planted(int k) {
    int a[4] = {0, 1, 2, 3};
    a[4] = k;  // out of bounds: must be flagged
    return a[k & 3];
}
EOF
lint LINT_SRCS="$TMP/planted.c"
if [ "$RC" -ne 0 ] && grep -q 'planted.c:4:.*\[arrayIndexOutOfBounds\]' <<<"$ERR"; then pass "lint/cppcheck flags a planted out-of-bounds write"
else fail "lint/cppcheck flags a planted out-of-bounds write" "exit $RC: $(head -c 300 <<<"$ERR")"; fi

# The header must be found (an include path that moved would leave CHECK undefined, a plain call,
# and the case would pass without looking): #error is a finding of its own.
cat >"$TMP/checked.c" <<'EOF'
#include "base/util.h"
#ifndef CHECK
#error "base/util.h was not found: CHECK is undefined"
#endif
int checked(int k);
int checked(int k) {
    static const int a[4] = {0, 1, 2, 3};
    CHECK(k >= 0 && k < 4, "k %d out of range", k);
    return a[k];
}
EOF
lint LINT_SRCS="$TMP/checked.c"
if [ "$RC" -eq 0 ]; then pass "lint/cppcheck: CHECK() ends the path (fatal is _Noreturn)"
else fail "lint/cppcheck: CHECK() ends the path (fatal is _Noreturn)" "exit $RC: $(head -c 300 <<<"$ERR")"; fi
# The control: a cppcheck that drops the Makefile's -D_Noreturn=... sees fatal() return, and flags
# the very same file.
printf '#!/usr/bin/env bash\nargs=(); for a in "$@"; do [[ "$a" == -D_Noreturn=* ]] || args+=("$a"); done\nexec %s "${args[@]}"\n' \
    "$(command -v cppcheck)" >"$TMP/cppcheck-returning"
chmod +x "$TMP/cppcheck-returning"
lint LINT_SRCS="$TMP/checked.c" CPPCHECK="$TMP/cppcheck-returning"
if [ "$RC" -ne 0 ] && grep -q 'checked.c:9:.*\[arrayIndexOutOfBoundsCond\]' <<<"$ERR"; then
    pass "lint/cppcheck: the same index is flagged when fatal() may return (the case above can fail)"
else fail "lint/cppcheck: the same index is flagged when fatal() may return" "exit $RC: $(head -c 300 <<<"$ERR")"; fi
