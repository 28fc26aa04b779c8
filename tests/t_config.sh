#!/usr/bin/env bash
# tests/t_config.sh: what a config file or a flag can get wrong, and how it is told: every problem
# with a key carries file:line:column, a key given twice is refused, long values are cut in the
# message, numbers are taken for string options, and --help speaks of JSON keys only where a
# command reads a --config file.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
cd "$TMP"
e() { expect_user_error "$@"; }

printf '{"layers": 2,\n  "hidden": 8,\n  "layers": 3}\n' > dup.json
e "config/duplicate key" "dup.json:3:3: key 'layers' is given twice \(first at line 1, column 2\): keep one" 10 "$MICROPP" train -c dup.json
printf '{"log_every": 1,\n "log-every": 3}' > alias.json
e "config/duplicate key under its two spellings" "alias.json:2:2: key 'log-every' is given twice \(first at line 1, column 2\)" 10 "$MICROPP" train -c alias.json
printf '{"stages": "2",\n "stages": "4"}' > bdup.json
e "config/duplicate key (bubble)" "bdup.json:2:2: key 'stages' is given twice" 10 "$MICROPP" bubble -c bdup.json
printf '{\n  "layers": 2,\n    "hiden": 8}' > unknown.json
e "config/unknown key with line:column" "unknown.json:3:5: unknown key 'hiden'" 10 "$MICROPP" train -c unknown.json
printf '{"layers": 2,\n "hidden": "x"}' > type.json
e "config/wrong type with line:column" "type.json:2:2: key 'hidden' must be a number, not a string" 10 "$MICROPP" train -c type.json
printf '{"steps": 1.5}' > int.json
e "config/not an integer with line:column" "int.json:1:2: key 'steps' must be an integer" 10 "$MICROPP" train -c int.json
printf '{"lr": 1e9}' > range.json
e "config/out of range with line:column" "range.json:1:2: key 'lr' = 1000000000 is out of range" 10 "$MICROPP" train -c range.json
printf '{"mode": "pipe"}' > choice.json
e "config/unknown choice with line:column" "choice.json:1:2: key 'mode' = 'pipe' is not one of" 10 "$MICROPP" train -c choice.json
printf '{"a\\"b": 1}' > quoted.json
e "config/a key with an escaped quote is found" "quoted.json:1:2: unknown key 'a\"b'" 10 "$MICROPP" train -c quoted.json
printf '{"stages": 2, "micro-batches": 4}' > num.json
run 10 "$MICROPP" bubble -c num.json
[ $RC -eq 0 ] && printf '%s' "$OUT" | grep -q "^1f1b  *2  *4 " && pass "config/a number is taken for a string option (bubble stages: 2)" \
    || fail "config/number for a string option" "rc $RC: $ERR"

# Long values are cut in messages (a 10 MB value once gave a 10 MB line).
long=$(python3 -c "print('x' * 5000)")
for args in "train --mode $long" "train --$long" "train --layers $long" "bubble --schedule $long" "train $long"; do
    run 10 "$MICROPP" $args
    n=$(printf '%s' "$ERR" | wc -c)
    [ $RC -eq 2 ] && [ "$n" -lt 400 ] && printf '%s' "$ERR" | grep -qE "\(5[0-9]* characters\)|longer than 511 characters" \
        && pass "config/a 5000-character value is cut in the message (${args:0:16}...: $n bytes)" \
        || fail "config/long value cut (${args:0:20})" "rc $RC, $n bytes: ${ERR:0:200}"
done
python3 -c "import json; print(json.dumps({'y' * 5000: 1}))" > longkey.json
run 10 "$MICROPP" train -c longkey.json
[ $RC -eq 2 ] && [ "$(printf '%s' "$ERR" | wc -c)" -lt 400 ] && pass "config/a 5000-character key is cut in the message" || fail "config/long key" "rc $RC ${ERR:0:200}"

