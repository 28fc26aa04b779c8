# tests/lib.sh: what every test script sources. A test prints exactly one line per case:
#   PASS name | FAIL name: why | SKIP name: why
# and tests/run.sh counts them. Every command runs under a timeout: a hang is a failure, not a wait.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MICROPP=${MICROPP:-$ROOT/micropp}
TMP=$(mktemp -d /tmp/micropp-test.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
export MPIEXEC_TIMEOUT=${MPIEXEC_TIMEOUT:-120}

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
skip() { echo "SKIP $1: $2"; }

# run T CMD...: runs CMD with a T-second timeout; stdout in $OUT, stderr in $ERR, exit code in $RC.
run() {
    local t=$1; shift
    timeout -k 5 "$t" "$@" >"$TMP/out" 2>"$TMP/err"
    RC=$?
    OUT=$(cat "$TMP/out")
    ERR=$(cat "$TMP/err")
}

# mp N ARGS...: micropp under mpiexec with N ranks (oversubscription is fine for correctness).
mp() { local n=$1; shift; mpiexec -n "$n" "$MICROPP" "$@"; }

# json_get KEY: prints a field of the JSON object in $OUT (python3 is installed by make deps).
json_get() { printf '%s' "$OUT" | python3 -c "import json,sys; v=json.load(sys.stdin)$1; print(v if not isinstance(v,(list,dict)) else json.dumps(v))"; }

# expect_user_error NAME PATTERN T CMD...: CMD must exit 2 within T seconds with one stderr line
# matching PATTERN. expect_failure: the same with exit 1 (a run that went wrong, not its input).
expect_failure() { EXPECT_RC=1 expect_user_error "$@"; }
expect_user_error() {
    local name=$1 pat=$2 t=$3 want=${EXPECT_RC:-2}; shift 3
    run "$t" "$@"
    local lines
    lines=$(printf '%s\n' "$ERR" | grep -c .)
    if [ "$RC" -ne "$want" ]; then fail "$name" "exit $RC, expected $want (stderr: $(printf '%s' "$ERR" | head -c 300))"
    elif ! printf '%s' "$ERR" | grep -qE -- "$pat"; then fail "$name" "stderr does not match /$pat/: $(printf '%s' "$ERR" | head -c 300)"
    elif [ "$lines" -ne 1 ]; then fail "$name" "expected one line on stderr, got $lines: $(printf '%s' "$ERR" | head -c 300)"
    else pass "$name"; fi
}
