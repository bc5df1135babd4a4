"""openstacksdk's compute proxy (`conn.compute`) against cumulo's Compute v2.1 subset.

Run by controller/tests/api/sdk.rs: `CUMULO_REQUIRE_OPENSTACK=1 cargo test -p controller --test
api sdk`; by hand: `~/.cache/cumulo/openstack-venv/bin/python
controller/tests/sdk/compute_checks.py WORLD.json` (WORLD.json: see cumulo_sdk.py). It expects
a fresh API: the flavor and image of WORLD.json only, no servers, no key pairs.
"""

import base64
import uuid

from cumulo_sdk import WAIT, Checks, connect, equal, exceptions, expect, load_world, raises

world = load_world()
flavor, image = world["flavor"], world["image"]
alpha, beta = world["alice"]["project_id"], world["bob"]["project_id"]
check = Checks("compute")
# The fake cluster answers at once; the SDK polls every INTERVAL until WAIT.
INTERVAL = 0.2

alice = connect(world, "alice")
bob = connect(world, "bob")
admin = connect(world, "admin")


def wait_status(server, status):
    """Waits for `status` (the SDK polls), then reads the server again: wait_for_server returns
    at once, without asking, when its Server object already shows `status` (after a reboot)."""
    alice.compute.wait_for_server(server, status=status, interval=INTERVAL, wait=WAIT)
    got = alice.compute.get_server(server.id)
    equal(got.status, status, "status")
    return got


with check("flavors: list, list with details, find by name, get by id"):
    equal([f.name for f in alice.compute.flavors(details=False)], [flavor["name"]], "names")
    listed = list(alice.compute.flavors())
    equal([f.id for f in listed], [flavor["id"]], "ids")
    equal((listed[0].vcpus, listed[0].ram, listed[0].disk),
          (flavor["vcpus"], flavor["ram"], flavor["disk"]), "listed vcpus, ram, disk")
    found = alice.compute.find_flavor(flavor["name"], ignore_missing=False)
    equal(found.id, flavor["id"], "find_flavor(name).id")
    got = alice.compute.get_flavor(flavor["id"])
    equal((got.name, got.vcpus, got.ram, got.disk, got.is_public),
          (flavor["name"], flavor["vcpus"], flavor["ram"], flavor["disk"], True), "get_flavor")
    equal(alice.compute.find_flavor("no-such-flavor"), None, "find_flavor of nothing")

with check("flavors: get_flavor with its extra specs (none)"):
    got = alice.compute.get_flavor(flavor["id"], get_extra_specs=True)
    equal(got.extra_specs, {}, "extra_specs")

with check("flavors: get_flavor of an unknown id is ResourceNotFound (404)"):
    raises(exceptions.ResourceNotFound, alice.compute.get_flavor, str(uuid.uuid4()), status=404)

with check("availability_zones: one, nova"):
    equal([z.name for z in alice.compute.availability_zones()], ["nova"], "zones")

with check("keypairs: create (generated), the private key is in the answer only"):
    generated = alice.compute.create_keypair(name="sdk-generated")
    expect(generated.private_key.startswith("-----BEGIN OPENSSH PRIVATE KEY-----"),
           f"private key {generated.private_key[:40]!r}")
    expect(generated.public_key.startswith("ssh-ed25519 "), f"public {generated.public_key!r}")
    equal(len(generated.fingerprint), 47, "fingerprint length")
    equal(generated.user_id, world["alice"]["user_id"], "user_id")
    got = alice.compute.get_keypair("sdk-generated")
    equal(got.public_key, generated.public_key, "get_keypair public key")
    equal(got.private_key, None, "get_keypair's private key")

with check("keypairs: create (imported), list, find, get; another user sees none of them"):
    line = ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDqQAmShDSQy5PElKTKfr2Xx0D8ZW+CSzdNTY+7C0SPx"
            " me@home")
    imported = alice.compute.create_keypair(name="sdk-imported", public_key=line)
    equal(imported.public_key, line, "imported public key")
    equal(imported.private_key, None, "imported private key")
    listed = {k.name: k.fingerprint for k in alice.compute.keypairs()}
    equal(sorted(listed), ["sdk-generated", "sdk-imported"], "keypairs()")
    equal(listed["sdk-imported"], imported.fingerprint, "listed fingerprint")
    equal(alice.compute.find_keypair("sdk-imported").fingerprint, imported.fingerprint,
          "find_keypair")
    equal(list(bob.compute.keypairs()), [], "bob's keypairs()")
    raises(exceptions.ResourceNotFound, bob.compute.get_keypair, "sdk-imported", status=404)

