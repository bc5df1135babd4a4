#!/usr/bin/env bash
# Builds the CNCI guest image: the tiny guest (scripts/tiny-guest.sh) with `cumulo-cnci`, `nft`
# and the kernel modules a concentrator needs (VXLAN, bridge, nf_tables NAT) inside. A network
# node boots CNCIs from it as VMs (`cumulo-agent --cnci-image NAME`).
#
# Usage: scripts/cnci-guest.sh CUMULO_CNCI_BINARY IMAGE_DIR
#   writes IMAGE_DIR/kernel and IMAGE_DIR/initrd (a kernel+initrd image: put IMAGE_DIR in the
#   agent's image store under the name the controller's --cnci-image gives, `cnci` by default).
#
# The guest's /init does what the tiny guest's does (modules, eth0 up, CUMULO-GUEST-UP <uuid> on
# the serial console); then, when its user data starts with `#cumulo-cnci` (what the network
# node's agent writes), it reads it:
#   KEY=value lines          cumulo-cnci's CUMULO_CNCI_* environment, plus CUMULO_CNCI_PREFIX
#                            (the compute network's prefix length) and CUMULO_CNCI_LINK_ADDR (a
#                            link-local address/prefix, where the agent's relay and route
#                            channel, CUMULO_CNCI_VIA and CUMULO_CNCI_ROUTE_VIA, are reached);
#                            values are plain (letters, digits, . : , / - _ [ ]), else refused
#   --- file NAME            then NAME's lines, up to the next `--- file` or the end: ca.pem,
#                            cert.pem, key.pem (any other name is dropped)
# puts CUMULO_CNCI_IP/PREFIX and the link-local address on eth0 with a default route out of it
# (the network node proxy-ARPs for what it routes), prints CUMULO-CNCI-START and
# runs cumulo-cnci (again after it exits, a second later; powers off when it exits with status 3,
# its certificate expired).
#
# The kernel modules come from the same Debian kernel package as the tiny guest's kernel; they
# are cached beside it. Needs: apt-get, dpkg-deb, strings, ldd, strip, nft on this host.
set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 CUMULO_CNCI_BINARY IMAGE_DIR" >&2
    exit 2
fi
binary=$1
dest=$2
here=$(cd "$(dirname "$0")" && pwd)
base=$("$here/tiny-guest.sh")
kpkg=$(cat "$base/kernel-package")
nft=$(command -v nft || true)
if [ -z "$nft" ]; then
    echo "cnci-guest: no nft on this host (apt-get install nftables)" >&2
    exit 1
fi

# What a concentrator loads: VXLAN tunnels on a bridge, nf_tables NAT with conntrack.
WANTED="vxlan bridge nf_tables nft_chain_nat nft_nat nft_ct nft_masq"

