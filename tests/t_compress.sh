#!/usr/bin/env bash
# tests/t_compress.sh: --compress topk:F, powersgd:R and sign, compressed gradients with error feedback
# (axes/compress.c, axes/lowrank.c). topk:1
# sends every entry: ddp's losses bit for bit (2 replicas: one addition either way), on ddp and pp x dp;
# topk:0.1 sends a tenth (its JSON bytes: the pairs' ring all-gather against the exact sum's ring all-reduce)
# and trains another way; --verify checks step 1's exact sum and says so; a resumed run repeats the
# uninterrupted losses bit for bit (each rank's error buffers in its file), and reads its own; a checkpoint
# without them is refused (or resumed with --fresh-state: the buffers from zero); bad input is one line and
# exit 2. PowerSGD at full rank (R = --hidden: every matrix's min(out, in)) is ddp within float rounding; powersgd:R and sign send what their formulas say, train the loss
# down, resume bit for bit (the error buffers and Q), refuse another compressor's checkpoint; 4 replicas end
# alike (train compares their checksums at the end, and fails the run when they differ). plan prices a compressed
# ddp layout apart from ddp, prints its crossover bandwidth, and refuses a bad R; plan --auto ranks the methods on
# its ddp rows where they pay (a slow link), not on a fast one, and --methods narrows them.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (the compressor runs on the host: tests/lib.sh)
TEXT=(--layers 4 --hidden 32 --batch 32 --samples 1024 --log-every 0)
M=("${TEXT[@]}" --json)

# ---- topk:1 is ddp; topk:0.1 is not ----
for layout in "--dp 2" "--pp 2 --dp 2"; do
    n=2; [[ $layout == *pp* ]] && n=4
    ddp=$(train_json $n $layout --steps 12)
    all=$(train_json $n $layout --steps 12 --compress topk:1)
    if why=$(losses_close "$all" "$ddp" 0 ddp); then pass "topk:1 is ddp bit for bit ($layout)"
    else fail "topk:1 is ddp bit for bit ($layout)" "$why ($all)"; fi
done
ddp=$(train_json 2 --dp 2 --steps 12)
tenth=$(train_json 2 --dp 2 --steps 12 --compress topk:0.1)
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
whole=$(train_json 2 --dp 2 --steps 14 --compress topk:0.05)
train_json 2 --dp 2 --steps 8 --compress topk:0.05 --save "$TMP/ck" >/dev/null
ls "$TMP/ck"/compress-rank-00000.safetensors "$TMP/ck"/compress-rank-00001.safetensors >/dev/null 2>&1 &&
    pass "a file per rank" || fail "a file per rank" "$(ls "$TMP/ck")"
rest=$(train_json 2 --dp 2 --steps 14 --compress topk:0.05 --resume "$TMP/ck")
python3 -c 'import json,sys; a, b = json.loads(sys.argv[1])["losses"], json.loads(sys.argv[2])["losses"]
sys.exit(0 if a[8:] == b and len(b) == 6 else 1)' "$whole" "$rest" 2>/dev/null &&
    pass "resume: steps 9-14 bit for bit" || fail "resume: steps 9-14 bit for bit" "$whole vs $rest"
# with replica 0's error buffers on replica 1 too, the resumed run is another
cp -r "$TMP/ck" "$TMP/ck1" && cp "$TMP/ck1/compress-rank-00000.safetensors" "$TMP/ck1/compress-rank-00001.safetensors"
other=$(train_json 2 --dp 2 --steps 14 --compress topk:0.05 --resume "$TMP/ck1")
python3 -c 'import json,sys; a, b = json.loads(sys.argv[1])["losses"], json.loads(sys.argv[2])["losses"]
sys.exit(0 if a[8:] != b else 1)' "$whole" "$other" 2>/dev/null &&
    pass "resume: replica 1 reads its own error buffer" || fail "resume: replica 1 reads its own error buffer" "$other"
run 120 mpiexec -n 2 "$MICROPP" train "${M[@]}" --dp 2 --steps 10 --resume "$TMP/ck"
[ "$RC" -eq 0 ] && pass "ddp resumes a compressed run's checkpoint" || fail "ddp resumes a compressed run's checkpoint" "$ERR"
train_json 2 --dp 2 --steps 8 --save "$TMP/plain" >/dev/null
expect_user_error "a checkpoint without error buffers" \
    "holds no state for this --compress on rank 0 .*cannot open.*or with --fresh-state" 120 \
    mpiexec -n 2 "$MICROPP" train "${M[@]}" --dp 2 --steps 10 --compress topk:0.1 --resume "$TMP/plain"
