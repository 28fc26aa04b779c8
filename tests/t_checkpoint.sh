#!/usr/bin/env bash
# tests/t_checkpoint.sh: --save/--resume: exact resume in the same layout, resume across layouts
# (pp 4 -> pp 2 -> manual 3 -> monolith) within fp32 tolerance, the files readable by plain python
# (numpy when installed), and every kind of bad checkpoint refused with one line and exit 2.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
TOOL="$(type -P python3) $ROOT/tests/ckpt_tool.py"  # (with site, not lib.sh's python3 -S: its format check reads with numpy)
A="--layers 8 --hidden 32 --classes 4 --batch 16 --samples 64 --micro-batches 4 --json --log-every 0"
M="--layers 8 --hidden 32 --classes 4 --batch 16 --samples 64 --json --log-every 0"  # one-process modes

losses() { json_get '["losses"]'; }
# same_losses NAME EXPECTED_JSON_LIST: $OUT's losses must equal the list exactly (bit for bit)
same_losses() {
    local got; got=$(losses)
    if [ "$RC" -ne 0 ]; then fail "$1" "exit $RC: $(printf '%s' "$ERR" | head -c 300)"
    elif [ "$got" = "$2" ]; then pass "$1"
    else fail "$1" "losses $got, expected $2"; fi
}
# close_losses NAME EXPECTED_JSON_LIST RTOL
close_losses() {
    if [ "$RC" -ne 0 ]; then fail "$1" "exit $RC: $(printf '%s' "$ERR" | head -c 300)"; return; fi
    local why
    why=$(python3 -c "
import json,sys
a,b=json.loads(sys.argv[1]),json.loads(sys.argv[2])
bad=[(x,y) for x,y in zip(a,b) if abs(x-y)>float(sys.argv[3])*abs(y)]
print('' if len(a)==len(b) and not bad else 'got %s expected %s'%(a,b))" "$(losses)" "$2" "$3")
    if [ -z "$why" ]; then pass "$1"; else fail "$1" "$why"; fi
}
slice() { python3 -c "import json,sys; print(json.dumps(json.loads(sys.argv[1])[int(sys.argv[2]):int(sys.argv[3])]))" "$1" "$2" "$3"; }

# ---- exact resume, same layout ----
run 60 mpiexec -n 4 "$MICROPP" train --mode pp $A --steps 8
REF_PP=$(losses)
run 60 mpiexec -n 4 "$MICROPP" train --mode pp $A --steps 4 --save "$TMP/pp4"
run 60 mpiexec -n 4 "$MICROPP" train --mode pp $A --steps 8 --resume "$TMP/pp4"
same_losses "ckpt/resume pp 4 ranks: 4+4 steps == 8 steps, bit for bit" "$(slice "$REF_PP" 4 8)"
if [ "$(json_get '["start_step"]')" = 4 ]; then pass "ckpt/--steps is the total: resumed run trains steps 5..8"; else fail "ckpt/--steps is the total: resumed run trains steps 5..8" "start_step $(json_get '["start_step"]')"; fi

run 60 "$MICROPP" train $M --steps 6
REF_MONO=$(losses)
run 60 "$MICROPP" train $M --steps 3 --save "$TMP/mono"
run 60 "$MICROPP" train $M --steps 6 --resume "$TMP/mono"
same_losses "ckpt/resume monolith: 3+3 steps == 6 steps, bit for bit" "$(slice "$REF_MONO" 3 6)"

run 60 "$MICROPP" train --mode manual --parts 2 --optimizer sgd --lr 0.05 $M --steps 6
REF_SGD=$(losses)
run 60 "$MICROPP" train --mode manual --parts 2 --optimizer sgd --lr 0.05 $M --steps 2 --save "$TMP/sgd"
run 60 "$MICROPP" train --mode manual --parts 2 --optimizer sgd --lr 0.05 $M --steps 6 --resume "$TMP/sgd" --save "$TMP/sgd" --save-every 2
same_losses "ckpt/resume manual 2 parts, sgd: 2+4 steps == 6 steps" "$(slice "$REF_SGD" 2 6)"
n=$(ls "$TMP/sgd" | grep -c 'safetensors$')
step=$(python3 -c "import json; print(json.load(open('$TMP/sgd/manifest.json'))['step'])")
if [ "$n" = 2 ] && [ "$step" = 6 ]; then pass "ckpt/save into the resumed folder: manifest at step 6, older files removed"
else fail "ckpt/save into the resumed folder: manifest at step 6, older files removed" "$n files, step $step: $(ls "$TMP/sgd")"; fi

# ---- resume across layouts: pp 4 -> pp 2 -> manual 3 -> monolith ----
run 60 mpiexec -n 4 "$MICROPP" train --mode pp $A --steps 12
REF12=$(losses)
run 60 mpiexec -n 4 "$MICROPP" train --mode pp $A --steps 3 --save "$TMP/chain"
run 60 mpiexec -n 2 "$MICROPP" train --mode pp $A --steps 6 --resume "$TMP/chain" --save "$TMP/chain"
close_losses "ckpt/re-partition pp 4 -> pp 2 (steps 4-6)" "$(slice "$REF12" 3 6)" 1e-5
run 60 "$MICROPP" train --mode manual --parts 3 $M --steps 9 --resume "$TMP/chain" --save "$TMP/chain"
close_losses "ckpt/re-partition pp 2 -> manual 3 parts (steps 7-9)" "$(slice "$REF12" 6 9)" 1e-5
run 60 "$MICROPP" train $M --steps 12 --resume "$TMP/chain"
close_losses "ckpt/re-partition manual 3 -> monolith (steps 10-12)" "$(slice "$REF12" 9 12)" 1e-5
run 60 mpiexec -n 3 "$MICROPP" train --mode pp --partition 5,2,1 $A --steps 8 --resume "$TMP/pp4"
close_losses "ckpt/re-partition pp 4 (2,2,2,2) -> pp 3 (5,2,1)" "$(slice "$REF_PP" 4 8)" 1e-5

run 60 "$MICROPP" train ${M/--batch 16/--batch 8} --lr 0.002 --steps 6 --resume "$TMP/mono"
if [ "$RC" -eq 0 ] && printf '%s' "$ERR" | grep -q 'note: --batch 8 differs from the checkpoint.s 16 (the data stream goes on from sample 48)' &&
   printf '%s' "$ERR" | grep -q 'note: --lr 0.002 differs'; then pass "ckpt/a changed --batch or --lr is allowed, with a note"
else fail "ckpt/a changed --batch or --lr is allowed, with a note" "exit $RC: $ERR"; fi

run 60 mpiexec -n 4 "$MICROPP" train --mode pp ${A/--json /} --steps 6 --resume "$TMP/pp4" --trace "$TMP/resumed.json"
first=$(python3 -c "import json,sys; t=json.load(open(sys.argv[1])); ev=t['traceEvents'] if isinstance(t,dict) else t; print(min(e['ts'] for e in ev if e.get('ph')=='X'))" "$TMP/resumed.json" 2>&1)
if [ "$RC" -eq 0 ] && python3 -c "import sys; sys.exit(not 0 <= float(sys.argv[1]) < 1e6)" "$first" 2>/dev/null; then pass "ckpt/a resumed run's --trace starts at its first step (${first} us)"
else fail "ckpt/a resumed run's --trace starts at its first step" "exit $RC, first event at '$first' us: $(printf '%s' "$ERR" | head -c 200)"; fi
expect_user_error "ckpt/--timeline-step before the checkpoint -> one line, exit 2" "--timeline-step 2 was done before the checkpoint \(step 4\): use 5..8" 60 mpiexec -n 4 "$MICROPP" train --mode pp $A --steps 8 --resume "$TMP/pp4" --timeline "$TMP/t.svg" --timeline-step 2

# ---- data parallel: replica 0 writes one file per stage, every replica reads it ----
run 60 mpiexec -n 2 "$MICROPP" train --mode ddp $M --steps 8
REF_DDP=$(losses)
run 60 mpiexec -n 2 "$MICROPP" train --mode ddp $M --steps 4 --save "$TMP/ddp"
run 60 mpiexec -n 2 "$MICROPP" train --mode ddp $M --steps 8 --resume "$TMP/ddp"
same_losses "ckpt/resume ddp 2 ranks: 4+4 steps == 8 steps, bit for bit" "$(slice "$REF_DDP" 4 8)"
n=$(ls "$TMP/ddp" | grep -c 'safetensors$')
[ "$n" = 1 ] && pass "ckpt/ddp writes one file (replica 0), not one per replica" || fail "ckpt/ddp writes one file" "$(ls "$TMP/ddp")"
run 60 mpiexec -n 2 "$MICROPP" train --mode pp $A --steps 8 --resume "$TMP/ddp"
close_losses "ckpt/re-partition ddp 2 -> pp 2 (steps 5-8)" "$(slice "$REF_DDP" 4 8)" 1e-5
run 90 mpiexec -n 4 "$MICROPP" train --mode hybrid --pp 2 --dp 2 $A --steps 4 --save "$TMP/hyb"
n=$(ls "$TMP/hyb" | grep -c 'safetensors$')
[ "$RC" -eq 0 ] && [ "$n" = 2 ] && pass "ckpt/hybrid 2x2 writes one file per stage" || fail "ckpt/hybrid 2x2 writes one file per stage" "rc $RC $(ls "$TMP/hyb") $ERR"
run 60 "$MICROPP" train $M --steps 8 --resume "$TMP/hyb"
close_losses "ckpt/re-partition hybrid 2x2 -> monolith (steps 5-8)" "$(slice "$REF_PP" 4 8)" 1e-5
run 90 mpiexec -n 4 "$MICROPP" train --mode hybrid --pp 2 --dp 2 $A --steps 8 --resume "$TMP/pp4"
close_losses "ckpt/re-partition pp 4 -> hybrid 2x2 (steps 5-8)" "$(slice "$REF_PP" 4 8)" 1e-5
# (--zero 1, 2 and 3 save and resume the unsharded files: tests/t_zero.sh)

# ---- the files: readable without micropp, names global, values the same whatever the layout ----
run 30 $TOOL check "$TMP/pp4"
if [ "$RC" -eq 0 ] && [ "$(json_get '["tensors"]')" = 54 ]; then pass "ckpt/format: CRC-32, headers, names and shapes check out in python ($(json_get '["reader"]'))"
else fail "ckpt/format: CRC-32, headers, names and shapes check out in python" "rc $RC: $OUT $ERR"; fi
run 60 "$MICROPP" train $M --steps 4 --save "$TMP/mono4"
run 60 $TOOL dump "$TMP/pp4" "$TMP/pp4.json"
run 60 $TOOL dump "$TMP/mono4" "$TMP/mono4.json"
run 60 $TOOL diff "$TMP/pp4.json" "$TMP/mono4.json"
if [ "$RC" -eq 0 ] && python3 -c "import sys; sys.exit(not float('$OUT') < 1e-4)"; then pass "ckpt/format: pp 4-stage files hold the monolith's tensors under the same names (rel diff $OUT)"
else fail "ckpt/format: pp 4-stage files hold the monolith's tensors under the same names" "rc $RC diff '$OUT' $ERR"; fi

run 10 "$MICROPP" train --help
if printf '%s' "$OUT" | grep -q -- '--resume DIR' && printf '%s' "$OUT" | tr '\n' ' ' | tr -s ' ' | grep -q 'with --resume: train up to step N'; then pass "ckpt/--help documents --save, --resume and the total --steps"
else fail "ckpt/--help documents --save, --resume and the total --steps" "help lacks them"; fi

# ---- bad checkpoints and bad flags: one line, exit 2, every rank ----
fresh() { rm -rf "$TMP/bad"; cp -r "$TMP/pp4" "$TMP/bad"; }
fresh; $TOOL corrupt "$TMP/bad" 2
expect_user_error "ckpt/corrupted file (read by rank 2 only) -> one line, exit 2" "stage-02-of-04.safetensors is corrupted: its CRC-32 is [0-9a-f]{8} but the manifest says" 60 mpiexec -n 4 "$MICROPP" train --mode pp $A --steps 8 --resume "$TMP/bad"
fresh; $TOOL truncate "$TMP/bad" 3
expect_user_error "ckpt/truncated file -> one line, exit 2" "stage-03-of-04.safetensors has [0-9]+ bytes but the manifest says [0-9]+ \(truncated" 60 "$MICROPP" train $M --steps 8 --resume "$TMP/bad"
fresh; $TOOL reshape "$TMP/bad" 1 layers.3.bias
expect_user_error "ckpt/wrong tensor shape -> one line, exit 2" "tensor 'layers.3.bias' has shape \[16,2\], expected \[32\]" 60 mpiexec -n 2 "$MICROPP" train --mode pp $A --steps 8 --resume "$TMP/bad"
fresh; rm "$TMP/bad/$(python3 -c "import json; print(json.load(open('$TMP/bad/manifest.json'))['files'][0]['file'])")"
expect_user_error "ckpt/missing file -> one line, exit 2" "cannot open .*stage-00-of-04.safetensors" 60 "$MICROPP" train $M --steps 8 --resume "$TMP/bad"
# --save to a folder some rank does not see (a node's own scratch disk): refused at start-up naming the
# rank and its host, not at the first save hours in. Rank 1 runs in a mount namespace of its own where
# the folder is another tmpfs (root only), as a node of a cluster whose disks are not shared.
if [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
    mkdir -p "$TMP/local"
    expect_user_error "ckpt/--save a folder rank 1 does not see -> one line, exit 2, at start-up" \
        "train: --save $TMP/local: rank 1 \(host [^)]*\) does not see the folder rank 0 made on .*: give --save a folder every host shares" 60 \
        mpiexec -n 1 "$MICROPP" train --mode pp $A --steps 4 --save "$TMP/local" : \
        -n 1 unshare -m sh -c "mount -t tmpfs tmpfs '$TMP/local' && exec '$MICROPP' train --mode pp $A --steps 4 --save '$TMP/local'"
    [ -z "$(ls -A "$TMP/local")" ] && [ "$(printf '%s' "$OUT" | grep -c '^step ')" = 0 ] \
        && pass "ckpt/... before any step, leaving nothing in the folder" || fail "ckpt/... before any step" "$(ls -A "$TMP/local"): $OUT"
else skip "ckpt/--save a folder rank 1 does not see" "needs root and unshare -m"; fi
expect_user_error "ckpt/wrong --hidden -> one line, exit 2" "checkpoint has --hidden 32 but this run has --hidden 64" 60 mpiexec -n 2 "$MICROPP" train --mode pp ${A/--hidden 32/--hidden 64} --steps 8 --resume "$TMP/pp4"
expect_user_error "ckpt/wrong --layers -> one line, exit 2" "checkpoint has --layers 8 but this run has --layers 6" 60 "$MICROPP" train ${M/--layers 8/--layers 6} --steps 8 --resume "$TMP/pp4"
expect_user_error "ckpt/wrong --classes -> one line, exit 2" "checkpoint has --classes 4 but this run has --classes 3" 60 "$MICROPP" train ${M/--classes 4/--classes 3} --steps 8 --resume "$TMP/pp4"
expect_user_error "ckpt/wrong --optimizer -> one line, exit 2" "trained with --optimizer adam but this run uses sgd" 60 "$MICROPP" train $M --optimizer sgd --steps 8 --resume "$TMP/pp4"
expect_user_error "ckpt/--steps not beyond the checkpoint -> one line, exit 2" "checkpoint is at step 4 and --steps 4 is the TOTAL step count: use --steps > 4" 60 mpiexec -n 4 "$MICROPP" train --mode pp $A --steps 4 --resume "$TMP/pp4"
fresh; echo '{"format": "micropp-checkpoint", "version": 1, ' > "$TMP/bad/manifest.json"
expect_user_error "ckpt/garbled manifest -> one line, exit 2" "manifest.json is not valid JSON" 60 mpiexec -n 2 "$MICROPP" train --mode pp $A --steps 8 --resume "$TMP/bad"
fresh; $TOOL manifest "$TMP/bad" 'm["files"][1]["file"] = "../../etc/passwd"'
expect_user_error "ckpt/manifest naming a path outside the folder -> refused" "not a plain file name" 60 "$MICROPP" train $M --steps 8 --resume "$TMP/bad"
fresh; $TOOL manifest "$TMP/bad" 'm["files"][1]["layers"] = [1, 4]'
expect_user_error "ckpt/manifest with a layer in two files -> refused" "layer 1 is in 2 files, expected exactly 1" 60 "$MICROPP" train $M --steps 8 --resume "$TMP/bad"
fresh; $TOOL poke "$TMP/bad" 1 optim.exp_avg_sq.layers.3.weight 5 -0.25
expect_user_error "ckpt/a negative Adam second moment -> refused when loading, naming the tensor and the file" \
    "stage-01-of-04.safetensors: tensor 'optim.exp_avg_sq.layers.3.weight' holds -0.25 at index 5, but Adam's second moment is a mean of squares and cannot be negative" \
    60 "$MICROPP" train $M --steps 8 --resume "$TMP/bad"
fresh; $TOOL poke "$TMP/bad" 1 optim.exp_avg.layers.3.weight 5 -0.25
run 60 "$MICROPP" train $M --steps 5 --resume "$TMP/bad"
[ "$RC" -eq 0 ] && pass "ckpt/a negative first moment (a mean of gradients) still loads" || fail "ckpt/a negative first moment still loads" "exit $RC: $ERR"
# Hosts with different copies of one checkpoint: every rank reads the files it needs and checks
# them against the manifest rank 0 read. Each rank in its own folder (Hydra's fake hosts nodeA and
# nodeB), --resume a relative path, rank 1's copy of the file altered (its manifest, unread, as it was).
mkdir -p "$TMP/h/0" "$TMP/h/1"; cp -r "$TMP/mono4" "$TMP/h/0/ck"; cp -r "$TMP/mono4" "$TMP/h/1/ck"; $TOOL corrupt "$TMP/h/1/ck" 0
printf '#!/bin/bash\ncd "%s/h/$PMI_RANK" && exec "%s" "$@"\n' "$TMP" "$MICROPP" > "$TMP/on-host.sh"; chmod +x "$TMP/on-host.sh"
expect_user_error "ckpt/hosts holding different copies: named with the rank and host that read the other copy" \
    "is corrupted: its CRC-32 .* \(read on rank 1, host nodeB; the manifest on rank 0: if the hosts hold different copies, copy the same folder to every host\)" \
    60 mpiexec -launcher fork -hosts nodeA:1,nodeB:1 -n 2 "$TMP/on-host.sh" train --mode ddp $M --steps 8 --resume ck
mkdir -p "$TMP/fifo-save"; mkfifo "$TMP/fifo-save/manifest.json.tmp"
run 30 "$MICROPP" train $M --steps 2 --save "$TMP/fifo-save"
[ "$RC" -eq 1 ] && printf '%s' "$ERR" | grep -q "cannot create $TMP/fifo-save/manifest.json.tmp: a FIFO has that name: remove it" \
    && pass "ckpt/--save where a FIFO has the manifest's temporary name: ends at once (exit 1), never waits for a reader" \
    || fail "ckpt/--save where a FIFO has the manifest's temporary name" "exit $RC: $ERR"
expect_user_error "ckpt/--resume of a folder without a manifest" "no readable manifest.json there" 60 mpiexec -n 2 "$MICROPP" train --mode pp $A --steps 8 --resume "$TMP/nothing-here"
expect_user_error "ckpt/--save-every without --save" "--save-every 2 needs --save DIR" 10 "$MICROPP" train $M --save-every 2
expect_user_error "ckpt/--resume with --verify" "cannot be combined with --resume" 10 "$MICROPP" train $M --verify --steps 8 --resume "$TMP/pp4"
expect_user_error "ckpt/--save to a path that cannot be a folder" "--save /proc/version/x: cannot create that folder" 60 mpiexec -n 2 "$MICROPP" train --mode pp $A --save /proc/version/x
