#!/usr/bin/env bash
# Builds the tiny test guest once and caches it outside the repository; prints the directory
# that holds it (`kernel`, `initrd`: a kernel+initrd image for the agent's libvirt backend).
#
# The guest is Debian's cloud kernel and a busybox initramfs, both unpacked from Debian packages
# fetched with `apt-get download` (no root needed). Its /init:
# - mounts proc, sys and dev, loads the virtio network and block drivers and the ACPI power
#   button's if it finds them, brings eth0 up
#   if there is one;
# - reads its instance UUID from the cloud-init meta-data that the agent appends to the initrd
#   (`/cumulo/meta-data`, `instance-id: <uuid>`), else from the kernel command line
#   (`cumulo.instance=<uuid>`), and prints `CUMULO-GUEST-UP <uuid>` on the serial console;
# - powers off when its ACPI power button is pressed (a soft reboot or shutdown from libvirt):
#   prints `CUMULO-GUEST-ACPI <uuid>` first (it listens before it prints anything below);
# - if it has a disk (`/dev/vda`: the data disk the agent gives a kernel image), counts its
#   boots on it: reads `CUMULO-DISK <n>` from the disk's first sector (0 on a blank disk), writes
#   n+1 there, syncs, and prints `CUMULO-DISK-WROTE <uuid> <n+1>`: a disk that survived a stop,
#   a reboot or a suspend shows the count going on; booted from scripts/tiny-disk.sh's image
#   (`cumulo.boot-disk` on its command line), it counts in the sector at 32 MiB of that disk
#   instead, past the file system it booted from; any other disk is left alone;
# - watches its virtio disks that carry a serial (the agent gives one to each volume: the first
#   20 hex digits of the volume's UUID; the instance's own disk has none): when one appears, at
#   boot or hot-plugged, prints `CUMULO-VOLUME-SEEN <uuid> <dev> <serial> <what its first
#   sector held: blank, or the line a guest wrote there>`, writes `CUMULO-VOLUME-MARK <uuid>`
#   there, syncs, and prints `CUMULO-VOLUME-WROTE <uuid> <serial>`; when one goes (a detach),
#   prints `CUMULO-VOLUME-GONE <uuid> <serial>` (it looks five times a second; a read or a
#   write that fails or takes more than 10 s prints `CUMULO-VOLUME-UNREADABLE` or
#   `-UNWRITABLE` with the error, and the watch goes on);
# - if it has eth0 (a tenant network), takes an address and a default route for it by DHCP
#   (from its CNCI) and prints `CUMULO-GUEST-ADDR <uuid> <ip>` (`CUMULO-GUEST-NOADDR <uuid>` if
#   none came): in the background, or first if its user-data has a line `cumulo-test: dhcp`;
# - if its user-data has a line `cumulo-test: metadata`, once it has its address asks the
#   metadata service (169.254.169.254) for its instance ID (EC2 path) and its OpenStack
#   meta_data.json, and prints `CUMULO-GUEST-META-ID <uuid> <the ID>` and
#   `CUMULO-GUEST-META-JSON <uuid> <the JSON>` (`CUMULO-GUEST-NOMETA <uuid> <wget's error>` if
#   no answer came);
# - if its user-data has a line `cumulo-test: listen <port>`, answers every TCP connection to
#   that port with the line `CUMULO-GUEST-HELLO <uuid>`, and prints `CUMULO-GUEST-LISTEN <uuid>
#   <port>` once it listens;
# - if its user-data has a line `cumulo-test: poweroff`, powers off (an instance that stops on
#   its own); otherwise stays up.
#
# Cache: ${CUMULO_TINY_GUEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cumulo/tiny-guest}/v<N>.
# Needs: apt-get (with package lists), dpkg-deb. Safe to run again and from several processes.
set -euo pipefail

# Bump when the guest's content changes: a new version is built beside the old one.
VERSION=9
cache=${CUMULO_TINY_GUEST_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/cumulo/tiny-guest}
out="$cache/v$VERSION"
if [ -s "$out/kernel" ] && [ -s "$out/initrd" ]; then
    echo "$out"
    exit 0
fi

work=$(mktemp -d)
chmod 755 "$work" # apt-get download drops privileges to _apt where it can
trap 'rm -rf "$work"' EXIT
cd "$work"

# The kernel package that the cloud kernel meta-package points at.
cloud_kernel() {
    apt-cache depends linux-image-cloud-amd64 2>/dev/null |
        awk '/Depends: linux-image-[0-9]/ { print $2; exit }'
}
kpkg=$(cloud_kernel)
if [ -z "$kpkg" ] && [ "$(id -u)" -eq 0 ]; then
    apt-get -o DPkg::Lock::Timeout=300 update -q >&2
    kpkg=$(cloud_kernel)
fi
if [ -z "$kpkg" ]; then
    echo "tiny-guest: no linux-image-cloud-amd64 in the package lists (run apt-get update)" >&2
    exit 1
