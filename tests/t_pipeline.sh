# tests/t_pipeline.sh: pipeline parallelism over MPI: every schedule x checkpointing x partition
# passes --verify on 2 and 4 ranks, losses match the monolith, memory counters follow the theory,
# every (K, M) runs (M < K too), pingpong validates its data, and bad inputs end every rank with 2.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
SMALL="--layers 8 --hidden 32 --batch 24 --steps 2 --log-every 0"

# losses over 20 steps: every schedule equals the monolith (the even, unrecomputed --verify runs train 20 steps)
run 60 "$MICROPP" train --layers 8 --hidden 32 --batch 24 --steps 20 --json; mono="$OUT"
for n in 2 4; do
    for sched in naive gpipe 1f1b; do
        for ck in "" "--checkpoint-activations"; do
            for part in even uneven; do
                p=""; [ $part = uneven ] && { [ $n = 2 ] && p="--partition 5,3" || p="--partition 3,2,2,1"; }
                name="pp/verify K=$n $sched ${ck:+ckpt }$part"
                steps=2; [ -z "$ck" ] && [ $part = even ] && steps=20
                run 90 mpiexec -n $n "$MICROPP" train --mode pp --schedule $sched --micro-batches 4 ${SMALL/--steps 2/--steps $steps} $ck $p --verify --json
                if [ "$RC" -eq 0 ] && [ "$(json_get '["verify_ok"]')" = True ]; then pass "$name (err $(json_get '["verify_max_rel_err"]'))"
                else fail "$name" "exit $RC $(printf '%s' "$ERR" | tail -2)"; fi
                [ $steps = 20 ] || continue
                python3 - "$mono" "$OUT" <<'PY' && pass "pp/losses K=$n $sched match monolith over 20 steps" || fail "pp/losses K=$n $sched match monolith" "rc $RC $ERR"
import json, sys
a = json.loads(sys.argv[1])["losses"]; b = json.loads(sys.argv[2])["losses"]
sys.exit(0 if len(a) == len(b) == 20 and all(abs(x - y) <= 1e-4 * abs(x) + 1e-6 for x, y in zip(a, b)) else 1)
PY
            done
        done
    done
done

# memory counters: gpipe stashes M, 1f1b min(K-s, M); checkpointing keeps less
peak() { json_get "[\"$1\"]"; }
run 60 mpiexec -n 4 "$MICROPP" train --mode pp --schedule gpipe --micro-batches 6 $SMALL --json; g_if=$(peak peak_inflight); g_b=$(peak peak_activation_bytes)
run 60 mpiexec -n 4 "$MICROPP" train --mode pp --schedule 1f1b --micro-batches 6 $SMALL --json; f_if=$(peak peak_inflight); f_b=$(peak peak_activation_bytes)
run 60 mpiexec -n 4 "$MICROPP" train --mode pp --schedule gpipe --micro-batches 6 $SMALL --checkpoint-activations --json; c_b=$(peak peak_activation_bytes)
python3 - "$g_if" "$f_if" "$g_b" "$f_b" "$c_b" <<'PY'
import json, sys
g_if, f_if, g_b, f_b, c_b = (json.loads(x) for x in sys.argv[1:])
K, M = 4, 6
def check(name, ok, why):
    print(("PASS %s" % name) if ok else ("FAIL %s: %s" % (name, why)))
check("memory/gpipe stashes M micro-batches on every stage", g_if == [M] * K, g_if)
check("memory/1f1b stashes min(K-s, M) on stage s", f_if == [min(K - s, M) for s in range(K)], f_if)
every = len(f_b) == len(g_b) == len(c_b) == K  # a stage per rank: all() over nothing is no check
check("memory/1f1b peak bytes below gpipe's on every stage but the first", every and all(f < g for f, g in zip(f_b[1:], g_b[1:])) and f_b[0] <= g_b[0], (f_b, g_b))
check("memory/checkpointing cuts gpipe's peak activation bytes", every and all(c < g for c, g in zip(c_b, g_b)), (c_b, g_b))
PY

