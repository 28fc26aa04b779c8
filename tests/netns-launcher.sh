#!/bin/bash
# tests/netns-launcher.sh: what Hydra runs instead of ssh (mpiexec -launcher ssh -launcher-exec THIS):
# called as `THIS [ssh options] HOST COMMAND...`, it runs COMMAND in the network namespace named
# HOST, so the "hosts" of tests/t_hosts.sh are namespaces joined by a veth pair on one machine.
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done  # Hydra passes -x (no X11) and the like
host=$1
shift
exec ip netns exec "$host" bash -c "$*"  # ssh hands the remote shell one string, so do we
