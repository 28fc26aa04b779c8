# tests/t_plan.sh: `micropp plan` (no MPI) against what `micropp train` measures: for configs in
# configs/ and several schedules, stages, a ZeRO-1 hybrid and ZeRO-2 and 3, plan's activation bytes per stage
# equal train's peak_activation_bytes and its weights and optimizer state train's memory_per_rank
# (within 5%); the memory wall's verdict; and every bad input ends with one line and exit 2.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
cd "$ROOT"

# compare NAME RANKS "PLAN ARGS" "TRAIN ARGS": plan's one row against a 2-step train run (its --json kept
# in TRAINED["RANKS|TRAIN ARGS"] for a later check of the same run).
declare -A TRAINED
compare() {
    local name=$1 n=$2 pargs=$3 targs=$4
    run 60 "$MICROPP" plan --json $pargs
    if [ "$RC" -ne 0 ]; then fail "$name" "plan exit $RC: $ERR"; return; fi
    printf '%s' "$OUT" >"$TMP/plan.json"
    run 300 mpiexec -n "$n" "$MICROPP" train --steps 2 --log-every 0 --json $targs
    if [ "$RC" -ne 0 ]; then fail "$name" "train exit $RC: $(printf '%s' "$ERR" | tail -c 300)"; return; fi
    TRAINED["$n|$targs"]=$OUT
    printf '%s' "$OUT" >"$TMP/train.json"
    why=$(python3 - "$TMP/plan.json" "$TMP/train.json" <<'PY'
import json, sys
plan, train = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
if len(plan["rows"]) != 1: print("plan gave %d rows, expected 1" % len(plan["rows"])); sys.exit()
r, m, bad = plan["rows"][0], train["memory_per_rank"], []
def near(what, a, b):
    if abs(a - b) > 0.05 * max(abs(b), 1): bad.append("%s: plan %g, train %g" % (what, a, b))
got, want = r["activation_bytes_per_stage"], train["peak_activation_bytes"]
if len(got) != len(want): bad.append("stages: plan %d, train %d" % (len(got), len(want)))
for s, (a, b) in enumerate(zip(got, want)): near("activations of stage %d" % s, a, b)
near("weights per rank", max(r["weight_bytes_per_stage"]), m["weights"])
near("gradients per rank", max(r["grad_bytes_per_stage"]), m["grads"])
near("optimizer state per rank", max(r["optimizer_bytes_per_stage"]), m["optimizer"])
if "peak_inflight" in train and r["peak_inflight"] != [int(x) for x in train["peak_inflight"]]: bad.append("peak in-flight: plan %s, train %s" % (r["peak_inflight"], train["peak_inflight"]))
if r.get("tp", 1) > 1:  # --tp: the group's all-reduce bytes per step and rank (train's: the mean over the ranks)
    tp = r["tp_allreduce_bytes_per_stage"]
    if sum(tp) / len(tp) != train.get("tp_allreduce_bytes_per_step"): bad.append("tp all-reduce bytes: plan %s, train %s" % (tp, train.get("tp_allreduce_bytes_per_step")))
print("; ".join(bad))
PY
)
    if [ -n "$why" ]; then fail "$name" "$why"; else pass "$name"; fi
}

compare "plan/default.json gpipe K=2 = train" 2 "--config configs/default.json --schedule gpipe --stages 2" \
    "--config configs/default.json --mode pp --schedule gpipe"
compare "plan/default.json 1f1b K=4 = train" 4 "--config configs/default.json --schedule 1f1b --stages 4 --micro-batches 8" \
    "--config configs/default.json --mode pp --schedule 1f1b --micro-batches 8"
compare "plan/default.json interleaved K=2 V=2 = train" 2 "--config configs/default.json --schedule interleaved --virtual-stages 2 --stages 2 --micro-batches 8" \
    "--config configs/default.json --mode pp --schedule interleaved --virtual-stages 2 --micro-batches 8"
