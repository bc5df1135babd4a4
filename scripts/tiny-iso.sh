#!/usr/bin/env bash
# Builds the tiny test guest (scripts/tiny-guest.sh) as a bootable ISO 9660 image (El Torito,
# ISOLINUX) once and caches it outside the repository; prints the ISO's path. Booted as a
# CD-ROM, the guest runs as from scripts/tiny-disk.sh's disk, with `cumulo.boot-iso` and the
# instance ID 00000000-0000-4000-8000-00000000150c on its command line (an ISO carries no
# instance's seed): it counts its boots on its data disk (`vda`), prints its markers, and sees
# volumes come and go.
#
# Cache: ${CUMULO_TINY_ISO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cumulo/tiny-iso}/v<N>/<the
# tiny guest's version>/tiny.iso. Needs: what tiny-guest.sh needs, genisoimage, and ISOLINUX
# (the isolinux and syslinux-common packages), taken from the system if installed, else fetched
# with `apt-get download` (no root needed). Safe to run again and from several processes.
set -euo pipefail

# Bump when the ISO's layout or boot configuration changes.
VERSION=1
guest=$(bash "$(dirname "$0")/tiny-guest.sh")
cache=${CUMULO_TINY_ISO_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/cumulo/tiny-iso}
out="$cache/v$VERSION/${guest##*/}"
if [ -s "$out/tiny.iso" ]; then
    echo "$out/tiny.iso"
    exit 0
fi

work=$(mktemp -d)
chmod 755 "$work" # apt-get download drops privileges to _apt where it can
trap 'rm -rf "$work"' EXIT
cd "$work"

isolinux=/usr/lib/ISOLINUX/isolinux.bin
ldlinux=/usr/lib/syslinux/modules/bios/ldlinux.c32
missing=()
[ -f "$isolinux" ] || missing+=(isolinux)
[ -f "$ldlinux" ] || missing+=(syslinux-common)
command -v genisoimage >/dev/null || missing+=(genisoimage)
if [ ${#missing[@]} -gt 0 ]; then
    apt-get download -q "${missing[@]}" >&2
    for deb in ./*.deb; do dpkg-deb -x "$deb" tools; done
    [ -f "$isolinux" ] || isolinux="$work/tools$isolinux"
    [ -f "$ldlinux" ] || ldlinux="$work/tools$ldlinux"
    export PATH="$work/tools/usr/bin:$PATH"
fi

mkdir -p root/isolinux
cp "$isolinux" "$ldlinux" root/isolinux/
cp "$guest/kernel" "$guest/initrd" root/
cat >root/isolinux/isolinux.cfg <<'CFG'
SERIAL 0 115200
DEFAULT cumulo
PROMPT 0
TIMEOUT 0
LABEL cumulo
  LINUX /kernel
  INITRD /initrd
  APPEND console=ttyS0 panic=1 cumulo.boot-iso cumulo.instance=00000000-0000-4000-8000-00000000150c
CFG
genisoimage -quiet -o tiny.iso -V CUMULO -J -R -b isolinux/isolinux.bin -c isolinux/boot.cat \
    -no-emul-boot -boot-load-size 4 -boot-info-table root >&2
mkdir -p "$cache/v$VERSION"
tmp=$(mktemp -d "$cache/v$VERSION/.build.XXXXXX")
chmod 755 "$tmp"
cp tiny.iso "$tmp/tiny.iso"
# Another process may have finished first: keep whichever landed.
mv -T "$tmp" "$out" 2>/dev/null || rm -rf "$tmp"
echo "$out/tiny.iso"
