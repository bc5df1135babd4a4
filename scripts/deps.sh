# Installs what cumulo's build and tests need on a Debian/Ubuntu machine. Sourced by
# scripts/test.sh; safe to run again (only missing pieces are installed).

# Debian packages the build and the tests need. The libvirt backend's: the libvirt library to
# build against (libvirt-dev), libvirtd with its QEMU driver and QEMU (TCG) for the VM tests,
# qemu-img for overlays, genisoimage for cloud-init seeds, and what scripts/tiny-guest.sh builds
# the test guest with.
CUMULO_DEBS=(build-essential pkg-config openssl ca-certificates procps
    # tenant networking tests (agent/tests: network namespaces, veth, ping); the CNCI's NAT and
    # public IPs (nft; the CNCI's DHCP tests use busybox-static's udhcpc, below)
    iproute2 iputils-ping nftables
    # the controller's etcd store: its tests start their own etcd from PATH (etcd-server); the
    # etcd-client crate compiles etcd's gRPC definitions at build time (protoc and its includes)
    etcd-server protobuf-compiler libprotobuf-dev
    # the libvirt backend and its VM tests
    libvirt-dev libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients qemu-system-x86 qemu-utils
    genisoimage busybox-static cpio
    # the tiny guest as a bootable disk image and ISO (scripts/tiny-disk.sh, scripts/tiny-iso.sh)
    syslinux mtools dosfstools isolinux syslinux-common
    # the CNCI guest image (scripts/cnci-guest.sh: strip, strings)
    binutils
    # the real `openstack` CLI, in a venv made by scripts/openstack-venv.sh
    python3 python3-venv
    # the dashboard's browser tests (cli/tests/ui.rs): Chromium headless and its WebDriver server
    chromium chromium-driver
    # the Debian packages and their units (scripts/package.sh; systest's packaging test runs
    # systemd-analyze verify on the units: no systemd runs)
    systemd
    # containers beside VMs (cumulo-agent --containers; agent/tests/agent/containers.rs builds
    # its images from busybox-static, above)
    runc)

# The version of a package that is installed, else empty.
deb_version() {
    # dpkg-query fails for a package it has never seen: that is "not installed", not an error
    # (under `set -o pipefail` it would end the script on a fresh machine).
    { dpkg-query -W -f='${Status} ${Version}' "$1" 2>/dev/null || true; } |
        sed -n 's/^install ok installed //p'
}

install_debs() {
    local missing=() p
    # qemu-img must come from the same QEMU as qemu-system-x86: some machines ship a newer
    # qemu-utils (from backports) that the distribution's qemu-system-x86 does not go with.
    # The pair is installed at one version (the one qemu-system-x86 has or would get),
    # downgrading qemu-utils if need be.
    local qemu_version pair=0
    qemu_version=$(deb_version qemu-system-x86)
    if [ -z "$qemu_version" ] || [ "$(deb_version qemu-utils)" != "$qemu_version" ]; then
        pair=1
    fi
    for p in "${CUMULO_DEBS[@]}"; do
        case "$p" in qemu-system-x86 | qemu-utils) continue ;; esac
        [ -n "$(deb_version "$p")" ] || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && [ $pair -eq 0 ] && return 0
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || { echo "need root to install: ${missing[*]}" >&2; return 1; }
        sudo="sudo"
    fi
    local apt=($sudo env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300)
    local install=(install -y -q --no-install-recommends -o Dpkg::Options::=--force-confold)
    "${apt[@]}" update -q
    if [ $pair -eq 1 ]; then
        local v
        v=$(apt-cache policy qemu-system-x86 | sed -n 's/^ *Candidate: //p')
        echo "installing: qemu-system-x86 and qemu-utils $v"
        "${apt[@]}" "${install[@]}" --allow-downgrades "qemu-system-x86=$v" "qemu-utils=$v"
    fi
    if [ ${#missing[@]} -gt 0 ]; then
        echo "installing: ${missing[*]}"
        "${apt[@]}" "${install[@]}" "${missing[@]}"
    fi
}

install_cargo_tools() {
    command -v cargo >/dev/null || { echo "cargo not found: install Rust with rustup first" >&2; return 1; }
    if ! cargo fuzz --version >/dev/null 2>&1; then
        cargo install cargo-fuzz --locked
    fi
}

install_deps() {
    install_debs
    install_cargo_tools
}

# Run as a script (`bash scripts/deps.sh`): install the packages the build needs.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    install_debs
fi
