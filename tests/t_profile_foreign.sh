# tests/t_profile_foreign.sh: a profile measured with another BLAS core or thread count than this machine runs
# is named in one warning line (plan --auto and one layout priced; train --profile, its layout priced or
# --auto's pick) with the command that measures this machine; a profile of this machine's own BLAS, core and
# threads gets none.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
cd "$ROOT"
A="--world 2 --config configs/medium.json --device-memory 8G"
# This machine's BLAS as train's header names it ("openblas 0.3.21 core=Cooperlake threads=1").
here=$("$MICROPP" train --layers 1 --hidden 8 --batch 8 --steps 1 2>/dev/null | grep -o 'openblas [^|]*threads=[0-9]*' | head -1)
[ -n "$here" ] || { fail "foreign/this machine's BLAS" "train's header names none"; exit 0; }
sed "s/openblas [^\"]*threads=[0-9]*/$here/" configs/profiles/cpu-2ranks.json > "$TMP/here.json"
sed "s/openblas [^\"]*threads=[0-9]*/openblas 0.3.21 core=Prescott threads=1/" configs/profiles/cpu-2ranks.json \
    > "$TMP/other.json"

# warns FILE CMD...: the output has exactly one warning line and it names what FILE says and the command.
warns() {
    local file=$1; shift
    run 30 "$@"
    local n
    n=$(printf '%s\n' "$OUT" | grep -c '^# warning: the profile was measured with')
    if [ "$RC" -ne 0 ] || [ "$n" -ne 1 ]; then echo "exit $RC, $n warning lines: $OUT $ERR"; return; fi
    printf '%s\n' "$OUT" | grep '^# warning' | grep -qE "measured with $(grep -o 'openblas [^"]*threads=[0-9]*' "$file")\
, and this machine runs openblas .*: .*measure this one: mpiexec -n 2 micropp plan --calibrate --config configs/medium.json \
--threads [0-9]+ --out profile.json$" || echo "the line: $(printf '%s\n' "$OUT" | grep '^# warning')"
}
why=$(warns "$TMP/other.json" "$MICROPP" plan --auto $A --profile "$TMP/other.json" --top 1)
if [ -n "$why" ]; then fail "foreign/another core, --auto" "$why"; else pass "foreign/another core, --auto"; fi
why=$(warns "$TMP/other.json" "$MICROPP" plan $A --profile "$TMP/other.json" --mode ddp)
if [ -n "$why" ]; then fail "foreign/another core, one layout" "$why"; else pass "foreign/another core, one layout"; fi
# The same BLAS and core, 2 threads a rank asked for: the profile's 1 thread is another machine's too.
why=$(warns "$TMP/here.json" "$MICROPP" plan --auto $A --profile "$TMP/here.json" --top 1 --threads 2)
if [ -n "$why" ]; then fail "foreign/another thread count" "$why"; else pass "foreign/another thread count"; fi
run 30 "$MICROPP" plan --auto $A --profile "$TMP/here.json" --top 1
if [ "$RC" -ne 0 ] || printf '%s' "$OUT" | grep -q '^# warning'; then
    fail "foreign/this machine's profile: no warning" "exit $RC: $OUT $ERR"
else pass "foreign/this machine's profile: no warning"; fi

# train --profile: the same line, once, from rank 0 (the layout as given priced, and --auto's pick); none with
# this machine's profile.
T="--config configs/medium.json --steps 1 --log-every 0"
why=$(warns "$TMP/other.json" mpiexec -n 2 "$MICROPP" train $T --profile "$TMP/other.json" --mode ddp)
if [ -n "$why" ]; then fail "foreign/train --profile, one layout" "$why"; else pass "foreign/train --profile, one layout"; fi
why=$(warns "$TMP/other.json" mpiexec -n 2 "$MICROPP" train $T --profile "$TMP/other.json" --auto)
if [ -n "$why" ]; then fail "foreign/train --profile --auto" "$why"; else pass "foreign/train --profile --auto"; fi
run 60 mpiexec -n 2 "$MICROPP" train $T --profile "$TMP/here.json" --mode ddp
if [ "$RC" -ne 0 ] || printf '%s' "$OUT" | grep -q '^# warning'; then
    fail "foreign/train with this machine's profile: no warning" "exit $RC: $OUT $ERR"
else pass "foreign/train with this machine's profile: no warning"; fi
