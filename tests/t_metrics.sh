#!/usr/bin/env bash
# tests/t_metrics.sh: --metrics FILE (train/metrics.c): a JSON line per step whatever the console prints
# (step, loss, lr, step_ms, samples_s, mfu, and a pipeline's bubble; --metrics-every N thins them), per
# evaluation (--eval-every N, and the final one: test loss, accuracy) and per epoch (train and test loss,
# accuracy, time), the same figures as --json's; flushed as the run goes (read while a rank is stalled); rank 0 writes
# it; --resume keeps the lines up to its step and appends after them; every bad path (a folder, a
# FIFO nobody reads, a file that is no metrics log, a full disk, '-' without --json) ends every rank
# with one line. Then the live line (train/live.c): on a terminal (a pty from script(1)) a line
# rewritten in place that leaves the screen as the log without it; a pipe, a file or --json unchanged.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)

# lines FILE KEY: the values of KEY in the file's lines, space-separated ("-" where a line lacks it)
lines() { python3 -c 'import json,sys; print(" ".join(str(json.loads(l).get(sys.argv[2], "-")) for l in open(sys.argv[1])))' "$1" "$2"; }

# --- every step a line, whatever --log-every prints: the fields, the losses --json reports; the final
# evaluation's test point last ---
run 60 "$MICROPP" train --steps 20 --log-every 5 --lr-schedule cosine --warmup-steps 4 --metrics "$TMP/m.jsonl" --json
if [ "$RC" -eq 0 ]; then
    why=$(python3 - "$TMP/m.jsonl" "$TMP/out" 2>&1 <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
summary = json.load(open(sys.argv[2]))
bad = []
final = rows.pop()
if final != {"step": 20, "test_loss": final.get("test_loss"), "accuracy": round(summary["accuracy"], 5)}: bad.append("last line %s" % final)
if [r["step"] for r in rows] != list(range(1, 21)): bad.append("steps %s" % [r["step"] for r in rows])
for r in rows:
    if sorted(r) != sorted(["step", "loss", "lr", "step_ms", "samples_s", "mfu"]): bad.append("keys %s" % sorted(r))
    elif abs(r["loss"] - summary["losses"][r["step"] - 1]) > 1e-6 * abs(r["loss"]): bad.append("loss at %d" % r["step"])
    elif not (r["step_ms"] > 0 and abs(r["samples_s"] - 32 / (r["step_ms"] / 1e3)) < 0.01 * r["samples_s"]): bad.append("time %s" % r)
lr = [rows[i]["lr"] for i in (0, 4, 9, 14, 19)]
# cosine with 4 warm-up steps: step 1 is a quarter of the peak, then the rate decays towards the end
if not (abs(lr[0] - 0.00025) < 1e-9 and abs(lr[1] - 0.001) < 1e-6 and lr[2] > lr[3] > lr[4] >= 0): bad.append("lr %s" % lr)
print("; ".join(bad))
PY
) || why="the check itself failed: ${why:-no output}"
    [ -z "$why" ] && pass "metrics/a line per step with --log-every 5: step, loss (= --json's), lr (cosine), step_ms, samples_s; the final test point" \
        || fail "metrics/a line per step" "$why"
else fail "metrics/a line per step" "exit $RC: $ERR"; fi

# --- --log-every 0 prints no step, and the file still has every one; --metrics-every N thins the file ---
run 60 "$MICROPP" train --steps 10 --log-every 0 --metrics "$TMP/quiet.jsonl"
s=$(lines "$TMP/quiet.jsonl" step)
[ "$RC" -eq 0 ] && [ "$s" = "1 2 3 4 5 6 7 8 9 10 10" ] && ! grep -q '^step [0-9]*/' "$TMP/out" \
    && pass "metrics/--log-every 0: no step on the console, all 10 in the file (and the final test point)" \
    || fail "metrics/--log-every 0 keeps the file's steps" "exit $RC, steps '$s': $ERR"