compare "plan/default.json zb-h1 K=4 = train" 4 "--config configs/default.json --schedule zb-h1 --stages 4 --micro-batches 8" \
    "--config configs/default.json --mode pp --schedule zb-h1 --micro-batches 8"
compare "plan/default.json zb-h1 K=2 checkpointed = train" 2 "--config configs/default.json --schedule zb-h1 --stages 2 --checkpoint-activations" \
    "--config configs/default.json --mode pp --schedule zb-h1 --checkpoint-activations"
compare "plan/default.json hybrid 2x2 ZeRO-1 = train" 4 "--config configs/default.json --schedule 1f1b --stages 2 --dp 2 --zero 1" \
    "--config configs/default.json --mode hybrid --pp 2 --dp 2 --zero 1"
compare "plan/default.json ddp 2 ZeRO-2 = train" 2 "--config configs/default.json --stages 1 --dp 2 --zero 2 --schedule gpipe" \
    "--config configs/default.json --mode ddp --zero 2"
compare "plan/default.json ddp 2 ZeRO-3 = train" 2 "--config configs/default.json --stages 1 --dp 2 --zero 3 --schedule gpipe" \
    "--config configs/default.json --mode ddp --zero 3"
compare "plan/default.json hybrid 2x2 ZeRO-3 = train" 4 "--config configs/default.json --schedule 1f1b --stages 2 --dp 2 --zero 3" \
    "--config configs/default.json --mode hybrid --pp 2 --dp 2 --zero 3"
# --zero as a list: one plan, a row per level, each equal to what train measures at that level (the
# train runs of ZeRO-2 and 3 above, when they passed)
run 60 "$MICROPP" plan --json --config configs/default.json --stages 1 --dp 2 --zero 1,2,3 --schedule gpipe
PLAN_Z=$OUT
for z in 1 2 3; do
    t="--config configs/default.json --mode ddp --zero $z"
    if [ -n "${TRAINED["2|$t"]:-}" ]; then OUT=${TRAINED["2|$t"]} RC=0
    else run 300 mpiexec -n 2 "$MICROPP" train --steps 2 --log-every 0 --json $t; fi
    why=$(python3 - "$PLAN_Z" "$OUT" "$z" <<'PY'
import json, sys
plan, train, z = json.loads(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])
rows = [r for r in plan["rows"] if r["zero"] == z]
if len(rows) != 1: print("plan has %d rows of zero %d" % (len(rows), z)); sys.exit()
r, m = rows[0], train["memory_per_rank"]
bad = ["%s: plan %g, train %g" % (k, r[k + "_bytes"], m[t]) for k, t in
       (("weight", "weights"), ("grad", "grads"), ("optimizer", "optimizer"))
       if abs(r[k + "_bytes"] - m[t]) > 0.05 * m[t]]
print("; ".join(bad))
PY
)
    if [ "$RC" -eq 0 ] && [ -z "$why" ]; then pass "plan/--zero 1,2,3: the zero-$z row = train --zero $z"
    else fail "plan/--zero 1,2,3: the zero-$z row = train --zero $z" "exit $RC $why"; fi
done
compare "plan/default.json 1f1b K=2 bf16 (stashes of 2 bytes) = train" 2 "--config configs/default.json --schedule 1f1b --stages 2 --precision bf16" \
    "--config configs/default.json --mode pp --schedule 1f1b --precision bf16"
compare "plan/default.json zb-v K=2 bf16 = train" 2 "--config configs/default.json --schedule zb-v --stages 2 --precision bf16" \
    "--config configs/default.json --mode pp --schedule zb-v --precision bf16"
compare "plan/medium.json 1f1b K=2 = train" 2 "--config configs/medium.json --schedule 1f1b --stages 2 --micro-batches 4" \
    "--config configs/medium.json --mode pp --schedule 1f1b --micro-batches 4"
