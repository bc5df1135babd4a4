#!/usr/bin/env bash
# The README's first command: installs what cumulo needs on this Debian/Ubuntu host (apt-get, as
# root or through sudo; otherwise it says what to install), builds the binaries, and runs
# `cumulo up`, which brings the whole cluster up here and boots a first instance. Arguments go to
# `cumulo up` (e.g. --backend sim, --dir DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
if ! install_debs; then
    echo "cumulo needs these Debian packages to build and run; install them and run this again:" >&2
    echo "  sudo apt-get install --no-install-recommends ${CUMULO_DEBS[*]}" >&2
    exit 1
fi
command -v cargo >/dev/null || { echo "cargo not found: install Rust with rustup first" >&2; exit 1; }
cargo build --release --bins --locked
exec target/release/cumulo up "$@"