run 60 "$MICROPP" train --steps 10 --metrics-every 4 --metrics "$TMP/thin.jsonl"
s=$(lines "$TMP/thin.jsonl" step)
[ "$RC" -eq 0 ] && [ "$s" = "1 4 8 10 10" ] && pass "metrics/--metrics-every 4: steps 1, 4, 8 and the last" \
    || fail "metrics/--metrics-every 4" "exit $RC, steps '$s': $ERR"
expect_user_error "metrics/--metrics-every without --metrics" "--metrics-every 4 thins the lines of --metrics: add --metrics" 30 \
    "$MICROPP" train --steps 4 --metrics-every 4

# --- --eval-every N: a steps-based run's test curve, a line on the console and a test point per N steps ---
run 60 "$MICROPP" train --layers 2 --hidden 32 --samples 4096 --batch 64 --steps 60 --log-every 0 --eval-every 20 \
    --metrics "$TMP/ev.jsonl" --json
why=$(python3 - "$TMP/ev.jsonl" "$TMP/out" 2>&1 <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ev = [r for r in rows if "loss" not in r]
s = json.load(open(sys.argv[2]))
bad = []
if [r["step"] for r in ev] != [20, 40, 60] or any(sorted(r) != ["accuracy", "step", "test_loss"] for r in ev): bad.append("eval lines %s" % ev)
elif abs(ev[-1]["accuracy"] - s["accuracy"]) > 1e-5: bad.append("last accuracy %s, summary's %s" % (ev[-1]["accuracy"], s["accuracy"]))
elif not ev[0]["test_loss"] > ev[-1]["test_loss"]: bad.append("the test loss did not fall: %s" % ev)
if [r["step"] for r in rows if "loss" in r] != list(range(1, 61)): bad.append("steps")
print("; ".join(bad))
PY
) || why="the check itself failed: ${why:-no output}"
[ "$RC" -eq 0 ] && [ -z "$why" ] && pass "metrics/--eval-every 20: test points at steps 20, 40, 60 (the last = the summary's)" \
    || fail "metrics/--eval-every 20" "exit $RC $why $ERR"
run 60 "$MICROPP" train --layers 2 --hidden 32 --steps 6 --log-every 0 --eval-every 3
n=$(grep -c '^eval at step 3/6 | test loss [0-9.]* | accuracy [0-9.]*% on 1024 held-out rows$' "$TMP/out")
[ "$RC" -eq 0 ] && [ "$n" = 1 ] && pass "metrics/--eval-every 3: a line at step 3 (step 6's is the final report)" \
    || fail "metrics/--eval-every's line" "exit $RC: $(cat "$TMP/out")"


# --- a pipeline's lines carry its bubble; rank 0 writes (one line per logged step, not per rank) ---
run 120 mpiexec -n 2 "$MICROPP" train --mode pp --steps 6 --metrics-every 2 --metrics "$TMP/pp.jsonl"
if [ "$RC" -eq 0 ]; then
    grep '"loss"' "$TMP/pp.jsonl" > "$TMP/pp_steps.jsonl"
    s=$(lines "$TMP/pp_steps.jsonl" step) b=$(lines "$TMP/pp_steps.jsonl" bubble)
    python3 -c 'import sys; v=[float(x) for x in sys.argv[1].split()]; sys.exit(not (len(v) == 4 and all(0 <= x < 1 for x in v)))' "$b" \
        && [ "$s" = "1 2 4 6" ] && pass "metrics/pp: a line per logged step with the bubble (steps $s, bubble $b)" \
        || fail "metrics/pp: the bubble" "steps '$s', bubbles '$b'"
else fail "metrics/pp: the bubble" "exit $RC: $ERR"; fi