# pipeline.json's batch of 2048 rows of 1024 takes minutes a step on a shared 2-core machine: a quarter of it
compare "plan/pipeline.json (batch 512) 1f1b K=2 = train" 2 "--config configs/pipeline.json --stages 2 --batch 512" \
    "--config configs/pipeline.json --batch 512"
# fashion.json reads Fashion-MNIST (784 inputs); synthetic rows of the same width have the same memory
compare "plan/fashion.json (synthetic rows) gpipe K=2 sgd = train" 2 "--config configs/fashion.json --schedule gpipe --stages 2 --optimizer sgd" \
    "--config configs/fashion.json --data synthetic --mode pp --schedule gpipe --optimizer sgd"
# --tp: weights, gradients and optimizer state are the rank's shards, activations its slices, and the
# group's all-reduce bytes per step what train counts
compare "plan/--tp 2 alone (5 layers, inputs 24) = train" 2 "--layers 5 --hidden 32 --inputs 24 --batch 16 --tp 2 --stages 1" \
    "--layers 5 --hidden 32 --inputs 24 --batch 16 --tp 2"
compare "plan/--tp 2 1f1b K=2 = train" 4 "--config configs/default.json --tp 2 --schedule 1f1b --stages 2" \
    "--config configs/default.json --mode pp --tp 2 --schedule 1f1b"
compare "plan/--tp 2 zb-h1 K=2 checkpointed, hybrid dp 2 ZeRO-1 = train" 8 "--config configs/default.json --tp 2 --schedule zb-h1 --stages 2 --dp 2 --zero 1 --checkpoint-activations" \
    "--config configs/default.json --mode hybrid --pp 2 --dp 2 --tp 2 --schedule zb-h1 --zero 1 --checkpoint-activations"
compare "plan/--tp 2 ddp 2 ZeRO-3 = train" 4 "--config configs/default.json --tp 2 --stages 1 --dp 2 --zero 3 --schedule gpipe" \
    "--config configs/default.json --mode ddp --dp 2 --tp 2 --zero 3"

# --experts: an MoE layer holds its router and its experts (all E; with --ep N, E/N): plan's weights,
# gradients, optimizer state and activations equal train's, on the monolith, a 2-stage pipeline, ddp with
# --ep 2, and dp 4 with --ep 2 and ZeRO-1 (the experts' moments sharded over their 2 holders, the rest over 4)
compare "plan/--experts 4 monolith = train" 1 "--experts 4 --layers 4 --hidden 32 --stages 1 --schedule gpipe" \
    "--experts 4 --layers 4 --hidden 32"
compare "plan/--experts 4 --moe-every 2 --top-k 1 1f1b K=2 = train" 2 \
    "--experts 4 --moe-every 2 --top-k 1 --layers 6 --hidden 32 --stages 2 --schedule 1f1b --micro-batches 4" \
    "--experts 4 --moe-every 2 --top-k 1 --layers 6 --hidden 32 --mode pp --schedule 1f1b --micro-batches 4"
compare "plan/--experts 4 ddp 2 --ep 2 = train" 2 \
    "--experts 4 --layers 4 --hidden 32 --stages 1 --dp 2 --ep 2 --schedule gpipe" \
    "--experts 4 --layers 4 --hidden 32 --dp 2 --ep 2"
compare "plan/--experts 4 dp 4 --ep 2 ZeRO-1 = train" 4 \
    "--experts 4 --layers 4 --hidden 32 --stages 1 --dp 4 --ep 2 --zero 1 --schedule gpipe" \
    "--experts 4 --layers 4 --hidden 32 --dp 4 --ep 2 --zero 1"
# ZeRO-2 and 3: the gradients (and weights) sharded the same way, each bucket over the group that sums it
compare "plan/--experts 4 dp 4 --ep 2 ZeRO-2 = train" 4 \
    "--experts 4 --layers 4 --hidden 32 --stages 1 --dp 4 --ep 2 --zero 2 --schedule gpipe" \
    "--experts 4 --layers 4 --hidden 32 --dp 4 --ep 2 --zero 2"
