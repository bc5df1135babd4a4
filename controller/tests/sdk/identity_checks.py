"""openstacksdk's identity proxy (`conn.identity`) against cumulo's Identity v3 subset.

Run by controller/tests/api/sdk.rs: `CUMULO_REQUIRE_OPENSTACK=1 cargo test -p controller --test
api sdk`; by hand: `~/.cache/cumulo/openstack-venv/bin/python
controller/tests/sdk/identity_checks.py WORLD.json` (WORLD.json: see cumulo_sdk.py).
"""

import uuid

import openstack
from cumulo_sdk import Checks, connect, equal, exceptions, expect, load_world, raises

world = load_world()
alice_id, alpha = world["alice"]["user_id"], world["alice"]["project_id"]
bob_id, beta = world["bob"]["user_id"], world["bob"]["project_id"]
check = Checks("identity")

alice = connect(world, "alice")
admin = connect(world, "admin")

with check("a member logs in: conn.auth_token, current_user_id, current_project_id"):
    token = alice.auth_token
    expect(token.startswith("cu1."), f"token {token!r} is not one of cumulo's")
    equal(alice.current_user_id, alice_id, "current_user_id")
    equal(alice.current_project_id, alpha, "current_project_id")

with check("the catalog gives the SDK its endpoints (compute, image, identity)"):
    base = world["auth_url"].removesuffix("/v3")
    equal(alice.endpoint_for("compute"), f"{base}/compute/v2.1", "compute endpoint")
    equal(alice.endpoint_for("image"), f"{base}/image", "image endpoint")
    equal(alice.endpoint_for("identity"), world["auth_url"], "identity endpoint")

with check("identity.validate_token of its own token: user, project, roles, catalog"):
    t = alice.identity.validate_token(token)
    equal(t.user["id"], alice_id, "token user")
    equal(t.user["name"], world["alice"]["user"], "token user name")
    equal(t.project["id"], alpha, "token project")
    equal(t.project["name"], world["alice"]["project"], "token project name")
    # Keystone's tokens list the roles the given ones imply: member implies reader.
    equal([r["name"] for r in t.roles], ["member", "reader"], "token roles")
    equal(t.methods, ["password"], "token methods")
    expect(t.expires_at > t.issued_at, f"expires {t.expires_at} before issued {t.issued_at}")
    types = sorted(s["type"] for s in t.catalog)
    for kind in ["compute", "identity", "image", "network"]:
        expect(kind in types, f"{kind} not in the catalog {types}")

with check("identity.check_token (HEAD /v3/auth/tokens): True for a valid token"):
    equal(alice.identity.check_token(token), True, "check_token")

with check("identity.get_user of itself"):
    me = alice.identity.get_user(alice_id)
    equal(me.id, alice_id, "id")
    equal(me.name, world["alice"]["user"], "name")
    equal(me.domain_id, "default", "domain_id")
    equal(me.is_enabled, True, "is_enabled")

with check("identity.get_user of another user: a member gets ForbiddenException (403)"):
    raises(exceptions.ForbiddenException, alice.identity.get_user, bob_id, status=403)

with check("identity.projects: a member gets ForbiddenException (identity:list_projects)"):
    e = raises(exceptions.ForbiddenException, lambda: list(alice.identity.projects()))
    expect("identity:list_projects" in str(e), f"message {e}")

with check("identity.get_project of its own project, 403 for another's"):
    p = alice.identity.get_project(alpha)
    equal((p.id, p.name, p.domain_id, p.is_enabled), (alpha, "alpha", "default", True), "project")
    raises(exceptions.ForbiddenException, alice.identity.get_project, beta, status=403)

with check("identity.user_projects of itself: its one project"):
    mine = [(p.id, p.name) for p in alice.identity.user_projects(alice_id)]
    equal(mine, [(alpha, "alpha")], "user_projects")

with check("admin: conn.current_project_id is the admin project, its token has role admin"):
    admin_project = admin.current_project_id
    t = admin.identity.validate_token(admin.auth_token)
    equal(t.project["id"], admin_project, "admin token project")
    equal(t.project["name"], world["admin"]["project"], "admin token project name")
    expect("admin" in [r["name"] for r in t.roles], f"roles {t.roles}")

with check("admin: identity.projects lists every project, filters by name"):
    projects = {p.name: p.id for p in admin.identity.projects()}
    equal(sorted(projects), sorted(["admin", "alpha", "beta"]), "project names")
    equal(projects["alpha"], alpha, "alpha's id")
    equal(projects["beta"], beta, "beta's id")
    equal([p.id for p in admin.identity.projects(name="beta")], [beta], "projects(name=beta)")

with check("admin: identity.get_project and find_project (by name and by id)"):
    equal(admin.identity.get_project(beta).name, "beta", "get_project(beta).name")
    equal(admin.identity.find_project("beta").id, beta, "find_project('beta')")
    equal(admin.identity.find_project(alpha).name, "alpha", "find_project(alpha id)")
    equal(admin.identity.find_project("no-such-project"), None, "find_project of nothing")

with check("admin: identity.get_project of an unknown id is ResourceNotFound (404)"):
    raises(exceptions.ResourceNotFound, admin.identity.get_project, str(uuid.uuid4()), status=404)

with check("admin: identity.users, get_user and find_user"):
    users = {u.name: u.id for u in admin.identity.users()}
    for name in [world["admin"]["user"], world["alice"]["user"], world["bob"]["user"]]:
        expect(name in users, f"{name} not in {sorted(users)}")
    equal(users[world["bob"]["user"]], bob_id, "bob's id")
    equal(admin.identity.get_user(bob_id).name, world["bob"]["user"], "get_user(bob).name")
    equal(admin.identity.find_user(world["alice"]["user"]).id, alice_id, "find_user(alice)")
    equal(
        [u.id for u in admin.identity.users(name=world["bob"]["user"])], [bob_id], "users(name=)"
    )
    bobs = [p.id for p in admin.identity.user_projects(bob_id)]
    equal(bobs, [beta], "user_projects(bob)")