# every (K, M) runs to the end, including M < K
bad=""
for n in 2 3 4; do for m in 1 2 3 5; do for sched in naive gpipe 1f1b; do
    run 60 mpiexec -n $n "$MICROPP" train --mode pp --schedule $sched --micro-batches $m --layers 8 --hidden 16 --batch 60 --steps 2 --log-every 0 --json
    [ "$RC" -eq 0 ] || bad="$bad $sched/K=$n/M=$m(rc=$RC)"
done; done; done
[ -z "$bad" ] && pass "pp/every schedule runs for K in 2..4, M in {1,2,3,5}" || fail "pp/grid of (K, M)" "$bad"

# text summary shows measured and theoretical bubble per stage, header shows the partition
run 60 mpiexec -n 2 "$MICROPP" train --mode pp --schedule gpipe --micro-batches 4 --layers 8 --hidden 32 --batch 24 --steps 3 --partition 5,3
if [ "$RC" -eq 0 ] && grep -qE '^  stage 0: layers 0-4$' <<<"$OUT" && grep -qE '^  stage 1: layers 5-7 \+ head$' <<<"$OUT" \
   && grep -qE '^1 +5-7 +[0-9.]+ +0\.200' <<<"$OUT"; then pass "pp/summary: partition and measured vs theory bubble"
else fail "pp/summary: partition and measured vs theory bubble" "$OUT"; fi

# bad input: one line, exit 2, quickly, on every rank
P="$MICROPP train --mode pp --layers 8 --hidden 16 --batch 24 --steps 2"
expect_user_error "pp-bad/one rank" "needs at least 2 ranks" 20 mpiexec -n 1 $P
expect_user_error "pp-bad/K > L" "4 stages \(--pp\) but only 3 layers" 20 mpiexec -n 4 ${P/--layers 8/--layers 3} --partition 1,1,1,1
expect_user_error "pp-bad/partition sum" "sums to 7 but --layers is 8" 20 mpiexec -n 2 $P --partition 4,3
expect_user_error "pp-bad/partition zero" "stage 1 gets 0 layers" 20 mpiexec -n 2 $P --partition 8,0
expect_user_error "pp-bad/partition count" "has 3 entries but there are 2 stages" 20 mpiexec -n 2 $P --partition 4,2,2
expect_user_error "pp-bad/partition syntax" "not a comma-separated list" 20 mpiexec -n 2 $P --partition 4,,4
expect_user_error "pp-bad/batch not divisible by M" "--batch 24 is not divisible by --micro-batches 5: .*\(1, 2, 3, 4, 6, 8" 20 mpiexec -n 2 $P --micro-batches 5
expect_user_error "pp-bad/M < 1" "--micro-batches = 0 is out of range" 20 mpiexec -n 2 $P --micro-batches 0
expect_user_error "pp-bad/unknown schedule" "--schedule = 'zigzag' is not one of naive\|gpipe\|1f1b" 20 mpiexec -n 2 $P --schedule zigzag
expect_user_error "pp-bad/monolith under mpiexec" "runs in one process but 2 were started" 20 mpiexec -n 2 "$MICROPP" train --mode monolith

# pingpong: the lab, the sweep validates its bytes, exactly 2 ranks
run 30 mpiexec -n 2 "$MICROPP" pingpong
[ "$RC" -eq 0 ] && grep -q 'rank 1: received tensor \[0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4\] from rank 0' <<<"$OUT" \
  && grep -q 'got it back doubled \[1, 2, 3, 4, 5, 6, 7, 8\]' <<<"$OUT" && pass "pingpong/lab" || fail "pingpong/lab" "$RC $OUT $ERR"
