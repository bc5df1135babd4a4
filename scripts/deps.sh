# Installs what cumulo's build and tests need on a Debian/Ubuntu machine. Sourced by
# scripts/test.sh; safe to run again (only missing pieces are installed).

# Debian packages the build and the tests need.
CUMULO_DEBS=(build-essential pkg-config openssl ca-certificates procps
    # tenant networking tests (agent/tests: network namespaces, veth, ping)
    iproute2 iputils-ping
    # the controller's etcd store: its tests start their own etcd from PATH (etcd-server); the
    # etcd-client crate compiles etcd's gRPC definitions at build time (protoc and its includes)
    etcd-server protobuf-compiler libprotobuf-dev
    # the real `openstack` CLI, in a venv made by scripts/openstack-venv.sh
    python3 python3-venv)

install_debs() {
    local missing=()
    for p in "${CUMULO_DEBS[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || { echo "need root to install: ${missing[*]}" >&2; return 1; }
        sudo="sudo"
    fi
    echo "installing: ${missing[*]}"
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        -o Dpkg::Options::=--force-confold "${missing[@]}"
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
