#!/usr/bin/env bash
# tests/bare-machine.sh: the README's two commands on a bare Debian 12, as a new user runs them (check
# it before a release; needs root, debootstrap and the network). A minbase bookworm holding only git,
# make, ca-certificates and sudo; this repository's HEAD cloned into its /root/micropp (mode 700, as
# in a container) and `make run` and `make test` run there as root; then, in a fresh copy, the same
# as an ordinary user in their home, with sudo for make's apt-get. Prints each run's FAIL and SKIP
# lines and its last line, and exits nonzero unless both commands passed in every run.
# Usage: sudo bash tests/bare-machine.sh [--as root|user|both] [DIR]
#   DIR (default /var/tmp/micropp-bare) keeps the bootstrapped system (DIR/base) and apt's downloads
#   (DIR/apt-archives) from one run to the next; each run works in a fresh copy, DIR/run, unmounted
#   on exit and removed (KEEP=1 keeps it), and leaves its log in DIR/root.log or DIR/user.log.
#   MIRROR and SECURITY_MIRROR set the Debian mirrors; LIMIT (default 7200) the seconds a run may take.
set -u
AS=both
while [ $# -gt 0 ]; do
    case $1 in
        --as) AS=${2:-}; shift 2 ;;
        -h|--help) sed -n '2,12p' "$0" | cut -c3-; exit 0 ;;
        -*) echo "bare-machine: unknown option '$1' (see --help)"; exit 2 ;;
        *) break ;;
    esac