# --- epochs: a line per epoch after its last step, the figures of --json's epochs ---
python3 - "$TMP/fm" <<'PY'
import gzip, os, random, struct, sys
out = sys.argv[1]; os.makedirs(out, exist_ok=True)
for split, n, seed in (("train", 320, 1), ("t10k", 128, 2)):  # class c: a bright band at row 2c, and noise
    r = random.Random(seed); img = bytearray(); lab = bytearray()
    for i in range(n):
        c = r.randrange(10); lab.append(c); px = [r.randrange(60) for _ in range(784)]
        for y in range(2 * c, min(28, 2 * c + 7)):
            for x in range(28): px[y * 28 + x] = 200 + r.randrange(55)
        img += bytes(px)
    with gzip.open(os.path.join(out, split + "-images-idx3-ubyte.gz"), "wb") as f: f.write(struct.pack(">IIII", 0x803, n, 28, 28) + img)
    with gzip.open(os.path.join(out, split + "-labels-idx1-ubyte.gz"), "wb") as f: f.write(struct.pack(">II", 0x801, n) + lab)
PY
E="--data $TMP/fm --inputs 784 --hidden 32 --layers 2 --classes 10 --batch 32 --log-every 4"
run 60 "$MICROPP" train $E --epochs 2 --metrics "$TMP/ep.jsonl" --json
if [ "$RC" -eq 0 ]; then
    why=$(python3 - "$TMP/ep.jsonl" "$TMP/out" 2>&1 <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ep = [r for r in rows if "epoch" in r]
want = json.load(open(sys.argv[2]))["epochs"]
bad = []
if [(r["epoch"], r["step"]) for r in ep] != [(1, 10), (2, 20)]: bad.append("epochs %s" % [(r["epoch"], r["step"]) for r in ep])
for r, w in zip(ep, want):
    if sorted(r) != sorted(["epoch", "step", "train_loss", "test_loss", "accuracy", "time_s"]): bad.append("keys %s" % sorted(r))
    for k, wk in (("train_loss", "train_loss"), ("test_loss", "test_loss"), ("accuracy", "test_accuracy")):
        if k in r and abs(r[k] - w[wk]) > 1e-4: bad.append("%s %s vs %s" % (k, r[k], w[wk]))
    if not r.get("time_s", 0) > 0: bad.append("time_s %s" % r.get("time_s"))
after = [r["step"] for r in rows if "epoch" not in r]
if after != list(range(1, 21)): bad.append("steps %s" % after)
if rows.index(ep[0]) != 10: bad.append("epoch 1 is line %d, not the 11th (after step 10)" % (rows.index(ep[0]) + 1))
print("; ".join(bad))
PY
) || why="the check itself failed: ${why:-no output}"
    [ -z "$why" ] && pass "metrics/--epochs: a line per epoch after its last step (train, test loss, accuracy = --json's, time)" \
        || fail "metrics/--epochs: a line per epoch" "$why"
else fail "metrics/--epochs: a line per epoch" "exit $RC: $ERR"; fi

# --- flushed as it goes: while the run is stalled at step 6 (MICROPP_FAULT), steps 1..5 are in the file ---
MICROPP_FAULT=0:6:stall timeout -k 5 60 "$MICROPP" train --steps 20 --log-every 1 --timeout 0 --metrics "$TMP/live.jsonl" >/dev/null 2>&1 &
pid=$!
for _ in $(seq 100); do [ "$(cat "$TMP/live.jsonl" 2>/dev/null | wc -l)" = 5 ] && break; sleep 0.1; done
got=$(lines "$TMP/live.jsonl" step 2>/dev/null); alive=$(kill -0 $pid 2>/dev/null && echo yes)
kill $pid 2>/dev/null; wait $pid 2>/dev/null
[ "$got" = "1 2 3 4 5" ] && [ "$alive" = yes ] && pass "metrics/flushed line by line: steps 1-5 readable while the run is still going" \
    || fail "metrics/flushed line by line" "read '$got' while the run was alive: '${alive:-no}'"

