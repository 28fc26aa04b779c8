#!/usr/bin/env bash
# tests/t_data.sh: real data. A few hundred Fashion-MNIST images (written by this test as an IDX
# folder: the installed data set's first rows, or made-up images when dataset-fashion-mnist is not
# installed) for one epoch: the pipeline, ddp and manual equal the monolith, --verify passes, the
# per-epoch line and JSON, --inputs in checkpoints, AdamW and cosine alike in every mode; and every
# bad input (IDX wrong magic, truncated, counts that disagree, labels out of range, corrupt gzip,
# the data set not installed) refused with one line and exit 2 on every rank.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
FM=/usr/share/datasets/fashion-mnist
D="$TMP/fm"
# mkset DIR NTRAIN NTEST: an MNIST-layout folder of gzip IDX files
mkset() {
    python3 - "$1" "$2" "$3" "$FM" <<'PY'
import gzip, os, random, struct, sys
out, ntr, nte, src = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
os.makedirs(out, exist_ok=True)
def load(name, n, rowbytes, hdr):
    p = os.path.join(src, name)
    if not os.path.exists(p): return None
    with gzip.open(p, "rb") as f:
        f.read(hdr)
        return f.read(n * rowbytes)
def made_up(n, seed):  # class c: a bright 7x28 band at row 2c (learnable), plus noise
    r = random.Random(seed); img = bytearray(); lab = bytearray()
    for i in range(n):
        c = r.randrange(10); lab.append(c)
        px = [r.randrange(60) for _ in range(784)]
        for y in range(2 * c, min(28, 2 * c + 7)):
            for x in range(28): px[y * 28 + x] = 200 + r.randrange(55)
        img += bytes(px)
    return bytes(img), bytes(lab)
for split, n, seed in (("train", ntr, 1), ("t10k", nte, 2)):
    img, lab = load(split + "-images-idx3-ubyte.gz", n, 784, 16), load(split + "-labels-idx1-ubyte.gz", n, 1, 8)
    if img is None: img, lab = made_up(n, seed)
    with gzip.open(os.path.join(out, split + "-images-idx3-ubyte.gz"), "wb") as f: f.write(struct.pack(">IIII", 0x803, n, 28, 28) + img)
    with gzip.open(os.path.join(out, split + "-labels-idx1-ubyte.gz"), "wb") as f: f.write(struct.pack(">II", 0x801, n) + lab)
PY
}
mkset "$D" 520 256
if [ -f "$FM/train-images-idx3-ubyte.gz" ]; then echo "# real Fashion-MNIST rows (the first 520 training, 256 test)"; else echo "# made-up images: $FM is not installed"; fi
A="--data $D --inputs 784 --hidden 64 --layers 4 --classes 10 --batch 64 --epochs 1 --json --log-every 0"

