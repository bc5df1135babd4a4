#!/usr/bin/env bash
# The REST API against its own OpenAPI document (GET /openapi.json) with schemathesis: a real
# cluster (`cumulo up --backend sim`, debug binaries), an admin token, then generated requests
# for every documented route; any 5xx or any answer that breaks the document's schema fails.
#
#   bash scripts/schemathesis.sh            # needs target/debug/cumulo* (cargo build --bins)
#
#   SCHEMATHESIS_MAX_EXAMPLES   examples per operation (default 25)
#   CUMULO_SCHEMATHESIS_VENV    where the venv goes (default: ${XDG_CACHE_HOME:-$HOME/.cache}/cumulo/schemathesis-venv)
#   CUMULO_BIN_DIR              where the binaries are (default: target/debug)
#
# The venv (schemathesis pinned below, from PyPI) is made once, outside the repository.
# Needs python3 with the venv module (on Debian: python3-venv) and pip access to PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."

ST_VERSION="4.32.5"
venv="${CUMULO_SCHEMATHESIS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/cumulo/schemathesis-venv}"
stamp="$venv/.cumulo-schemathesis-$ST_VERSION"
bin="${CUMULO_BIN_DIR:-target/debug}"

if [ ! -x "$venv/bin/schemathesis" ] || [ ! -e "$stamp" ]; then
    python="${PYTHON:-python3}"
    command -v "$python" >/dev/null || { echo "python3 not found" >&2; exit 1; }
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    "$python" -m venv "$venv" >&2 || {
        echo "could not make a venv: on Debian install python3-venv" >&2
        exit 1
    }
    "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$ST_VERSION" >&2
    "$venv/bin/schemathesis" --version >&2
    touch "$stamp"
fi

for b in cumulo cumulo-scheduler cumulo-controller cumulo-agent; do
    [ -x "$bin/$b" ] || { echo "$bin/$b missing: run cargo build --bins first" >&2; exit 1; }
done

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