with check("keypairs: delete, then ResourceNotFound"):
    alice.compute.delete_keypair("sdk-imported", ignore_missing=False)
    raises(exceptions.ResourceNotFound, alice.compute.get_keypair, "sdk-imported", status=404)
    equal([k.name for k in alice.compute.keypairs()], ["sdk-generated"], "keypairs() after")
    raises(exceptions.ResourceNotFound, alice.compute.delete_keypair, "sdk-imported",
           ignore_missing=False)

with check("quota sets: the admin sets alpha's (update_quota_set), a member reads its own"):
    admin.compute.update_quota_set(alpha, instances=5, cores=8, ram=4096)
    quota = alice.compute.get_quota_set(alpha)
    equal((quota.instances, quota.cores, quota.ram), (5, 8, 4096), "instances, cores, ram")
    equal(quota.key_pairs, 100, "key_pairs")
    equal(quota.metadata_items, 128, "metadata_items")

with check("quota sets: a member may not read another project's (ForbiddenException)"):
    raises(exceptions.ForbiddenException, alice.compute.get_quota_set, beta, status=403)

with check("quota sets: nor change its own (ForbiddenException)"):
    raises(exceptions.ForbiddenException, alice.compute.update_quota_set, alpha, instances=50,
           status=403)

user_data = "#cloud-config\nhostname: sdk-vm\n"
with check("create_server, then wait_for_server to ACTIVE"):
    created = alice.compute.create_server(
        name="sdk-vm",
        flavor_id=flavor["id"],
        image_id=image["id"],
        key_name="sdk-generated",
        user_data=base64.b64encode(user_data.encode()).decode(),
    )
    expect(created.id, "no id in the create answer")
    server = wait_status(created, "ACTIVE")
    equal(server.id, created.id, "id")
    equal(server.status, "ACTIVE", "status")

with check("get_server: name, flavor, image, key, project, user, addresses"):
    got = alice.compute.get_server(server.id)
    equal(got.name, "sdk-vm", "name")
    equal(got.user_id, world["alice"]["user_id"], "user_id")
    equal(got.flavor.id, flavor["id"], "flavor id")
    equal(got.image.id, image["id"], "image id")
    equal(got.key_name, "sdk-generated", "key_name")
    equal(got.project_id, alpha, "project_id")
    fixed = [a["addr"] for a in got.addresses.get("private", [])]
    expect(len(fixed) == 1 and fixed[0].startswith("172."), f"addresses {got.addresses}")

with check("server_ips: the fixed address under private"):
    ips = [(ip.network_label, ip.address) for ip in alice.compute.server_ips(server.id)]
    equal(ips, [("private", fixed[0])], "server_ips")

with check("servers: list, filters name and status, find_server"):
    equal([s.id for s in alice.compute.servers()], [server.id], "servers()")
    equal([s.name for s in alice.compute.servers(details=False)], ["sdk-vm"], "names")
    equal([s.id for s in alice.compute.servers(name="sdk")], [server.id], "name filter")
    equal(list(alice.compute.servers(name="other")), [], "name filter of nothing")
    equal([s.id for s in alice.compute.servers(status="ACTIVE")], [server.id], "ACTIVE")
    equal(list(alice.compute.servers(status="SHUTOFF")), [], "SHUTOFF")
    equal(alice.compute.find_server("sdk-vm", ignore_missing=False).id, server.id, "find")
    equal(list(bob.compute.servers()), [], "bob's servers()")

with check("servers: the admin lists every project's with all_projects, its own without"):
    equal([s.id for s in admin.compute.servers(all_projects=True)], [server.id], "all_projects")
    equal(list(admin.compute.servers()), [], "the admin project's servers()")
    equal(admin.compute.get_server(server.id).project_id, alpha, "the admin's get_server")

with check("servers: pages of limit=1 (the SDK follows servers_links)"):
    second = alice.compute.create_server(name="sdk-vm-2", flavor_id=flavor["id"],
                                         image_id=image["id"])
    wait_status(second, "ACTIVE")
    paged = [s.id for s in alice.compute.servers(limit=1, paginated=True)]
    equal(sorted(paged), sorted([server.id, second.id]), "paged servers")
    alice.compute.delete_server(second)
    alice.compute.wait_for_delete(second, interval=INTERVAL, wait=WAIT)

