#!/usr/bin/env bash
# tests/t_ep_overlap.sh: --ep's all-to-all shown and overlapped (docs/experts.md, axes/expert.c, moe.c).
# --ep-overlap on and off give the same losses bit for bit (by each algorithm, and on a 1F1B pipeline) and
# pass --verify; so does pair (1F1B and DualPipeV, each algorithm, with drops), whose passes ran in turn (its
# measured bubble counting a pair's overlap once, --gantt's block naming both, --trace's backward on a track of its own); --json's all-to-all in flight and exposed (shares in [0, 1], exposed at most in flight), the
# rows each expert got (plus the dropped: every assignment) and --metrics' load under --ep; the waits in the
# exchanges in --trace (dispatch and combine, on every rank's collectives track, in a forward or backward)
# and in --gantt's legend; a bad --ep-overlap refused in one line.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)

L=(--layers 4 --hidden 16 --batch 32 --log-every 0 --experts 4 --steps 6 --json)
bits() { python3 -c "import json,sys; print([x.hex() for x in json.loads(sys.argv[1])['losses']])" "$1" 2>/dev/null; }

# ---- the same bits with and without the overlap ----
for lay in "2|--dp 2 --ep 2 --alltoall shm" "2|--dp 2 --ep 2 --alltoall mpi" "2|--dp 2 --ep 2 --alltoall pair" \
           "2|--dp 2 --ep 2 --capacity-factor 0.5 --top-k 1" \
           "4|--pp 2 --dp 2 --ep 2 --schedule 1f1b --micro-batches 4"; do
    IFS='|' read -r n args <<<"$lay"
    # shellcheck disable=SC2086
    run 240 mpiexec -n "$n" "$MICROPP" train "${L[@]}" $args --ep-overlap off; OFF=$OUT; rc1=$RC
    # shellcheck disable=SC2086
    run 240 mpiexec -n "$n" "$MICROPP" train "${L[@]}" $args --ep-overlap on; ON=$OUT
    flags=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['alltoall_overlap'], json.loads(sys.argv[2])['alltoall_overlap'])" "$OFF" "$ON" 2>/dev/null)
    if [ "$rc1" = 0 ] && [ "$RC" = 0 ] && [ -n "$(bits "$ON")" ] && [ "$(bits "$ON")" = "$(bits "$OFF")" ] &&
        [ "$flags" = "False True" ]; then
        pass "ep_overlap/$args: --ep-overlap on and off, 6 steps' losses bit for bit"
    else fail "ep_overlap/$args: on vs off" "rc $rc1/$RC, flags '$flags': $(bits "$OFF") vs $(bits "$ON") ${ERR:0:200}"; fi
done

