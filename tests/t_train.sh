# tests/t_train.sh: the monolith learns, the manual split equals it, .npy data, JSON/flags, and
# every bad input of `micropp train` gives one line and exit 2.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)

# --- the default run learns (the course's monolith: 0.69 -> 0.23) ---
run 60 "$MICROPP" train --json
if [ "$RC" -eq 0 ]; then
    first=$(json_get '["first_loss"]'); final=$(json_get '["final_loss"]')
    if python3 -c "import sys; sys.exit(0 if $final <= 0.5 * $first else 1)"; then pass "train/default run halves the loss ($first -> $final)"
    else fail "train/default run halves the loss" "first $first final $final"; fi
    keys=$(printf '%s' "$OUT" | python3 -c "import json,sys; d=json.load(sys.stdin); need=['mode','layers','hidden','batch','steps','final_loss','step_ms_median','samples_per_s','gflops','accuracy']; print(' '.join(k for k in need if k not in d))")
    [ -z "$keys" ] && pass "train/--json has the summary keys" || fail "train/--json has the summary keys" "missing: $keys"
    n=$(printf '%s\n' "$OUT" | grep -c .)
    [ "$n" -eq 1 ] && pass "train/--json prints one line" || fail "train/--json prints one line" "$n lines"
else
    fail "train/default run" "exit $RC: $ERR"
fi

# --- text output: header with BLAS, step lines, summary ---
run 60 "$MICROPP" train --steps 10 --log-every 5
if [ "$RC" -eq 0 ] && grep -qE '^batch 32 .*openblas [0-9.]+ core=[A-Za-z0-9]+ threads=1' <<<"$OUT" \
   && grep -qE '^step 5/10 \| loss [0-9.]+ \| [0-9.]+ ms \| [0-9.]+k? samples/s' <<<"$OUT" \
   && grep -qE 'samples/s \| [0-9.]+ GFLOP/s' <<<"$OUT"; then pass "train/text header, step lines, summary"
else fail "train/text header, step lines, summary" "$OUT $ERR"; fi

# --- memory per rank in every mode, with plan's columns in plan's binary units: the monolith holds
# the whole model, a 2-stage pipeline about half (the last stage also the head), ZeRO-1 over 2 replicas
# half the optimizer state and the whole weights ---
mem_re='weights [0-9.]+ [KM]iB \| gradients [0-9.]+ [KM]iB \| optimizer [0-9.]+ [KM]iB \| activations [0-9.]+ KiB \(peak\)$'
mem_line=$(grep -E "^memory per process: $mem_re" <<<"$OUT")
run 60 mpiexec -n 2 "$MICROPP" train --pp 2 --steps 3
mem_pp=$(grep -E "^memory per rank: $mem_re" <<<"$OUT")
run 60 mpiexec -n 2 "$MICROPP" train --dp 2 --zero 1 --steps 3
mem_z1=$(grep -E "^memory per rank: $mem_re" <<<"$OUT")
if grep -q 'weights 1.01 MiB | gradients 1.01 MiB | optimizer 2.02 MiB' <<<"$mem_line" \
   && grep -q 'weights 517.01 KiB | gradients 517.01 KiB | optimizer 1.01 MiB' <<<"$mem_pp" \
   && grep -q 'weights 1.01 MiB | gradients 1.01 MiB | optimizer 1.01 MiB' <<<"$mem_z1"; then
    pass "train/memory per rank in the text summary: monolith, --pp 2 halves it, --zero 1 halves the optimizer"
else fail "train/memory per rank in the text summary" "monolith '$mem_line' | pp 2 '$mem_pp' | zero 1 '$mem_z1'"; fi