# --fresh-state: the error buffers start at zero, so the plain checkpoint resumes, and the compressed one trains
# otherwise than when its buffers are read
fresh=$(train_json 2 --dp 2 --steps 10 --compress topk:0.1 --resume "$TMP/plain" --fresh-state)
[[ $fresh == "{"* ]] && pass "--fresh-state resumes a checkpoint without error buffers" ||
    fail "--fresh-state resumes a checkpoint without error buffers" "$fresh"
fresh=$(train_json 2 --dp 2 --steps 14 --compress topk:0.05 --resume "$TMP/ck" --fresh-state)
python3 -c 'import json,sys; a, b = json.loads(sys.argv[1])["losses"], json.loads(sys.argv[2])["losses"]
sys.exit(0 if a[8:] != b and len(b) == 6 else 1)' "$whole" "$fresh" 2>/dev/null &&
    pass "--fresh-state reads no error buffers" || fail "--fresh-state reads no error buffers" "$fresh"
expect_user_error "--fresh-state without --compress" "--fresh-state starts the state of --compress or --sync-every" 60 \
    mpiexec -n 2 "$MICROPP" train "${M[@]}" --dp 2 --steps 10 --resume "$TMP/plain" --fresh-state

# ---- PowerSGD and sign ----
full=$(train_json 2 --dp 2 --steps 12 --compress powersgd:32)  # (the head [2, 32] takes rank 2: its min(out, in))
if why=$(losses_close "$full" "$ddp" 1e-5 ddp); then pass "powersgd at full rank is ddp within float rounding"
else fail "powersgd at full rank is ddp within float rounding" "$why ($full)"; fi
# at --precision bf16 its products stay fp32 (cpu_sgemm_fp32): full rank takes ddp's first update to float rounding,
# where the model's bf16 gemm took it 3.7e-5 away (its rounding of M lands in the error feedback)
b16=$(train_json 2 --dp 2 --steps 2 --precision bf16)
if why=$(losses_close "$(train_json 2 --dp 2 --steps 2 --precision bf16 --compress powersgd:32)" "$b16" 5e-6 ddp)
then pass "powersgd at bf16 multiplies in fp32: full rank is bf16 ddp's step"
else fail "powersgd at bf16 multiplies in fp32: full rank is bf16 ddp's step" "$why"; fi
for c in powersgd:2 sign; do
    low=$(train_json 2 --dp 2 --steps 40 --compress $c)
    python3 -c 'import json,sys; l = json.loads(sys.argv[1])["losses"]
sys.exit(0 if sum(l[-5:]) / 5 < sum(l[:5]) / 5 - 0.005 else 1)' "$low" 2>/dev/null &&
        pass "$c: the loss goes down" || fail "$c: the loss goes down" "$low"
    ! losses_close "$low" "$(train_json 2 --dp 2 --steps 40)" 1e-6 ddp >/dev/null && pass "$c: trains otherwise than ddp" ||
        fail "$c: trains otherwise than ddp" "$low"
done
# bytes a rank sends per step (D = 2: the other replica gets each float once). Bucket A holds layers 2, 3 and the
# head ([32, 32], [32, 32], [2, 32] and biases 32 + 32 + 2), bucket B layers 0 and 1 (two [32, 32], biases 64).
# powersgd:4: P (32 x 4 + 32 x 4 + 2 x 2) + biases 66, then Q (32 x 4 + 32 x 4 + 32 x 2); B: 256 + 64, then
# 256: 1222 floats, 4888 bytes. sign: A: 3 scales + 66 + 2112 bits (66 floats); B: 2 + 64 + 2048 bits (64):
# 265 floats, 1060 bytes.
for want in "powersgd:4 4888" "sign 1060"; do
    set -- $want
    got=$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(d["compressed_bytes_per_step"], d["uncompressed_bytes_per_step"])' \
        "$(train_json 2 --dp 2 --steps 2 --compress $1)" 2>&1)
    [ "$got" = "$2 17160" ] && pass "json: $1 sends $2 bytes per step against 17160" ||
        fail "json: $1 sends $2 bytes per step against 17160" "$got"
done
run 120 mpiexec -n 2 "$MICROPP" train "${TEXT[@]}" --dp 2 --steps 4 --compress powersgd:4
grep -q "compressed: PowerSGD rank 4 | 4.89 kB sent per rank per step, against 17.2 kB" <<<"$OUT" &&
    pass "powersgd: the summary's line" || fail "powersgd: the summary's line" "$(grep compress <<<"$OUT")"
run 120 mpiexec -n 2 "$MICROPP" train "${TEXT[@]}" --dp 2 --steps 2 --compress sign --verify
[ "$RC" -eq 0 ] && grep -q "stepped with (sign), and the error buffers, it does not check" <<<"$OUT" &&
    pass "sign: verify says what it checks" || fail "sign: verify says what it checks" "exit $RC: $ERR"