with check("return_reservation_id: the reservation alone; servers(reservation_id=) lists its servers"):
    answer = alice.compute.post("/servers", json={"server": {
        "name": "sdk-pair", "flavorRef": flavor["id"], "imageRef": image["id"],
        "min_count": 2, "max_count": 2, "return_reservation_id": True}})
    equal(answer.status_code, 202, "status")
    reservation = answer.json()["reservation_id"]
    expect(reservation.startswith("r-") and len(reservation) == 10, f"reservation {reservation!r}")
    pair = list(alice.compute.servers(reservation_id=reservation))
    equal([s.name for s in pair], ["sdk-pair", "sdk-pair"], "the reservation's servers")
    equal(list(alice.compute.servers(reservation_id="r-00000000")), [], "another reservation")
    equal(list(bob.compute.servers(reservation_id=reservation)), [], "bob's")

with check("servers: several sort keys, each with its direction (lists of sort_key and sort_dir)"):
    def sorted_names(**sort):
        return [s.name for s in alice.compute.servers(**sort)]
    equal(sorted_names(sort_key=["display_name", "uuid"], sort_dir=["asc", "asc"]),
          ["sdk-pair", "sdk-pair", "sdk-vm"], "name asc, uuid asc")
    ids = [s.id for s in alice.compute.servers(sort_key=["display_name", "uuid"],
                                               sort_dir=["desc", "asc"])]
    equal(ids[0], server.id, "name desc first")
    equal(ids[1:], sorted(s.id for s in pair), "then the pair by uuid asc")
    ids = [s.id for s in alice.compute.servers(sort_key=["display_name", "uuid"],
                                               sort_dir=["desc", "desc"])]
    equal(ids[1:], sorted((s.id for s in pair), reverse=True), "then the pair by uuid desc")
    raises(exceptions.BadRequestException, list,
           alice.compute.servers(sort_key=["display_name", "password"]), status=400)
    for s in pair:
        alice.compute.delete_server(s)
        alice.compute.wait_for_delete(s, interval=INTERVAL, wait=WAIT)

with check("another project's server is ResourceNotFound (404)"):
    raises(exceptions.ResourceNotFound, bob.compute.get_server, server.id, status=404)
    raises(exceptions.ResourceNotFound, alice.compute.get_server, str(uuid.uuid4()), status=404)

with check("update_server: a new name"):
    renamed = alice.compute.update_server(server, name="sdk-vm-renamed")
    equal(renamed.name, "sdk-vm-renamed", "returned name")
    equal(alice.compute.get_server(server.id).name, "sdk-vm-renamed", "name after")

with check("server metadata: set_server_metadata merges, get, delete_server_metadata"):
    alice.compute.set_server_metadata(server, role="web", tier="1")
    equal(alice.compute.get_server_metadata(server).metadata, {"role": "web", "tier": "1"},
          "metadata after set")
    alice.compute.delete_server_metadata(server, ["tier"])
    equal(alice.compute.get_server(server.id).metadata, {"role": "web"}, "metadata after delete")
    raises(exceptions.BadRequestException, alice.compute.set_server_metadata, server,
           **{"bad/key": "v"}, status=400)

with check("lock_server: the member's stop and metadata change are 409s; unlock_server"):
    alice.compute.lock_server(server)
    raises(exceptions.ConflictException, alice.compute.stop_server, server, status=409)
    raises(exceptions.ConflictException, alice.compute.set_server_metadata, server, k="v",
           status=409)
    alice.compute.unlock_server(server)
    alice.compute.set_server_metadata(server, k="v")
    equal(alice.compute.get_server_metadata(server).metadata, {"role": "web", "k": "v"},
          "metadata after unlock")

with check("limits: the quota set above and what the server uses"):
    absolute = alice.compute.get_limits().absolute
    equal((absolute.instances, absolute.total_cores, absolute.total_ram), (5, 8, 4096),
          "max instances, cores, ram")
    equal((absolute.instances_used, absolute.total_cores_used, absolute.total_ram_used),
          (1, flavor["vcpus"], flavor["ram"]), "used instances, cores, ram")
    equal(absolute.keypairs, 100, "keypairs")
    equal(alice.compute.get_limits().rate, [], "rate limits")

with check("quota sets with usage: in use"):
    quota = alice.compute.get_quota_set(alpha, usage=True)
    equal(quota.instances, 5, "instances limit")
    equal(quota.usage.get("instances"), 1, "instances in use")
    equal(quota.usage.get("cores"), flavor["vcpus"], "cores in use")