# --help: JSON keys are promised only by commands that read --config.
for cmd in train bubble; do
    run 10 "$MICROPP" $cmd --help
    printf '%s' "$OUT" | grep -q "each is also a JSON config key" && pass "config/$cmd --help names its JSON keys" || fail "config/$cmd --help" "no JSON line"
done
for cmd in pingpong allreduce selftest; do
    run 10 "$MICROPP" $cmd --help
    [ $RC -eq 0 ] && ! printf '%s' "$OUT" | grep -q "JSON config key" && pass "config/$cmd --help promises no JSON keys (it takes no --config)" \
        || fail "config/$cmd --help" "rc $RC, mentions JSON keys"
done

# Options that were silently changed or ignored are refused or said.
e "config/--threads beyond what OpenBLAS was built for" "train: --threads 1000 is more than the [0-9]+ this OpenBLAS was built for" 10 "$MICROPP" train --threads 1000
printf '\x93NUMPY' > x.npy
e "config/--samples with a data file" "--samples sizes the synthetic data set, and --data 'x.npy' is a file" 10 "$MICROPP" train --data x.npy --labels x.npy --samples 5
run 60 "$MICROPP" train --eval-samples 0 --steps 2
[ $RC -eq 0 ] && printf '%s' "$OUT" | grep -q "accuracy not measured (--eval-samples 0)" && ! printf '%s' "$OUT" | grep -q nan \
    && pass "config/--eval-samples 0 says the accuracy is not measured (no nan%)" || fail "config/--eval-samples 0" "rc $RC: $OUT"
run 60 "$MICROPP" train --eval-samples 0 --steps 2 --json
[ "$(json_get "['accuracy']")" = "None" ] && pass "config/--eval-samples 0: JSON accuracy is null" || fail "config/--eval-samples 0 JSON" "$OUT"
# Commands without MPI refuse to run N times over under mpiexec, and say so once.
for cmd in bubble selftest; do
    e "config/$cmd under mpiexec -n 2" "$cmd runs in one process, and mpiexec started 2: run it without mpiexec" 30 mpiexec -n 2 "$MICROPP" $cmd
done

