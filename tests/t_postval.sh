#!/usr/bin/env bash
# tests/t_postval.sh: --post-validate, steps that overlap. A non-finite gradient injected at step k on one
# rank (MICROPP_FAULT nangrad) is undone on every rank, and the run ends with the weights, byte for byte,
# of the synchronous run that leaves step k out (MICROPP_FAULT skip), on 1, 2 and 4 ranks, 1f1b, zb-h2 and
# zb-v; --clip-grad's steps that clip are redone and end as the synchronous clipping run's; without a failure
# it trains the synchronous run's weights; a step starts at once (a late rank: the others wait at no
# barrier); its undo copy counts in the memory (train's and plan's); --json and --metrics say per step whether
# its update stood, was undone or redone, and --json counts them; the runs it cannot undo are refused, one
# line, exit 2, on every rank.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
cd "$TMP" || exit 1
S=(--layers 8 --hidden 32 --batch 32 --steps 6 --log-every 0)

# train N DIR ENV ARGS...: a run that saves its last step to DIR ("" ENV: no fault); its stdout in $OUT
train() {
    local n=$1 dir=$2 fault=$3; shift 3
    if [ "$n" -gt 1 ]; then run 240 env MICROPP_FAULT="$fault" mpiexec -n "$n" "$MICROPP" train "${S[@]}" --save "$dir" "$@"
    else run 240 env MICROPP_FAULT="$fault" "$MICROPP" train "${S[@]}" --save "$dir" "$@"; fi
}
# same A B: every safetensors file of checkpoint A equals B's of the same stage, byte for byte
same() {
    local a b n=0
    for a in "$1"/*.safetensors; do
        b=$(ls "$2"/*"${a##*-stage-}" 2>/dev/null | head -1)
        [ -n "$b" ] && cmp -s "$a" "$b" || return 1
        n=$((n + 1))
    done
    [ "$n" -gt 0 ]
}

# rollback NAME N RANK STEP ARGS...: nangrad at STEP on RANK with --post-validate against skip at STEP
rollback() {
    local name=$1 n=$2 rank=$3 k=$4; shift 4
    local d="pv$RANDOM"
    train "$n" "$d-pv" "$rank:$k:nangrad" --post-validate "$@"
    local rc1=$RC out1=$OUT err1=$ERR
    train "$n" "$d-sync" "0:$k:skip" "$@"
    local rc2=$RC
    train "$n" "$d-plain" "" "$@"
    if [ "$rc1" -ne 0 ] || [ "$rc2" -ne 0 ] || [ "$RC" -ne 0 ]; then
        fail "postval/$name" "exit $rc1 (post-validate), $rc2 (skip), $RC (plain): $(head -c 300 <<<"$err1$ERR")"
    elif ! grep -q "^step $k: 1 rank held a non-finite gradient: its update is undone on every rank" <<<"$out1"; then
        fail "postval/$name" "no line of the undone step $k: $(head -c 300 <<<"$out1")"
    elif ! same "$d-pv" "$d-sync"; then fail "postval/$name" "the weights differ from the synchronous run that skips step $k"
    elif same "$d-pv" "$d-plain"; then fail "postval/$name" "the weights equal the run that skips nothing (the test cannot tell)"
    else pass "postval/$name: NaN gradient at step $k on rank $rank undone; the weights equal the synchronous run's that skips step $k, byte for byte"; fi
}
PP=(--mode pp --micro-batches 8)
rollback "monolith" 1 0 3
rollback "pp 2 1f1b" 2 1 3 "${PP[@]}" --schedule 1f1b
rollback "pp 2 zb-h2" 2 0 4 "${PP[@]}" --schedule zb-h2
rollback "pp 2 zb-v" 2 1 2 "${PP[@]}" --schedule zb-v
rollback "pp 4 1f1b" 4 2 3 "${PP[@]}" --schedule 1f1b
rollback "pp 4 zb-h2" 4 3 5 "${PP[@]}" --schedule zb-h2
rollback "pp 4 zb-v" 4 0 3 "${PP[@]}" --schedule zb-v
rollback "pp 2 the last step (no next step to run again)" 2 1 6 "${PP[@]}" --schedule 1f1b
rollback "ddp 2, sgd" 2 1 3 --mode ddp --optimizer sgd
rollback "hybrid pp 2 x dp 2" 4 3 2 --mode hybrid --pp 2 --dp 2 --schedule zb-h2 --micro-batches 4

# without a failure: the synchronous run's weights (the optimistic updates all stand)
train 2 ok-pv "" --post-validate "${PP[@]}" --schedule zb-h2
rc=$RC
train 2 ok-sync "" "${PP[@]}" --schedule zb-h2
if [ "$rc" -eq 0 ] && [ "$RC" -eq 0 ] && same ok-pv ok-sync; then
    pass "postval/no failure: pp 2 zb-h2 trains the synchronous run's weights, byte for byte"
else fail "postval/no failure: the synchronous run's weights" "exit $rc, $RC"; fi

# what became of each step, in --json (per step and counted) and --metrics (per step line): a non-finite
# gradient at step 3 on rank 1 undoes step 3 (and runs step 4 again); a synchronous run has no such keys
# outcomes JSON METRICS: "post_validation of the JSON | undone redone rerun | the metrics lines' post_validation"
outcomes() {
    python3 - "$1" "$2" <<'PY' 2>&1
import json, sys
d = json.loads(sys.argv[1].strip().splitlines()[-1])
lines = [json.loads(x) for x in open(sys.argv[2])] if sys.argv[2] else []
print(",".join(d.get("post_validation", ["-"])), "|", d.get("steps_undone", "-"), d.get("steps_redone", "-"),
      d.get("steps_rerun", "-"), "|", ",".join(x.get("post_validation", "-") for x in lines if "loss" in x))
PY
}
run 240 env MICROPP_FAULT=1:3:nangrad mpiexec -n 2 "$MICROPP" train "${S[@]}" "${PP[@]}" --schedule zb-h2 \
    --post-validate --json --metrics pv-undo.jsonl
got=$(outcomes "$OUT" pv-undo.jsonl)
want="stood,stood,undone,stood,stood,stood | 1 0 1 | stood,stood,undone,stood,stood,stood"
[ "$RC" -eq 0 ] && [ "$got" = "$want" ] && pass "postval/--json and --metrics: step 3 undone (nangrad on rank 1), step 4 run again: $got" \
    || fail "postval/--json and --metrics count the undone step" "rc $RC, got '$got', want '$want'"
run 240 env MICROPP_FAULT=1:6:nangrad mpiexec -n 2 "$MICROPP" train "${S[@]}" "${PP[@]}" --schedule zb-h2 --post-validate --json
got=$(outcomes "$OUT" "")
want="stood,stood,stood,stood,stood,undone | 1 0 0 | "
[ "$RC" -eq 0 ] && [ "$got" = "$want" ] && pass "postval/--json: the last step undone, no next step to run again: $got" \
    || fail "postval/--json: the last step undone" "rc $RC, got '$got', want '$want'"
run 240 env MICROPP_FAULT=0:3:skip mpiexec -n 2 "$MICROPP" train "${S[@]}" "${PP[@]}" --schedule zb-h2 --json --metrics sync.jsonl
got=$(outcomes "$OUT" sync.jsonl)
want="- | - - - | -,-,-,-,-,-"
[ "$RC" -eq 0 ] && [ "$got" = "$want" ] && pass "postval/--json and --metrics: a synchronous run (skip at step 3) has no post-validation keys" \
    || fail "postval/a synchronous run has no post-validation keys" "rc $RC, got '$got', want '$want'"

# --clip-grad: the norm arrives a step late; a step that clips is redone from its gradients, clipped: the
# synchronous clipping run's weights (3 of 6 steps clip at 0.012), byte for byte
clipped() {  # NAME N ARGS...
    local name=$1 n=$2; shift 2
    local C=(--clip-grad 0.012 --json)
    train "$n" "$name-cpv" "" --post-validate "${C[@]}" --metrics "$name.jsonl" "$@"
    local rc=$RC steps redone
    steps=$(python3 -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["steps_clipped"])' <<<"$OUT" 2>/dev/null)
    redone=$(python3 - "$OUT" "$name.jsonl" <<'PY' 2>&1
import json, sys
d = json.loads(sys.argv[1].strip().splitlines()[-1])
lines = [json.loads(x)["post_validation"] for x in open(sys.argv[2]) if '"loss"' in x]
want = ["redone" if c else "stood" for c in d["clipped"]]
ok = d["post_validation"] == want == lines and d["steps_undone"] == 0
print(d["steps_redone"] if ok else "per step %s, metrics %s, clipped %s" % (d["post_validation"], lines, d["clipped"]))
PY
)
    train "$n" "$name-csync" "" "${C[@]}" "$@"
    if [ "$rc" -ne 0 ] || [ "$RC" -ne 0 ]; then fail "postval/--clip-grad $name" "exit $rc, $RC: $(head -c 300 <<<"$ERR")"
    elif [ "$steps" != 3 ]; then fail "postval/--clip-grad $name" "steps clipped: '$steps', expected 3"
    elif [ "$redone" != 3 ]; then fail "postval/--clip-grad $name" "--json steps_redone / post_validation, --metrics: $redone"
    elif ! same "$name-cpv" "$name-csync"; then fail "postval/--clip-grad $name" "the weights differ from the synchronous clipping run's"
    else pass "postval/--clip-grad $name: 3 of 6 steps clip, redone once the norm arrives (--json steps_redone 3, per step in --json and --metrics); the synchronous run's weights, byte for byte"; fi
}
clipped "monolith" 1
clipped "pp 2 zb-h2" 2 "${PP[@]}" --schedule zb-h2
clipped "pp 4 1f1b" 4 "${PP[@]}" --schedule 1f1b
clipped "ddp 2" 2 --mode ddp

# no barrier between steps: rank 1 starts step 3 two seconds late (MICROPP_FAULT late); synchronous, rank 0
# waits for it at the barrier before its step 3; with --post-validate it starts step 3 at once (and waits
# inside it, for rank 1's gradients)
gap() {  # TRACE: rank 0's time from its step 2's last event to its step 3's first, in seconds
    python3 -c 'import json,sys; ev=[e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph")=="X" and e["pid"]==0]
end2=max(e["ts"]+e["dur"] for e in ev if e["args"]["step"]==2); start3=min(e["ts"] for e in ev if e["args"]["step"]==3)
print(round((start3-end2)/1e6, 3))' "$1"
}
run 240 env MICROPP_FAULT=1:3:late mpiexec -n 2 "$MICROPP" train "${S[@]}" "${PP[@]}" --schedule zb-h2 --trace sync.json
rc=$RC
run 240 env MICROPP_FAULT=1:3:late mpiexec -n 2 "$MICROPP" train "${S[@]}" "${PP[@]}" --schedule zb-h2 --trace pv.json --post-validate
if [ "$rc" -ne 0 ] || [ "$RC" -ne 0 ]; then fail "postval/no barrier between steps" "exit $rc, $RC: $(head -c 300 <<<"$ERR")"
else
    g1=$(gap sync.json) g2=$(gap pv.json)
    if python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > 1.5 and float(sys.argv[2]) < 0.5 else 1)' "$g1" "$g2"; then
        pass "postval/no barrier between steps: rank 0 starts step 3 ${g2}s after step 2 (synchronous: ${g1}s at the barrier for a late rank 1)"
    else fail "postval/no barrier between steps" "rank 0's gap before step 3: ${g2}s with --post-validate, ${g1}s without"; fi
fi

# the memory: the undo copy is counted (adam: the weights and both moments, 3 x the weights)
mem() {  # ARGS...: "weights optimizer" of memory_per_rank
    run 240 mpiexec -n 2 "$MICROPP" train "${S[@]}" "${PP[@]}" --json "$@"
    python3 -c 'import json,sys; m=json.loads(sys.stdin.read().strip().splitlines()[-1])["memory_per_rank"]
print(m["weights"], m["optimizer"])' <<<"$OUT"
}
read -r w o <<<"$(mem)"
for x in "3 --post-validate" "4 --post-validate --clip-grad 1"; do  # (--clip-grad: the step's gradients too)
    read -r w2 o2 <<<"$(mem ${x#* })"
    if [ -n "${o2:-}" ] && python3 -c 'import sys; k,w,o,o2=map(float,sys.argv[1:]); sys.exit(0 if o2 == o + k * w else 1)' "${x%% *}" "$w" "$o" "$o2"; then
        pass "postval/memory: the undo copy counts as optimizer state (${x#* }: ${o} + ${x%% *} x ${w} bytes = ${o2})"
    else fail "postval/memory: the undo copy counted (${x#* })" "weights ${w:-?}, optimizer ${o:-?} -> ${o2:-?}"; fi
done
# micropp plan reckons the same copy
plan_opt() { "$MICROPP" plan --pp 2 --layers 8 --hidden 32 --schedule 1f1b --json "$@" | python3 -c 'import json,sys
d=json.load(sys.stdin); print(d["rows"][0]["optimizer_bytes"], d["rows"][0]["weight_bytes"])' 2>/dev/null; }
read -r po pw <<<"$(plan_opt)"
read -r po2 pw2 <<<"$(plan_opt --post-validate)"
if [ -n "${po2:-}" ] && python3 -c 'import sys; o,w,o2=map(float,sys.argv[1:]); sys.exit(0 if o2 == o + 3 * w else 1)' "$po" "$pw" "$po2"; then
    pass "postval/memory: micropp plan --post-validate reckons the copy (${po} + 3 x ${pw} bytes = ${po2})"
else fail "postval/memory: micropp plan reckons the copy" "optimizer ${po:-?} -> ${po2:-?}, weights ${pw:-?}"; fi

# what cannot be undone: one line, exit 2, on every rank
refused() {  # WHAT PATTERN ARGS...
    local what=$1 pat=$2; shift 2
    expect_user_error "postval/refused with $what" "$pat" 60 mpiexec -n 2 "$MICROPP" train "${S[@]}" --post-validate "$@"
}
refused "--zero 1" "post-validate with --zero 1: ZeRO keeps the optimizer's state" --mode ddp --zero 1
refused "--zero 3" "post-validate with --zero 3" --mode ddp --zero 3
refused "--compress" "post-validate with --compress: a step's error-feedback buffers" --mode ddp --compress topk:0.1
refused "--sync-every" "post-validate with --sync-every 2: local SGD's outer step" --mode ddp --sync-every 2
refused "--verify" "post-validate with --verify" --mode pp --verify
