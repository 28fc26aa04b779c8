#!/usr/bin/env bash
# tests/t_hosts.sh: two hosts on one machine, in two tiers.
# Fake hosts: Hydra builds its process map from its host list (mpiexec -launcher fork -hosts
# nodeA:2,nodeB:2), so MPI sees two nodes: the header shows the placement (--placement stages, replicas,
# and auto's choice for a dp-heavy and a pp-heavy run) and --allreduce auto never takes shared memory
# across them (hier instead: tests/t_hier.sh). Real network stacks (root and `ip netns` needed, else SKIP): two
# namespaces joined by a veth pair, Hydra launching into them through tests/netns-launcher.sh; pp,
# ddp and hybrid --verify over TCP, traffic seen on the veth; a link taken down mid-run is ended by
# the watchdog.
# It runs beside other files (tests/run.sh): a run's end is judged by the finalize backstop's own line
# (comms/watchdog.c finalize_overdue always prints it), not by the clock, and the link-down bound is
# --timeout 3 + 10 s.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
A="--layers 8 --hidden 32 --classes 4 --batch 16 --samples 64 --log-every 0"
TWO="-launcher fork -hosts nodeA:2,nodeB:2"

run 60 mpiexec $TWO -n 4 "$MICROPP" train --mode ddp $A --steps 2 --verify --json
got=$(printf '%s' "$OUT" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['nodes'], d['allreduce'])" 2>/dev/null)
if [ "$RC" -eq 0 ] && [ "$got" = "2 hier" ]; then pass "hosts/fake: ddp on nodeA:2,nodeB:2 sees 2 nodes, --allreduce auto takes hier"
else fail "hosts/fake: ddp on nodeA:2,nodeB:2 sees 2 nodes, --allreduce auto takes hier" "exit $RC, nodes/allreduce '$got': $(printf '%s' "$ERR" | head -c 300)"; fi
run 60 mpiexec -launcher fork -hosts nodeA:4 -n 4 "$MICROPP" train --mode ddp $A --steps 2 --json
got=$(printf '%s' "$OUT" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['nodes'], d['allreduce'])" 2>/dev/null)
if [ "$RC" -eq 0 ] && [ "$got" = "1 shm" ]; then pass "hosts/fake: the same on nodeA:4 (one node) takes shm"
else fail "hosts/fake: the same on nodeA:4 (one node) takes shm" "exit $RC, nodes/allreduce '$got'"; fi
# --placement: which neighbours share a node. stages: a replica's pipeline (the all-reduce crosses
# nodes); replicas: a stage's data-parallel group (the pipeline crosses, and the all-reduce fits in
# a node's shared memory, so --allreduce auto takes shm).
STAGES='placement: host nodeA: rank 0 stage 0 replica 0, rank 1 stage 1 replica 0 | host nodeB: rank 2 stage 0 replica 1, rank 3 stage 1 replica 1'
REPLICAS='placement: host nodeA: rank 0 stage 0 replica 0, rank 1 stage 0 replica 1 | host nodeB: rank 2 stage 1 replica 0, rank 3 stage 1 replica 1'
hybrid_placed() {  # NAME WANT-LINE WANT-LINE2 ARGS...: a fake 2-node hybrid --verify whose header shows both lines
    local name=$1 want=$2 want2=$3; shift 3
    run 60 mpiexec ${HOSTS:-$TWO} -n 4 "$MICROPP" train --mode hybrid --pp 2 --dp 2 --steps 2 --verify "$@"
    local blocks=1  # (the note on ranks not in node blocks only where they are not)
    printf '%s' "$OUT" | grep -q '^note: the ranks are not in node blocks' && blocks=0
    if [ -n "${HOSTS:-}" ]; then blocks=$((!blocks)); fi
    if [ "$RC" -eq 0 ] && printf '%s' "$OUT" | grep -qF -- "$want" && printf '%s' "$OUT" | grep -qF -- "$want2" && printf '%s' "$OUT" | grep -q -- '-> ok' && [ "$blocks" = 1 ]; then pass "$name"
    else fail "$name" "exit $RC: $(printf '%s' "$OUT" | grep placement | tr '\n' ' ') $(printf '%s' "$OUT" | grep -m1 'data parallel') $(printf '%s' "$ERR" | head -c 300)"; fi
}
hybrid_placed "hosts/fake: hybrid 2x2 --placement stages --verify: each replica's stages on one node, the all-reduce across (mpi)" \
    "$STAGES" "all-reduce mpi" --placement stages --micro-batches 4 $A
hybrid_placed "hosts/fake: hybrid 2x2 --placement replicas --verify: each stage's replicas on one node, so the all-reduce takes shm" \
    "$REPLICAS" "all-reduce shm" --placement replicas --micro-batches 4 $A
