#!/usr/bin/env bash
# Makes (once) a Python venv holding the standard `openstack` CLI, outside the repository, and
# prints the path of its `openstack` binary. The OpenStack CLI tests (controller/tests/api/
# openstack.rs, systest/tests/system/openstack.rs) and the openstacksdk tests (controller/tests/api/
# sdk.rs, with the venv's python) use it: set CUMULO_OPENSTACK to that path, or
# let the tests find the venv at its default place.
#
#   CUMULO_OPENSTACK_VENV   where the venv goes (default: ${XDG_CACHE_HOME:-$HOME/.cache}/cumulo/openstack-venv)
#
# Needs python3 with the venv module (on Debian: the python3-venv package) and pip access to PyPI.
set -euo pipefail

OSC_VERSION="10.5.0"
venv="${CUMULO_OPENSTACK_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/cumulo/openstack-venv}"
stamp="$venv/.cumulo-osc-$OSC_VERSION"

if [ ! -x "$venv/bin/openstack" ] || [ ! -e "$stamp" ]; then
    python="${PYTHON:-python3}"
    command -v "$python" >/dev/null || { echo "python3 not found" >&2; exit 1; }
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    "$python" -m venv "$venv" >&2 || {
        echo "could not make a venv: on Debian install python3-venv" >&2
        exit 1
    }
    "$venv/bin/pip" install --quiet --disable-pip-version-check "python-openstackclient==$OSC_VERSION" >&2
    "$venv/bin/openstack" --version >&2
    touch "$stamp"
fi
echo "$venv/bin/openstack"