# Messages that named the wrong thing.
python3 -c "print('{\"layers\":' * 2000 + '1' + '}' * 2000)" > deep.json
e "config/deep nesting is named as such, not a syntax error" "deep.json: nested 2000 levels deep" 10 "$MICROPP" train -c deep.json
e "config/--bucket-mb's range is what it accepts" "--bucket-mb = -1 is out of range: use a value in \[0, 1e\+12\]" 10 "$MICROPP" train --mode ddp --bucket-mb -1
# numbers past double's range are numbers (issue 37: 'expects a number'): 1e400 out of range, 1e-320 a tiny value
e "config/--lr 1e400 is out of range, not 'not a number'" "--lr = 1e400 is out of range: use a value in" 10 "$MICROPP" train --lr 1e400
e "config/--bucket-mb -1e-320 is a (tiny negative) number, out of range" "--bucket-mb = -1e-320 is out of range" 10 "$MICROPP" train --mode ddp --bucket-mb -1e-320
run 30 "$MICROPP" train --steps 1 --save ckbig
python3 "$ROOT/tests/ckpt_tool.py" manifest ckbig "m['step']=10**15" >/dev/null
e "config/a checkpoint past --steps' range says it cannot continue" "checkpoint is at step 1000000000000000, past the most --steps accepts \(1073741824\)" 30 "$MICROPP" train --resume ckbig
python3 - <<'PY'
import struct
head = "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 9), }"
head += " " * (63 - (10 + len(head)) % 64) + "\n"
open("w9.npy", "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head.encode() + struct.pack("<36f", *([0.0] * 36)))
PY
e "config/a feature file of another width says the width found" "w9.npy: its rows have 9 features but --inputs is 128: set --inputs 9" 10 "$MICROPP" train --data w9.npy --labels w9.npy

# A run that cannot fit is refused before it allocates (not after climbing toward the OOM killer).
e "memory/a model too large for the node is refused at once, with the figures" "needs about 64\.06 GiB \(weights 16\.00 GiB, gradients 16\.00 GiB, optimizer 32\.00 GiB,.*and the node has [0-9.]+ [KMGT]?i?B available: use more pipeline stages" \
    20 "$MICROPP" train --hidden 65536 --layers 1
# Memory in the binary unit that fits (as `micropp plan` prints it): 2.50 TiB, never 2.75e+03 GB (what
# the memory check once printed).
e "memory/sizes in the binary unit that fits (TiB), no exponent" "needs about 2\.50 TiB \(weights 640\.01 GiB, gradients 640\.01 GiB, optimizer 1\.25 TiB, activations [0-9.]+ MiB, buffers [0-9.]+ MiB\), 1 rank on its node 2\.50 TiB, and the node has [0-9.]+ [KMGT]?i?B available" \
    20 "$MICROPP" train --hidden 65536 --layers 40 --batch 8 --steps 1
e "memory/ddp suggests sharding the optimizer" "2 ranks on its node .* use --zero 1" 60 mpiexec -n 2 "$MICROPP" train --mode ddp --hidden 30000 --layers 4
e "memory/huge micro-batches suggest checkpointing or more micro-batches" "activations .* use --checkpoint-activations, more --micro-batches" \
    60 mpiexec -n 2 "$MICROPP" train --mode pp --hidden 4096 --layers 2 --batch 400000 --micro-batches 1

# A flag given twice on the command line is refused (which was meant?), by every command, in any
# spelling (-n and --steps, --log_every and --log-every); a config key overridden by a flag is not.
e "config/train --steps twice" "^micropp: train: --steps given twice \(2 and 3\): give it once$" 10 "$MICROPP" train --steps 2 --steps 3
e "config/train -n and --steps" "train: --steps given twice \(2 and 3\): give it once" 10 "$MICROPP" train -n 2 --steps 3
e "config/train --log_every and --log-every" "train: --log-every given twice \(2 and 3\)" 10 "$MICROPP" train --log_every 2 --log-every 3
e "config/train a switch twice" "train: --verify given twice: give it once" 10 "$MICROPP" train --verify --steps 2 --verify
e "config/train --config twice" "train: --config given twice \(a.json and b.json\): give it once" 10 "$MICROPP" train --config a.json --config b.json
e "config/train twice under mpiexec: one line, every rank exits 2" "train: --mode given twice \(pp and ddp\)" 30 mpiexec -n 2 "$MICROPP" train --mode pp --mode ddp
e "config/bubble twice" "bubble: --pp given twice \(2 and 4\): give it once" 10 "$MICROPP" bubble --stages 2 --stages 4
e "config/plan twice" "plan: --params given twice \(1B and 2B\): give it once" 10 "$MICROPP" plan --params 1B --params 2B
e "config/selftest twice" "selftest: --device given twice \(cpu and cpu\): give it once" 10 "$MICROPP" selftest --device cpu --device cpu
e "config/pingpong twice" "pingpong: --sweep given twice: give it once" 30 mpiexec -n 2 "$MICROPP" pingpong --sweep --sweep
e "config/allreduce twice" "allreduce: --json given twice: give it once" 30 mpiexec -n 2 "$MICROPP" allreduce --json --json
echo '{"steps": 5, "log_every": 0}' > five.json
run 60 "$MICROPP" train --config five.json --steps 2 --json
[ "$RC" -eq 0 ] && [ "$(json_get '["steps"]')" = 2 ] && pass "config/a flag overrides the config's key (not a repeat)" \
    || fail "config/a flag overrides the config's key (not a repeat)" "exit $RC, steps $(json_get '["steps"]' 2>/dev/null): $ERR"