run 60 mpiexec -n 2 "$MICROPP" pingpong -b 1 -e 1M -f 4 -n 2 -w 1 --json  # (every size checked: few iterations)
python3 - "$OUT" <<'PY' && pass "pingpong/sweep: sizes 1 B..1 MiB by 4, no wrong bytes" || fail "pingpong/sweep" "rc $RC $OUT $ERR"
import json, sys
d = json.loads(sys.argv[1]); rows = d["rows"]
sys.exit(0 if [r["size_bytes"] for r in rows] == [4 ** i for i in range(11)] and all(r["wrong"] == 0 and r["latency_us"] > 0 and r["bandwidth_gbs"] > 0 for r in rows) else 1)
PY
run 60 env MICROPP_WAIT=spin mpiexec -n 2 "$MICROPP" pingpong --sweep -e 64K -n 2 -w 1  # (the header: few iterations)
[ "$RC" -eq 0 ] && grep -qE '^# +size\(B\) +iters +latency\(us\) +bandwidth\(GB/s\) +#wrong' <<<"$OUT" && pass "pingpong/table header with units" || fail "pingpong/table header" "$OUT"
expect_user_error "pingpong/3 ranks" "needs exactly 2 ranks, got 3" 20 mpiexec -n 3 "$MICROPP" pingpong
expect_user_error "pingpong/reversed range" "--min-bytes 1024 is above --max-bytes 16" 20 mpiexec -n 2 "$MICROPP" pingpong -b 1K -e 16
expect_user_error "pingpong/bad size" "expects a size like" 20 mpiexec -n 2 "$MICROPP" pingpong -e 4Q

# --verify catches a wrong gradient: MICROPP_FAULT=rank:1:grad moves that rank's largest gradient by 0.1%
for n in 2 4; do
    run 60 env MICROPP_FAULT=$((n - 1)):1:grad mpiexec -n $n "$MICROPP" train --mode pp --micro-batches 4 $SMALL --verify
    if [ "$RC" -eq 1 ] && grep -q 'FAILED' <<<"$OUT" && grep -q 'micropp: --verify failed: worst relative error 0.001' <<<"$ERR"; then pass "pp/verify fails on a gradient 0.1% off (K=$n)"
    else fail "pp/verify fails on a gradient 0.1% off (K=$n)" "exit $RC: $(tail -3 <<<"$OUT") $ERR"; fi
done
run 60 env MICROPP_FAULT=0:1:grad "$MICROPP" train --mode manual --parts 2 $SMALL --verify
[ "$RC" -eq 1 ] && grep -q FAILED <<<"$OUT" && pass "manual/verify fails on a gradient 0.1% off" || fail "manual/verify fails on a gradient 0.1% off" "exit $RC"
expect_user_error "pp-bad/--transport outside a pipeline" "--transport applies to a pipeline \(--pp > 1\) or tensor parallelism \(--tp > 1\), and this run is pp 1 x dp 1 x tp 1" 20 "$MICROPP" train --transport mpi