work=$(mktemp -d /tmp/cumulo-schemathesis.XXXXXX)
chmod 755 "$work"
cluster="$work/cluster"
cleanup() {
    "$bin/cumulo" down --dir "$cluster" --purge >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

sport=$(free_port)
aport=$(free_port)
if ! "$bin/cumulo" up --backend sim --tenant-network none --dir "$cluster" --no-instance \
    --scheduler-listen "127.0.0.1:$sport" --api-listen "127.0.0.1:$aport" >"$work/up.log" 2>&1; then
    cat "$work/up.log"
    tail -n 40 "$cluster"/logs/*.log 2>/dev/null || true
    echo "cumulo up --backend sim failed" >&2
    exit 1
fi

url=$(sed -n 's/^export CUMULO_CONTROLLER=//p' "$cluster/env")
password=$(cat "$cluster/admin-password")
tls=()
if [ "${url#https:}" != "$url" ]; then tls=(--tls-verify "$cluster/certs/ca.pem"); fi

# An admin token (Keystone v3 password login, project scope), then one object of each kind
# (flavor, image, workload, tenant, user, instance) whose ids go in the run's configuration:
# half the generated ids and references are real ones, so the checks reach past the 404s.
python3 - "$url" "$password" "$cluster/certs/ca.pem" "$work" <<'PY'
import json, ssl, sys, urllib.request
url, password, ca, work = sys.argv[1:5]
context = ssl.create_default_context(cafile=ca) if url.startswith("https:") else None

def call(method, path, body=None, token=None):
    headers = {"Content-Type": "application/json"}
    if token:
        headers["X-Auth-Token"] = token
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, headers=headers, method=method)
    with urllib.request.urlopen(req, context=context, timeout=30) as r:
        raw = r.read()
        return r.headers, (json.loads(raw) if raw else None)

headers, _ = call("POST", "/v3/auth/tokens", {"auth": {
    "identity": {"methods": ["password"], "password": {"user": {
        "name": "admin", "domain": {"name": "Default"}, "password": password}}},
    "scope": {"project": {"name": "admin", "domain": {"name": "Default"}}}}})
token = headers["X-Subject-Token"]
v1 = "/cumulo/v1"
flavor = call("POST", v1 + "/flavors", {"name": "st-flavor", "vcpus": 1, "memory_mb": 64}, token)[1]["id"]
image = call("POST", v1 + "/images", {"name": "st-image", "kind": "raw", "reference": "st",
                                      "public": True}, token)[1]["id"]
workload = call("POST", v1 + "/workloads", {"name": "st-workload", "flavor": flavor,
                                            "image": image, "public": True}, token)[1]["id"]
tenant = call("POST", v1 + "/tenants", {"name": "st-tenant"}, token)[1]["id"]
user = call("POST", v1 + "/users", {"name": "st-user", "password": "st-password-1"}, token)[1]["id"]
_, created = call("POST", v1 + "/instances", {"workload": workload, "name": "st", "count": 2}, token)
instances = [i["id"] for i in call("GET", v1 + "/instances", token=token)[1]["instances"]]
nodes = [n["id"] for n in call("GET", v1 + "/nodes", token=token)[1]["nodes"]]

def dictionary(name, values):
    return f"[dictionaries.{name}]\nvalues = {json.dumps(values)}\n"

def operations(regex, bindings):
    pairs = ", ".join(f'"{k}" = {{ dictionary = "{d}", probability = 0.5 }}' for k, d in bindings)
    return f'[[operations]]\ninclude-path-regex = "{regex}"\nparameters = {{ {pairs} }}\n'

toml = "".join([
    dictionary("flavors", [flavor]), dictionary("images", [image]),
    dictionary("workloads", [workload]), dictionary("tenants", [tenant]),
    dictionary("users", [user]), dictionary("instances", instances),
    dictionary("nodes", nodes or [flavor]),
    operations("^/cumulo/v1/flavors", [("path.id", "flavors")]),
    operations("^/cumulo/v1/images", [("path.id", "images"), ("body.tenant", "tenants")]),
    operations("^/cumulo/v1/workloads", [("path.id", "workloads"), ("body.flavor", "flavors"),
                                         ("body.image", "images"), ("body.tenant", "tenants")]),
    operations("^/cumulo/v1/instances", [("path.id", "instances"), ("body.workload", "workloads"),
                                         ("body.tenant", "tenants")]),
    operations("^/cumulo/v1/tenants", [("path.id", "tenants")]),
    operations("^/cumulo/v1/users", [("path.id", "users"), ("path.tenant", "tenants"),
                                     ("body.tenant", "tenants")]),
    operations("^/cumulo/v1/nodes", [("path.id", "nodes")]),
])
open(f"{work}/schemathesis.toml", "w").write(toml)
open(f"{work}/token", "w").write(token)
PY
token=$(cat "$work/token")
[ -n "$token" ] || { echo "no admin token from $url/v3/auth/tokens" >&2; exit 1; }

echo "schemathesis $ST_VERSION against $url/openapi.json (${SCHEMATHESIS_MAX_EXAMPLES:-25} examples per operation)"
status=0
# From the scratch directory: schemathesis keeps a cache (.schemathesis/) in its working directory.
(cd "$work" && "$venv/bin/schemathesis" --config-file "$work/schemathesis.toml" run "$url/openapi.json" \
    --header "X-Auth-Token: $token" \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance \
    --max-examples "${SCHEMATHESIS_MAX_EXAMPLES:-25}" \
    --seed "${SCHEMATHESIS_SEED:-12}" \
    --generation-database none \
    --no-color \
    ${tls[@]:+"${tls[@]}"}) || status=$?
if [ "$status" -ne 0 ]; then
    tail -n 40 "$cluster"/logs/controller*.log 2>/dev/null || true
    echo "schemathesis found failures (above)" >&2
fi
exit "$status"
