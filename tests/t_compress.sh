#!/usr/bin/env bash
# tests/t_compress.sh: --compress topk:F, compressed gradients with error feedback (axes/compress.c). topk:1
# sends every entry: ddp's losses bit for bit (2 replicas: one addition either way), on ddp and pp x dp;
# topk:0.1 sends a tenth (its JSON bytes: the pairs' ring all-gather against the exact sum's ring all-reduce)
# and trains another way; --verify checks step 1's exact sum and says so; a resumed run repeats the
# uninterrupted losses bit for bit (each rank's error buffers in its file), and reads its own; a checkpoint
# without them is refused; bad input is one line and exit 2.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (the compressor runs on the host: tests/lib.sh)
TEXT=(--layers 4 --hidden 32 --batch 32 --samples 1024 --log-every 0)
M=("${TEXT[@]}" --json)

# json N ARGS...: the run's JSON object (its last line), or "exit RC: stderr"
json() {
    local n=$1; shift
    run 240 mpiexec -n "$n" "$MICROPP" train "${M[@]}" "$@"
    if [ "$RC" -ne 0 ]; then echo "exit $RC: $(head -c 300 <<<"$ERR" | tr '\n' ' ')"; return; fi
    tail -n 1 <<<"$OUT"
}

# ---- topk:1 is ddp; topk:0.1 is not ----
for layout in "--dp 2" "--pp 2 --dp 2"; do
    n=2; [[ $layout == *pp* ]] && n=4
    ddp=$(json $n $layout --steps 12)
    all=$(json $n $layout --steps 12 --compress topk:1)
    if why=$(losses_close "$all" "$ddp" 0 ddp); then pass "topk:1 is ddp bit for bit ($layout)"
    else fail "topk:1 is ddp bit for bit ($layout)" "$why ($all)"; fi
done
ddp=$(json 2 --dp 2 --steps 12)
tenth=$(json 2 --dp 2 --steps 12 --compress topk:0.1)
if ! losses_close "$tenth" "$ddp" 1e-6 ddp >/dev/null && [[ $tenth == "{"* ]]; then pass "topk:0.1 sends less, trains otherwise"
else fail "topk:0.1 sends less, trains otherwise" "$tenth"; fi

# ---- the report: bytes per step, sent and exact (4290 parameters in 2 buckets of 2112 and 2178) ----
got=$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(d["compress_topk"], d["compressed_bytes_per_step"], d["uncompressed_bytes_per_step"])' "$tenth" 2>&1)
# k = ceil(0.1 n) per bucket (212 + 218 pairs of 8 bytes, once to the other replica); exact: 2 (D-1)/D 4 n
[ "$got" = "0.1 3440 17160" ] && pass "json: 3440 bytes sent per step against 17160" ||
    fail "json: 3440 bytes sent per step against 17160" "$got"
run 120 mpiexec -n 2 "$MICROPP" train "${TEXT[@]}" --dp 2 --steps 4 --compress topk:0.1
grep -q "compressed: top-k 0.1 of each bucket | 3.44 kB sent per rank per step, against 17.2 kB" <<<"$OUT" &&
    pass "the summary's line" || fail "the summary's line" "$(grep compress <<<"$OUT")"

# ---- --verify: step 1's exact sum (the compressed one would fail it) ----
run 120 mpiexec -n 2 "$MICROPP" train "${TEXT[@]}" --dp 2 --steps 2 --compress topk:0.1 --verify
[ "$RC" -eq 0 ] && grep -q -- "--compress: it checks step 1's exact sum" <<<"$OUT" &&
    pass "verify checks the exact sum, and says so" || fail "verify checks the exact sum, and says so" "exit $RC: $ERR"

# ---- checkpoints: the error buffers resume bit for bit ----
whole=$(json 2 --dp 2 --steps 14 --compress topk:0.05)
json 2 --dp 2 --steps 8 --compress topk:0.05 --save "$TMP/ck" >/dev/null
ls "$TMP/ck"/compress-rank-00000.safetensors "$TMP/ck"/compress-rank-00001.safetensors >/dev/null 2>&1 &&
    pass "a file per rank" || fail "a file per rank" "$(ls "$TMP/ck")"
rest=$(json 2 --dp 2 --steps 14 --compress topk:0.05 --resume "$TMP/ck")
python3 -c 'import json,sys; a, b = json.loads(sys.argv[1])["losses"], json.loads(sys.argv[2])["losses"]
sys.exit(0 if a[8:] == b and len(b) == 6 else 1)' "$whole" "$rest" 2>/dev/null &&
    pass "resume: steps 9-14 bit for bit" || fail "resume: steps 9-14 bit for bit" "$whole vs $rest"
# with replica 0's error buffers on replica 1 too, the resumed run is another
cp -r "$TMP/ck" "$TMP/ck1" && cp "$TMP/ck1/compress-rank-00000.safetensors" "$TMP/ck1/compress-rank-00001.safetensors"
other=$(json 2 --dp 2 --steps 14 --compress topk:0.05 --resume "$TMP/ck1")
python3 -c 'import json,sys; a, b = json.loads(sys.argv[1])["losses"], json.loads(sys.argv[2])["losses"]
sys.exit(0 if a[8:] != b else 1)' "$whole" "$other" 2>/dev/null &&
    pass "resume: replica 1 reads its own error buffer" || fail "resume: replica 1 reads its own error buffer" "$other"
run 120 mpiexec -n 2 "$MICROPP" train "${M[@]}" --dp 2 --steps 10 --resume "$TMP/ck"
[ "$RC" -eq 0 ] && pass "ddp resumes a compressed run's checkpoint" || fail "ddp resumes a compressed run's checkpoint" "$ERR"
json 2 --dp 2 --steps 8 --save "$TMP/plain" >/dev/null
expect_user_error "a checkpoint without error buffers" "holds no error buffers for --compress on rank" 120 \
    mpiexec -n 2 "$MICROPP" train "${M[@]}" --dp 2 --steps 10 --compress topk:0.1 --resume "$TMP/plain"

# ---- bad input: one line, exit 2 ----
B=(--dp 2 --layers 4 --hidden 32 --batch 32 --steps 4 --log-every 0)
for f in topk:0 topk:1.5 topk:nan topk:-0.1 topk: sign powersgd:2; do
    expect_user_error "--compress $f" "--compress $f: give topk:F with 0 < F <= 1" 60 \
        mpiexec -n 2 "$MICROPP" train "${B[@]}" --compress "$f"
done
expect_user_error "with ZeRO" "--zero 1 reduce-scatters them into shards" 60 \
    mpiexec -n 2 "$MICROPP" train "${B[@]}" --compress topk:0.1 --zero 1
expect_user_error "with --deterministic" "--deterministic sums every replica's rows in one tree" 60 \
    mpiexec -n 2 "$MICROPP" train "${B[@]}" --compress topk:0.1 --deterministic
expect_user_error "with --sync-every" "--sync-every 2 sums no gradients" 60 \
    mpiexec -n 2 "$MICROPP" train "${B[@]}" --compress topk:0.1 --sync-every 2
expect_user_error "with --tp" "--tp 2 splits the layer over ranks" 60 \
    mpiexec -n 4 "$MICROPP" train "${B[@]}" --compress topk:0.1 --tp 2
expect_user_error "without replicas" "--compress applies to data parallelism" 60 \
    "$MICROPP" train --layers 4 --hidden 32 --steps 4 --compress topk:0.1