# --- --resume: the lines up to the checkpoint's step stay, later ones (and a line cut short) go, the run appends ---
run 60 "$MICROPP" train --steps 10 --metrics-every 4 --save "$TMP/ck" --metrics "$TMP/r.jsonl"
printf '{"step":14,"loss":9}\n{"step":15,"lo' >> "$TMP/r.jsonl"  # the earlier run went on past its checkpoint
ln -s r.jsonl "$TMP/link.jsonl"
run 60 "$MICROPP" train --steps 20 --metrics-every 4 --resume "$TMP/ck" --metrics "$TMP/link.jsonl"
s=$(lines "$TMP/r.jsonl" step)
[ "$RC" -eq 0 ] && [ "$s" = "1 4 8 10 10 11 12 16 20 20" ] && [ -L "$TMP/link.jsonl" ] \
    && pass "metrics/--resume appends after the checkpoint's step: no line twice, none past it kept (steps $s; through a symlink)" \
    || fail "metrics/--resume appends after its step" "exit $RC, steps '$s': $ERR"

# --- a file that is no metrics log is never overwritten by a resumed run ---
echo "my notes" > "$TMP/notes.txt"
expect_user_error "metrics/--resume refuses a file that is no metrics log" "notes.txt': line 1 is no metrics line" 60 \
    "$MICROPP" train --steps 20 --resume "$TMP/ck" --metrics "$TMP/notes.txt"
