"""What the openstacksdk checks share: the world file, connections, and the check log.

Run by controller/tests/api/sdk.rs (`CUMULO_REQUIRE_OPENSTACK=1 cargo test -p controller
--test api sdk`), with the venv's python (`scripts/openstack-venv.sh`), as
`python controller/tests/sdk/<proxy>_checks.py WORLD.json`. WORLD.json describes the API the
checks run against:

    {"auth_url": "http://127.0.0.1:PORT/v3", "cacert": null or "/path/ca.pem",
     "admin": {"user": ..., "password": ..., "project": ...},
     "alice": {"user", "user_id", "password", "project", "project_id"},   # a member of alpha
     "bob": {...},                                                        # a member of beta
     "flavor": {"id", "name", "vcpus", "ram", "disk"},
     "image": {"id", "name"}}                                             # a public image

Each check prints `ok   <what>`; the first that fails prints `FAIL <what>: <why>` with the
traceback, and the script exits with 1. With CUMULO_OPENSTACK_DEBUG=1 the SDK logs every
request and answer to stderr.
"""

import contextlib
import json
import os
import sys
import traceback

# No clouds.yaml and no OS_* variables of the host: everything is passed explicitly below.
for _key in [k for k in os.environ if k.startswith("OS_")]:
    del os.environ[_key]
os.environ["OS_CLIENT_CONFIG_FILE"] = "/dev/null"

import openstack  # noqa: E402
from openstack import exceptions  # noqa: E402

# CUMULO_OPENSTACK_DEBUG=1 (as for the CLI tests): every request and answer on stderr.
if os.environ.get("CUMULO_OPENSTACK_DEBUG"):
    openstack.enable_logging(debug=True, http_debug=True, stream=sys.stderr)

# Every wait of the SDK (wait_for_server, wait_for_delete, ...) gives up after this, in seconds.
WAIT = 60


def load_world():
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} WORLD.json")
    with open(sys.argv[1]) as f:
        return json.load(f)


def connect(world, who):
    """A connection as `who` (`admin`, `alice`, `bob`), every setting explicit."""
    account = world[who]
    kwargs = {}
    if world.get("cacert"):
        kwargs["cacert"] = world["cacert"]
    return openstack.connect(
        load_yaml_config=False,
        load_envvars=False,
        auth_type="password",
        auth_url=world["auth_url"],
        username=account["user"],
        password=account["password"],
        project_name=account["project"],
        user_domain_name="Default",
        project_domain_name="Default",
        region_name="RegionOne",
        interface="public",
        identity_api_version="3",
        api_timeout=WAIT,
        **kwargs,
    )


class Checks:
    """The log of one script's checks: `with checks("what"):` around each."""

    def __init__(self, proxy):
        self.proxy = proxy
        self.count = 0

    @contextlib.contextmanager
    def __call__(self, what):
        try:
            yield
        except Exception as e:  # noqa: BLE001 - any failure ends the run with its cause
            print(f"FAIL {self.proxy}: {what}: {type(e).__name__}: {e}", flush=True)
            traceback.print_exc(file=sys.stdout)
            sys.stdout.flush()
            sys.exit(1)
        self.count += 1
        print(f"ok   {self.proxy}: {what}", flush=True)

    def done(self):
        print(f"{self.proxy}: all {self.count} checks passed", flush=True)


def expect(condition, message):
    """Fails the current check with `message` unless `condition`."""
    if not condition:
        raise AssertionError(message)


def equal(got, want, what):
    expect(got == want, f"{what}: got {got!r}, want {want!r}")


def raises(exception, call, *args, status=None, **kwargs):
    """Runs `call(*args, **kwargs)`, which must raise `exception` (with HTTP `status` if
    given); returns the exception."""
    try:
        result = call(*args, **kwargs)
    except exception as e:
        if status is not None:
            equal(getattr(e, "status_code", None), status, f"status of {type(e).__name__}")
        return e
    raise AssertionError(
        f"{getattr(call, '__name__', call)}{args} gave {result!r}, not {exception.__name__}"
    )


__all__ = [
    "WAIT",
    "Checks",
    "connect",
    "equal",
    "exceptions",
    "expect",
    "load_world",
    "raises",
]
