#!/usr/bin/env bash
# Builds the tiny test guest (scripts/tiny-guest.sh) as a bootable disk image once and caches it
# outside the repository; prints the path of the qcow2 file. QEMU boots it from the disk alone
# (SeaBIOS, no -kernel/-initrd), and the guest prints `CUMULO-GUEST-UP <uuid>` as usual.
#
# The disk is a FAT "superfloppy" (no partition table) holding the guest's kernel and initrd and
# syslinux, which boots them with `cumulo.instance=00000000-0000-4000-8000-00000000d15c` on the
# kernel command line (a guest booted from the image with no meta-data gives that UUID). It is
# made without root, loop devices or mounting: mkfs.vfat -C, mcopy, and syslinux's mtools
# installer, then qemu-img convert.
#
# The disk is 33 MiB: the file system takes the first 32, and the guest, told by `cumulo.boot-disk`
# on its command line that it booted from this disk, counts its boots in the sector at 32 MiB
# (`CUMULO-DISK-WROTE`, as on a data disk), so that a copy of the disk (a snapshot) shows its
# count going on.
#
# Cache: ${CUMULO_TINY_DISK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cumulo/tiny-disk}/v<N>/<the
# tiny guest's version>/disk.qcow2. Needs: what tiny-guest.sh needs, qemu-img, and syslinux,
# mtools and dosfstools, taken from the system if installed, else fetched with `apt-get download`
# (no root needed). Safe to run again and from several processes.
set -euo pipefail

# Bump when the disk's layout or boot configuration changes.
VERSION=2
guest=$(bash "$(dirname "$0")/tiny-guest.sh")
cache=${CUMULO_TINY_DISK_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/cumulo/tiny-disk}
out="$cache/v$VERSION/${guest##*/}"
if [ -s "$out/disk.qcow2" ]; then
    echo "$out/disk.qcow2"
    exit 0
fi

work=$(mktemp -d)
chmod 755 "$work" # apt-get download drops privileges to _apt where it can
trap 'rm -rf "$work"' EXIT
cd "$work"

# The tools, from the system or unpacked from their packages (syslinux runs mcopy and mattrib).
export PATH="$work/tools/usr/bin:$work/tools/sbin:$work/tools/usr/sbin:$PATH:/usr/sbin:/sbin"
missing=()
command -v syslinux >/dev/null || missing+=(syslinux)
command -v mcopy >/dev/null && command -v mattrib >/dev/null || missing+=(mtools)
command -v mkfs.vfat >/dev/null || missing+=(dosfstools)
if [ ${#missing[@]} -gt 0 ]; then
    apt-get download -q "${missing[@]}" >&2
    for deb in ./*.deb; do dpkg-deb -x "$deb" tools; done
fi

cat >syslinux.cfg <<'CFG'
SERIAL 0 115200
DEFAULT cumulo
PROMPT 0
TIMEOUT 0
LABEL cumulo
  LINUX /kernel
  INITRD /initrd
  APPEND console=ttyS0 panic=1 cumulo.boot-disk cumulo.instance=00000000-0000-4000-8000-00000000d15c
CFG
# 32 MiB (FAT16) holds the kernel (~14 MiB) and the initrd (~1 MiB) with room to spare.
mkfs.vfat -C -n CUMULO disk.img 32768 >&2
mcopy -i disk.img "$guest/kernel" "$guest/initrd" syslinux.cfg ::
syslinux --install disk.img
truncate -s 33M disk.img
mkdir -p "$cache/v$VERSION"
tmp=$(mktemp -d "$cache/v$VERSION/.build.XXXXXX")
chmod 755 "$tmp" # readable by the user QEMU runs as, as a backing file
qemu-img convert -O qcow2 disk.img "$tmp/disk.qcow2"
# Another process may have finished first: keep whichever landed.
mv -T "$tmp" "$out" 2>/dev/null || rm -rf "$tmp"
echo "$out/disk.qcow2"
