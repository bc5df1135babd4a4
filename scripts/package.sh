#!/usr/bin/env bash
# Builds cumulo's Debian packages from the workspace with dpkg-deb (docs/deploy.md):
#   cumulo            the `cumulo` CLI and `cumulo-cert`; the cumulo system user; /etc/cumulo
#   cumulo-scheduler  the scheduler, its unit and /etc/cumulo/scheduler.conf
#   cumulo-controller the controller, its unit and /etc/cumulo/controller.conf
#   cumulo-agent      the agent and cumulo-cnci, its unit and /etc/cumulo/agent.conf
# The units and the configuration files are packaging/'s (the files are made from the daemons'
# flags: systest's packaging test says when they are out of date).
#
# Usage: scripts/package.sh [--profile release|debug] [--out DIR] [--no-build] [--fast]
# (--fast: gzip at its fastest level instead of xz, for tests)
# Prints the paths of the packages it made, one a line.
set -euo pipefail
cd "$(dirname "$0")/.."

profile=release
out=target/debian
build=1
compress=(-Zxz)
while [ $# -gt 0 ]; do
    case "$1" in
        --profile) profile="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --no-build) build=0; shift ;;
        --fast) compress=(-Zgzip -z1); shift ;;
        *) echo "package.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
case "$profile" in
    release|debug) ;;
    *) echo "package.sh: --profile is release or debug, not $profile" >&2; exit 2 ;;
esac

if [ "$build" = 1 ]; then
    if [ "$profile" = release ]; then
        cargo build --release --locked --bins >&2
    else
        cargo build --locked --bins >&2
    fi
fi
bin="target/$profile"
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
arch=$(dpkg --print-architecture)
[ -n "$version" ] || { echo "package.sh: no version in Cargo.toml's [workspace.package]" >&2; exit 1; }

mkdir -p "$out"
stage=$(mktemp -d "$out/stage.XXXXXX")
trap 'rm -rf "$stage"' EXIT

# pkg NAME DESCRIPTION DEPENDS RECOMMENDS: the package's staging root, with its control file.
pkg() {
    local name=$1 root="$stage/$1"
    mkdir -p "$root/DEBIAN" "$root/usr/share/doc/$name"
    {
        echo "Package: $name"
        echo "Version: $version"
        echo "Architecture: $arch"
        echo "Maintainer: cumulo developers <cumulo@localhost>"
        echo "Section: admin"
        echo "Priority: optional"
        echo "Depends: $3"
        [ -z "$4" ] || echo "Recommends: $4"
        echo "Description: $2"
        echo " cumulo is a small, secure cloud orchestrator for VMs: a scheduler, a controller"
        echo " with OpenStack-compatible APIs, and an agent on every host."
    } > "$root/DEBIAN/control"
    {
        echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
        echo "Upstream-Name: cumulo"
        echo ""
        echo "Files: *"
        echo "Copyright: the cumulo developers"
        echo "License: Apache-2.0"
        echo " On Debian systems the full text of the Apache License 2.0 is in"
        echo " /usr/share/common-licenses/Apache-2.0."
    } > "$root/usr/share/doc/$name/copyright"
    echo "$root"
}

# install_bin ROOT NAME: a binary of the build, stripped of its debug sections.
install_bin() {
    install -D -m 0755 "$bin/$2" "$1/usr/bin/$2"
    strip --strip-debug "$1/usr/bin/$2" 2>/dev/null || true
}

# daemon NAME: the unit (/lib/systemd/system) and the configuration file (a conffile: an
# upgrade keeps the user's edits). Read by root and the cumulo group only: it may name secrets.
daemon() {
    local root=$1 name=$2
    install -D -m 0644 "packaging/systemd/cumulo-$name.service" \
        "$root/lib/systemd/system/cumulo-$name.service"
    install -D -m 0640 "packaging/etc/$name.conf" "$root/etc/cumulo/$name.conf"
    echo "/etc/cumulo/$name.conf" > "$root/DEBIAN/conffiles"
    # The configuration comes first (certificates, addresses): the unit is not started here.
    cat > "$root/DEBIAN/postinst" <<EOF
#!/bin/sh
set -e
if [ "\$1" = configure ]; then
    chgrp cumulo /etc/cumulo/$name.conf || true
    if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi
fi
EOF
    cat > "$root/DEBIAN/postrm" <<EOF
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi
EOF
    cat > "$root/DEBIAN/prerm" <<EOF
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "\$1" = remove ]; then
    systemctl stop cumulo-$name.service || true
fi
EOF
    chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/postrm" "$root/DEBIAN/prerm"
}

# The common package: the CLI, the certificate tool, the user and the directories.
root=$(pkg cumulo "cumulo cloud orchestrator: command line and certificate tool" \
    "libc6, adduser, ca-certificates" "")
install_bin "$root" cumulo
install_bin "$root" cumulo-cert
install -D -m 0644 docs/deploy.md "$root/usr/share/doc/cumulo/deploy.md"
cat > "$root/DEBIAN/postinst" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
    if ! getent passwd cumulo >/dev/null; then
        adduser --system --group --home /var/lib/cumulo --no-create-home \
            --gecos "cumulo daemons" cumulo
    fi
    install -d -m 0755 -o root -g root /var/lib/cumulo
    install -d -m 0755 -o root -g root /etc/cumulo
    install -d -m 0750 -o root -g cumulo /etc/cumulo/pki
fi
EOF
chmod 0755 "$root/DEBIAN/postinst"

root=$(pkg cumulo-scheduler "cumulo cloud orchestrator: the scheduler" \
    "libc6, cumulo (= $version)" "")
install_bin "$root" cumulo-scheduler
daemon "$root" scheduler

root=$(pkg cumulo-controller "cumulo cloud orchestrator: the controller and its REST API" \
    "libc6, cumulo (= $version)" "cumulo-scheduler, etcd-client")
install_bin "$root" cumulo-controller
daemon "$root" controller

root=$(pkg cumulo-agent "cumulo cloud orchestrator: the agent that runs a host's instances" \
    "libc6, libvirt0, iproute2, nftables, cumulo (= $version)" \
    "libvirt-daemon-system, qemu-system-x86, qemu-utils, genisoimage, runc")
install_bin "$root" cumulo-agent
install_bin "$root" cumulo-cnci
daemon "$root" agent

for name in cumulo cumulo-scheduler cumulo-controller cumulo-agent; do
    deb="$out/${name}_${version}_${arch}.deb"
    dpkg-deb --root-owner-group "${compress[@]}" --build "$stage/$name" "$deb" >/dev/null
    echo "$deb"
done