fi
apt-get download -q "$kpkg" busybox-static >&2
dpkg-deb -x "$(ls "$kpkg"_*.deb)" kernel-pkg
dpkg-deb -x "$(ls busybox-static_*.deb)" busybox-pkg
vmlinuz=$(ls kernel-pkg/boot/vmlinuz-*)
kver=${vmlinuz##*/vmlinuz-}

root=initramfs
mkdir -p "$root"/{bin,dev,proc,sys,etc,cumulo,lib/modules}
cp busybox-pkg/bin/busybox "$root/bin/busybox"
# The virtio network and block drivers, the ACPI power button and what they need, in load order (built-in ones are simply absent).
for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci failover \
    net_failover virtio_net virtio_blk evdev button; do
    f=$(find "kernel-pkg/lib/modules/$kver" -name "$m.ko*" | head -n 1)
    if [ -n "$f" ]; then
        case "$f" in
        *.ko.xz) xz -dc "$f" >"$root/lib/modules/$m.ko" ;;
        *.ko.zst) zstd -qdc "$f" >"$root/lib/modules/$m.ko" ;;
        *) cp "$f" "$root/lib/modules/$m.ko" ;;
        esac
        echo "$m" >>"$root/lib/modules/order"
    fi
done

cat >"$root/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
exec </dev/console >/dev/console 2>&1
if [ -f /lib/modules/order ]; then
    while read -r m; do insmod "/lib/modules/$m.ko" 2>/dev/null; done </lib/modules/order
fi
if [ -e /sys/class/net/eth0 ]; then
    ip link set eth0 up && echo "CUMULO-GUEST-NET eth0 up"
fi
id=""
if [ -f /cumulo/meta-data ]; then
    id=$(sed -n 's/^instance-id: *//p' /cumulo/meta-data | head -n 1)
    host=$(sed -n 's/^local-hostname: *//p' /cumulo/meta-data | head -n 1)
    [ -n "$host" ] && hostname "$host"
fi
if [ -z "$id" ]; then
    id=$(tr ' ' '\n' </proc/cmdline | sed -n 's/^cumulo.instance=//p' | head -n 1)
fi
# The power button: whatever event comes from it powers the guest off (a clean shutdown, as
# far as a guest with nothing to save has one).
for e in /sys/class/input/event*; do
    [ -e "$e/device/name" ] || continue
    if grep -q "Power Button" "$e/device/name"; then
        (
            dd if="/dev/input/${e##*/}" bs=4096 count=1 >/dev/null 2>&1
            echo "CUMULO-GUEST-ACPI ${id:-unknown}"
            sync
            poweroff -f
        ) &
    fi
done
# The data disk, if there is one (virtio device id 2: block); its node may take a moment.
if grep -qx 0x0002 /sys/bus/virtio/devices/*/device 2>/dev/null; then
    i=0
    while [ ! -b /dev/vda ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
fi
# The count's sector: the first on a blank disk or one that holds a count; on a disk the guest
# booted from (scripts/tiny-disk.sh: its first sector is a boot sector), the sector at 32 MiB,
# past its file system; none on any other disk.
at=""
if [ -b /dev/vda ] && [ -z "$(cat /sys/block/vda/serial 2>/dev/null)" ]; then
    first=$(dd if=/dev/vda bs=512 count=1 2>/dev/null | tr -d '\000')
    if [ -z "$first" ] || echo "$first" | grep -q '^CUMULO-DISK [0-9]*$'; then
        at=0
    elif grep -q 'cumulo.boot-disk' /proc/cmdline; then
        at=65536
    fi
fi
if [ -n "$at" ]; then
    n=$(dd if=/dev/vda bs=512 skip="$at" count=1 2>/dev/null | tr -d '\000' |
        sed -n 's/^CUMULO-DISK \([0-9][0-9]*\)$/\1/p' | head -n 1)
    n=$((${n:-0} + 1))
    printf 'CUMULO-DISK %s\n' "$n" | dd of=/dev/vda bs=512 seek="$at" count=1 conv=sync,notrunc 2>/dev/null
    sync
    echo "CUMULO-DISK-WROTE ${id:-unknown} $n"
fi
echo "CUMULO-GUEST-UP ${id:-unknown}"
# Volumes: virtio disks with a serial, as they come and go.
(
    mkdir -p /tmp
    known=""
    while true; do
        now=""
        for f in /sys/block/vd*/serial; do
            [ -f "$f" ] || continue
            ser=$(cat "$f" 2>/dev/null)
            [ -n "$ser" ] || continue
            dev=${f%/serial}
            dev=${dev##*/}
            now="$now $ser"
            case " $known " in *" $ser "*) continue ;; esac
            [ -b "/dev/$dev" ] || continue
            # (Bounded: a device unplugged under a read or a write must not stop the watch.)
            if ! timeout 10 dd if="/dev/$dev" of=/tmp/vol-head bs=512 count=1 2>/tmp/vol-err; then
                echo "CUMULO-VOLUME-UNREADABLE ${id:-unknown} $dev $ser $(head -c 200 /tmp/vol-err)"
                continue
            fi
            before=$(tr -d '\000' </tmp/vol-head | head -n 1)
            echo "CUMULO-VOLUME-SEEN ${id:-unknown} $dev $ser ${before:-blank}"
            known="$known $ser"
            printf 'CUMULO-VOLUME-MARK %s\n' "${id:-unknown}" >/tmp/vol-mark
            if timeout 10 dd if=/tmp/vol-mark of="/dev/$dev" bs=512 count=1 conv=sync,notrunc,fsync 2>/tmp/vol-err; then
                echo "CUMULO-VOLUME-WROTE ${id:-unknown} $ser"
            else
                echo "CUMULO-VOLUME-UNWRITABLE ${id:-unknown} $dev $ser $(head -c 200 /tmp/vol-err)"
            fi
        done
        for ser in $known; do
            case " $now " in
            *" $ser "*) ;;
            *)
                echo "CUMULO-VOLUME-GONE ${id:-unknown} $ser"
                known=$(echo " $known " | sed "s/ $ser / /")
                ;;
            esac
        done
        sleep 0.2
    done
) &
if [ -e /sys/class/net/eth0 ]; then
    mkdir -p /tmp
    cat >/bin/dhcp-event <<'EVENT'