# ---- --ep-overlap pair: a stage's forward and another micro-batch's backward in turn, the same bits ----
# (pairs happen on stage 0 of 1F1B, on both ranks of DualPipeV's V; alltoall_paired counts the rows' exchanges
# started while the other pass had one in flight, over all ranks and steps: 0 when nothing ran in turn)
paired() { python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(d['alltoall_pair'], d['alltoall_paired'] > 0)" "$1" 2>/dev/null; }
for lay in "--schedule 1f1b --alltoall shm" "--schedule 1f1b --alltoall mpi" "--schedule 1f1b --alltoall pair" \
           "--schedule dualpipev --alltoall shm" "--schedule dualpipev --alltoall mpi --capacity-factor 0.5 --top-k 1"; do
    P=(--pp 2 --dp 2 --ep 2 --micro-batches 4)
    # shellcheck disable=SC2086
    run 240 mpiexec -n 4 "$MICROPP" train "${L[@]}" "${P[@]}" $lay --ep-overlap on; ON=$OUT; rc1=$RC
    # shellcheck disable=SC2086
    run 240 mpiexec -n 4 "$MICROPP" train "${L[@]}" "${P[@]}" $lay --ep-overlap pair; PAIR=$OUT
    if [ "$rc1" = 0 ] && [ "$RC" = 0 ] && [ -n "$(bits "$PAIR")" ] && [ "$(bits "$PAIR")" = "$(bits "$ON")" ] &&
        [ "$(paired "$PAIR")" = "True True" ] && [ "$(paired "$ON")" = "False False" ]; then
        pass "ep_overlap/pair $lay: the forward and backward in turn (exchanges paired), 6 steps' losses as on's"
    else fail "ep_overlap/pair $lay" "rc $rc1/$RC, paired '$(paired "$PAIR")': $(bits "$ON") vs $(bits "$PAIR") ${ERR:0:200}"; fi
done
# another schedule runs every pass whole under pair (receiving a gradient early could deadlock it): nothing paired
run 240 mpiexec -n 4 "$MICROPP" train "${L[@]}" --pp 2 --dp 2 --ep 2 --micro-batches 4 --schedule gpipe --ep-overlap pair
[ "$RC" = 0 ] && [ "$(paired "$OUT")" = "True False" ] && pass "ep_overlap/pair under gpipe: nothing run in turn" \
    || fail "ep_overlap/pair under gpipe" "rc $RC, paired '$(paired "$OUT")' ${ERR:0:200}"
run 240 mpiexec -n 4 "$MICROPP" train --layers 4 --hidden 32 --batch 32 --log-every 0 --experts 4 --steps 2 --verify \
    --pp 2 --dp 2 --ep 2 --micro-batches 4 --schedule dualpipev --ep-overlap pair
[ "$RC" = 0 ] && grep -q -- "-> ok" <<<"$OUT" && grep -qE "^expert parallelism: .*, overlapped in pairs: " <<<"$OUT" \
    && pass "ep_overlap/--verify with --ep-overlap pair (dualpipev), and the summary's line" \
    || fail "ep_overlap/--verify with --ep-overlap pair" "rc $RC: $(grep -E 'verify|expert' <<<"$OUT") ${ERR:0:200}"

# the measured bubble under pair: a rank's busy time is the union of its passes (a pair's two overlap: counted
# once), so each step's bubble (--metrics) is in [0, 1] and not below the one the passes' union in --trace gives
# with the least span they allow (a sum of the passes would count a pair's overlap twice: the bubble fell below)
run 240 mpiexec -n 4 "$MICROPP" train --layers 4 --hidden 16 --batch 32 --log-every 1 --experts 4 --steps 6 --pp 2 \
    --dp 2 --ep 2 --micro-batches 4 --schedule 1f1b --ep-overlap pair --json --trace "$TMP/pair.json" \
    --metrics "$TMP/pair.jsonl"
why=$(python3 - "$TMP/pair.json" "$TMP/pair.jsonl" "$(tail -n 1 <<<"$OUT")" 2>&1 <<'EOF'
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X" and e["cat"] in ("forward", "backward")]
ranks = sorted({e["pid"] for e in ev})
for m in [json.loads(l) for l in open(sys.argv[2]) if '"bubble"' in l]:
    union = extent = 0
    for r in ranks:
        iv, end = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e["pid"] == r and e["args"]["step"] == m["step"]), -1e300
        for a, b in iv:
            union += b - a if a >= end else max(0, b - end)
            end = max(end, b)
        extent = max(extent, iv[-1][1] - iv[0][0])
    low = 1 - union / (len(ranks) * extent)
    if not 0 <= m["bubble"] <= 1 or m["bubble"] < low - 2e-3: sys.exit(f"step {m['step']}: bubble {m['bubble']}, union's {low:.4f}")
b = json.loads(sys.argv[3])["bubble_measured"]
if not all(0 <= x <= 1 for x in b): sys.exit(f"--json's bubble_measured {b}")
EOF
)
[ "$RC" = 0 ] && [ -z "$why" ] && pass "ep_overlap/pair's measured bubble: in [0, 1], a pair's overlap counted once (the passes' union)" \
    || fail "ep_overlap/pair's measured bubble" "rc $RC: $why ${ERR:0:200}"

# pair drawn: --gantt's (and --timeline's SVG's) block of both passes in the legend (drawn only when one was: its label "[F3/B2]", or its
# letter where narrow, tests/unit_trace.c); --trace keeps both events, a pair's backward on a track of its own
run 240 mpiexec -n 4 "$MICROPP" train --layers 4 --hidden 16 --batch 32 --log-every 0 --experts 4 --steps 2 --pp 2 \
    --dp 2 --ep 2 --micro-batches 4 --schedule 1f1b --ep-overlap pair --gantt --width 100 --trace "$TMP/pair2.json" \
    --timeline "$TMP/pair2.svg"
