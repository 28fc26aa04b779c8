# tests/lib.sh: what every test script sources. A test prints exactly one line per case:
#   PASS name | FAIL name: why | SKIP name: why
# and tests/run.sh counts them. Every command runs under a timeout: a hang is a failure, not a wait.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MICROPP_GIVEN=${MICROPP:+1}  # (set by the caller: make test-asan's build; then use_cpu_build keeps it)
MICROPP=${MICROPP:-$ROOT/micropp}
# use_cpu_build: for a file whose point is not the GPU, MICROPP becomes ./micropp-cpu (make test builds it
# beside a CUDA build) when it is there and no source is newer: every start of the CUDA build loads
# CUDA's libraries (measured: 0.16 s a process, which hundreds of ranks a file pay).
use_cpu_build() {
    local cpu=$ROOT/micropp-cpu
    [ -z "$MICROPP_GIVEN" ] && [ -x "$cpu" ] || return 0
    [ -z "$(find "$ROOT" -maxdepth 2 -path "$ROOT/tests" -prune -o \( -name '*.[ch]' -o -name '*.cu' \) -newer "$cpu" -print -quit)" ] \
        && MICROPP=$cpu
    return 0
}
TMP=$(mktemp -d /tmp/micropp-test.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
export MPIEXEC_TIMEOUT=${MPIEXEC_TIMEOUT:-120}
# The suite runs files side by side, up to a dozen ranks on 2 cores: a waiting rank sleeps rather than
# spin or yield (--wait-policy passive, comms/watchdog.c; measured under a load of 27 on 2 cores against
# yield: a 4-rank ZeRO-3 run took a quarter of the CPU and of the time, a 4-rank pipeline half). A file
# that compares times by the clock (run.sh: alone) sets active, as a user's run would have it.
export MICROPP_WAIT_POLICY=${MICROPP_WAIT_POLICY:-passive}
# Two start-up costs every rank of thousands of runs pays, which no test here is about (measured on a
# 4-rank pipeline file: 47.6 CPU s with them, 40.3 without): MFU's peak, a 30 ms sgemm a rank
# (train/measure.c's peak_of_gemm; tests/t_mfu.sh and the docs' examples measure it, unsetting this), and
# hwloc's scan of the PCI devices' config space in MPI_Init (the I/O devices: MPICH here needs the cores).
# The peak given is above any CPU's, so an MFU stays a fraction.
export MICROPP_PEAK_GFLOPS=${MICROPP_PEAK_GFLOPS-10000} HWLOC_COMPONENTS=${HWLOC_COMPONENTS--linuxio}
# The checks' python reads JSON and text with the standard library alone, so it starts without site (-S): a
# site-packages .pth (on this project's machines a CA bundle's, importing certifi, typing and pathlib) costs
# each start about 50 ms of CPU, and a file makes up to 200 of them. What needs numpy or torch calls
# `command python3` (or /usr/bin/python3) and gets site; scripts the tests start keep the plain python3.
python3() { command python3 -S "$@"; }

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
skip() { echo "SKIP $1: $2"; }

# cpu_children: CPU_CHILDREN becomes the user + system seconds of this shell's ended children so far.
cpu_children() {
    local u s
    times > "$TMP/times"  # (in this shell: a $(times) would be a subshell's, with no children yet)
    { read -r _ _; read -r u s; } < "$TMP/times"
    CPU_CHILDREN=$(awk -v u="$u" -v s="$s" 'BEGIN { split(u, a, /[ms]/); split(s, b, /[ms]/); printf "%.2f", a[1] * 60 + a[2] + b[1] * 60 + b[2] }')
}
# MICROPP_TEST_PROFILE=1: every run() appends "CPU WALL FILE COMMAND" (the CPU seconds of the command's
# process tree, its wall seconds, the test file) to $MICROPP_TEST_PROFILE_LOG (default
# tests/bin/profile.txt), to find where a file's time goes:
#   sort -rn tests/bin/profile.txt | head      awk '{ c[$3] += $1 } END { for (f in c) print c[f], f }'
PROFILE_LOG=${MICROPP_TEST_PROFILE_LOG:-$ROOT/tests/bin/profile.txt}
profile_case() {  # profile_case CPU0 WALL0 CMD...: the line for a command started at CPU0, WALL0
    local c0=$1 w0=$2; shift 2
    local c1 w1
    cpu_children; c1=$CPU_CHILDREN; w1=${EPOCHREALTIME/./}
    mkdir -p "$(dirname "$PROFILE_LOG")"
    printf '%.2f %.2f %s %s\n' "$(awk -v a="$c0" -v b="$c1" 'BEGIN { print b - a }')" "$(((w1 - w0) / 10000))e-2" \
        "$(basename "${BASH_SOURCE[-1]}")" "${*//$'\n'/ }" >> "$PROFILE_LOG"
}

# run T CMD...: runs CMD with a T-second timeout; stdout in $OUT, stderr in $ERR, exit code in $RC.
run() {
    local t=$1 c0 w0; shift
    [ "${MICROPP_TEST_PROFILE:-0}" = 1 ] && { cpu_children; c0=$CPU_CHILDREN; w0=${EPOCHREALTIME/./}; }
    timeout -k 5 "$t" "$@" >"$TMP/out" 2>"$TMP/err"
    RC=$?
    [ "${MICROPP_TEST_PROFILE:-0}" = 1 ] && profile_case "$c0" "$w0" "$@"
    OUT=$(cat "$TMP/out")
    ERR=$(cat "$TMP/err")
}

# mp N ARGS...: micropp under mpiexec with N ranks (oversubscription is fine for correctness).
mp() { local n=$1; shift; mpiexec -n "$n" "$MICROPP" "$@"; }

# Processes, read from /proc: no pgrep, which a minimal Debian lacks (it is in procps), and whose
# absence would make a check for leftovers find none and pass without looking. PROC: /proc, or
# another folder for the test of these helpers. When the listing cannot be trusted they print
# "cannot list processes: WHY" and return 1, so a check that wants no output fails.
PROC=/proc
procs_readable() {  # /proc must be mounted and show this shell itself (the same pid namespace)
    [ -r "$PROC/$BASHPID/cmdline" ] && [ "$PROC/self" -ef "$PROC/$BASHPID" ] && return 0
    echo "cannot list processes: $PROC is not this machine's process table (not mounted?)"; return 1
}
# procs_matching TEXT: pids whose command line (arguments joined by spaces) contains TEXT.
procs_matching() {
    procs_readable || return 1
    local d args out="" IFS=" "
    for d in "$PROC"/[0-9]*; do
        [ "${d##*/}" = "$BASHPID" ] && continue
        { mapfile -d '' -t args < "$d/cmdline"; } 2>/dev/null || continue
        [[ "${args[*]}" == *"$1"* ]] && out="$out ${d##*/}"
    done
    echo "${out# }"
}
# procs_children PID: the pids whose parent is PID.
procs_children() {
    procs_readable || return 1
    local d stat rest out=""
    for d in "$PROC"/[0-9]*; do
        { read -r stat < "$d/stat"; } 2>/dev/null || continue
        rest=${stat##*) }; rest=${rest#* }  # "PID (COMM) STATE PPID ...": COMM may hold spaces
        [ "${rest%% *}" = "$1" ] && out="$out ${d##*/}"
    done
    echo "${out# }"
}
# left_behind TEXT: what a check for leftovers prints, empty when no process mentions TEXT.
left_behind() { procs_matching "$1"; }

# nobody_micropp: for a test run as root that acts as user nobody, who cannot reach a clone in /root
# (mode 700, as in a container): copies $MICROPP into $TMP/nobody, opens both folders to all, and
# checks that nobody runs it. Sets NOBODY (the command prefix) and NOBODY_MICROPP, or returns 1 with
# the reason in NOBODY_WHY.
NOBODY="setpriv --reuid=65534 --regid=65534 --clear-groups"
nobody_micropp() {
    NOBODY_MICROPP=$TMP/nobody/micropp NOBODY_WHY=""
    if [ "$(id -u)" -ne 0 ]; then NOBODY_WHY="not root: cannot switch to user nobody"; return 1; fi
    if [ ! -x "$NOBODY_MICROPP" ]; then
        mkdir -p "$TMP/nobody" && cp "$MICROPP" "$NOBODY_MICROPP" && chmod 755 "$TMP" "$TMP/nobody" "$NOBODY_MICROPP" \
            || { NOBODY_WHY="could not copy $MICROPP into $TMP/nobody"; return 1; }
    fi
    # Run through a shell of nobody's: setpriv's own exec still passes folders closed to nobody
    # (measured: a binary in a mode-700 folder runs), where mpiexec, run as nobody, cannot.
    local err rc
    err=$($NOBODY /bin/sh -c 'exec "$0" --version' "$NOBODY_MICROPP" 2>&1 >/dev/null); rc=$?
    [ "$rc" -eq 0 ] && return 0
    NOBODY_WHY="user nobody cannot run $NOBODY_MICROPP (exit $rc): $(printf '%s' "$err" | head -c 200)"
    return 1
}

# json_get KEY: prints a field of the JSON object in $OUT (python3 is installed by make deps).
# train_json N ARGS...: `mpiexec -n N micropp train "${M[@]}" ARGS` (M: the calling file's common options,
# --json among them): the run's JSON object (its last line), or "exit RC: stderr"
train_json() {
    local n=$1; shift
    run 240 mpiexec -n "$n" "$MICROPP" train "${M[@]}" "$@"
    if [ "$RC" -ne 0 ]; then echo "exit $RC: $(head -c 300 <<<"$ERR" | tr '\n' ' ')"; return; fi
    tail -n 1 <<<"$OUT"
}
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

# losses_close A B RTOL [REF]: the "losses" arrays of JSON objects A and B agree within RTOL (relative);
# prints why not, naming B as REF (default: monolith).
losses_close() {
    python3 - "$1" "$2" "$3" "${4:-monolith}" <<'EOF'
import json, sys
a, b, rtol = json.loads(sys.argv[1])["losses"], json.loads(sys.argv[2])["losses"], float(sys.argv[3])
if len(a) != len(b): print(f"{len(a)} losses vs {len(b)}"); sys.exit(1)
for i, (x, y) in enumerate(zip(a, b)):
    if abs(x - y) > rtol * abs(y): print(f"step {i + 1}: {x!r} vs {sys.argv[4]} {y!r}"); sys.exit(1)
EOF
}