# --- the BLAS kernel: never the generic fallback when the CPU has AVX2; OPENBLAS_CORETYPE respected ---
core=$(grep -oE 'core=[A-Za-z0-9]+' <<<"$OUT" | cut -d= -f2)
if grep -q avx2 /proc/cpuinfo; then
    case "$core" in Prescott|Core2|Penryn|Nehalem|Sandybridge|Atom|Barcelona|Katmai) fail "blas/best kernel picked" "core=$core";;
        *) pass "blas/best kernel picked (core=$core)";; esac
else skip "blas/best kernel picked" "CPU without AVX2"; fi
run 60 env OPENBLAS_CORETYPE=Haswell "$MICROPP" train --steps 2
grep -q 'core=Haswell' <<<"$OUT" && pass "blas/OPENBLAS_CORETYPE set by the user is kept" || fail "blas/OPENBLAS_CORETYPE kept" "$(grep -o 'core=[A-Za-z]*' <<<"$OUT")"

# --- manual split equals the monolith ---
run 60 "$MICROPP" train --steps 20 --json; mono="$OUT"
for k in 2 4; do
    run 60 "$MICROPP" train --steps 20 --mode manual --parts $k --verify --json
    if [ "$RC" -ne 0 ]; then fail "manual/K=$k" "exit $RC: $ERR"; continue; fi
    python3 - "$mono" "$OUT" <<'PY' && pass "manual/K=$k losses match monolith within 1e-5" || fail "manual/K=$k losses match monolith" "differ"
import json, sys
a = json.loads(sys.argv[1])["losses"]; b = json.loads(sys.argv[2])
ok = b["verify_ok"] and all(abs(x - y) <= 1e-5 * abs(x) + 1e-7 for x, y in zip(a, b["losses"]))
sys.exit(0 if ok and len(a) == len(b["losses"]) == 20 else 1)
PY
done

# --- config file, JSON keys with underscores, flags override the file ---
cat > "$TMP/c.json" <<'J'
{"hidden": 64, "layers": 4, "batch": 16, "steps": 3, "log_every": 0, "optimizer": "sgd", "lr": 0.01}
J
run 30 "$MICROPP" train --config "$TMP/c.json" --steps 2 --json
[ "$RC" -eq 0 ] && [ "$(json_get '["hidden"]')" = 64 ] && [ "$(json_get '["steps"]')" = 2 ] && [ "$(json_get '["optimizer"]')" = sgd ] \
  && pass "config/file read, flag overrides it" || fail "config/file read, flag overrides it" "$RC $OUT $ERR"
for f in default medium pipeline; do
    [ -f "$ROOT/configs/$f.json" ] || { fail "config/configs/$f.json" "missing"; continue; }
    run 30 "$MICROPP" train --config "$ROOT/configs/$f.json" --mode monolith --steps 1 --layers 2 --hidden 16 --batch 16 --json
    [ "$RC" -eq 0 ] && pass "config/configs/$f.json parses" || fail "config/configs/$f.json parses" "$ERR"
done