why=$(python3 - "$TMP/pair2.json" 2>&1 <<'EOF'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
named = [e for e in ev if e["ph"] == "M" and e["name"] == "thread_name" and e["args"]["name"].endswith("backwards in pairs")]
own = [e for e in ev if e["ph"] == "X" and e["tid"] in {n["tid"] for n in named} and e["pid"] == 0]
if not named or not own or any(e["cat"] != "backward" for e in own): sys.exit(f"{len(named)} tracks, {len(own)} events")
for b in own:  # each overlaps a forward of its rank and step on the rank's own track
    if not any(f["cat"] == "forward" and f["pid"] == 0 and f["tid"] == 0 and f["args"]["step"] == b["args"]["step"]
               and f["ts"] < b["ts"] + b["dur"] and b["ts"] < f["ts"] + f["dur"] for f in ev if f["ph"] == "X"):
        sys.exit(f"{b['name']} of step {b['args']['step']} overlaps no forward")
EOF
)
[ "$RC" = 0 ] && [ -z "$why" ] && grep -q "F/B a forward and a backward in turn (--ep-overlap pair)" <<<"$OUT" \
    && grep -q "F3/B1: a forward and a backward in turn (--ep-overlap pair)</text>" "$TMP/pair2.svg" \
    && pass "ep_overlap/pair drawn: --gantt's and --timeline's block of both passes (F3/B2), in their legends; --trace's backward on its own track" \
    || fail "ep_overlap/pair drawn" "rc $RC: $why $(grep -E '^rank 0|F/B' <<<"$OUT" | head -2) ${ERR:0:200}"

# plan counts pair's second scratch (expert_sizes): its per-rank total above on's, on for off's
P=(plan --layers 4 --hidden 512 --batch 256 --experts 4 --dp 2 --ep 2 --pp 2 --schedule 1f1b --device-memory 1G)
total() { awk '/^1f1b /{print $(NF-3)}' <<<"$1"; }
run 30 "$MICROPP" "${P[@]}" --ep-overlap on; on=$(total "$OUT"); rc_on=$RC
run 30 "$MICROPP" "${P[@]}" --ep-overlap pair; pair=$(total "$OUT")
[ "$rc_on" = 0 ] && [ "$RC" = 0 ] && [ -n "$on" ] && awk -v a="$on" -v b="$pair" 'BEGIN{exit !(b > a)}' \
    && pass "ep_overlap/plan --ep-overlap pair: the second scratch counted ($on -> $pair MiB a rank)" \
    || fail "ep_overlap/plan --ep-overlap pair" "rc $rc_on/$RC, on '$on' pair '$pair' ${ERR:0:200}"

V=(--layers 4 --hidden 32 --batch 32 --log-every 0 --experts 4 --steps 2 --verify)
for o in on off; do
    run 120 mpiexec -n 2 "$MICROPP" train "${V[@]}" --dp 2 --ep 2 --ep-overlap $o
    if [ "$RC" = 0 ] && grep -q -- "-> ok" <<<"$OUT" &&
        grep -qE "^expert parallelism: groups of 2 .*all-to-all shm$([ $o = on ] && echo ', overlapped'): .* ms in flight .* exposed" <<<"$OUT"; then
        pass "ep_overlap/--verify with --ep-overlap $o, and the summary's line"
    else fail "ep_overlap/--verify with --ep-overlap $o" "rc $RC: $(grep -E 'verify|expert' <<<"$OUT") ${ERR:0:200}"; fi
done

# ---- what --json and --metrics say under --ep ----
run 120 mpiexec -n 2 "$MICROPP" train "${L[@]}" --dp 2 --ep 2 --metrics "$TMP/ep.jsonl"
cat >"$TMP/ep_json.py" <<'EOF'
import json, sys
d = json.loads(sys.stdin.read().strip().splitlines()[-1])
ms, ex, sh, es = (d[k] for k in ("alltoall_ms_per_step", "alltoall_exposed_ms_per_step", "alltoall_share",
                                 "alltoall_exposed_share"))