done
case $AS in root|user|both) ;; *) echo "bare-machine: --as is root, user or both"; exit 2 ;; esac
DIR=$(realpath -m "${1:-/var/tmp/micropp-bare}")
case $DIR in *[[:space:]]*|/) echo "bare-machine: DIR '$DIR' must be a folder without spaces"; exit 2 ;; esac
MIRROR=${MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${SECURITY_MIRROR:-http://deb.debian.org/debian-security}
LIMIT=${LIMIT:-7200}
INCLUDE=git,make,ca-certificates,sudo
REPO=$(git -C "$(dirname "$0")" rev-parse --show-toplevel) || exit 2
RUN=$DIR/run
[ "$(id -u)" = 0 ] || { echo "bare-machine: needs root (debootstrap, chroot, mounts)"; exit 2; }
command -v debootstrap >/dev/null || { echo "bare-machine: needs debootstrap (apt-get install debootstrap)"; exit 2; }
[ -z "$(git -C "$REPO" status --porcelain)" ] \
    || echo "bare-machine: note: $REPO has uncommitted changes; only its HEAD is tested"

# Mounts under a folder, deepest first (/proc/mounts escapes spaces, which DIR has none of).
mounts_under() { awk -v d="$1" '$2 == d || index($2, d "/") == 1 { print $2 }' /proc/mounts | sort -r; }
unmount_all() {
    local p m
    for p in /proc/[0-9]*; do  # what still runs inside the copy (an interrupted run) holds its mounts
        case $(readlink "$p/root" 2>/dev/null) in "$RUN"|"$RUN"/*) kill -KILL "${p#/proc/}" 2>/dev/null ;; esac
    done
    for m in $(mounts_under "$DIR"); do umount "$m" 2>/dev/null || umount -l "$m"; done
}
trap unmount_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The base system, bootstrapped once.
if [ ! -e "$DIR/base/.micropp-base" ]; then
    echo "bare-machine: debootstrap --variant=minbase --include=$INCLUDE bookworm into $DIR/base (log: $DIR/debootstrap.log)"
    mkdir -p "$DIR"; unmount_all; rm -rf --one-file-system "$DIR/base.tmp"
    debootstrap --variant=minbase --include=$INCLUDE bookworm "$DIR/base.tmp" "$MIRROR" > "$DIR/debootstrap.log" 2>&1 \
        || { tail -5 "$DIR/debootstrap.log"; echo "bare-machine: debootstrap failed"; exit 1; }
    echo "debootstrap --variant=minbase --include=$INCLUDE bookworm $MIRROR" > "$DIR/base.tmp/.micropp-base"
    mv "$DIR/base.tmp" "$DIR/base"
fi

# fresh: a copy of the base as a container starts it: apt's sources as in the debian:12 image, the
# host's name resolution, /proc /sys /dev /dev/pts /dev/shm bound in; HEAD as a bare repository.
fresh() {
    unmount_all
    [ -z "$(mounts_under "$RUN")" ] || { echo "bare-machine: $RUN still has mounts: not removed"; exit 1; }
    rm -rf --one-file-system "$RUN" && cp -a "$DIR/base" "$RUN" || exit 1
    printf 'deb %s bookworm main\ndeb %s bookworm-updates main\ndeb %s bookworm-security main\n' \
        "$MIRROR" "$MIRROR" "$SECURITY_MIRROR" > "$RUN/etc/apt/sources.list"
    cp -L /etc/resolv.conf "$RUN/etc/resolv.conf"; cp -L /etc/hosts "$RUN/etc/hosts"
    local m
    # The copy's root a mount point, as a container's is: `ip netns exec` (t_hosts) makes / a slave
    # mount, which fails where / is a plain folder of the host's.
    mount --bind "$RUN" "$RUN" || exit 1
    for m in proc dev dev/pts dev/shm; do mkdir -p "$RUN/$m"; mount --bind "/$m" "$RUN/$m" || exit 1; done
    # /sys with its submounts (slurmd needs /sys/fs/cgroup), slaved so that unmounting them here stays here
    mkdir -p "$RUN/sys" && mount --rbind /sys "$RUN/sys" && mount --make-rslave "$RUN/sys" || exit 1
    mkdir -p "$DIR/apt-archives/partial"
    mount --bind "$DIR/apt-archives" "$RUN/var/cache/apt/archives" || exit 1
    git clone -q --bare "$REPO" "$RUN/srv/micropp.git" || exit 1
}

# in_chroot WHO LOG: clones HEAD into WHO's home (/root for root) and runs the README's two commands.
STATUS=0
in_chroot() {
    local who=$1 log=$2 home=/root
    local script='git clone -q /srv/micropp.git micropp && cd micropp || { echo "bare-machine: git clone failed"; exit 1; }
        git log --oneline -1; ls -ld "$HOME"
        make run; echo "bare-machine: make run exit $?"; make test; echo "bare-machine: make test exit $?"'
    echo "bare-machine: $who: make run && make test in a fresh bookworm minbase (log: $log)"
    if [ "$who" = root ]; then
        (cd / && timeout -k 10 "$LIMIT" chroot "$RUN" /usr/bin/env -i HOME=/root USER=root LOGNAME=root TERM=dumb \
            PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin bash -lc "cd && $script") > "$log" 2>&1
    else
        home=/home/tester
        chroot "$RUN" useradd -m -s /bin/bash tester && chroot "$RUN" chown -R tester: /srv/micropp.git || exit 1
        echo 'tester ALL=(ALL) NOPASSWD:ALL' > "$RUN/etc/sudoers.d/tester"; chmod 440 "$RUN/etc/sudoers.d/tester"
        (cd / && timeout -k 10 "$LIMIT" chroot "$RUN" /usr/sbin/runuser -l tester -c "cd && $script") > "$log" 2>&1
    fi
    local run_rc test_rc last
    run_rc=$(sed -n 's/^bare-machine: make run exit //p' "$log")
    test_rc=$(sed -n 's/^bare-machine: make test exit //p' "$log")
    last=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$log" | tail -1)
    grep -E '^(FAIL|SKIP) ' "$log" | sed "s|^|  $who: |"
    echo "bare-machine: $who in $home: make run exit ${run_rc:-none}, make test exit ${test_rc:-none}: ${last:-no summary line (see $log)}"
    [ "$run_rc" = 0 ] && [ "$test_rc" = 0 ] && [[ "$last" == *" passed, 0 failed, "* ]] || STATUS=1
}

for who in root user; do
    [ "$AS" = both ] || [ "$AS" = "$who" ] || continue
    fresh
    in_chroot "$who" "$DIR/$who.log"
done
unmount_all
[ "${KEEP:-0}" = 1 ] || [ -n "$(mounts_under "$RUN")" ] || rm -rf --one-file-system "$RUN"
exit $STATUS