#!/bin/busybox sh
case "$1" in
bound | renew)
    ip addr flush dev "$interface"
    ip addr add "$ip/${mask:-24}" dev "$interface"
    [ -n "$router" ] && ip route replace default via "${router%% *}" dev "$interface"
    echo "$ip" >/tmp/addr
    ;;
esac
EVENT
    chmod 755 /bin/dhcp-event
    dhcp() {
        if udhcpc -i eth0 -n -q -t 10 -T 2 -s /bin/dhcp-event >/dev/null 2>&1 && [ -s /tmp/addr ]; then
            echo "CUMULO-GUEST-ADDR ${id:-unknown} $(cat /tmp/addr)"
        else
            echo "CUMULO-GUEST-NOADDR ${id:-unknown}"
        fi
    }
    # An HTTP GET to the metadata service with busybox nc (the static busybox's wget crashes
    # without the name service libraries); the body if the answer is 200.
    fetch() {
        printf 'GET %s HTTP/1.0\r\nHost: 169.254.169.254\r\n\r\n' "$1" |
            nc -w 3 169.254.169.254 80 >/tmp/meta-reply 2>/tmp/meta-error || return 1
        tr -d '\r' </tmp/meta-reply >/tmp/meta-clean
        if ! head -n 1 /tmp/meta-clean | grep -q ' 200 '; then
            head -n 1 /tmp/meta-clean >/tmp/meta-error
            return 1
        fi
        sed '1,/^$/d' /tmp/meta-clean
    }
    meta() {
        [ -s /tmp/addr ] || return 0
        [ -f /cumulo/user-data ] && grep -q '^cumulo-test: metadata$' /cumulo/user-data || return 0
        i=0
        got=""
        while [ $i -lt 10 ]; do
            got=$(fetch /latest/meta-data/instance-id) && [ -n "$got" ] && break
            got=""
            i=$((i + 1))
            sleep 1
        done
        if [ -n "$got" ]; then
            echo "CUMULO-GUEST-META-ID ${id:-unknown} $got"
            echo "CUMULO-GUEST-META-JSON ${id:-unknown} $(fetch /openstack/latest/meta_data.json)"
        else
            echo "CUMULO-GUEST-NOMETA ${id:-unknown} $(tr '\n' ' ' </tmp/meta-error)"
        fi
    }
    if [ -f /cumulo/user-data ] && grep -q '^cumulo-test: dhcp$' /cumulo/user-data; then
        dhcp
        meta
    else
        (dhcp; meta) &
    fi
fi
port=""
if [ -f /cumulo/user-data ]; then
    port=$(sed -n 's/^cumulo-test: listen \([0-9][0-9]*\)$/\1/p' /cumulo/user-data | head -n 1)
fi
if [ -n "$port" ]; then
    (while true; do nc -l -p "$port" -e echo "CUMULO-GUEST-HELLO ${id:-unknown}"; done) &
    echo "CUMULO-GUEST-LISTEN ${id:-unknown} $port"
fi
if [ -f /cumulo/user-data ] && grep -q '^cumulo-test: poweroff' /cumulo/user-data; then
    echo "CUMULO-GUEST-POWEROFF ${id:-unknown}"
    poweroff -f
fi
while true; do sleep 3600; done
INIT
chmod 755 "$root/init"

(cd "$root" && find . | "$work/busybox-pkg/bin/busybox" cpio -o -H newc 2>/dev/null | gzip -9) >initrd
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.build.XXXXXX")
cp "$vmlinuz" "$tmp/kernel"
cp initrd "$tmp/initrd"
echo "$kpkg" >"$tmp/kernel-package"
# Another process may have finished first: keep whichever landed.
mv -T "$tmp" "$out" 2>/dev/null || rm -rf "$tmp"
echo "$out"
