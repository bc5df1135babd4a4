#!/usr/bin/env bash
# The README as a new user follows it, so that it cannot drift from the product:
#
# 1. As root, with the default directory (/var/lib/cumulo) and a home directory of mode 0700
#    (as Debian makes /root): every command of the fenced `sh` blocks of the README's quick start
#    and tour, copied as written, in order, in one shell from the repository's top (the quick
#    start's test command excepted: this runs inside it). The first command is `bash
#    scripts/up.sh`: it must bring the cluster up with real VMs and boot the first instance (`up`
#    waits for the guest's marker on its console). The tour ends with `cumulo down --purge`; then nothing
#    may be left: no process of the cluster, no VM, no link of cumulo's, no state directory.
# 2. As a plain user (made here, home mode 0700), where the machine allows: `cumulo up` with the
#    user's default directory (qemu:///session, QEMU as the user), the first instance boots,
#    `cumulo down --purge`, nothing left. Where no plain user can be had it says so.
#
# Needs root (CI runs as root); the README's commands install what they need themselves.
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD

if [ "$(id -u)" -ne 0 ]; then
    echo "readme-test: needs root (the README's quick start as root, then as a plain user)" >&2
    exit 1
fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# The fenced sh blocks between "## Quick start" and the next second-level heading, without
# comment-only lines and without the test command.
python3 - "$top/README.md" >"$scratch/readme.sh" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
start = text.index("## Quick start")
end = text.index("\n## ", start + 1)
section = text[start:end]
print("set -euxo pipefail")
for block in re.findall(r"```sh\n(.*?)```", section, re.S):
    for line in block.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped == "bash scripts/test.sh":
            continue
        print(line)
PY
echo "== the README's commands:"
cat "$scratch/readme.sh"

# What a cluster may leave behind after `cumulo down --purge`: nothing. $1: its directory.
nothing_left() {
    local dir=$1 bad=0
    # Zombies are ended processes that this machine's init has not reaped yet.
    local procs
    procs=$(ps -eo stat=,pid=,comm= |
        awk '$1 !~ /^Z/ && $3 ~ /^(cumulo-|libvirtd$|virtlogd$|qemu-system)/ { print }')
    if [ -n "$procs" ]; then
        echo "left running:" >&2
        echo "$procs" >&2
        bad=1
    fi
    local links
    links=$(ip -o link show | awk -F': ' '{ print $2 }' | grep -E '^(cumulo0|cb-|cv-|cg-|ct-)' || true)
    if [ -n "$links" ]; then
        echo "links left: $links" >&2
        bad=1
    fi
    if [ -e "$dir" ]; then
        echo "$dir is left:" >&2
        ls -la "$dir" >&2
        bad=1
    fi
    return $bad
}

# Each run must start from nothing, or it would prove nothing.
if ! nothing_left /var/lib/cumulo; then
    echo "readme-test: a cluster or its leftovers are here already; stop them first" >&2
    exit 1
fi

echo
echo "== 1. as root, home $HOME (mode $(stat -c %a "$HOME")), default directory"
if [ "$HOME" = /root ]; then chmod 700 /root; fi
log="$scratch/root.log"
if ! bash "$scratch/readme.sh" 2>&1 | tee "$log"; then
    echo "readme-test: a README command failed (above)" >&2
    tail -n 30 /var/lib/cumulo/logs/*.log 2>/dev/null || true
    target/release/cumulo down --purge || true
    exit 1
fi
grep -q "cumulo is up (libvirt backend)" "$log" || {
    echo "readme-test: scripts/up.sh did not bring cumulo up with real VMs" >&2
    exit 1
}
grep -q "first instance ... .* active, booted" "$log" || {
    echo "readme-test: the first instance did not boot" >&2
    exit 1
}
nothing_left /var/lib/cumulo
echo "readme-test: as root, the README works as written and leaves nothing"

echo
echo "== 2. as a plain user"
user=cumulo-readme
if ! id "$user" >/dev/null 2>&1; then
    if ! useradd --create-home --shell /bin/bash "$user" 2>"$scratch/useradd.err"; then
        echo "readme-test: SKIPPED the plain-user run: no user could be made ($(cat "$scratch/useradd.err"))"
        exit 0
    fi
fi
home=$(getent passwd "$user" | cut -d: -f6)
chmod 700 "$home"
# The user runs the binaries that scripts/up.sh built; where the checkout is closed to it (under
# /root, say), a copy of them and of the scripts that it can reach.
bin=$top/target/release
scripts=$top/scripts
if ! runuser -u "$user" -- test -x "$bin/cumulo" || ! runuser -u "$user" -- test -r "$scripts/tiny-guest.sh"; then
    copy=$(mktemp -d /tmp/cumulo-readme.XXXXXX)
    chmod 755 "$copy"
    mkdir "$copy/bin"
    cp "$bin"/cumulo "$bin"/cumulo-* "$copy/bin/"
    cp -r "$scripts" "$copy/scripts"
    chmod -R a+rX "$copy"
    bin=$copy/bin
    scripts=$copy/scripts
    trap 'rm -rf "$scratch" "$copy"' EXIT
fi
userdir="$home/.local/share/cumulo"
as_user() {
    (cd "$home" && runuser -u "$user" -- env -i HOME="$home" PATH=/usr/bin:/bin \
        CUMULO_SCRIPTS_DIR="$scripts" "$@")
}
ulog="$scratch/user.log"
if ! as_user "$bin/cumulo" up 2>&1 | tee "$ulog"; then
    echo "readme-test: cumulo up as $user failed" >&2
    tail -n 30 "$userdir"/logs/*.log 2>/dev/null || true
    as_user "$bin/cumulo" down --purge || true
    exit 1
fi
grep -q "cumulo is up (libvirt backend)" "$ulog" && grep -q "active, booted" "$ulog" || {
    echo "readme-test: as $user, the first instance did not boot under qemu:///session" >&2
    as_user "$bin/cumulo" down --purge || true
    exit 1
}
as_user "$bin/cumulo" down --purge
nothing_left "$userdir"
echo "readme-test: as $user (qemu:///session), cumulo up boots the first instance and leaves nothing"