four=$(train_json 4 --dp 4 --steps 6 --compress powersgd:2)
[[ $four == "{"* ]] && pass "powersgd: 4 replicas end alike" || fail "powersgd: 4 replicas end alike" "$four"
four=$(train_json 4 --pp 2 --dp 2 --steps 6 --compress sign)
[[ $four == "{"* ]] && pass "sign: pp 2 x dp 2, the replicas end alike" || fail "sign: pp 2 x dp 2, the replicas end alike" "$four"
moe=$(train_json 2 --dp 2 --steps 6 --experts 4 --compress powersgd:2)  # (its expert layers sent whole, no error)
[[ $moe == "{"* ]] && pass "powersgd with --experts: the replicas end alike" ||
    fail "powersgd with --experts: the replicas end alike" "$moe"
for c in powersgd:3 sign; do
    whole=$(train_json 2 --dp 2 --steps 14 --compress $c)
    train_json 2 --dp 2 --steps 8 --compress $c --save "$TMP/ck-$c" >/dev/null
    rest=$(train_json 2 --dp 2 --steps 14 --compress $c --resume "$TMP/ck-$c")
    python3 -c 'import json,sys; a, b = json.loads(sys.argv[1])["losses"], json.loads(sys.argv[2])["losses"]
sys.exit(0 if a[8:] == b and len(b) == 6 else 1)' "$whole" "$rest" 2>/dev/null &&
        pass "$c: resume, steps 9-14 bit for bit" || fail "$c: resume, steps 9-14 bit for bit" "$whole vs $rest"
done
expect_user_error "powersgd:2 resumes no powersgd:3 checkpoint" \
    "holds the state of --compress powersgd:3, not of powersgd:2\): resume it with the ranks, layout and --compress" 120 \
    mpiexec -n 2 "$MICROPP" train "${M[@]}" --dp 2 --steps 10 --compress powersgd:2 --resume "$TMP/ck-powersgd:3"
expect_user_error "sign resumes no powersgd checkpoint" "holds the state of --compress powersgd:3, not of sign" 120 \
    mpiexec -n 2 "$MICROPP" train "${M[@]}" --dp 2 --steps 10 --compress sign --resume "$TMP/ck-powersgd:3"
expect_user_error "powersgd resumes no topk checkpoint" "holds the state of --compress topk:0.05, not of powersgd:3" 120 \
    mpiexec -n 2 "$MICROPP" train "${M[@]}" --dp 2 --steps 10 --compress powersgd:3 --resume "$TMP/ck"

# ---- bad input: one line, exit 2 ----
B=(--dp 2 --layers 4 --hidden 32 --batch 32 --steps 4 --log-every 0)
for f in topk:0 topk:1.5 topk:nan topk:-0.1 topk: sign:2 powersgd powersgd: powersgd:x signs; do
    expect_user_error "--compress $f" "--compress $f: give topk:F with 0 < F <= 1.*powersgd:R with R >= 1.*or sign" 60 \
        mpiexec -n 2 "$MICROPP" train "${B[@]}" --compress "$f"
done
for r in 0 33 1.5 -2; do
    expect_user_error "--compress powersgd:$r" \
        "--compress powersgd:$r: R is each weight matrix's rank, an integer from 1 to the layers' width 32 \(--hidden 32\)" \
        60 mpiexec -n 2 "$MICROPP" train "${B[@]}" --compress "powersgd:$r"
done
expect_user_error "--compress powersgd:9 with --inputs 8" "from 1 to the layers' width 8 \(--inputs 8\)" 60 \
    mpiexec -n 2 "$MICROPP" train "${B[@]}" --inputs 8 --compress powersgd:9
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

# ---- the planner: a compressed ddp layout priced, its crossover line; bad input refused there too ----
PL=(--profile configs/profiles/cpu-2ranks.json --world 2 --config configs/medium.json --mode ddp)
run 60 "$MICROPP" plan "${PL[@]}" --compress sign
grep -q "^crossover: --compress sign beats ddp on links below [0-9.]* Gb/s a rank" <<<"$OUT" &&
    grep -q "run: .* --compress sign$" <<<"$OUT" && pass "plan: sign's crossover, and its command" ||
    fail "plan: sign's crossover, and its command" "exit $RC: $OUT $ERR"
run 60 "$MICROPP" plan "${PL[@]}" --sync-every 8
grep -q "^crossover: --sync-every 8 beats ddp at every link bandwidth" <<<"$OUT" &&
    pass "plan: local SGD's crossover" || fail "plan: local SGD's crossover" "exit $RC: $OUT $ERR"