compare "plan/--experts 4 dp 4 --ep 2 ZeRO-3 = train" 4 \
    "--experts 4 --layers 4 --hidden 32 --stages 1 --dp 4 --ep 2 --zero 3 --schedule gpipe" \
    "--experts 4 --layers 4 --hidden 32 --dp 4 --ep 2 --zero 3"

# --- the memory wall: a 10B fp32 model with Adam needs 8 stages of a 24 GiB device ---
run 60 "$MICROPP" plan --params 10B --device-memory 24G
if [ "$RC" -ne 0 ]; then fail "plan/10B on 24G" "exit $RC: $ERR"
elif ! printf '%s' "$OUT" | grep -q '^smallest K that fits: 8 stages'; then fail "plan/10B on 24G" "no 'smallest K that fits: 8 stages' line: $(printf '%s' "$OUT" | tail -n 2)"
elif ! printf '%s' "$OUT" | grep -qE '^1f1b +4 +1 .* no$'; then fail "plan/10B on 24G" "1f1b at K=4 is not marked as not fitting"
else pass "plan/10B on 24G: K=8 is the smallest that fits, K=4 does not"; fi
run 60 "$MICROPP" plan --params 10B --device-memory 24G --stages 1,2 --json
if [ "$RC" -ne 0 ]; then fail "plan/nothing fits" "exit $RC: $ERR"
elif [ "$(json_get '["smallest_stages_that_fit"]')" != None ] || ! json_get '["fix"]' | grep -q 'at least 7 stages'; then fail "plan/nothing fits" "$(printf '%s' "$OUT" | tail -c 300)"
else pass "plan/nothing fits: null, and the fix names the stages the model state needs"; fi

# --- the smallest P x T: --tp LIST (or all) adds a tp column and names the layout on the fewest ranks ---
# 10B at hidden 8192: 8 x 1, 4 x 2 and 2 x 4 all fit on 8 ranks; the tie goes to the smaller T
run 60 "$MICROPP" plan --params 10B --device-memory 24G --schedule 1f1b --tp all
if [ "$RC" -ne 0 ]; then fail "plan/10B --tp all" "exit $RC: $ERR"
elif ! printf '%s' "$OUT" | grep -q '^smallest P x T that fits: 8 x 1 = 8 ranks (1f1b'; then fail "plan/10B --tp all" "$(printf '%s' "$OUT" | tail -n 1)"
elif ! printf '%s' "$OUT" | grep -qE '^1f1b +4 +1 +2 .* yes$' || ! printf '%s' "$OUT" | grep -qE '^1f1b +4 +1 +1 .* no$'; then fail "plan/10B --tp all" "no tp column with 4 x 2 fitting and 4 x 1 not"
else pass "plan/10B --tp all: 8 x 1 named (4 x 2 fits on as many ranks, 4 x 1 does not)"; fi
# two layers of hidden 65536: a stage of one layer holds it whole, only T = 8 on one stage fits 24G
run 60 "$MICROPP" plan --params 10B --hidden 65536 --device-memory 24G --schedule 1f1b --tp 1,2,4,8 --json
got=$(json_get '["smallest_p_x_t_that_fits"]')
if [ "$RC" -ne 0 ]; then fail "plan/2 x 65536 --tp 1,2,4,8" "exit $RC: $ERR"
elif [ "$got" != '{"stages": 1, "tp": 8, "dp": 1, "ranks": 8, "schedule": "none"}' ] || [ "$(json_get '["smallest_stages_that_fit"]')" != 1 ]; then fail "plan/2 x 65536 --tp 1,2,4,8" "smallest_p_x_t_that_fits $got"
else pass "plan/2 x 65536 --tp 1,2,4,8: 1 stage x tp 8 is the only fit, in --json"; fi
run 60 "$MICROPP" plan --params 10B --device-memory 24G --stages 8 --schedule 1f1b --tp 1,3
if [ "$RC" -ne 0 ] || ! printf '%s' "$OUT" | grep -q '^# left out: 1f1b K=8 dp=1 tp=3: --hidden 8192 is not divisible by --tp 3'; then fail "plan/--tp 1,3" "rc $RC: $OUT"
else pass "plan/--tp 1,3: T = 3 left out with the reason"; fi
expect_user_error "plan/--tp lists a T twice" "--tp '2,2' lists 2 twice" 10 "$MICROPP" plan --params 10B --tp 2,2