# The modules, with their dependencies first, cached per kernel package.
mods="$(dirname "$base")/cnci-modules-$kpkg"
if [ ! -s "$mods/order" ]; then
    work=$(mktemp -d)
    chmod 755 "$work"
    trap 'rm -rf "$work"' EXIT
    (cd "$work" && apt-get download -q "$kpkg" >&2)
    dpkg-deb -x "$(ls "$work/$kpkg"_*.deb)" "$work/k"
    tree=$(ls -d "$work"/k/lib/modules/*)
    mkdir -p "$work/out"
    : >"$work/out/order"
    # `depends=` of a module's .modinfo section (plain, xz or zstd .ko).
    deps() {
        local f
        f=$(find "$tree" -name "$1.ko*" | head -n 1)
        [ -n "$f" ] || return 0
        case "$f" in
        *.ko.xz) xz -dc "$f" ;;
        *.ko.zst) zstd -qdc "$f" ;;
        *) cat "$f" ;;
        esac >"$work/out/$1.ko"
        strings "$work/out/$1.ko" | sed -n 's/^depends=//p' | head -n 1 | tr ',' ' '
    }
    add() {
        local m=$1 d
        grep -qx "$m" "$work/out/order" && return 0
        # Built into the kernel: nothing to load.
        grep -q "/$m.ko" "$tree/modules.builtin" 2>/dev/null && return 0
        for d in $(deps "$m"); do add "$d"; done
        [ -s "$work/out/$m.ko" ] || { echo "cnci-guest: no module $m in $kpkg" >&2; exit 1; }
        echo "$m" >>"$work/out/order"
    }
    for m in $WANTED; do add "$m"; done
    tmp=$(mktemp -d "$(dirname "$base")/.cnci-modules.XXXXXX")
    while read -r m; do cp "$work/out/$m.ko" "$tmp/"; done <"$work/out/order"
    cp "$work/out/order" "$tmp/order"
    mv -T "$tmp" "$mods" 2>/dev/null || rm -rf "$tmp"
    rm -rf "$work"
    trap - EXIT
fi

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{bin,etc,cnci,lib/modules/cnci,lib64}
cp "$mods"/*.ko "$mods/order" "$root/lib/modules/cnci/"
strip -o "$root/bin/cumulo-cnci" "$binary"
cp "$nft" "$root/bin/nft"
# The shared libraries both need, at the paths the dynamic loader looks in.
for exe in "$binary" "$nft"; do
    ldd "$exe" | awk '/=> \// { print $3 } /^\t\/lib/ { print $1 }'
done | sort -u | while read -r lib; do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
done
for f in /etc/protocols /etc/services; do
    [ -f "$f" ] && cp "$f" "$root$f"
done

cat >"$root/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
exec </dev/console >/dev/console 2>&1
for list in /lib/modules/order /lib/modules/cnci/order; do
    dir=${list%/order}
    [ -f "$list" ] || continue
    while read -r m; do insmod "$dir/$m.ko" 2>/dev/null; done <"$list"
done
ip link set lo up
if [ -e /sys/class/net/eth0 ]; then
    ip link set eth0 up && echo "CUMULO-GUEST-NET eth0 up"
fi
id=""
if [ -f /cumulo/meta-data ]; then
    id=$(sed -n 's/^instance-id: *//p' /cumulo/meta-data | head -n 1)
fi
if [ -z "$id" ]; then
    id=$(tr ' ' '\n' </proc/cmdline | sed -n 's/^cumulo.instance=//p' | head -n 1)
fi
echo "CUMULO-GUEST-UP ${id:-unknown}"
if [ -f /cumulo/user-data ] && [ "$(head -n 1 /cumulo/user-data)" = "#cumulo-cnci" ]; then
    out=""
    while IFS= read -r line; do
        case "$line" in
        "#"*) continue ;;
        "--- file "*)
            name=${line#--- file }
            case "$name" in
            ca.pem | cert.pem | key.pem) out=/cnci/$name; : >"$out"; chmod 600 "$out" ;;
            *) out=/dev/null ;;
            esac
            continue ;;
        esac
        if [ -n "$out" ]; then
            echo "$line" >>"$out"
            continue
        fi
        key=${line%%=*}
        value=${line#*=}
        if echo "$key" | grep -qx 'CUMULO_CNCI_[A-Z_]*' &&
            echo "$value" | grep -qx '[][A-Za-z0-9.:,/_-]*'; then
            export "$key=$value"
        else
            echo "CUMULO-CNCI-REFUSED $key"
        fi
    done </cumulo/user-data
    ip addr add "$CUMULO_CNCI_IP/$CUMULO_CNCI_PREFIX" dev eth0
    ip addr add "$CUMULO_CNCI_LINK_ADDR" dev eth0
    # Everything else through the network node, which answers ARP for what it routes.
    ip route add default dev eth0
    unset CUMULO_CNCI_PREFIX CUMULO_CNCI_LINK_ADDR
    export CUMULO_CNCI_CA_CERT=/cnci/ca.pem CUMULO_CNCI_CERT=/cnci/cert.pem
    export CUMULO_CNCI_KEY=/cnci/key.pem RUST_LOG=info PATH=/bin
    echo "CUMULO-CNCI-START $id"
    while true; do
        /bin/cumulo-cnci
        status=$?
        echo "CUMULO-CNCI-EXIT $status"
        # 3: its certificate expired. Power off: the node reports the CNCI exited, and the
        # controller starts it again with new credentials (in a rewritten seed).
        if [ "$status" = 3 ]; then
            poweroff -f
        fi
        sleep 1
    done
fi
while true; do sleep 3600; done
INIT
chmod 755 "$root/init"

# A cpio archive (newc) of the file names on stdin.
newc() {
    if command -v busybox >/dev/null; then
        busybox cpio -o -H newc 2>/dev/null
    else
        cpio -o -H newc 2>/dev/null
    fi
}

mkdir -p "$dest"
tmp=$(mktemp "$dest/.initrd.XXXXXX")
# The tiny guest's archive, then ours over it (the kernel unpacks both, later files win).
{
    cat "$base/initrd"
    (cd "$root" && find . | newc | gzip -6)
} >"$tmp"
chmod 644 "$tmp"
mv "$tmp" "$dest/initrd"
cp "$base/kernel" "$dest/kernel.tmp" && mv "$dest/kernel.tmp" "$dest/kernel"
echo "$dest"
