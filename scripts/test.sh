#!/usr/bin/env bash
# cumulo's whole test suite: the README's test command, and what CI (.ci/run) runs.
# Installs what is missing, then: format, lints, docs, tests, a smoke run of every benchmark,
# licence policy, fuzz smoke.
# FUZZ_SECONDS (default 20) sets the fuzz smoke run per target.
# The libvirt backend's VM tests (agent/tests/agent/libvirt.rs, systest/tests/system/remote.rs,
# the kill -9 fault test with real VMs in cli/tests/faults/libvirt.rs) run against a libvirtd that
# this script starts as root (and stops, by PID, even on failure) and the tiny test guest (built
# once, cached outside the repository); in CI (CI=true) they must run: CUMULO_LIBVIRT_REQUIRED=1
# makes a skip a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
source scripts/libvirt.sh
install_deps

scratch=""
cleanup() {
    libvirt_down
    if [ -n "$scratch" ]; then rm -rf "$scratch"; fi
}
trap cleanup EXIT

step() { printf '\n== %s\n' "$*"; }

# A clean checkout gains nothing from incremental compilation, and its caches would double the
# target directory: CI builds without them.
if [ "${CI:-}" = true ]; then export CARGO_INCREMENTAL=0; fi
# The build needs room (README, "Testing", has the measured peak): say how much there is up front, so
# that a full disk is recognised as the cause of a failed build.
mkdir -p target
echo "free space for target/: $(df -h --output=avail target | tail -n 1 | tr -d ' ')"

step "format"
cargo fmt --all -- --check

step "clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "no import circles between a crate's files (docs/architecture.md)"
python3 scripts/import-circles.py

step "docs"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet

step "libvirtd and the tiny guest (for the VM tests)"
if [ "$(id -u)" -eq 0 ]; then
    libvirt_up
    CUMULO_TINY_GUEST=$(bash scripts/tiny-guest.sh)
    export CUMULO_TINY_GUEST
    echo "tiny guest: $CUMULO_TINY_GUEST"
    CUMULO_TINY_DISK=$(bash scripts/tiny-disk.sh)
    export CUMULO_TINY_DISK
    echo "tiny guest as a disk image: $CUMULO_TINY_DISK"
    CUMULO_TINY_ISO=$(bash scripts/tiny-iso.sh)
    export CUMULO_TINY_ISO
    echo "tiny guest as an ISO image: $CUMULO_TINY_ISO"
else
    echo "not root: no libvirtd started, the VM tests skip (CI runs as root)"
fi
# In CI the VM tests must run, not skip.
if [ "${CI:-}" = true ]; then export CUMULO_LIBVIRT_REQUIRED=1; fi

step "tests"
# CI runs as root: the network-namespace tests (agent/tests/agent/netns.rs) must run there, not skip.
if [ "${CI:-}" = true ]; then export CUMULO_REQUIRE_NETNS=1; fi
# The etcd store's tests start their own etcd (installed above): a missing etcd is a failure here,
# not a skip.
export CUMULO_REQUIRE_ETCD=1
# `cumulo up`'s end-to-end test runs the cluster's binaries: build them first, and fail (not skip)
# if they are missing.
cargo build --workspace --bins --locked
export CUMULO_REQUIRE_BINS=1
# The real `openstack` CLI (python-openstackclient in a venv outside the repository) against the
# API: installed here, required by the tests.
CUMULO_OPENSTACK=$(bash scripts/openstack-venv.sh)
export CUMULO_OPENSTACK CUMULO_REQUIRE_OPENSTACK=1
# The dashboard's tests drive Chromium (installed above): a missing browser is a failure here.
export CUMULO_REQUIRE_BROWSER=1
cargo test --workspace --locked

step "every benchmark once, small counts (scripts/bench-smoke.sh)"
# A benchmark that no longer completes (a panic, a hang, a daemon it starts that dies) fails CI;
# its figures are not checked (docs/benchmarks.md has the measured ones).
bash scripts/bench-smoke.sh

step "the REST API against its OpenAPI document (schemathesis, sim cluster)"
# A real `cumulo up --backend sim` cluster, an admin token, generated requests for every route of
# /openapi.json: a 5xx or an answer that breaks the document fails CI (docs/reliability.md).
if ! bash scripts/schemathesis.sh; then
    echo "schemathesis found 5xx or schema mismatches in the REST API" >&2
    exit 1
fi

# The VM tests' libvirtd goes first: the README's cluster starts its own, and nothing of the
# tests may be mistaken for its leftovers.
libvirt_down

step "the README's quick start and tour, as written (root, then a plain user)"
if [ "$(id -u)" -eq 0 ]; then
    bash scripts/readme-test.sh
else
    echo "not root: skipped (CI runs as root)"
fi

if cargo deny --version >/dev/null 2>&1; then
    step "licences, bans, sources (cargo deny)"
    cargo deny --offline check licenses bans sources
fi

step "fuzz smoke (${FUZZ_SECONDS:-20}s per target)"
scratch=$(mktemp -d)
for target in $(cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz list); do
    mkdir -p "$scratch/$target"
    log="$scratch/$target.log"
    # New inputs go to the scratch corpus; the committed seeds are only read.
    if ! (cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run "$target" "$scratch/$target" "corpus/$target" \
        -- -max_total_time="${FUZZ_SECONDS:-20}") >"$log" 2>&1; then
        tail -n 60 "$log"
        echo "fuzz target $target failed: see fuzz/artifacts/$target" >&2
        exit 1
    fi
    echo "$target: $(grep -E '^Done' "$log" || echo 'ran')"
done
echo "fuzz smoke: every target ran clean"