with check("admin: identity.validate_token of a member's token"):
    t = admin.identity.validate_token(token)
    equal(t.user["id"], alice_id, "validated token's user")

with check("identity.revoke_token: the token is then invalid (check_token False, 404)"):
    second = connect(world, "alice")
    revoked = second.auth_token
    expect(revoked != token, "two logins gave one token")
    alice.identity.revoke_token(revoked)
    equal(alice.identity.check_token(revoked), False, "check_token of a revoked token")
    raises(exceptions.NotFoundException, alice.identity.validate_token, revoked, status=404)
    # The first token is untouched.
    equal(alice.identity.check_token(token), True, "check_token of the other token")

with check("a connection whose token was revoked logs in again on its 401 (keystoneauth)"):
    equal(second.identity.get_user(alice_id).id, alice_id, "get_user after the revocation")
    expect(second.auth_token != revoked, "the connection kept the revoked token")

with check("a wrong password: conn.authorize() raises SDKException (401)"):
    world_wrong = dict(world, alice=dict(world["alice"], password="not-the-password"))
    e = raises(exceptions.SDKException, connect(world_wrong, "alice").authorize)
    expect("401" in str(e), f"message {e}")

with check("admin: create_project, create_user, assign_project_role_to_user, role checks"):
    gamma = admin.identity.create_project(name="gamma", description="sdk", domain_id="default")
    equal((gamma.name, gamma.description, gamma.is_enabled), ("gamma", "sdk", True), "project")
    carol = admin.identity.create_user(name="carol", password="carol-pw", default_project_id=gamma.id)
    equal(carol.default_project_id, gamma.id, "default_project_id")
    reader = admin.identity.find_role("reader")
    equal(reader.id, "reader", "find_role('reader')")
    admin.identity.assign_project_role_to_user(gamma, carol, reader)
    expect(
        admin.identity.validate_user_has_project_role(gamma, carol, reader), "role not found"
    )
    held = [r.name for r in admin.identity.role_assignments_filter(project=gamma, user=carol)]
    equal(held, ["reader"], "role_assignments_filter")
    listed = list(admin.identity.role_assignments(user_id=carol.id, scope_project_id=gamma.id))
    equal([a.role["id"] for a in listed], ["reader"], "role_assignments")
    admin.identity.unassign_project_role_from_user(gamma, carol, reader)
    expect(
        not admin.identity.validate_user_has_project_role(gamma, carol, reader), "role kept"
    )
    admin.identity.delete_user(carol)
    admin.identity.delete_project(gamma)
    equal(admin.identity.find_project("gamma"), None, "find_project after delete_project")

with check("a member: create_project is ForbiddenException (identity:create_project)"):
    e = raises(exceptions.ForbiddenException, alice.identity.create_project, name="x")
    expect("identity:create_project" in str(e), f"message {e}")

with check("application credentials: create, list, log in with one (v3applicationcredential)"):
    cred = alice.identity.create_application_credential(
        alice_id, "sdk-ci", roles=[{"name": "reader"}], description="from the SDK"
    )
    expect(cred.secret, "no secret in the creation's answer")
    equal([r["name"] for r in cred.roles], ["reader"], "roles")
    names = [c.name for c in alice.identity.application_credentials(alice_id)]
    equal(names, ["sdk-ci"], "application_credentials")
    kwargs = {"cacert": world["cacert"]} if world.get("cacert") else {}
    app = openstack.connect(
        load_yaml_config=False,
        load_envvars=False,
        auth_type="v3applicationcredential",
        auth_url=world["auth_url"],
        application_credential_id=cred.id,
        application_credential_secret=cred.secret,
        region_name="RegionOne",
        interface="public",
        identity_api_version="3",
        **kwargs,
    )
    equal(app.current_project_id, alpha, "the credential's project")
    t = app.identity.validate_token(app.auth_token)
    equal(t.methods, ["application_credential"], "methods")
    equal([r["name"] for r in t.roles], ["reader"], "the token's roles")
    alice.identity.delete_application_credential(alice_id, cred.id)
    equal(list(alice.identity.application_credentials(alice_id)), [], "after delete")

with check("update_password: a user changes its own (204); its tokens end; 401, 403"):
    member = admin.identity.find_role("member")
    name = f"dave-{uuid.uuid4().hex[:8]}"
    dave_user = admin.identity.create_user(name=name, password="dave-old", default_project_id=alpha)
    admin.identity.assign_project_role_to_user(alpha, dave_user, member)
    as_dave = dict(world, dave={"user": name, "password": "dave-old",
                                "project": world["alice"]["project"]})
    dave = connect(as_dave, "dave")
    old_token = dave.auth_token
    e = raises(exceptions.HttpException, dave.identity.update_password, dave_user.id,
               "not-the-password", "dave-new", status=401)
    raises(exceptions.HttpException, alice.identity.update_password, dave_user.id, "dave-old",
           "alice-chose", status=403)
    equal(dave.identity.update_password(dave_user.id, "dave-old", "dave-new"), None,
          "update_password")
    expect(not admin.identity.check_token(old_token), "the token from before is still valid")
    as_dave["dave"]["password"] = "dave-new"
    equal(connect(as_dave, "dave").current_user_id, dave_user.id, "a login with the new one")
    as_dave["dave"]["password"] = "dave-old"
    e = raises(exceptions.SDKException, connect(as_dave, "dave").authorize)
    expect("401" in str(e), f"the old password: {e}")
    admin.identity.delete_user(dave_user)

check.done()