[ "$(cat "$TMP/notes.txt")" = "my notes" ] && pass "metrics/the user's file is left as it was" || fail "metrics/the user's file is left" "$(head -c 100 "$TMP/notes.txt")"
# ... nor by a fresh run, whatever it holds: no newline at all, a NUL byte (a binary), through a symlink;
# a NUL inside a real log names its line instead of dropping every later one; the checkpoint's own
# files, --data and --labels are the run's inputs (the file is the run's, so it resumes after)
printf 'my notes' > "$TMP/nonl.txt"; ln -s nonl.txt "$TMP/nonl-link"
printf '{"step":1}\n\177ELF\0\0\0' > "$TMP/bin"
python3 -c "import sys; t=open(sys.argv[1],'rb').read(); open(sys.argv[2],'wb').write(t.replace(b'\"step\":4', b'\"step\"\0:4', 1))" "$TMP/r.jsonl" "$TMP/nul.jsonl"
cp "$TMP/nul.jsonl" "$TMP/nul.keep"; stf=$(ls "$TMP"/ck/*.safetensors | head -1); cp "$stf" "$TMP/st.keep"
python3 -c "import struct,sys; open(sys.argv[1],'wb').write(struct.pack('>IIII', 0x803, 64, 4, 4) + bytes(64 * 16)); open(sys.argv[2],'wb').write(struct.pack('>II', 0x801, 64) + bytes(64))" "$TMP/x.idx" "$TMP/y.idx"
cp "$TMP/x.idx" "$TMP/x.keep"
expect_user_error "metrics/a fresh run refuses a file with no newline" "nonl.txt': line 1 is no metrics line" 60 \
    "$MICROPP" train --steps 2 --metrics "$TMP/nonl.txt"
expect_user_error "metrics/... through a symlink" "nonl-link': line 1 is no metrics line" 60 "$MICROPP" train --steps 2 --metrics "$TMP/nonl-link"
expect_user_error "metrics/--resume refuses a file with no newline" "nonl.txt': line 1 is no metrics line" 60 \
    "$MICROPP" train --steps 20 --resume "$TMP/ck" --metrics "$TMP/nonl.txt"
expect_user_error "metrics/--resume refuses a binary (a NUL byte)" "bin': line 2 holds a NUL byte, so it is no metrics log" 60 \
    "$MICROPP" train --steps 20 --resume "$TMP/ck" --metrics "$TMP/bin"
expect_user_error "metrics/a NUL inside a metrics log names its line" "nul.jsonl': line 2 holds a NUL byte" 60 \
    "$MICROPP" train --steps 20 --resume "$TMP/ck" --metrics "$TMP/nul.jsonl"
expect_user_error "metrics/--resume refuses its checkpoint's own stage file" "is a file of the checkpoint folder --resume" 60 \
    "$MICROPP" train --steps 20 --resume "$TMP/ck" --metrics "$stf"
expect_user_error "metrics/--data is an input" "--metrics '$TMP/x.idx' is also --data '$TMP/x.idx', which train reads" 60 \
    "$MICROPP" train --steps 2 --data "$TMP/x.idx" --labels "$TMP/y.idx" --inputs 16 --classes 2 --metrics "$TMP/x.idx"
[ "$(cat "$TMP/nonl.txt")" = "my notes" ] && [ "$(head -c 10 "$TMP/bin")" = '{"step":1}' ] && cmp -s "$TMP/nul.jsonl" "$TMP/nul.keep" \
    && cmp -s "$stf" "$TMP/st.keep" && cmp -s "$TMP/x.idx" "$TMP/x.keep" && pass "metrics/each refused file is left as it was" \
    || fail "metrics/each refused file is left as it was" "$(ls -l "$TMP")"
run 60 "$MICROPP" train --steps 12 --resume "$TMP/ck" --json
[ "$RC" -eq 0 ] && pass "metrics/the checkpoint still resumes" || fail "metrics/the checkpoint still resumes" "exit $RC: $ERR"

# --- bad paths end every rank at once: a folder, a FIFO nobody reads (2 s), a missing folder ---
expect_user_error "metrics/a folder: exit 2 on every rank" "cannot write --metrics '$TMP': Is a directory \\(it is a folder" 60 \
    mpiexec -n 2 "$MICROPP" train --mode pp --steps 4 --metrics "$TMP"
mkfifo "$TMP/fifo"
t0=$(date +%s.%N)
expect_user_error "metrics/a FIFO nobody reads: exit 2 on every rank" "it is a FIFO that no process opened for reading within 2 s" 60 \
    mpiexec -n 2 "$MICROPP" train --mode pp --steps 4 --metrics "$TMP/fifo"
t=$(python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$(date +%s.%N)")
python3 -c "import sys; sys.exit(float(sys.argv[1]) > 30)" "$t" && pass "metrics/... within seconds (${t} s)" || fail "metrics/FIFO: within seconds" "${t} s"
(cat "$TMP/fifo" > "$TMP/fromfifo" &)
run 60 "$MICROPP" train --steps 8 --metrics-every 4 --metrics "$TMP/fifo"
sleep 0.2
[ "$RC" -eq 0 ] && [ "$(lines "$TMP/fromfifo" step)" = "1 4 8 8" ] && pass "metrics/a FIFO with a reader gets the lines" \
    || fail "metrics/a FIFO with a reader" "exit $RC, read '$(head -c 200 "$TMP/fromfifo")': $ERR"

# --- a write that fails (a full disk): the run ends, exit 1, one line naming the file ---
run 60 "$MICROPP" train --steps 8 --metrics /dev/full --json
[ "$RC" -eq 1 ] && grep -q "writing --metrics '/dev/full' failed: No space left on device: the disk is full" <<<"$ERR" \
    && [ "$(json_get '["completed"]')" = False ] \
    && pass "metrics/a full disk: exit 1, one line, \"completed\": false" || fail "metrics/a full disk" "exit $RC: $ERR"

# --- '-': standard output, the lines and then --json's summary; never into the text report ---
run 60 "$MICROPP" train --steps 8 --metrics-every 4 --metrics - --json
n=$(grep -c '^{"step":' "$TMP/out") last=$(tail -n 1 "$TMP/out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["completed"])')
[ "$RC" -eq 0 ] && [ "$n" = 4 ] && [ "$last" = True ] && pass "metrics/- with --json: 4 lines (3 steps, the test point), then the summary object" \
    || fail "metrics/- with --json" "exit $RC, $n step lines, last line's completed '$last'"
expect_user_error "metrics/- without --json is refused" "train: --metrics - would mix its JSON lines into the text" 60 \
    "$MICROPP" train --steps 8 --metrics -

# --- the live line: on a terminal, rewritten in place with "\r" and cleared before every other line ---
L="--hidden 256 --batch 128 --steps 100 --log-every 50"
# screen FILE: what a terminal shows at the end: per line, the text after its last "\r", less "erase to the end"
screen() { python3 -c 'import sys; t=open(sys.argv[1], encoding="utf-8", errors="replace", newline="").read().replace("\x1b[K", "").replace("\r\n", "\n"); print("\n".join(l.split("\r")[-1] for l in t.split("\n")))' "$1"; }
if command -v script >/dev/null; then
    timeout -k 5 120 script -qfec "$MICROPP train $L" /dev/null > "$TMP/tty.out" 2>&1; RC=$?
    n=$(tr '\r' '\n' < "$TMP/tty.out" | grep -cE '^step [0-9]+/100 \| [0-9.]+[kM]? samples/s \| [0-9:]+( s)? left.\[K$')
    left=$(tr '\r' '\n' < "$TMP/tty.out" | grep -oE '[0-9]+ s left' | sed -n '1p;$p' | cut -d' ' -f1 | paste -sd' ')
    if [ "$RC" -eq 0 ] && [ "$n" -ge 1 ]; then pass "live/on a terminal: $n live lines (steps done, samples/s, time left, first and last: $left s)"
    else fail "live/on a terminal" "exit $RC, $n live lines: $(head -c 400 "$TMP/tty.out" | cat -v)"; fi
    "$MICROPP" train $L > "$TMP/pipe.out" 2>&1
    # the screen holds the same lines as the log without a terminal (times aside): no live text left over
    if diff <(screen "$TMP/tty.out" | sed -E 's/[0-9.]+ ?k? ?(ms|samples\/s|GFLOP\/s)//g; s/MFU [0-9.]+%//' | grep .) \
            <(sed -E 's/[0-9.]+ ?k? ?(ms|samples\/s|GFLOP\/s)//g; s/MFU [0-9.]+%//' "$TMP/pipe.out" | grep .) > "$TMP/screen.diff"; then
        pass "live/cleared before every other line: the screen ends as the log without it"
    else fail "live/cleared before every other line" "$(head -c 400 "$TMP/screen.diff" | cat -v)"; fi
    grep -q $'[\r\x1b]' "$TMP/pipe.out" && fail "live/a pipe: nothing changes" "$(grep -c $'\r' "$TMP/pipe.out") carriage returns" \
        || pass "live/a pipe: nothing changes (no carriage return, no escape)"
    timeout -k 5 120 script -qfec "$MICROPP train $L --json" /dev/null > "$TMP/ttyj.out" 2>&1
    tr -d '\r' < "$TMP/ttyj.out" | python3 -c 'import json,sys; json.load(sys.stdin)' 2>/dev/null && ! grep -q $'\x1b' "$TMP/ttyj.out" \
        && pass "live/--json on a terminal: the JSON object alone" || fail "live/--json on a terminal" "$(head -c 300 "$TMP/ttyj.out" | cat -v)"
    timeout -k 5 120 script -qfec "$MICROPP train $L --live off" /dev/null > "$TMP/ttyo.out" 2>&1
    grep -q $'\x1b' "$TMP/ttyo.out" && fail "live/--live off" "escapes on the terminal" || pass "live/--live off: none on a terminal"
else skip "live/on a terminal" "script(1) is not installed (util-linux)"; fi
run 120 mpiexec -n 2 "$MICROPP" train --mode pp $L --live on
[ "$RC" -eq 0 ] && grep -qE $'\rstep [0-9]+/100 \\|' "$TMP/out" && pass "live/--live on: under mpiexec (rank 0 writes to a pipe) too" \
    || fail "live/--live on under mpiexec" "exit $RC: $(head -c 300 "$TMP/out" | cat -v)"
expect_user_error "live/--live on with --json is refused" "train: --live on rewrites a line of text and --json prints one JSON object" 30 \
    "$MICROPP" train --steps 2 --live on --json