with check("stop_server, wait_for_server to SHUTOFF; stopping again is a 409"):
    alice.compute.stop_server(server)
    wait_status(server, "SHUTOFF")
    equal([s.id for s in alice.compute.servers(status="SHUTOFF")], [server.id], "SHUTOFF")
    raises(exceptions.ConflictException, alice.compute.stop_server, server, status=409)

with check("start_server, wait_for_server to ACTIVE"):
    alice.compute.start_server(server)
    wait_status(server, "ACTIVE")

with check("reboot_server SOFT and HARD, ACTIVE after each"):
    alice.compute.reboot_server(server, "SOFT")
    wait_status(server, "ACTIVE")
    alice.compute.reboot_server(server, "HARD")
    wait_status(server, "ACTIVE")

with check("pause_server / unpause_server: PAUSED, then ACTIVE"):
    alice.compute.pause_server(server)
    wait_status(server, "PAUSED")
    alice.compute.unpause_server(server)
    wait_status(server, "ACTIVE")

with check("server_actions: every action, newest first, with its request id and user"):
    actions = list(alice.compute.server_actions(server.id))
    equal([a.action for a in actions],
          ["unpause", "pause", "reboot", "reboot", "start", "stop", "create"], "actions")
    for a in actions:
        equal(a.server_id, server.id, f"{a.action}'s server_id")
        equal(a.project_id, alpha, f"{a.action}'s project_id")
        equal(a.user_id, world["alice"]["user_id"], f"{a.action}'s user_id")
        expect(a.request_id.startswith("req-"), f"request id {a.request_id}")

with check("get_server_action: the stop's events"):
    stop = actions[5]
    got = alice.compute.get_server_action(stop.request_id, server.id)
    equal((got.action, got.request_id), ("stop", stop.request_id), "action")
    events = [(e.event, e.result) for e in got.events]
    equal(events, [("controller_stop", "Success")], "events")
    raises(exceptions.ResourceNotFound, alice.compute.get_server_action, "req-" +
           str(uuid.uuid4()), server.id, ignore_missing=False)

with check("get_server_console_output: the whole log, and its last line"):
    output = alice.compute.get_server_console_output(server)["output"]
    equal(output.splitlines()[-1], f"CUMULO-GUEST-UP {server.id}", "last line")
    last = alice.compute.get_server_console_output(server, length=1)["output"]
    equal(last, f"CUMULO-GUEST-UP {server.id}\n", "length=1")

with check("delete_server, wait_for_delete; then ResourceNotFound"):
    alice.compute.delete_server(server)
    alice.compute.wait_for_delete(server, interval=INTERVAL, wait=WAIT)
    raises(exceptions.ResourceNotFound, alice.compute.get_server, server.id, status=404)
    equal(list(alice.compute.servers()), [], "servers() after")
    raises(exceptions.ResourceNotFound, alice.compute.delete_server, server.id,
           ignore_missing=False)

with check("a deleted server's actions are still listed, the newest its delete"):
    actions = list(alice.compute.server_actions(server.id))
    equal(actions[0].action, "delete", "newest action")

with check("create_server of an unknown image is BadRequestException (400)"):
    raises(exceptions.BadRequestException, alice.compute.create_server, name="bad",
           flavor_id=flavor["id"], image_id=str(uuid.uuid4()), status=400)

with check("server groups: create, a server joins by its scheduler hint, list, get, delete"):
    group = alice.compute.create_server_group(name="sdk-spread",
                                              policies=["soft-anti-affinity"])
    equal(group.policies, ["soft-anti-affinity"], "policies")
    member = alice.compute.create_server(name="sdk-member", flavor_id=flavor["id"],
                                         image_id=image["id"],
                                         scheduler_hints={"group": group.id})
    wait_status(member, "ACTIVE")
    equal(alice.compute.get_server_group(group.id).member_ids, [member.id], "member_ids")
    equal([g.id for g in alice.compute.server_groups()], [group.id], "listed")
    equal(list(bob.compute.server_groups()), [], "another project's list")
    raises(exceptions.ResourceNotFound, bob.compute.get_server_group, group.id)
    alice.compute.delete_server(member)
    alice.compute.wait_for_delete(member, interval=INTERVAL, wait=WAIT)
    equal(alice.compute.get_server_group(group.id).member_ids, [], "members after the delete")
    alice.compute.delete_server_group(group, ignore_missing=False)
    raises(exceptions.ResourceNotFound, alice.compute.get_server_group, group.id)

with check("keypairs: the last one deleted"):
    alice.compute.delete_keypair("sdk-generated", ignore_missing=False)
    equal(list(alice.compute.keypairs()), [], "keypairs()")

check.done()