# auto: 16 rows x 32 wide against 8 x 32 x 32 weights is dp-heavy (69 kB vs 4 kB a step)...
hybrid_placed "hosts/fake: hybrid --placement auto, dp-heavy: the all-reduce stays on a node" \
    "$REPLICAS" "-> auto keeps the all-reduce on a node" --micro-batches 4 $A
# ...and 4096 rows x 16 wide against 2 x 16 x 16 weights is pp-heavy.
hybrid_placed "hosts/fake: hybrid --placement auto, pp-heavy: the pipeline stays on a node" \
    "$STAGES" "-> auto keeps the pipeline on a node" --micro-batches 8 --layers 2 --hidden 16 --classes 4 --batch 4096 --samples 8192 --log-every 0
# Ranks dealt out node by node (-hosts nodeA,nodeB: rank 0 on A, 1 on B, 2 on A, ..., as srun -m
# cyclic does; issue 37): auto decides from the node map, says the ranks are not in node blocks, and
# takes the placement that keeps the heavier traffic on a node there: the other one.
CYCLIC_NOTE='note: the ranks are not in node blocks (rank 0 on nodeA, rank 1 on nodeB, rank 2 on nodeA, rank 3 on nodeB'
HOSTS="-launcher fork -hosts nodeA,nodeB" hybrid_placed \
    "hosts/fake cyclic: dp-heavy: auto takes stages, so each stage's replicas share a node and the all-reduce takes shm" \
    'placement: host nodeA: rank 0 stage 0 replica 0, rank 2 stage 0 replica 1 | host nodeB: rank 1 stage 1 replica 0, rank 3 stage 1 replica 1' \
    "-> auto keeps the all-reduce on a node" --micro-batches 4 $A
grep -qF "$CYCLIC_NOTE" <<<"$OUT" && grep -q "all-reduce shm" <<<"$OUT" && pass "hosts/fake cyclic: the note names the ranks' hosts, shm within a node" \
    || fail "hosts/fake cyclic: the note names the ranks' hosts, shm within a node" "$(printf '%s' "$OUT" | grep -E 'note|all-reduce' | tr '\n' ' ')"
HOSTS="-launcher fork -hosts nodeA,nodeB" hybrid_placed \
    "hosts/fake cyclic: pp-heavy: auto takes replicas, so each pipeline shares a node" \
    'placement: host nodeA: rank 0 stage 0 replica 0, rank 2 stage 1 replica 0 | host nodeB: rank 1 stage 0 replica 1, rank 3 stage 1 replica 1' \
    "-> auto keeps the pipeline on a node" --micro-batches 8 --layers 2 --hidden 16 --classes 4 --batch 4096 --samples 8192 --log-every 0