ddp_ms=$("$MICROPP" plan "${PL[@]}" | awk '$1 == 1 {print $7}')
run 60 "$MICROPP" plan "${PL[@]}" --compress powersgd:4
psgd_ms=$(awk '$1 == 1 {print $7}' <<<"$OUT")
[ -n "$ddp_ms" ] && [ "$ddp_ms" != "$psgd_ms" ] && ! grep -q crossover <<<"$("$MICROPP" plan "${PL[@]}")" &&
    pass "plan: powersgd priced apart from ddp ($psgd_ms ms vs $ddp_ms), no crossover line for ddp" ||
    fail "plan: powersgd priced apart from ddp" "$ddp_ms vs $psgd_ms"
expect_user_error "plan: --compress powersgd:0" "--compress powersgd:0: R is each weight matrix's rank" 60 \
    "$MICROPP" plan "${PL[@]}" --compress powersgd:0

# ---- plan --auto searches the methods on its ddp rows: on links of 100 Mb/s they rank above the exact sum, on
# NVLink none pays 10% and none is listed; --methods keeps them out, or keeps only those it names (a machine file:
# the same figures on every machine) ----
python3 -c 'import json,sys; m = json.load(open(sys.argv[1])); m["intra_node"] = m["inter_node"] = {
    "bandwidth_bytes_per_s": 1.25e7, "latency_s": 1e-4}; json.dump(m, open(sys.argv[2], "w"))' \
    configs/machines/h100-node.json "$TMP/slow.json"
AU=(--world 2 --config configs/medium.json --auto --json)
# the ranked rows: the fastest with a method, the fastest ddp row without one, how many have a method, and whether
# every ddp row of one replica per rank without ZeRO runs a method of the kinds in $1 (a comma list)
rows() { python3 -c 'import json,sys; r = json.load(sys.stdin)["layouts"]; kinds = sys.argv[1].split(",")
def method(x): return ("sync-every" if "sync_every" in x else x["compress"].split(":")[0]) if "sync_every" in x or "compress" in x else ""
m = [x["step_s"] for x in r if method(x)]; e = [x["step_s"] for x in r if x["family"] == "ddp" and not method(x)]
plain = [x for x in r if x["pp"] == 1 and x["tp"] == 1 and x["dp"] > 1 and x["zero"] == 0 and "ep" not in x]
print(min(m) if m else "none", min(e) if e else "none", len(m), all(method(x) in kinds for x in plain) and len(plain) > 0)' "$1"; }
read -r meth exact n ok <<<"$("$MICROPP" plan --machine "$TMP/slow.json" "${AU[@]}" | rows x)"
python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) else 1)' "$meth" "$exact" 2>/dev/null &&
    pass "plan --auto on 100 Mb/s: a method ranks above the exact sum ($meth s < $exact s, $n rows)" ||
    fail "plan --auto on 100 Mb/s: a method ranks above the exact sum" "$meth $exact $n"
read -r meth exact n ok <<<"$("$MICROPP" plan --machine configs/machines/h100-node.json "${AU[@]}" | rows x)"
[ "$meth" = none ] && [ "$exact" != none ] && pass "plan --auto on NVLink: no method listed" ||
    fail "plan --auto on NVLink: no method listed" "$meth $exact $n"
read -r meth exact n ok <<<"$("$MICROPP" plan --machine "$TMP/slow.json" "${AU[@]}" --methods exact | rows x)"
[ "$meth" = none ] && [ "$exact" != none ] && pass "--methods exact keeps them out" ||
    fail "--methods exact keeps them out" "$meth $exact $n"
read -r meth exact n ok <<<"$("$MICROPP" plan --machine configs/machines/h100-node.json "${AU[@]}" --methods sign,sync-every |
    rows sign,sync-every)"
[ "$ok" = True ] && [ "$n" -gt 0 ] && pass "--methods sign,sync-every: the ddp rows run those alone, even on NVLink" ||
    fail "--methods sign,sync-every: the ddp rows run those alone, even on NVLink" "$meth $exact $n $ok"
run 60 "$MICROPP" plan --machine "$TMP/slow.json" --world 2 --config configs/medium.json --auto --methods powersgd --pp 1 \
    --precision fp32
grep -Eq "^best: .* --compress (powersgd:[0-9]+)  # --compress \1 changes the numerics from ddp's exact sum: --methods exact" \
    <<<"$OUT" && pass "plan --auto: the best's method, and its note" || fail "plan --auto: the best's method, and its note" "$OUT"
expect_user_error "--methods bogus" "--methods 'exact,bogus': 'bogus' is no method: give a comma list of exact" 60 \
    "$MICROPP" plan --machine "$TMP/slow.json" --world 2 --config configs/medium.json --auto --methods exact,bogus
expect_user_error "--methods without --auto" "--methods 'exact' narrows --auto's search: add --auto" 60 \
    "$MICROPP" plan --machine "$TMP/slow.json" --world 2 --config configs/medium.json --methods exact
