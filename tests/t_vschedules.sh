#!/usr/bin/env bash
# tests/t_vschedules.sh: V-Half and V-Min (schedule_v.c; their construction against their authors' own is
# tests/unit_schedules.c's): train --verify equals the monolith on 2 and 4 ranks; the activation peak train
# measures is the memory reckoning's (bubble --model) to the byte; on a deep model that reckoning puts
# V-Min below 1F1B from 4 stages and V-Half from 8, nearer a half and a third as the stages grow, each below
# ZB-V's; in their authors' unit (chunk passes held from F to W) their peaks are the published (p+2)//2 and
# (p+4)//3 against 1F1B's p (0.55 and 0.40 are reached at every p from 19 and 18); bubble prints them; the V's one limit (two chunks per rank, so layers >= 2 x stages) is one line
# and exit 2.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
echo '{"mode": "pp", "layers": 8, "hidden": 32, "batch": 32, "micro_batches": 8}' > "$TMP/small.json"
echo '{"mode": "pp", "layers": 64, "hidden": 512, "batch": 1536, "micro_batches": 8}' > "$TMP/deep.json"

for s in v-half v-min; do
    for n in 2 4; do
        run 240 mpiexec -n "$n" "$MICROPP" train --config "$TMP/small.json" --schedule "$s" --steps 2 --verify --json \
            --log-every 0
        got=$(python3 -c 'import json,sys; o=json.loads(sys.stdin.read().strip().splitlines()[-1])
print(o["verify_ok"], o["peak_activation_bytes"])' <<<"$OUT" 2>/dev/null)
        run 60 "$MICROPP" bubble --schedule "$s" --stages "$n" --micro-batches 8 --model "$TMP/small.json" --json
        want=$(python3 -c 'import json,sys; print(True, json.load(sys.stdin)["rows"][0]["peak_activation_bytes"])' \
            <<<"$OUT" 2>/dev/null)
        if [ -n "$got" ] && [ "$got" = "$want" ]; then
            pass "vsched/$s on $n ranks: --verify ok, the activation peak per stage the reckoning's ($got)"
        else fail "vsched/$s on $n ranks: --verify ok, the activation peak per stage the reckoning's" "got [$got], want [$want]"; fi
    done
done

# the memory reckoning's peaks on a deep model (64 layers), M = 3K, against 1F1B's largest stage
for K in 4 8 16; do
    run 120 "$MICROPP" bubble --schedule 1f1b,zb-v,v-half,v-min --stages "$K" --micro-batches $((3 * K)) \
        --model "$TMP/deep.json" --json
    r=$(python3 -c 'import json,sys; r={x["schedule"]: max(x["peak_activation_bytes"]) for x in json.load(sys.stdin)["rows"]}
print(" ".join("%.3f" % (r[s] / r["1f1b"]) for s in ("zb-v", "v-half", "v-min")))' <<<"$OUT" 2>/dev/null)
    read -r zbv half min <<<"$r"
    if python3 -c 'import sys; K, zbv, half, vmin = int(sys.argv[1]), *map(float, sys.argv[2:5])
lim = {4: (1.25, 0.80), 8: (0.90, 0.70), 16: (0.75, 0.52)}[K]
sys.exit(0 if vmin < half < zbv and half <= lim[0] and vmin <= lim[1] else 1)' "$K" $r 2>/dev/null; then
        pass "vsched/K=$K M=$((3 * K)): activation peak of 1F1B's: v-half ${half}x, v-min ${min}x (zb-v ${zbv}x)"
    else fail "vsched/K=$K: v-min < v-half < zb-v, within the bounds" "ratios zb-v v-half v-min: [$r]"; fi
done

# the authors' unit (bubble --json's peak_held_chunk_passes: chunk passes held from F to W, two a stage's
# micro-batch): the published ratios to 1F1B's p hold where (p+2)//2 <= 0.55p and (p+4)//3 <= 0.40p
for K in 8 16 24 32; do
    run 120 "$MICROPP" bubble --schedule 1f1b,v-half,v-min --stages "$K" --micro-batches $((3 * K)) --json
    r=$(python3 -c 'import json,sys; r={x["schedule"]: max(x["peak_held_chunk_passes"]) / x["virtual_stages"] for x in json.load(sys.stdin)["rows"]}
print("%.4f %.4f" % (r["v-half"] / r["1f1b"], r["v-min"] / r["1f1b"]))' <<<"$OUT" 2>/dev/null)
    want=$(python3 -c 'import sys; p = int(sys.argv[1]); print("%.4f %.4f" % ((p + 2) // 2 / p, (p + 4) // 3 / p))' "$K")
    if [ -n "$r" ] && [ "$r" = "$want" ]; then
        pass "vsched/K=$K M=$((3 * K)): held of 1F1B's, v-half and v-min $r, the published (p+2)//2/p and (p+4)//3/p"
    else fail "vsched/K=$K: held of 1F1B's the published" "got [$r], want [$want]"; fi
done

run 60 "$MICROPP" bubble --schedule v-half,v-min --stages 4 --micro-batches 8
if [ "$RC" = 0 ] && grep -qE '^v-half +4 +8 +- +0\.0943 +0\.0943 ' <<<"$OUT" && grep -qE '^v-min +4 +8 +- +0\.1864 ' <<<"$OUT"; then
    pass "vsched/bubble prints them: K=4 M=8 v-half 0.0943, v-min 0.1864 (their authors' figures)"
else fail "vsched/bubble prints them" "rc $RC: $OUT"; fi

for args in "--layers 6" "--virtual-stages 3"; do
    run 60 mpiexec -n 4 "$MICROPP" train --mode pp --schedule v-min $args
    if [ "$RC" = 2 ] && [ "$(grep -c . <<<"$ERR")" = 1 ] && grep -q "v-min" <<<"$ERR"; then
        pass "vsched/v-min with $args on 4 ranks: one line, exit 2 ($ERR)"
    else fail "vsched/v-min with $args on 4 ranks: one line, exit 2" "rc $RC: $ERR"; fi
done