# Over UCX's TCP transport MPICH 4.0.2's MPI_Finalize deadlocked in most runs (finalize.c): every run
# must end by itself, not at the watchdog's finalize backstop 5 s later, which says so on stderr ("MPI_Finalize
# had not returned"; a backstop that failed too leaves the run to its 60 s timeout). No bound by the clock:
# beside other files on 2 cores a 4-rank run may take more than the backstop's 5 s and still end by itself.
slow=""
for i in 1 2 3 4 5 6; do
    t0=$(date +%s.%N)
    run 60 env UCX_TLS=tcp,self mpiexec $TWO -n 4 "$MICROPP" train --mode hybrid --pp 2 --dp 2 --micro-batches 4 $A --steps 2
    secs=$(python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$(date +%s.%N)")
    if [ "$RC" -ne 0 ] || printf '%s' "$ERR" | grep -q 'MPI_Finalize had not returned'; then
        slow="$slow run $i: exit $RC in ${secs}s $(printf '%s' "$ERR" | grep -m1 -v '^$' | head -c 200);"
    fi
done
if [ -z "$slow" ]; then pass "hosts/fake: 6 runs of 4 ranks over TCP each end by themselves (MPI_Finalize does not hang, the backstop never fires)"
else fail "hosts/fake: 6 runs of 4 ranks over TCP each end by themselves (MPI_Finalize does not hang, the backstop never fires)" "$slow"; fi
expect_user_error "hosts/fake: --allreduce shm across nodes -> one line, exit 2" "shm needs the 4 replicas of each stage on one node, and only 2 share" 60 \
    mpiexec $TWO -n 4 "$MICROPP" train --mode ddp $A --steps 2 --allreduce shm

# ---- real network stacks: two namespaces, a veth pair ----
NS_A=mpp$$a NS_B=mpp$$b  # names of our own (veth names: at most 15 characters)
netns_cleanup() { ip netns del "$NS_A" 2>/dev/null; ip netns del "$NS_B" 2>/dev/null; }
trap 'netns_cleanup; rm -rf "$TMP"' EXIT
netns_setup() {
    [ "$(id -u)" = 0 ] || { echo "not root"; return 1; }
    command -v ip >/dev/null || { echo "no ip command (iproute2)"; return 1; }
    ip netns add "$NS_A" 2>&1 && ip netns add "$NS_B" 2>&1 || return 1
    ip link add "${NS_A}0" type veth peer name "${NS_B}0" 2>&1 || return 1
    ip link set "${NS_A}0" netns "$NS_A" && ip link set "${NS_B}0" netns "$NS_B" &&
    ip -n "$NS_A" addr add 10.77.0.1/24 dev "${NS_A}0" && ip -n "$NS_B" addr add 10.77.0.2/24 dev "${NS_B}0" &&
    ip -n "$NS_A" link set lo up && ip -n "$NS_B" link set lo up &&
    ip -n "$NS_A" link set "${NS_A}0" up && ip -n "$NS_B" link set "${NS_B}0" up 2>&1
}
rx_bytes() { ip -n "$NS_B" -s link show "${NS_B}0" | awk 'f { print $1; exit } /RX:/ { f = 1 }'; }
# mpiexec in the first namespace, told its interface (or the far proxy cannot call back); UCX told to
# use TCP (across namespaces that share IPC it would take shared memory and bypass the veth).
ACROSS=(env UCX_TLS=tcp,self ip netns exec "$NS_A" mpiexec -iface "${NS_A}0" -launcher ssh -launcher-exec "$ROOT/tests/netns-launcher.sh" -hosts "$NS_A:2,$NS_B:2")

if ! why=$(netns_setup); then
    for t in pp ddp "hybrid --placement stages" "hybrid --placement replicas" link-down; do skip "hosts/netns: $t across two namespaces" "no network namespaces here: ${why:-ip netns failed}"; done
else
    for m in "pp --micro-batches 4" "ddp" "hybrid --pp 2 --dp 2 --micro-batches 4 --placement stages" "hybrid --pp 2 --dp 2 --micro-batches 4 --placement replicas"; do
        name=${m%% *}; [ "$name" = hybrid ] && name="hybrid --placement ${m##* }"
        before=$(rx_bytes)
        run 90 "${ACROSS[@]}" -n 4 "$MICROPP" train --mode $m $A --steps 3 --verify --timeout 30
        bytes=$(( $(rx_bytes) - before ))
        if [ "$RC" -eq 0 ] && printf '%s' "$OUT" | grep -q -- '-> ok' && printf '%s' "$OUT" | grep -q '^placement: host ' && [ "$bytes" -gt 10000 ]; then
            pass "hosts/netns: $name --verify across two namespaces ($bytes bytes over the veth)"
        else fail "hosts/netns: $name --verify across two namespaces" "exit $RC, $bytes bytes over the veth: $(printf '%s' "$ERR" | tail -c 400)"; fi
    done
    # The link goes down mid-run: nothing reports an error, and only the watchdog ends the job.
    "${ACROSS[@]}" -n 4 "$MICROPP" train --mode pp --micro-batches 4 ${A/--log-every 0/--log-every 1} --steps 1000000 --timeout 3 --save "$TMP/ld" >"$TMP/ld.out" 2>"$TMP/ld.err" &
    job=$!
    for _ in $(seq 300); do grep -q '^step 2/' "$TMP/ld.out" 2>/dev/null && break; sleep 0.1; done
    t0=$(date +%s.%N)
    ip -n "$NS_A" link set "${NS_A}0" down
    # Every rank, on both sides of the dead link, must be gone within --timeout + 10 s.
    for _ in $(seq 130); do [ -z "$(left_behind "$TMP/ld")" ] && break; sleep 0.1; done
    secs=$(python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$(date +%s.%N)")
    left=$(left_behind "$TMP/ld")
    ip -n "$NS_A" link set "${NS_A}0" up  # lets whatever is left finish
    for p in $left; do kill -KILL "$p" 2>/dev/null; done
    for _ in $(seq 100); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$job" 2>/dev/null && kill -TERM "$job" 2>/dev/null
    wait "$job"
    if [ -z "$left" ] && grep -q 'watchdog: waited' "$TMP/ld.err"; then pass "hosts/netns: a link taken down mid-run: the watchdog ends every rank in ${secs}s"
    else fail "hosts/netns: a link taken down mid-run: the watchdog ends every rank" "left after ${secs}s: '$left': $(head -c 400 "$TMP/ld.err")"; fi
fi