# a file only some ranks can read: every rank takes the same verdict at once (not a 10 s stall)
echo '{"steps": 2}' > "$TMP/ok.json"
python3 - "$TMP" <<'PY'
import struct, sys
d = sys.argv[1]
def save(path, descr, shape, nbytes):
    h = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    h += " " * ((64 - (10 + len(h) + 1) % 64) % 64) + "\n"
    open(path, "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + b"\0" * nbytes)
save(d + "/x.npy", "<f4", "(8, 16)", 512)
save(d + "/y.npy", "<i4", "(8,)", 32)
PY
# The same command line everywhere (the launch agreement insists), relative paths that rank 1's "node"
# (its own working directory) lacks.
mkdir -p "$TMP/node1"
printf '#!/bin/bash\ncd "%s"; if [ "$PMI_RANK" = 1 ]; then cd node1; fi\nexec "%s" train --mode pp --layers 4 --hidden 16 --batch 8 "$@"\n' "$TMP" "$MICROPP" > "$TMP/rank1-differs.sh"
chmod +x "$TMP/rank1-differs.sh"
# The line names the rank and host that could not read it, and how many could (a file missing on some nodes).
WHERE="\[on rank 1 \(host [^)]*\), while 1 rank could: is it on every host\?\]"
expect_user_error "pp-bad/config readable on rank 0 only: every rank ends at once, naming rank 1 and its host" "cannot read config 'ok.json'.* $WHERE" 8 mpiexec -n 2 "$TMP/rank1-differs.sh" --config ok.json
expect_user_error "pp-bad/data readable on rank 0 only: every rank ends at once, naming rank 1 and its host" "--data x.npy: cannot open.* $WHERE" 8 mpiexec -n 2 "$TMP/rank1-differs.sh" --data x.npy --labels y.npy
(cd "$TMP" && timeout 60 mpiexec -n 2 "$MICROPP" train --mode pp --layers 4 --hidden 16 --batch 8 --steps 2 --save ck >/dev/null 2>&1)
expect_user_error "pp-bad/--resume readable on rank 0 only: naming rank 1 and its host" "--resume ck: .*cannot open.* $WHERE" 30 mpiexec -n 2 "$TMP/rank1-differs.sh" --resume ck --steps 4
expect_user_error "pp-bad/no line names a rank when none could read it" "cannot read config 'none.json': No such file or directory \(check the path\)$" 8 mpiexec -n 2 "$TMP/rank1-differs.sh" --config none.json
# --save to a folder rank 1 does not see (its own "node" makes another): refused at start-up (issue 37)
expect_user_error "pp-bad/--save a folder rank 1 does not see: at start-up, naming rank 1 and its host" "train: --save sv: rank 1 \(host [^)]*\) does not see the folder rank 0 made on" 30 \
    mpiexec -n 2 "$TMP/rank1-differs.sh" --save sv --steps 2

# Waiting ranks yield their core when a node has more ranks than cores (comms/watchdog.c's
# wd_share_cores; MICROPP_WAIT overrides): 4 ranks on 2 cores, a waiting rank that spins burns the core
# the rank it waits for needs, so the same run takes several times the CPU (measured: 3.5 s against 0.7).
cpu_of() {  # CMD...: the user + system CPU seconds of CMD and its children
    ( "$@" > /dev/null 2>&1; times ) | awk 'NR == 2 { split($1, u, /[ms]/); split($2, y, /[ms]/); print u[1] * 60 + u[2] + y[1] * 60 + y[2] }'
}
WAITRUN=(mpiexec -n 4 "$MICROPP" train --mode pp --layers 8 --hidden 32 --batch 24 --steps 30 --log-every 0 --schedule zb-h1 --micro-batches 6)
if [ "$(nproc)" -lt 4 ]; then
    spin=$(MICROPP_WAIT=spin cpu_of timeout 60 "${WAITRUN[@]}") yield=$(MICROPP_WAIT=yield cpu_of timeout 60 "${WAITRUN[@]}")
    if awk -v s="$spin" -v y="$yield" 'BEGIN { exit !(y < 0.6 * s) }'; then pass "pp/waits yield on $(nproc) cores: 4 ranks' CPU ${yield} s, spinning ${spin} s"
    else fail "pp/waits yield on $(nproc) cores" "4 ranks' CPU ${yield} s yielding, ${spin} s spinning: expected under 60%"; fi
else skip "pp/waits yield" "$(nproc) cores: 4 ranks do not outnumber them"; fi
# MICROPP_WAIT=sleep (run.sh's, for files side by side): a rank that waits 2 s for a late peer
# (MICROPP_FAULT late) sleeps through it, where a spinning one burns its core
LATERUN=(env MICROPP_FAULT=1:1:late timeout 60 mpiexec -n 2 "$MICROPP" train --mode pp --layers 4 --hidden 32 --batch 24 --steps 2 --log-every 0)
spin=$(MICROPP_WAIT=spin cpu_of "${LATERUN[@]}") sleep=$(MICROPP_WAIT=sleep cpu_of "${LATERUN[@]}")
if awk -v s="$spin" -v z="$sleep" 'BEGIN { exit !(z < 0.6 * s) }'; then pass "pp/MICROPP_WAIT=sleep: a 2 s wait costs ${sleep} CPU s, spinning ${spin} s"
else fail "pp/MICROPP_WAIT=sleep sleeps through a wait" "${sleep} CPU s sleeping, ${spin} s spinning: expected under 60%"; fi
expect_user_error "pp-bad/MICROPP_WAIT=nap: one line, exit 2" "MICROPP_WAIT=nap: expected spin, yield or sleep" 30 \
    env MICROPP_WAIT=nap mpiexec -n 2 "$MICROPP" train --mode pp --layers 4 --hidden 16 --batch 8 --steps 1