# --- .npy data ---
python3 - "$TMP" <<'PY'
import struct, sys, random
def save(path, descr, shape, fmt, vals):
    h = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    h += " " * ((64 - (10 + len(h) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + struct.pack("<%d%s" % (len(vals), fmt), *vals))
random.seed(1)
N, H = 64, 16
x = [random.uniform(-1, 1) for _ in range(N * H)]
y = [1 if sum(x[i*H:(i+1)*H]) > 0 else 0 for i in range(N)]
d = sys.argv[1]
save(d + "/x.npy", "<f4", "(%d, %d)" % (N, H), "f", x)
save(d + "/y.npy", "<i8", "(%d,)" % N, "q", y)
save(d + "/y32.npy", "<i4", "(%d,)" % N, "i", y)
save(d + "/xd.npy", "<f8", "(%d, %d)" % (N, H), "d", x)
save(d + "/xw.npy", "<f4", "(%d, %d)" % (N, 8), "f", x[:N*8])
save(d + "/ybig.npy", "<i8", "(%d,)" % N, "q", [5] * N)
with open(d + "/x.npy", "rb") as f: b = f.read()
open(d + "/xt.npy", "wb").write(b[:len(b) - 100])
open(d + "/junk.npy", "wb").write(b"hello")
PY
run 60 "$MICROPP" train --hidden 16 --layers 4 --batch 16 --steps 40 --data "$TMP/x.npy" --labels "$TMP/y.npy" --json
[ "$RC" -eq 0 ] && python3 -c "import sys; sys.exit(0 if $(json_get '["final_loss"]') < $(json_get '["first_loss"]') else 1)" \
  && pass "npy/trains on float32 + int64 files" || fail "npy/trains on float32 + int64 files" "$RC $ERR"
run 60 "$MICROPP" train --hidden 16 --layers 4 --batch 16 --steps 2 --data "$TMP/x.npy" --labels "$TMP/y32.npy"
[ "$RC" -eq 0 ] && pass "npy/int32 labels" || fail "npy/int32 labels" "$ERR"
T="$MICROPP train --hidden 16 --layers 4 --batch 16 --steps 2"
expect_user_error "npy/wrong dtype" "<f8.*float32" 20 $T --data "$TMP/xd.npy" --labels "$TMP/y.npy"
expect_user_error "npy/wrong width" "its rows have 8 features but --inputs is 16: set --inputs 8" 20 $T --data "$TMP/xw.npy" --labels "$TMP/y.npy"
expect_user_error "npy/truncated" "truncated" 20 $T --data "$TMP/xt.npy" --labels "$TMP/y.npy"
expect_user_error "npy/not npy" "not a .npy" 20 $T --data "$TMP/junk.npy" --labels "$TMP/y.npy"
expect_user_error "npy/label out of range" "label 5 .*--classes" 20 $T --data "$TMP/x.npy" --labels "$TMP/ybig.npy"
expect_user_error "npy/missing labels" "needs --labels" 20 $T --data "$TMP/x.npy"
expect_user_error "npy/missing file" "cannot open" 20 $T --data "$TMP/nope.npy" --labels "$TMP/y.npy"

# --- bad input: one line, exit 2 ---
expect_user_error "bad/unknown command" "unknown command 'trian'" 10 "$MICROPP" trian
expect_user_error "bad/unknown flag" "unknown option '--hiden'" 10 "$MICROPP" train --hiden 4
expect_user_error "bad/flag missing its value" "needs a value" 10 "$MICROPP" train --layers
expect_user_error "bad/non-numeric" "--layers expects an integer, got 'abc'" 10 "$MICROPP" train --layers abc
expect_user_error "bad/trailing junk in number" "expects an integer, got '12x'" 10 "$MICROPP" train --batch 12x
expect_user_error "bad/out of range" "--hidden = 0 is out of range" 10 "$MICROPP" train --hidden 0
expect_user_error "bad/negative lr" "--lr = -1 is out of range" 10 "$MICROPP" train --lr -1
expect_user_error "bad/unknown choice" "--mode = 'pipe' is not one of" 10 "$MICROPP" train --mode pipe
expect_user_error "bad/missing config" "cannot read config '$TMP/none.json'" 10 "$MICROPP" train --config "$TMP/none.json"
printf '{\n  "hidden": 64,\n  "layers": 4\n  "batch": 8\n}\n' > "$TMP/syntax.json"
expect_user_error "bad/JSON syntax with file:line:column" "syntax.json:4:3: JSON syntax error" 10 "$MICROPP" train --config "$TMP/syntax.json"
echo '{"hiden": 64}' > "$TMP/typo.json"
expect_user_error "bad/unknown JSON key named" "unknown key 'hiden'" 10 "$MICROPP" train --config "$TMP/typo.json"
echo '{"hidden": "64"}' > "$TMP/type.json"
expect_user_error "bad/wrong JSON type" "key 'hidden' must be a number, not a string" 10 "$MICROPP" train --config "$TMP/type.json"
echo '{"hidden": 6.5}' > "$TMP/frac.json"
expect_user_error "bad/fractional integer" "must be an integer" 10 "$MICROPP" train --config "$TMP/frac.json"
expect_user_error "bad/layers < parts" "5 parts but only 4 layers" 10 "$MICROPP" train --mode manual --parts 5 --layers 4
expect_user_error "bad/--parts without manual is --pp on one rank" \
    "--pp 2 runs a stage per rank, and 1 rank was started: run 'mpiexec -n 2 .*', or add --mode manual" 10 \
    "$MICROPP" train --parts 2
expect_user_error "bad/pp flag in monolith" "--micro-batches applies to a pipeline \(--pp > 1\), and this run is pp 1 x dp 1 x tp 1: drop it or set --pp" 10 "$MICROPP" train --micro-batches 4
expect_failure "bad/NaN loss names the step (exit 1)" "loss became (NaN|Inf) at step [0-9]+: lower --lr" 30 "$MICROPP" train --optimizer sgd --lr 1000 --steps 50
expect_user_error "bad/stray argument" "unexpected argument 'extra'" 10 "$MICROPP" train extra

# --- help and version ---
run 10 "$MICROPP" --help
[ "$RC" -eq 0 ] && grep -q 'train' <<<"$OUT" && grep -q pingpong <<<"$OUT" && pass "cli/--help lists the commands" || fail "cli/--help" "$RC"
run 10 "$MICROPP" --version
[ "$RC" -eq 0 ] && grep -qE '^micropp [0-9]+\.[0-9]+\.[0-9]+$' <<<"$OUT" && pass "cli/--version" || fail "cli/--version" "$OUT"
# Every command's --help lists every option of its table, read from the file that holds the table
# (a row starts `    {"name", `). The count guards the reading itself: a table that moved or changed
# its spelling reads as a handful of names and fails here instead of passing without looking.
for row in "train train/options.c 50" "bubble bubble.c 10" "plan plan_cmd.c 4" "pingpong pingpong.c 8" "allreduce allreduce.c 5" "selftest selftest.c 3"; do
    read -r cmd file least <<<"$row"
    names=$(grep -oE '^    \{"[a-z0-9-]+", ' "$ROOT/$file" | grep -oE '[a-z0-9-]+')
    n=$(grep -c . <<<"$names")
    run 10 "$MICROPP" "$cmd" --help
    missing=""
    # the option column must list it: --lr is not listed by --lr-schedule, nor by a help text naming it
    for f in $names; do grep -qE -- "^ +(-[a-zA-Z], )?--$f( |$)" <<<"$OUT" || missing="$missing $f"; done
    if [ "$RC" -eq 0 ] && [ -z "$missing" ] && [ "$n" -ge "$least" ]; then pass "cli/$cmd --help lists every option of its table ($n in $file)"
    else fail "cli/$cmd --help lists every option of its table" "rc $RC, $n options read from $file (at least $least expected), missing:$missing"; fi
done

# --- BLAS threads: the header reports what OpenBLAS runs with ---
run 30 "$MICROPP" train --steps 2 --threads 2
grep -qE 'openblas .* threads=2' <<<"$OUT" && pass "blas/--threads 2 reaches OpenBLAS" || fail "blas/--threads 2" "$(grep -o 'threads=[0-9]*' <<<"$OUT")"

# --- evaluation through an even number of parts with more classes than hidden units (a heap overflow once) ---
run 60 "$MICROPP" train --mode manual --parts 2 --layers 2 --hidden 8 --classes 4096 --batch 64 --steps 1 --eval-samples 64 --json
[ "$RC" -eq 0 ] && [ -n "$(json_get '["accuracy"]')" ] && pass "manual/eval with classes > hidden over 2 parts" || fail "manual/eval with classes > hidden over 2 parts" "exit $RC: $(head -c 300 <<<"$ERR")"