# --- advice plan would refuse is never given: the stages it names fit the model's layers (and 4096) ---
for dev in 16M 1G 24G; do
    run 60 "$MICROPP" plan --params 10B --device-memory $dev --stages 1,2 --json
    why=$(printf '%s' "$OUT" | python3 -c '
import json, re, sys
d = json.load(sys.stdin); fix = d.get("fix") or ""; most = min(d["layers"], 4096)
want = {"16M": "it does not fit even so", "1G": "try --optimizer sgd (no moments) with --pp 75", "24G": "try --pp 7"}[sys.argv[1]]
bad = [n for n in map(int, re.findall(r"--stages (\d+)", fix)) if n > most]
print("advises --stages %s past %d: %s" % (bad, most, fix) if bad else "" if want in fix else "no %r in %r" % (want, fix))' $dev 2>&1)
    [ "$RC" -eq 0 ] && [ -z "$why" ] && pass "plan/10B on $dev: the fix is one plan and train accept" || fail "plan/10B on $dev: the fix" "rc $RC $why"
done

# --- large M: the simulator keeps passes (8 bytes, no slices unless a chart asks), and past its limit
# (K x v x M > 4194304 passes) a refusal in a second instead of minutes and gigabytes ---
if [ -x /usr/bin/time ]; then
    base=$(/usr/bin/time -f %M "$MICROPP" plan --help 2>&1 >/dev/null | tail -n 1)
    run 120 /usr/bin/time -f %M "$MICROPP" plan --schedule zb-h1 --stages 64 --layers 64 --micro-batches 65536 --batch 65536 --device-memory 1G
    peak=$(printf '%s' "$ERR" | tail -n 1)
    if [ "$RC" -ne 0 ]; then fail "plan/large M: zb-h1 K=64 M=65536" "exit $RC: $ERR"
    elif [ $((peak - base)) -gt 300000 ]; then fail "plan/large M: zb-h1 K=64 M=65536" "$((peak - base)) KB above plan --help's $base KB (at most 300000)"
    else pass "plan/large M: zb-h1 K=64 M=65536 (4194304 passes) in $((peak - base)) KB above plan --help"; fi
else fail "plan/large M: memory" "no /usr/bin/time to measure it (make deps installs the package time)"; fi
expect_user_error "plan/M past the simulator's limit: refused at once" \
    "no layout given can run \(first: gpipe K=64 dp=1: 64 stages x 1 chunk x 1048576 micro-batches = 67108864 passes to simulate, more than the 4194304 the simulator takes .*: use --micro-batches 65536 or fewer" \
    10 "$MICROPP" plan --micro-batches 1048576 --batch 1048576 --stages 64 --layers 64

# --- bad input: one line, exit 2 ---
expect_user_error "plan/bad --params" "--params '10X' is not a parameter count" 10 "$MICROPP" plan --params 10X
expect_user_error "plan/bad --device-memory" "--device-memory '24Q' is not a size" 10 "$MICROPP" plan --device-memory 24Q
expect_user_error "plan/--device-memory above 1 PiB" "--device-memory '1e30' is more than 1 PiB: give the memory of one device, like 24G or 80G" 10 "$MICROPP" plan --device-memory 1e30
expect_user_error "plan/--device-memory of 1 byte" "--device-memory '1' is 1 byte, and a device holds at least 1 MiB: give the unit, like 24G or 512M" 10 "$MICROPP" plan --device-memory 1
run 30 "$MICROPP" plan --device-memory 1024T --stages 1
[ "$RC" -eq 0 ] && grep -q '^smallest K that fits: 1 stage' <<<"$OUT" && pass "plan/--device-memory 1024T (1 PiB) is taken" || fail "plan/--device-memory 1024T" "rc $RC $ERR"
expect_user_error "plan/--params below one layer" "--params 0.5 is less than the smallest model plan shapes \(1 layer x hidden 16 = 306 parameters\): give --params 306 or more" 10 "$MICROPP" plan --params 0.5
expect_user_error "plan/--params below one layer of --hidden" "--params 50 is less than one layer at --hidden 8 \(90 parameters\): use a smaller --hidden, or --params 90 or more" 10 "$MICROPP" plan --params 50 --hidden 8
expect_user_error "plan/--params past the largest model" "--params 20T is more than the largest model plan shapes \(4096 layers x hidden 65536 = 1.759e\+13 parameters\)" 10 "$MICROPP" plan --params 20T
expect_user_error "plan/--params too deep at --hidden" "--params 1B at --hidden 16 makes 3676470 layers, more than the 4096 a model can have: use a larger --hidden" 10 "$MICROPP" plan --params 1B --hidden 16
expect_user_error "plan/bad --stages" "--pp '0,2'" 10 "$MICROPP" plan --stages 0,2
# --schedule takes the list bubble's --schedule takes (one parser, schedule_parse_list): the rows
# follow it, 'all' is every schedule; the old --schedules spelling is gone
run 30 "$MICROPP" plan --schedule zb-h1,gpipe --stages 2 --json
got=$(json_get "['rows']" 2>/dev/null | python3 -c "import json,sys; print(','.join(r['schedule'] for r in json.load(sys.stdin)))" 2>/dev/null)
[ "$RC" -eq 0 ] && [ "$got" = "zb-h1,gpipe" ] && pass "plan/--schedule zb-h1,gpipe: those rows, in that order" || fail "plan/--schedule zb-h1,gpipe" "rc $RC rows '$got' $ERR"
run 30 "$MICROPP" plan --schedule all --stages 2 --layers 4 --micro-batches 4 --json
got=$(json_get "['rows']" 2>/dev/null | python3 -c "import json,sys; print(','.join(r['schedule'] for r in json.load(sys.stdin)))" 2>/dev/null)
[ "$RC" -eq 0 ] && [ "$got" = "naive,gpipe,1f1b,interleaved,zb-h1,zb-v,dualpipev,zb-h2,looped-bfs,v-half,v-min" ] && pass "plan/--schedule all: every schedule, as bubble's" || fail "plan/--schedule all" "rc $RC rows '$got' $ERR"
expect_user_error "plan/--schedules (the old spelling) is refused" "unknown option '--schedules'" 10 "$MICROPP" plan --schedules gpipe
expect_user_error "plan/bad --schedule" "plan: --schedule 'gpipe,nope' is not 'all' or a list of" 10 "$MICROPP" plan --schedule gpipe,nope
expect_user_error "plan/--params with --layers" "--params picks --layers" 10 "$MICROPP" plan --params 1B --layers 4
expect_user_error "plan/--zero without --dp" "--zero 1 shards" 10 "$MICROPP" plan --zero 1
expect_user_error "plan/a train-only flag" "--steps changes neither memory nor the bubble" 10 "$MICROPP" plan --steps 5
expect_user_error "plan/no layout runs" "no layout given can run" 10 "$MICROPP" plan --layers 2 --stages 4
expect_user_error "plan/--tp 4096: the reason names --tp, no blame on --pp (issue 37)" "no layout given can run \(first: .*--hidden 128 is not divisible by --tp 4096.*, or a --tp that divides 128\)$" 10 "$MICROPP" plan --tp 4096
expect_user_error "plan/under mpiexec" "plan" 30 mpiexec -n 2 "$MICROPP" plan