if not (0 <= es <= sh <= 1 and 0 <= ex <= ms and d["alltoall_bytes_per_step"] > 0): sys.exit(f"shares {sh} {es}, ms {ms} {ex}")
m = d["moe"]  # 32 rows x top-2 x 3 MoE layers per step, over both replicas
for step, (load, drop, assigned) in enumerate(zip(m["rows_per_expert"], m["dropped"], m["assigned"])):
    if sum(load) + drop != assigned or assigned != 32 * 2 * 3 or min(load) < 0 or drop < 0:
        sys.exit(f"step {step + 1}: rows per expert {load} + dropped {drop} != assigned {assigned}")
if len(m["aux_loss"]) != 6 or not all(0 < a < 1 for a in m["aux_loss"]): sys.exit(f"aux loss {m['aux_loss']}")
lines = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
if [l["moe_load"] for l in lines] != m["rows_per_expert"] or [l["moe_dropped"] for l in lines] != m["dropped"]:
    sys.exit("--metrics' moe_load or moe_dropped differ from --json's")
EOF
why=$(python3 "$TMP/ep_json.py" "$TMP/ep.jsonl" <<<"$OUT" 2>&1)
[ "$RC" = 0 ] && [ -z "$why" ] && pass "ep_overlap/--json: all-to-all shares in [0, 1], exposed <= in flight; rows per expert + dropped = assignments; --metrics' load and drops are --json's" \
    || fail "ep_overlap/--json and --metrics under --ep" "rc $RC: $why ${ERR:0:200}"

# ---- the waits in the exchanges, drawn ----
run 120 mpiexec -n 2 "$MICROPP" train --layers 4 --hidden 16 --batch 32 --log-every 0 --experts 4 --steps 3 --dp 2 \
    --ep 2 --trace "$TMP/ep_trace.json"
why=$(python3 - "$TMP/ep_trace.json" 2>&1 <<'EOF'
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X"]
for rank in (0, 1):
    mine = [e for e in ev if e["pid"] == rank]
    passes = [e for e in mine if e["cat"] in ("forward", "backward")]
    for cat in ("all-to-all dispatch", "all-to-all combine"):
        a = [e for e in mine if e["cat"] == cat]
        # every step, each of 3 MoE layers: at least one wait each way in its forward and in its backward
        if len(a) < 3 * 3 * 2: sys.exit(f"rank {rank}: {len(a)} slices of {cat}")
        if any(e["tid"] == rank or e["args"].get("micro_batch") != 0 for e in a): sys.exit(f"rank {rank}: {cat} off track")
        inside = lambda e: any(p["ts"] - 1 <= e["ts"] and e["ts"] + e["dur"] <= p["ts"] + p["dur"] + 1 for p in passes)
        if not all(inside(e) for e in a): sys.exit(f"rank {rank}: a {cat} outside every forward and backward")
EOF
)
[ "$RC" = 0 ] && [ -z "$why" ] && pass "ep_overlap/--trace: dispatch and combine waits on every rank's collectives track, inside its passes" \
    || fail "ep_overlap/--trace" "rc $RC: $why ${ERR:0:200}"
run 240 mpiexec -n 4 "$MICROPP" train --layers 4 --hidden 16 --batch 32 --log-every 0 --experts 4 --steps 2 \
    --pp 2 --dp 2 --ep 2 --micro-batches 4 --gantt --width 100
[ "$RC" = 0 ] && grep -q "> all-to-all dispatch, < all-to-all combine" <<<"$OUT" && grep -qE '^ +[^ ]*[<>]' <<<"$OUT" \
    && pass "ep_overlap/--gantt: the all-to-alls drawn under the ranks, in the legend" \
    || fail "ep_overlap/--gantt" "rc $RC: $(grep -E 'all-to-all|idle' <<<"$OUT" | head -3) ${ERR:0:200}"

expect_user_error "ep_overlap/a bad --ep-overlap" "ep-overlap" 60 mpiexec -n 2 "$MICROPP" train --experts 4 --dp 2 \
    --ep 2 --steps 1 --ep-overlap maybe