# close NAME KEY REF_JSON RTOL: $OUT's KEY (a number or a list) within RTOL of REF_JSON's
close() {
    if [ "$RC" -ne 0 ]; then fail "$1" "exit $RC: $(printf '%s' "$ERR" | head -c 300)"; return; fi
    local why
    why=$(python3 -c "
import json,sys
k=sys.argv[2]; a,b=json.loads(sys.argv[1])[k],json.loads(sys.argv[3])[k]
a,b=(a,b) if isinstance(a,list) else ([a],[b])
bad=[(x,y) for x,y in zip(a,b) if abs(x-y)>float(sys.argv[4])*abs(y)]
print('' if len(a)==len(b) and not bad else '%s: got %s expected %s'%(k,a,b))" "$OUT" "$2" "$3" "$4" 2>&1 || echo "cannot compare")
    if [ -z "$why" ]; then pass "$1"; else fail "$1" "$why"; fi
}

# ---- one epoch of real rows: every mode equals the monolith ----
run 120 "$MICROPP" train $A --verify
MONO=$OUT
if [ "$RC" -eq 0 ] && [ "$(json_get '["verify_ok"]')" = True ] && [ "$(json_get '["steps"]')" = 8 ] && [ "$(json_get '["steps_per_epoch"]')" = 8 ] \
   && [ "$(json_get '["dropped_rows_per_epoch"]')" = 8 ] && [ "$(json_get '["eval_rows"]')" = 256 ]; then
    pass "data/monolith: one epoch of 520 rows = 8 steps of 64 (8 dropped), --verify ok, accuracy on the 256 test rows"
else fail "data/monolith: one epoch of 520 rows = 8 steps of 64 (8 dropped), --verify ok, accuracy on the 256 test rows" "exit $RC: $(printf '%s' "$ERR$OUT" | head -c 400)"; fi
ep=$(json_get '["epochs"][0]')
python3 -c "import json,sys; e=json.loads(sys.argv[1]); sys.exit(0 if set(e)=={'epoch','train_loss','test_loss','test_accuracy','time_s','samples_per_s'} and e['epoch']==1 and 0<e['test_accuracy']<=1 else 1)" "$ep" \
    && pass "data/--json has a per-epoch array (train loss, test loss, test accuracy, time, samples/s)" || fail "data/--json has a per-epoch array (train loss, test loss, test accuracy, time, samples/s)" "$ep"

run 120 mpiexec -n 2 "$MICROPP" train $A --mode pp --schedule 1f1b --micro-batches 4 --verify
close "data/pp 1f1b 2 ranks == monolith: losses" losses "$MONO" 1e-5
close "data/pp 1f1b 2 ranks == monolith: test loss" final_loss "$MONO" 1e-5
[ "$RC" -eq 0 ] && [ "$(json_get '["verify_ok"]')" = True ] && [ "$(json_get '["accuracy"]')" = "$(printf '%s' "$MONO" | python3 -c 'import json,sys; print(json.load(sys.stdin)["accuracy"])')" ] \
    && pass "data/pp 1f1b: --verify ok, the same test accuracy" || fail "data/pp 1f1b: --verify ok, the same test accuracy" "exit $RC $(json_get '["accuracy"]')"
run 120 mpiexec -n 2 "$MICROPP" train $A --mode pp --schedule zb-h1 --micro-batches 4
close "data/pp zb-h1 2 ranks == monolith" losses "$MONO" 1e-5
run 120 mpiexec -n 2 "$MICROPP" train $A --mode ddp --verify
close "data/ddp 2 ranks == monolith" losses "$MONO" 1e-5
run 120 "$MICROPP" train $A --mode manual --parts 2
close "data/manual 2 parts == monolith" losses "$MONO" 1e-5

# AdamW and the cosine schedule: every mode the same; the decay changes the run
W="--weight-decay 0.1 --lr-schedule cosine --warmup-steps 3 --lr 3e-3"
run 120 "$MICROPP" train $A $W
WMONO=$OUT
[ "$RC" -eq 0 ] && [ "$(json_get '["losses"]')" != "$(printf '%s' "$MONO" | python3 -c 'import json,sys; print(json.load(sys.stdin)["losses"])')" ] \
    && pass "data/--weight-decay and --lr-schedule change the run" || fail "data/--weight-decay and --lr-schedule change the run" "exit $RC"
run 120 mpiexec -n 2 "$MICROPP" train $A $W --mode pp --micro-batches 2
close "data/AdamW + cosine: pp == monolith" losses "$WMONO" 1e-5
run 120 mpiexec -n 2 "$MICROPP" train $A $W --mode ddp --zero 1
close "data/AdamW + cosine: ddp ZeRO-1 == monolith" losses "$WMONO" 1e-5

# epochs: two epochs read two different shuffles; the text says what is dropped
run 120 "$MICROPP" train ${A/--epochs 1/--epochs 2}
[ "$RC" -eq 0 ] && [ "$(json_get '["steps"]')" = 16 ] && [ "$(json_get '["epochs"]' | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 2 ] \
    && pass "data/--epochs 2: 16 steps, two epoch records" || fail "data/--epochs 2: 16 steps, two epoch records" "exit $RC"
run 120 "$MICROPP" train ${A/--json/}
printf '%s' "$OUT" | grep -q "the last partial batch (8 rows of each epoch's shuffle) is dropped" && printf '%s' "$OUT" | grep -qE '^epoch 1/1 \| train loss [0-9.]+ \| test loss [0-9.]+ \| test accuracy [0-9.]+% \| [0-9.]+ s \| [0-9.]+[kM]? samples/s$' \
    && printf '%s' "$OUT" | grep -q "standardised with the training set's mean" \
    && pass "data/text: standardisation, dropped rows and the epoch line" || fail "data/text: standardisation, dropped rows and the epoch line" "$(printf '%s' "$OUT" | head -c 600)"

# --inputs in checkpoints: layers.0.weight is [H, D]; --save-best keeps the best epoch
run 120 "$MICROPP" train ${A/--epochs 1/--epochs 2} --save "$TMP/best" --save-best
[ "$RC" -eq 0 ] && [ -n "$(json_get '["best_epoch"]')" ] && python3 "$ROOT/tests/ckpt_tool.py" check "$TMP/best" >/dev/null 2>&1 \
    && grep -q '"inputs":	784' "$TMP/best/manifest.json" \
    && pass "data/--save-best: a checkpoint of the best epoch, layers.0.weight [64, 784]" || fail "data/--save-best: a checkpoint of the best epoch, layers.0.weight [64, 784]" "exit $RC $(printf '%s' "$ERR" | head -c 300)"
expect_user_error "data/refuse: resume with other --inputs" "the checkpoint has --inputs 784 but this run has --inputs 800" 60 \
    "$MICROPP" train --data synthetic --inputs 800 --hidden 64 --layers 4 --classes 10 --steps 40 --resume "$TMP/best"

# ---- bad input: one line, exit 2, every rank ----
cp -r "$D" "$TMP/bad"
B="--inputs 784 --hidden 16 --layers 2 --classes 10 --batch 16 --epochs 1"
img="$TMP/bad/train-images-idx3-ubyte.gz" lab="$TMP/bad/train-labels-idx1-ubyte.gz"
printf 'not an idx file' | gzip > "$img"
expect_user_error "data/refuse: IDX wrong magic" "train-images-idx3-ubyte.gz: wrong magic 0x6e6f7420: not an IDX file" 60 mpiexec -n 2 "$MICROPP" train --mode ddp --data "$TMP/bad" $B
gzip -dc "$D/train-images-idx3-ubyte.gz" | head -c 5000 > "$TMP/cut.idx"
expect_user_error "data/refuse: IDX truncated" "--data $TMP/cut.idx: truncated: the header promises 407680 bytes" 60 mpiexec -n 2 "$MICROPP" train --mode pp --micro-batches 2 --data "$TMP/cut.idx" --labels "$D/train-labels-idx1-ubyte.gz" $B
head -c 2000 "$D/train-images-idx3-ubyte.gz" > "$TMP/cut.gz"
expect_user_error "data/refuse: gzip stream cut short" "truncated" 60 "$MICROPP" train --data "$TMP/cut.gz" --labels "$D/train-labels-idx1-ubyte.gz" $B
python3 -c "
import sys; b=bytearray(open(sys.argv[1],'rb').read()); b[200:400]=bytes(x^0x5a for x in b[200:400]); open(sys.argv[2],'wb').write(b)" "$D/train-images-idx3-ubyte.gz" "$TMP/corrupt.gz"
expect_user_error "data/refuse: corrupt gzip" "corrupt gzip stream" 60 mpiexec -n 2 "$MICROPP" train --mode ddp --data "$TMP/corrupt.gz" --labels "$D/train-labels-idx1-ubyte.gz" $B
expect_user_error "data/refuse: images and labels disagree" "--labels $D/t10k-labels-idx1-ubyte.gz has 256 labels but --data $D/train-images-idx3-ubyte.gz has 520 rows" 60 \
    mpiexec -n 2 "$MICROPP" train --mode ddp --data "$D/train-images-idx3-ubyte.gz" --labels "$D/t10k-labels-idx1-ubyte.gz" $B
expect_user_error "data/refuse: labels out of range" "label [0-9] at row [0-9]+ is outside \[0, 3\): set --classes to cover it" 60 \
    "$MICROPP" train --data "$D" --inputs 784 --hidden 16 --layers 2 --classes 3 --epochs 1
expect_user_error "data/refuse: --inputs that does not fit the images" "its rows have 784 values \(IDX 28x28\) but --inputs is 100: set --inputs 784" 60 \
    "$MICROPP" train --data "$D" --inputs 100 --hidden 16 --classes 10
expect_user_error "data/refuse: data set not installed, named with its package" "not installed .*install the package dataset-fashion-mnist" 60 \
    env MICROPP_DATASETS="$TMP/none" mpiexec -n 2 "$MICROPP" train --mode ddp --data fashion-mnist $B
expect_user_error "data/refuse: a folder without the files" "no train-images-idx3-ubyte\[.gz\] there" 60 "$MICROPP" train --data "$TMP" $B
expect_user_error "data/refuse: a folder with --labels" "names a whole data set: drop --labels" 60 "$MICROPP" train --data "$D" --labels x $B
expect_user_error "data/refuse: --test-data without --test-labels" "--test-data needs --test-labels too" 60 \
    "$MICROPP" train --data "$D/train-images-idx3-ubyte.gz" --labels "$D/train-labels-idx1-ubyte.gz" --test-data "$D/t10k-images-idx3-ubyte.gz" $B
expect_user_error "data/refuse: an epoch smaller than a batch" "an epoch of 520 training rows holds no whole step of 1024 rows" 60 \
    "$MICROPP" train --data "$D" --inputs 784 --hidden 16 --layers 2 --classes 10 --batch 1024 --epochs 1

# explicit files, plain (gunzipped) IDX, with a test split: the same run as the folder
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do gzip -dc "$D/$f.gz" > "$TMP/$f"; done
run 120 "$MICROPP" train ${A/--data $D/--data $TMP/train-images-idx3-ubyte --labels $TMP/train-labels-idx1-ubyte --test-data $TMP/t10k-images-idx3-ubyte --test-labels $TMP/t10k-labels-idx1-ubyte}
close "data/explicit plain IDX files == the gzip folder" losses "$MONO" 0

# ---- the ends of a file: a gzip trailer present and right, nothing after the promised data ----
gzip -dc "$D/train-labels-idx1-ubyte.gz" > "$TMP/lab.idx"
IMG="$D/train-images-idx3-ubyte.gz"
head -c -8 "$D/train-labels-idx1-ubyte.gz" > "$TMP/notrailer.gz"
expect_user_error "data/refuse: a gzip file without its trailer (its CRC would go unchecked)" \
    "--labels $TMP/notrailer.gz: truncated: the gzip stream ends before its trailer \(CRC-32 and length\)" 60 \
    mpiexec -n 2 "$MICROPP" train --mode ddp --data "$IMG" --labels "$TMP/notrailer.gz" $B
{ cat "$D/train-labels-idx1-ubyte.gz"; printf 'extra'; } > "$TMP/after.gz"
expect_user_error "data/refuse: bytes after the gzip stream, counted" "--labels $TMP/after.gz: 5 bytes follow the end of the gzip stream" 60 \
    "$MICROPP" train --data "$IMG" --labels "$TMP/after.gz" $B
{ cat "$TMP/lab.idx"; printf 'xyz'; } > "$TMP/long.idx"
expect_user_error "data/refuse: a plain IDX longer than its header promises" "the file holds 3 bytes after the 520 bytes of data its header promises" 60 \
    "$MICROPP" train --data "$IMG" --labels "$TMP/long.idx" $B
{ cat "$TMP/lab.idx"; printf 'xyz'; } | gzip > "$TMP/long.gz"
expect_user_error "data/refuse: a gzip stream longer than its header promises" "the file holds 3 bytes after the 520 bytes of data its header promises" 60 \
    "$MICROPP" train --data "$IMG" --labels "$TMP/long.gz" $B

# ---- a zero dimension: an empty file, never "set --inputs 0" ----
python3 -c "
import gzip, struct, sys
gzip.open(sys.argv[1], 'wb').write(struct.pack('>IIII', 0x803, 520, 0, 28))
gzip.open(sys.argv[2], 'wb').write(struct.pack('>IIII', 0x803, 0, 28, 28))" "$TMP/zero-width.gz" "$TMP/zero-rows.gz"
for f in zero-width zero-rows; do
    run 60 "$MICROPP" train --data "$TMP/$f.gz" --labels "$D/train-labels-idx1-ubyte.gz" $B
    [ "$RC" -eq 2 ] && printf '%s' "$ERR" | grep -q "has a zero dimension, so it holds no images: the file is empty or damaged" \
        && ! printf '%s' "$ERR" | grep -q -- "--inputs 0" && [ "$(printf '%s\n' "$ERR" | grep -c .)" -eq 1 ] \
        && pass "data/refuse: IDX with a zero dimension ($f): the file is empty, not --inputs 0" \
        || fail "data/refuse: IDX with a zero dimension ($f)" "exit $RC: $ERR"
done

python3 - "$TMP" <<'PY'
import struct, sys
def save(path, descr, shape):
    h = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    h += " " * ((64 - (10 + len(h) + 1) % 64) % 64) + "\n"
    open(path, "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode())
save(sys.argv[1] + "/width0.npy", "<f4", "(8, 0)")
save(sys.argv[1] + "/labels8.npy", "<i8", "(8,)")
PY
printf '\0%.0s' $(seq 64) >> "$TMP/labels8.npy"
run 60 "$MICROPP" train --data "$TMP/width0.npy" --labels "$TMP/labels8.npy" --inputs 16 --hidden 16 --batch 8 --steps 1
[ "$RC" -eq 2 ] && printf '%s' "$ERR" | grep -qF ".npy <f4 (8, 0) holds no features in a row: the file is empty or damaged" \
    && ! printf '%s' "$ERR" | grep -q -- "--inputs 0" && pass "data/refuse: .npy rows of zero features: the file is empty, not --inputs 0" \
    || fail "data/refuse: .npy rows of zero features" "exit $RC: $ERR"

# ---- every header before any data, and the data's bytes against the node's memory ----
# A gzip file whose header promises 5.5 M images (4.3 GB) over 4.2 MB, its data garbage past the
# first kilobyte: inflating it would end on the garbage; the labels' count, in their header, says
# at once that the files do not belong together.
python3 - "$TMP/big.gz" "$TMP/bigl.gz" <<'PY'
import os, random, struct, sys, zlib
def member(head, rows_bytes, junk):  # a gzip member's start: the IDX header and some zeros, then junk
    z = zlib.compressobj(6, zlib.DEFLATED, 31)
    b = z.compress(head + bytes(rows_bytes)) + z.flush(zlib.Z_SYNC_FLUSH)
    return b + random.Random(7).randbytes(junk)
n = 5478274  # 5478274 x 784 = 4.3e9 bytes: at most 1032 to 1 from the file's 4.2 MB
open(sys.argv[1], "wb").write(member(struct.pack(">IIII", 0x803, n, 28, 28), 1024, 4_200_000))
rows = 21913098  # 16 GiB of images, the most an IDX may promise; its labels' header agrees
open(sys.argv[2], "wb").write(member(struct.pack(">II", 0x801, rows), 1024, 21_300))
PY
start=$(date +%s%N)
expect_user_error "data/refuse: counts that disagree, from the headers, before a byte of data is inflated" \
    "--labels $D/train-labels-idx1-ubyte.gz has 520 labels but --data $TMP/big.gz has 5478274 rows" 60 \
    mpiexec -n 2 "$MICROPP" train --mode ddp --data "$TMP/big.gz" --labels "$D/train-labels-idx1-ubyte.gz" $B
echo "# refused in $(( ($(date +%s%N) - start) / 1000000 )) ms"
python3 - "$TMP/huge.gz" <<'PY'
import random, struct, sys, zlib
z = zlib.compressobj(6, zlib.DEFLATED, 31)
b = z.compress(struct.pack(">IIII", 0x803, 21913098, 28, 28) + bytes(1024)) + z.flush(zlib.Z_SYNC_FLUSH)
open(sys.argv[1], "wb").write(b + random.Random(8).randbytes(16_700_000))  # 16 GiB at 1032 to 1 needs 16.6 MB
PY
avail=$(awk '/MemAvailable/ {print $2 * 1024}' /proc/meminfo)
ranks=$(python3 -c "import sys; print(int(float(sys.argv[1]) // (21913098 * 789)) + 1)" "$avail")
if [ "$ranks" -le 8 ]; then
    expect_user_error "data/refuse: data that cannot fit in the node's memory ($ranks ranks x 17.3 GB), before reading it" \
        "--data $TMP/huge.gz: the data needs 17.3 GB in memory on each rank \(this file 17.2 GB\), $ranks ranks on this node .* GB available: use a smaller data set, or fewer ranks per node" 60 \
        mpiexec -n "$ranks" "$MICROPP" train --mode ddp --data "$TMP/huge.gz" --labels "$TMP/bigl.gz" --inputs 784 --hidden 16 --layers 2 --classes 10 --batch 16 --epochs 1
else skip "data/refuse: data that cannot fit in the node's memory" "this node has $((avail / 1000000000)) GB available: $ranks ranks would be needed"; fi

# ---- hosts that hold different files under one path ----
# Each rank runs in its own folder, its "host" (Hydra's fake hosts name them nodeA and nodeB): the
# command lines agree, and the relative paths name other bytes there. Before, a run like these
# trained a mixed schedule, or waited until the watchdog (300 s) fired.
H="$TMP/hosts"
mkdir -p "$H/0" "$H/1"
printf '#!/bin/bash\ncd "%s/$PMI_RANK" && exec "%s" "$@"\n' "$H" "$MICROPP" > "$TMP/on-host.sh"
chmod +x "$TMP/on-host.sh"
TWO=(mpiexec -launcher fork -hosts nodeA:1,nodeB:1 -n 2 "$TMP/on-host.sh" train --inputs 784 --hidden 16 --layers 4 --classes 10 --batch 16 --steps 2)
# subset DIR ROWS [FLIP]: the first ROWS training rows of $D as DIR/x.gz and DIR/y.gz (FLIP: one pixel changed)
subset() {
    python3 - "$D" "$1" "$2" "${3:-0}" <<'PY'
import gzip, struct, sys
src, out, n, flip = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
img = bytearray(gzip.open(src + "/train-images-idx3-ubyte.gz").read()[16:16 + n * 784])
lab = gzip.open(src + "/train-labels-idx1-ubyte.gz").read()[8:8 + n]
if flip: img[100] ^= 0xff
gzip.open(out + "/x.gz", "wb").write(struct.pack(">IIII", 0x803, n, 28, 28) + bytes(img))
gzip.open(out + "/y.gz", "wb").write(struct.pack(">II", 0x801, n) + lab)
PY
}
subset "$H/0" 64; subset "$H/1" 64
run 60 "${TWO[@]}" --mode ddp --data x.gz --labels y.gz
[ "$RC" -eq 0 ] && pass "data/hosts: the same files on every host train" || fail "data/hosts: the same files on every host train" "exit $RC: $ERR"
subset "$H/1" 128
expect_user_error "data/hosts: --data of 64 rows on one host and 128 on another: named at once, with the hosts" \
    "--data x.gz differs between the ranks: on rank 0 \(host nodeA\) it is IDX 64x28x28, on rank 1 \(host nodeB\) IDX 128x28x28: copy the same file to every host" 20 \
    "${TWO[@]}" --mode ddp --data x.gz --labels y.gz
subset "$H/1" 64 1
expect_user_error "data/hosts: one pixel apart under the same header" \
    "--data x.gz differs between the ranks: on rank 0 \(host nodeA\) and on rank 1 \(host nodeB\) it holds different bytes \(IDX 64x28x28 on both\)" 20 \
    "${TWO[@]}" --mode pp --micro-batches 2 --data x.gz --labels y.gz
rm -rf "$H/1/x.gz"; mkdir "$H/1/x.gz"
expect_user_error "data/hosts: a file on one host, a folder on the other" \
    "--data x.gz differs between the ranks: on rank 0 \(host nodeA\) it is a file, on rank 1 \(host nodeB\) a folder" 20 \
    "${TWO[@]}" --mode ddp --data x.gz --labels y.gz
"$MICROPP" bubble --schedule 1f1b --stages 2 --micro-batches 4 --dump-csv "$H/0/s.csv" > /dev/null
"$MICROPP" bubble --schedule gpipe --stages 2 --micro-batches 4 --dump-csv "$H/1/s.csv" > /dev/null
expect_user_error "data/hosts: --schedule-file 1F1B on one host and GPipe on another" \
    "--schedule-file s.csv differs between the ranks: on rank 0 \(host nodeA\) and on rank 1 \(host nodeB\) it holds different bytes \(64 bytes on both\)" 20 \
    "${TWO[@]}" --mode pp --micro-batches 4 --schedule-file s.csv
