#!/bin/bash
# tests/slowhosts.sh: slow hosts on one machine: N network namespaces on a bridge, each host's link
# shaped by tc (tbf: the bandwidth; netem: a one-way latency), each an MPI host that Hydra launches
# into through tests/netns-launcher.sh; runs one mpiexec across them and always removes them after.
#
#   tests/slowhosts.sh [--hosts N] [--ppn K] [--rate RATE] [--delay D] -- MPIEXEC-ARGS...
#   tests/slowhosts.sh --hosts 2 --ppn 2 --rate 100mbit -- -n 4 ./micropp allreduce --algo ring --size 4M
#
# --hosts N (2): namespaces h1..hN, 10.79.0.1..N/24, each joined to a bridge in a switch namespace by
#   a veth pair. --ppn K (1): ranks per host (mpiexec -hosts h1:K,...,hN:K). --rate RATE (1gbit): tc's
#   spelling (100mbit, 1gbit, 10gbit), set both ways on every host's link (the host's side shapes what
#   it sends, the switch's side what it receives). --delay D (none): one-way latency added to what
#   each host sends (0.1ms..10ms; needs the kernel's sch_netem). The mpiexec runs in h1 (told h1's
#   interface), with UCX on TCP and posix shared memory (UCX's cma, process_vm_readv, reaches across
#   namespaces and would bypass the links: measured 0.2 GB/s between two hosts at 100mbit; posix stays
#   inside a host here; SLOWHOSTS_UCX_TLS=... overrides). After the command, one line on stderr: the
#   bytes each host sent over its link ("slowhosts: bytes each host sent ..."). Exit: the command's; 3 with one line
#   "slowhosts: unavailable: WHY" where the hosts cannot be made (not root, no ip or tc, no netem for
#   --delay), so tests skip with the reason. Teardown: a trap on exit, error and signal stops the
#   command and deletes every namespace (with them the veths and the bridge). Root only.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
hosts=2 ppn=1 rate=1gbit delay=""
while [ $# -gt 0 ]; do
    case $1 in
        --hosts) hosts=$2; shift 2 ;;
        --ppn) ppn=$2; shift 2 ;;
        --rate) rate=$2; shift 2 ;;
        --delay) delay=$2; shift 2 ;;
        --) shift; break ;;
        *) echo "slowhosts: unknown option '$1': see the usage at the top of $0" >&2; exit 2 ;;
    esac
done
[ $# -gt 0 ] || { echo "slowhosts: no mpiexec arguments after --: see the usage at the top of $0" >&2; exit 2; }
case $hosts in ''|*[!0-9]*) echo "slowhosts: --hosts '$hosts' is not a count: use 2 to 200" >&2; exit 2 ;; esac
[ "$hosts" -ge 2 ] && [ "$hosts" -le 200 ] || { echo "slowhosts: --hosts $hosts: use 2 to 200" >&2; exit 2; }
# tbf's burst: a 64 KiB GSO packet at least (tbf drops a larger packet than its burst), or 2 ms of the rate.
burst=$(python3 -c "
import re, sys
v, u = re.fullmatch(r'([0-9]+(?:[.][0-9]+)?)([kmg]?)bit', sys.argv[1]).groups()
print(max(131072, int(float(v) * {'': 1, 'k': 1e3, 'm': 1e6, 'g': 1e9}[u] / 8 * 0.002)))" "$rate" 2>/dev/null) ||
    { echo "slowhosts: --rate '$rate' is not tc's NUMBER[k|m|g]bit: use e.g. 100mbit, 1gbit, 10gbit" >&2; exit 2; }

unavailable() { echo "slowhosts: unavailable: $1" >&2; exit 3; }
[ "$(id -u)" = 0 ] || unavailable "not root (network namespaces need it)"
command -v ip >/dev/null || unavailable "no ip command (iproute2: make deps installs it)"
command -v tc >/dev/null || unavailable "no tc command (iproute2: make deps installs it)"

P=sl$$  # our own names (interface names: at most 15 characters)
SW=${P}sw
job=""
teardown() {
    [ -n "$job" ] && kill -TERM "$job" 2>/dev/null && wait "$job" 2>/dev/null
    for i in $(seq "$hosts"); do ip netns del "${P}h$i" 2>/dev/null; done
    ip netns del "$SW" 2>/dev/null
}
trap teardown EXIT
trap 'exit 130' INT TERM HUP

# shape DEV NS WITH_DELAY: tbf at RATE on DEV, under a netem of DELAY when WITH_DELAY is 1 and one is asked for.
shape() {
    local dev=$1 ns=$2 with_delay=$3
    if [ "$with_delay" = 1 ] && [ -n "$delay" ]; then
        local err
        err=$(tc -n "$ns" qdisc add dev "$dev" root handle 1: netem delay "$delay" limit 100000 2>&1) ||
            { echo "--delay needs tc's netem, and it failed here (the kernel lacks sch_netem?): $err"; return 1; }
        tc -n "$ns" qdisc add dev "$dev" parent 1:1 handle 10: tbf rate "$rate" burst "$burst" latency 200ms 2>&1
    else
        tc -n "$ns" qdisc add dev "$dev" root tbf rate "$rate" burst "$burst" latency 200ms 2>&1
    fi
}

setup() {
    ip netns add "$SW" 2>&1 || return 1
    ip -n "$SW" link add br0 type bridge 2>&1 && ip -n "$SW" link set br0 up 2>&1 || return 1
    for i in $(seq "$hosts"); do
        local h=${P}h$i
        ip netns add "$h" 2>&1 || return 1
        ip link add "${h}" type veth peer name "${P}s$i" 2>&1 || return 1
        ip link set "$h" netns "$h" && ip link set "${P}s$i" netns "$SW" &&
        ip -n "$SW" link set "${P}s$i" master br0 && ip -n "$SW" link set "${P}s$i" up &&
        ip -n "$h" addr add "10.79.$((i / 250)).$((i % 250 + 1))/16" dev "$h" &&
        ip -n "$h" link set lo up && ip -n "$h" link set "$h" up 2>&1 || return 1
        shape "$h" "$h" 1 || return 1
        shape "${P}s$i" "$SW" 0 || return 1
    done
}
why=$(setup) || unavailable "${why:-setting up the namespaces failed}"

list=""
for i in $(seq "$hosts"); do list="$list,${P}h$i:$ppn"; done
echo "slowhosts: $hosts hosts (${list#,}), each link $rate${delay:+ and $delay one way}" >&2
env UCX_TLS=${SLOWHOSTS_UCX_TLS:-tcp,self,posix} ip netns exec "${P}h1" mpiexec -iface "${P}h1" -launcher ssh \
    -launcher-exec "$HERE/netns-launcher.sh" -hosts "${list#,}" "$@" &
job=$!
wait "$job"
rc=$?
job=""
sent=""
for i in $(seq "$hosts"); do
    sent="$sent, ${P}h$i $(ip -n "${P}h$i" -s link show "${P}h$i" | awk 'f { print $1; exit } /TX:/ { f = 1 }')"
done
echo "slowhosts: bytes each host sent over its link:${sent#,}" >&2
exit "$rc"
