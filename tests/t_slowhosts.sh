#!/usr/bin/env bash
# tests/t_slowhosts.sh: the slow hosts of tests/slowhosts.sh (namespaces on a bridge, links shaped by
# tc): the throttle holds (micropp pingpong between two hosts at 100 Mb/s measures about that, where the
# same hosts unshaped carry clearly more), a one-way --delay shows in the ping-pong's latency
# (where the kernel has netem), hier's all-reduce sends 2/3 of the flat ring's bytes across 2 hosts of
# 2 ranks, bad options end in one line, and no namespace is left behind.
# Root, ip and tc needed, else SKIP with the reason.
# It runs beside other files (tests/run.sh): the throttled link is the bottleneck whatever the load (its
# bandwidth within 0.5-1.1x of the rate), the unshaped one carries far over 1.5x that even on a loaded
# machine, the delay is a lower bound and hier's bytes are counted, not timed.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
SLOW=$ROOT/tests/slowhosts.sh
PING="$MICROPP pingpong -b 4M -e 4M -n 40 -w 2 --window 4 --json"
ours() { ip netns list 2>/dev/null | grep -c '^sl[0-9]*\(h[0-9]*\|sw\)\b'; }
before=$(ours)

bw() {  # the bandwidth (GB/s) of pingpong's JSON in $OUT
    printf '%s' "$OUT" | python3 -c "import json,sys; d=json.load(sys.stdin); print('%.4f' % d['rows'][-1]['bandwidth_gbs'])" 2>/dev/null
}
run 120 "$SLOW" --hosts 2 --rate 100mbit -- -n 2 $PING
if [ "$RC" -eq 3 ]; then
    why=$(printf '%s' "$ERR" | grep -m1 'slowhosts: unavailable' | sed 's/^slowhosts: unavailable: //')
    for t in "100mbit throttle" "unshaped is faster" "--delay" "hier's bytes" "no namespace left"; do skip "slowhosts: $t" "$why"; done
    exit 0
fi
slow=$(bw)
if [ "$RC" -eq 0 ] && python3 -c "import sys; b=float(sys.argv[1]); sys.exit(not 0.5 * 0.0125 <= b <= 1.1 * 0.0125)" "$slow" 2>/dev/null; then
    pass "slowhosts: 2 hosts at 100mbit: pingpong measures $slow GB/s (set: 0.0125)"
else fail "slowhosts: 2 hosts at 100mbit: pingpong measures about 0.0125 GB/s" "exit $RC, '$slow': $(printf '%s' "$ERR" | tail -c 300)"; fi
run 120 "$SLOW" --hosts 2 --rate 100gbit -- -n 2 $PING
fast=$(bw)
if [ "$RC" -eq 0 ] && python3 -c "import sys; sys.exit(not float(sys.argv[1]) > 1.5 * float(sys.argv[2]))" "$fast" "$slow" 2>/dev/null; then
    pass "slowhosts: the same hosts unshaped (100gbit) carry $fast GB/s, over 1.5x the throttled"
else fail "slowhosts: the same hosts unshaped carry over 1.5x the throttled" "exit $RC, '$fast' vs '$slow'"; fi

# A one-way delay of 5 ms each way: a small message's half round trip is at least 5 ms.
run 120 "$SLOW" --hosts 2 --rate 1gbit --delay 5ms -- -n 2 "$MICROPP" pingpong -b 8 -e 8 -n 20 -w 2 --json
lat=$(printf '%s' "$OUT" | python3 -c "import json,sys; print('%.0f' % json.load(sys.stdin)['rows'][-1]['latency_us'])" 2>/dev/null)
if [ "$RC" -eq 3 ]; then skip "slowhosts: --delay 5ms shows in the latency" "$(printf '%s' "$ERR" | grep -m1 unavailable | sed 's/^slowhosts: unavailable: //')"
elif [ "$RC" -eq 0 ] && python3 -c "import sys; sys.exit(not float(sys.argv[1]) >= 5000)" "$lat" 2>/dev/null; then
    pass "slowhosts: --delay 5ms: an 8-byte half round trip takes $lat us"
else fail "slowhosts: --delay 5ms shows in the latency" "exit $RC, '$lat' us: $(printf '%s' "$ERR" | tail -c 300)"; fi

# hier on 2 hosts of 2 ranks: the link carries 2/3 of the flat ring's bytes (each host sends n, where the
# ring's two crossing edges carry 2(D-1)/D n = 1.5 n each way), read off the counters slowhosts prints.
sent() {  # the bytes all hosts sent, from slowhosts' last line on stderr
    printf '%s\n' "$ERR" | python3 -c "
import re, sys
l = [x for x in sys.stdin if x.startswith('slowhosts: bytes each host sent')]
print(sum(int(b) for b in re.findall(r' (\d+)(?:,|$)', l[-1].split(':', 1)[1])) if l else '')"
}
declare -A BYTES SECS
for a in ring hier; do
    run 300 "$SLOW" --hosts 2 --ppn 2 --rate 1gbit -- -n 4 "$MICROPP" allreduce --algo $a --size 4M --iters 3 --warmup 0 --json
    BYTES[$a]=$(sent)
    SECS[$a]=$(printf '%s' "$OUT" | python3 -c "import json,sys; r=json.load(sys.stdin)['results'][0]; print('%.3f' % (r['time_us'] / 1e6) if r['wrong'] == 0 else 'wrong')" 2>/dev/null)
done
if [ -n "${BYTES[ring]}" ] && [ -n "${BYTES[hier]}" ] && [ "${SECS[hier]}" != wrong ] && [ "${SECS[ring]}" != wrong ] &&
   python3 -c "import sys; r = float(sys.argv[2]) / float(sys.argv[1]); sys.exit(not 0.6 <= r <= 0.72)" "${BYTES[ring]}" "${BYTES[hier]}" 2>/dev/null; then
    pass "slowhosts: hier on 2 hosts x 2 ranks sends ${BYTES[hier]} bytes over the links, the ring ${BYTES[ring]} (2/3; ${SECS[hier]} s against ${SECS[ring]} s a 4 MiB all-reduce)"
else fail "slowhosts: hier on 2 hosts x 2 ranks sends 2/3 of the ring's bytes over the links" "bytes ${BYTES[ring]:-?} ${BYTES[hier]:-?}, s ${SECS[ring]:-?} ${SECS[hier]:-?}: $(printf '%s' "$ERR" | tail -c 300)"; fi

run 20 "$SLOW" --hosts 1 -- -n 2 true
if [ "$RC" -eq 2 ] && [ "$(printf '%s\n' "$ERR" | grep -c .)" = 1 ] && printf '%s' "$ERR" | grep -q -- '--hosts 1: use 2 to 200'; then
    pass "slowhosts: --hosts 1 -> one line, exit 2"
else fail "slowhosts: --hosts 1 -> one line, exit 2" "exit $RC: $ERR"; fi
run 20 "$SLOW" --rate fast -- -n 2 true
if [ "$RC" -eq 2 ] && [ "$(printf '%s\n' "$ERR" | grep -c .)" = 1 ] && printf '%s' "$ERR" | grep -q -- "--rate 'fast' is not tc's"; then
    pass "slowhosts: --rate fast -> one line, exit 2"
else fail "slowhosts: --rate fast -> one line, exit 2" "exit $RC: $ERR"; fi
if [ "$(ours)" = "$before" ]; then pass "slowhosts: no namespace left behind (after runs, failures and refusals)"
else fail "slowhosts: no namespace left behind" "$(ip netns list | tr '\n' ' ')"; fi
