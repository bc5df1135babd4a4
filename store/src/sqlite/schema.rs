//! The SQLite schema as an ordered list of migrations, and the code that applies them.
//!
//! Migration `n` (1-based) takes a database from schema version `n - 1` to `n`. The version is kept
//! in `schema_version`; all pending migrations run in one transaction, so a failure leaves the
//! database as it was. Migrations are append-only: a released one is never edited.

use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use crate::{Result, StoreError};

/// The migrations, oldest first.
pub(crate) const MIGRATIONS: &[&str] = &[
    // 1: the first schema.
    r#"
CREATE TABLE tenants (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    quota_instances INTEGER,
    quota_vcpus INTEGER,
    quota_memory_mb INTEGER,
    subnet_prefix INTEGER NOT NULL,
    created INTEGER NOT NULL,
    version INTEGER NOT NULL
);
CREATE TABLE users (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    password_hash TEXT NOT NULL,
    created INTEGER NOT NULL,
    version INTEGER NOT NULL
);
CREATE TABLE roles (
    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    PRIMARY KEY (user_id, tenant_id, role)
);
CREATE INDEX roles_tenant ON roles(tenant_id);
CREATE TABLE flavors (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    vcpus INTEGER NOT NULL,
    memory_mb INTEGER NOT NULL,
    disk_gb INTEGER NOT NULL
);
CREATE TABLE images (
    id TEXT PRIMARY KEY,
    owner TEXT REFERENCES tenants(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    reference TEXT NOT NULL,
    created INTEGER NOT NULL
);
CREATE INDEX images_owner ON images(owner);
CREATE TABLE workloads (
    id TEXT PRIMARY KEY,
    owner TEXT REFERENCES tenants(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    flavor_id TEXT NOT NULL REFERENCES flavors(id),
    image_id TEXT NOT NULL REFERENCES images(id),
    user_data TEXT NOT NULL,
    version INTEGER NOT NULL
);
CREATE INDEX workloads_owner ON workloads(owner);
CREATE INDEX workloads_flavor ON workloads(flavor_id);
CREATE INDEX workloads_image ON workloads(image_id);
CREATE TABLE subnets (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL REFERENCES tenants(id),
    base INTEGER NOT NULL UNIQUE,
    prefix INTEGER NOT NULL,
    capacity INTEGER NOT NULL,
    used INTEGER NOT NULL
);
CREATE INDEX subnets_tenant ON subnets(tenant_id, base);
CREATE TABLE instances (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    tenant_id TEXT NOT NULL REFERENCES tenants(id),
    workload_id TEXT NOT NULL REFERENCES workloads(id),
    name TEXT NOT NULL,
    vcpus INTEGER NOT NULL,
    memory_mb INTEGER NOT NULL,
    node TEXT,
    state TEXT NOT NULL,
    reason TEXT,
    subnet_id TEXT NOT NULL REFERENCES subnets(id),
    ip INTEGER NOT NULL UNIQUE,
    cnci TEXT,
    created INTEGER NOT NULL,
    updated INTEGER NOT NULL,
    version INTEGER NOT NULL
);
CREATE INDEX instances_tenant ON instances(tenant_id, seq);
CREATE INDEX instances_subnet ON instances(subnet_id, ip);
CREATE INDEX instances_node ON instances(node, seq);
CREATE INDEX instances_workload ON instances(workload_id);
CREATE TABLE cncis (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL REFERENCES tenants(id),
    subnet_id TEXT NOT NULL UNIQUE REFERENCES subnets(id),
    state TEXT NOT NULL,
    ip TEXT,
    node TEXT,
    created INTEGER NOT NULL,
    updated INTEGER NOT NULL,
    version INTEGER NOT NULL
);
CREATE INDEX cncis_tenant ON cncis(tenant_id);
CREATE TABLE events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    time INTEGER NOT NULL,
    tenant_id TEXT,
    kind TEXT NOT NULL,
    message TEXT NOT NULL
);
CREATE INDEX events_tenant ON events(tenant_id, seq);
"#,
    // 2: off-host hosts and the operation queue; `fencing` holds the last fencing token handed
    // out, raised in each claim's transaction.
    r#"
CREATE TABLE remote_hosts (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    libvirt_uri TEXT NOT NULL,
    created INTEGER NOT NULL
);
CREATE TABLE operations (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    host_id TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    payload BLOB NOT NULL,
    state TEXT NOT NULL,
    owner TEXT,
    token INTEGER,
    expires INTEGER,
    result TEXT,
    created INTEGER NOT NULL,
    updated INTEGER NOT NULL
);
CREATE INDEX operations_state ON operations(state, seq);
CREATE INDEX operations_host ON operations(host_id, seq);
CREATE INDEX operations_instance ON operations(instance_id, seq);
CREATE TABLE fencing (last INTEGER NOT NULL);
INSERT INTO fencing (last) VALUES (0);
"#,
    // 3: the launcher credentials of off-host hosts (short-lived TLS client certificates).
    r#"
CREATE TABLE launcher_creds (
    host_id TEXT PRIMARY KEY,
    cert TEXT NOT NULL,
    key TEXT NOT NULL,
    ca TEXT NOT NULL,
    not_after INTEGER NOT NULL,
    issued INTEGER NOT NULL
);
"#,
    // 4: why an instance is in error (issue 18): the failure's code, its cause in words, and
    // when it happened; NULL when it is not in error.
    r#"
ALTER TABLE instances ADD COLUMN fault_reason TEXT;
ALTER TABLE instances ADD COLUMN fault_message TEXT;
ALTER TABLE instances ADD COLUMN fault_created INTEGER;
"#,
    // 5: the instance actions log (issue 20): who asked what of an instance, when, and how its
    // steps (`events`, a JSON array: always read and written with their action) went. No
    // foreign key to `instances`: actions outlive the instance's record. `gone_instances` lists
    // the instances whose record went while they had actions, oldest first; the actions of
    // those pushed out of it are dropped.
    r#"
CREATE TABLE instance_actions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_id TEXT NOT NULL,
    request_id TEXT NOT NULL,
    tenant_id TEXT NOT NULL,
    action TEXT NOT NULL,
    user_id TEXT,
    project_id TEXT,
    start INTEGER NOT NULL,
    updated INTEGER NOT NULL,
    message TEXT,
    events TEXT NOT NULL,
    UNIQUE (instance_id, request_id)
);
CREATE INDEX instance_actions_instance ON instance_actions(instance_id, seq);
CREATE TABLE gone_instances (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_id TEXT NOT NULL
);
"#,
    // 6: ephemeral workloads (issue 20): their instances start again elsewhere from the image
    // when their node is evacuated or lost. Existing workloads are not ephemeral.
    r#"
ALTER TABLE workloads ADD COLUMN ephemeral INTEGER NOT NULL DEFAULT 0;
"#,
    // 7: resize (issue 20): the workload an instance had before a resize that is not confirmed
    // or reverted yet.
    r#"
ALTER TABLE instances ADD COLUMN previous_workload_id TEXT;
"#,
    // 8: token revocation (issue 21): a user's token generation, raised by a password change or
    // a role removal (its tokens end), and the revoked tokens by id, each until it expires.
    r#"
ALTER TABLE users ADD COLUMN token_generation INTEGER NOT NULL DEFAULT 0;
CREATE TABLE revoked_tokens (
    id TEXT PRIMARY KEY,
    expires INTEGER NOT NULL
);
CREATE INDEX revoked_tokens_expires ON revoked_tokens(expires);
"#,
    // 9: launcher keys are kept sealed for their host (issue 21, `crate::sealed`): the clear
    // keys written before go (the controller's sweep issues sealed credentials for every host
    // that has none).
    r#"
DELETE FROM launcher_creds WHERE key NOT LIKE 'sealed:%';
"#,
    // 10: key pairs (issue 22): users' SSH public keys, unique by name per user, going with the
    // user; the key pair an instance was made with (its name and a copy of its public key).
    r#"
CREATE TABLE keypairs (
    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    public_key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    created INTEGER NOT NULL,
    PRIMARY KEY (user_id, name)
);
ALTER TABLE instances ADD COLUMN key_name TEXT;
ALTER TABLE instances ADD COLUMN key_data TEXT;
"#,
    // 11: tenant networking (issue 22): each tenant's security groups, rules, floating IPs and
    // network quotas as one JSON document (`crate::networking`), the security groups set on an
    // instance's port (a JSON array of group ids, going with the instance), and the floating
    // addresses in use (IPv4 as integers, unique over all tenants).
    r#"
CREATE TABLE tenant_networks (
    tenant_id TEXT PRIMARY KEY REFERENCES tenants(id) ON DELETE CASCADE,
    doc TEXT NOT NULL
);
CREATE TABLE port_groups (
    instance_id TEXT PRIMARY KEY REFERENCES instances(id) ON DELETE CASCADE,
    tenant_id TEXT NOT NULL,
    groups TEXT NOT NULL
);
CREATE INDEX port_groups_tenant ON port_groups(tenant_id);
CREATE TABLE floating_addresses (
    address INTEGER PRIMARY KEY,
    tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE
);
CREATE INDEX floating_addresses_tenant ON floating_addresses(tenant_id);
"#,
    // 12: images through the Image API (issue 23): a status (registered images are active),
    // the uploaded data's size and hashes (JSON), the other Glance fields (JSON) and when it
    // last changed (0: when it was made).
    r#"
ALTER TABLE images ADD COLUMN status TEXT NOT NULL DEFAULT 'active';
ALTER TABLE images ADD COLUMN file TEXT;
ALTER TABLE images ADD COLUMN props TEXT NOT NULL DEFAULT '{}';
ALTER TABLE images ADD COLUMN updated INTEGER NOT NULL DEFAULT 0;
"#,
    // 13: block storage volumes: a tenant's volumes (no cascade: a tenant is not deleted while
    // it has any), the image each was made from (no foreign key: the image may go), the node
    // holding its file, and its attachment (all four columns NULL when detached).
    r#"
CREATE TABLE volumes (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL REFERENCES tenants(id),
    name TEXT NOT NULL,
    description TEXT NOT NULL,
    size_gb INTEGER NOT NULL,
    status TEXT NOT NULL,
    image_id TEXT,
    node TEXT,
    attachment_id TEXT,
    attachment_instance TEXT,
    attachment_device TEXT,
    attachment_attached INTEGER,
    bootable INTEGER NOT NULL,
    created INTEGER NOT NULL,
    updated INTEGER NOT NULL
);
CREATE INDEX volumes_owner ON volumes(owner, created, id);
"#,
    // 14: image sharing: an image's visibility (`public` exactly when it has no owner, else
    // `private`, `shared` or `community`; existing images are public or private as their owner
    // says) and the members of shared images (going with the image and with the member tenant).
    r#"
ALTER TABLE images ADD COLUMN visibility TEXT NOT NULL DEFAULT 'private';
UPDATE images SET visibility = 'public' WHERE owner IS NULL;
CREATE TABLE image_members (
    image_id TEXT NOT NULL REFERENCES images(id) ON DELETE CASCADE,
    member TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    status TEXT NOT NULL,
    created INTEGER NOT NULL,
    updated INTEGER NOT NULL,
    PRIMARY KEY (image_id, member)
);
CREATE INDEX image_members_member ON image_members(member, image_id);
"#,
    // 15: a volume attachment's `delete_on_termination` (a boot volume that goes with its
    // server); existing attachments keep their volumes.
    r#"
ALTER TABLE volumes ADD COLUMN attachment_delete_on_termination INTEGER NOT NULL DEFAULT 0;
"#,
    // 16: tenants' own volume quotas (Cinder's `volumes` and `gigabytes`, NULL: unlimited), going
    // with the tenant; a tenant without a row has the controller's defaults.
    r#"
CREATE TABLE volume_quotas (
    tenant_id TEXT PRIMARY KEY REFERENCES tenants(id) ON DELETE CASCADE,
    volumes INTEGER,
    gigabytes INTEGER
);
"#,
    // 17: a server's user metadata (a JSON object of strings) and who locked it (`owner`,
    // `admin`, NULL when unlocked).
    r#"
ALTER TABLE instances ADD COLUMN metadata TEXT NOT NULL DEFAULT '{}';
ALTER TABLE instances ADD COLUMN locked_by TEXT;
"#,
    // 18: the nodes an admin disabled (Compute's `os-services` disable): no new instances there.
    r#"
CREATE TABLE disabled_nodes (
    node_id TEXT PRIMARY KEY,
    reason TEXT,
    since INTEGER NOT NULL
);
"#,
    // 19: the user who created an instance (Nova's `user_id`; NULL for older ones).
    r#"
ALTER TABLE instances ADD COLUMN user_id TEXT;
"#,
    // 20: private flavors and flavor extra specs: whether a flavor is public (those made before
    // are), its extra specs (a JSON object of strings), and the access lists of private flavors
    // (a row going with its flavor and with its tenant).
    r#"
ALTER TABLE flavors ADD COLUMN is_public INTEGER NOT NULL DEFAULT 1;
ALTER TABLE flavors ADD COLUMN extra_specs TEXT NOT NULL DEFAULT '{}';
CREATE TABLE flavor_access (
    flavor_id TEXT NOT NULL REFERENCES flavors(id) ON DELETE CASCADE,
    tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    PRIMARY KEY (flavor_id, tenant_id)
);
CREATE INDEX flavor_access_tenant ON flavor_access(tenant_id, flavor_id);
"#,
    // 21: Identity write routes and application credentials (issue 24): a project's description, a
    // user's `enabled` and default project (no foreign key: Keystone's, it may outlive the
    // project), and users' application credentials (going with their user and their project;
    // the secret as a hash; the roles as comma-separated names).
    r#"
ALTER TABLE tenants ADD COLUMN description TEXT NOT NULL DEFAULT '';
ALTER TABLE users ADD COLUMN enabled INTEGER NOT NULL DEFAULT 1;
ALTER TABLE users ADD COLUMN default_project_id TEXT;
CREATE TABLE app_credentials (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    description TEXT NOT NULL,
    secret_hash TEXT NOT NULL,
    roles TEXT NOT NULL,
    expires INTEGER,
    unrestricted INTEGER NOT NULL,
    created INTEGER NOT NULL,
    UNIQUE (user_id, name)
);
CREATE INDEX app_credentials_tenant ON app_credentials(tenant_id);
"#,
    // 22: server groups (issue 24): a tenant's groups (going with it), and their members (an
    // instance in one group at most, leaving it when its record goes; a group's deletion
    // leaves its members in none).
    r#"
CREATE TABLE server_groups (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    user_id TEXT,
    name TEXT NOT NULL,
    policy TEXT NOT NULL,
    created INTEGER NOT NULL
);
CREATE INDEX server_groups_tenant ON server_groups(tenant_id, seq);
CREATE TABLE server_group_members (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_id TEXT NOT NULL UNIQUE REFERENCES instances(id) ON DELETE CASCADE,
    group_id TEXT NOT NULL REFERENCES server_groups(id) ON DELETE CASCADE
);
CREATE INDEX server_group_members_group ON server_group_members(group_id, seq);
"#,
    // 23: the reservation id of the create that made an instance (Nova's `reservation_id`;
    // NULL for older ones).
    r#"
ALTER TABLE instances ADD COLUMN reservation_id TEXT;
"#,
    // 24: the availability zone an instance was asked for (NULL: any).
    r#"
ALTER TABLE instances ADD COLUMN zone TEXT;
"#,
    // 25: join tokens (used once) and the hosts that joined with them (issue 28).
    r#"
CREATE TABLE join_tokens (
    id TEXT PRIMARY KEY,
    secret_hash BLOB NOT NULL,
    roles INTEGER NOT NULL,
    created INTEGER NOT NULL,
    expires INTEGER NOT NULL,
    used_at INTEGER,
    used_by TEXT
);
CREATE TABLE joined_nodes (
    id TEXT PRIMARY KEY,
    hostname TEXT NOT NULL,
    roles INTEGER NOT NULL,
    serial BLOB NOT NULL,
    not_after INTEGER NOT NULL,
    joined INTEGER NOT NULL,
    revoked INTEGER
);
"#,
];

/// The newest schema version this code knows.
pub(crate) fn known_version() -> u32 {
    u32::try_from(MIGRATIONS.len()).unwrap_or(u32::MAX)
}

/// The schema version recorded in the database (0 for an empty file).
pub(crate) fn current_version(conn: &Connection) -> Result<u32> {
    let has_table: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version')",
        [],
        |row| row.get(0),
    )?;
    if !has_table {
        return Ok(0);
    }
    let version: Option<i64> = conn
        .query_row("SELECT MAX(version) FROM schema_version", [], |row| {
            row.get(0)
        })
        .optional()?
        .flatten();
    Ok(u32::try_from(version.unwrap_or(0)).unwrap_or(u32::MAX))
}

/// Brings the database up to the newest schema in one transaction; refuses a newer one.
pub(crate) fn migrate(conn: &mut Connection) -> Result<u32> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute(
        "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)",
        [],
    )?;
    let found = current_version(&tx)?;
    let known = known_version();
    if found > known {
        return Err(StoreError::SchemaTooNew { found, known });
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        tx.execute_batch(sql)?;
        tx.execute("DELETE FROM schema_version", [])?;
        tx.execute(
            "INSERT INTO schema_version (version) VALUES (?1)",
            [index as i64 + 1],
        )?;
    }
    tx.commit()?;
    Ok(known)
}

#[cfg(test)]
mod tests {
    // Test code: a failed unwrap is a failed test.
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::{
        Fault, IdentityStore, InstanceChange, InstanceState, InstanceStore, KeypairStore, Scope,
        SqliteStore, TokenRef, TokenState,
    };

    /// Writes a database at schema `version` to `path`, with the rows `sql` inserts.
    fn database_at(path: &std::path::Path, version: usize, sql: &str) {
        let conn = Connection::open(path).unwrap();
        for migration in &MIGRATIONS[..version] {
            conn.execute_batch(migration).unwrap();
        }
        conn.execute_batch(&format!(
            "CREATE TABLE schema_version (version INTEGER NOT NULL);
             INSERT INTO schema_version (version) VALUES ({version});
             {sql}"
        ))
        .unwrap();
    }

    /// A version 12 database with a tenant: migration 13 gives it no volumes, and it takes
    /// some (and is then not deleted while it has them).
    #[test]
    fn a_version_12_database_gains_volumes() {
        use crate::{NewVolume, VolumeLimits, VolumeStore};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v12.db");
        let tenant = "00000000-0000-0000-0000-000000000001";
        database_at(
            &path,
            12,
            &format!("INSERT INTO tenants VALUES ('{tenant}', 't', NULL, NULL, NULL, 24, 0, 1);"),
        );
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), known_version());
        let tenant = tenant.parse().unwrap();
        assert!(store.volumes(Scope::All).unwrap().is_empty());
        assert_eq!(store.tenant_volume_usage(tenant).unwrap(), (0, 0));
        let v = store
            .create_volume(
                NewVolume {
                    owner: tenant,
                    name: "v".into(),
                    description: String::new(),
                    size_gb: 3,
                    image: None,
                    bootable: false,
                },
                VolumeLimits::default(),
            )
            .unwrap();
        assert_eq!(store.volumes(Scope::Tenant(tenant)).unwrap(), vec![v]);
        assert_eq!(store.tenant_volume_usage(tenant).unwrap(), (1, 3));
        assert!(matches!(
            store.delete_tenant(tenant),
            Err(StoreError::Conflict(_))
        ));
    }

    /// A version 15 database with a tenant and a volume: migration 16 gives the tenant no quota
    /// of its own (the defaults apply), it takes one, and the quota goes with the tenant.
    #[test]
    fn a_version_15_database_gains_volume_quotas() {
        use crate::{QuotaKind, VolumeLimits, VolumeStore};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v15.db");
        let (tenant, volume) = (
            "00000000-0000-0000-0000-000000000001",
            "00000000-0000-0000-0000-00000000000a",
        );
        database_at(
            &path,
            15,
            &format!(
                "INSERT INTO tenants VALUES ('{tenant}', 't', NULL, NULL, NULL, 24, 0, 1);
                 INSERT INTO volumes (id, owner, name, description, size_gb, status, bootable,
                     created, updated)
                     VALUES ('{volume}', '{tenant}', 'v', '', 3, 'available', 0, 0, 0);"
            ),
        );
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), known_version());
        let (tenant, volume) = (tenant.parse().unwrap(), volume.parse().unwrap());
        let defaults = VolumeLimits {
            volumes: Some(10),
            gigabytes: Some(1000),
        };
        assert_eq!(store.volume_quota(tenant, defaults).unwrap(), defaults);
        let own = VolumeLimits {
            volumes: Some(1),
            gigabytes: None,
        };
        assert_eq!(store.set_volume_quota(tenant, own).unwrap(), own);
        assert_eq!(store.volume_quota(tenant, defaults).unwrap(), own);
        let new = crate::NewVolume {
            owner: tenant,
            name: "w".into(),
            description: String::new(),
            size_gb: 1,
            image: None,
            bootable: false,
        };
        assert_eq!(
            store.create_volume(new, defaults),
            Err(StoreError::QuotaExceeded {
                what: QuotaKind::Volumes,
                limit: 1
            })
        );
        store.delete_volume(Scope::All, volume).unwrap();
        store.delete_tenant(tenant).unwrap();
        let conn = Connection::open(&path).unwrap();
        let rows: i64 = conn
            .query_row("SELECT COUNT(*) FROM volume_quotas", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 0);
    }

    /// A version 13 database with a public and a private image: migration 14 keeps them public
    /// and private, with no members; the private one can then be shared.
    #[test]
    fn a_version_13_database_gains_image_visibility_and_members() {
        use crate::{CatalogStore, ImageChange, MAX_IMAGE_MEMBERS, MemberStatus, Visibility};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v13.db");
        let (owner, other) = (
            "00000000-0000-0000-0000-000000000001",
            "00000000-0000-0000-0000-000000000002",
        );
        let (public, private) = (
            "00000000-0000-0000-0000-00000000000a",
            "00000000-0000-0000-0000-00000000000b",
        );
        database_at(
            &path,
            13,
            &format!(
                "INSERT INTO tenants VALUES ('{owner}', 'o', NULL, NULL, NULL, 24, 0, 1);
                 INSERT INTO tenants VALUES ('{other}', 't', NULL, NULL, NULL, 24, 0, 1);
                 INSERT INTO images (id, owner, name, kind, reference, created)
                     VALUES ('{public}', NULL, 'p', 'raw', 'p.raw', 0);
                 INSERT INTO images (id, owner, name, kind, reference, created)
                     VALUES ('{private}', '{owner}', 'q', 'raw', 'q.raw', 0);"
            ),
        );
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), known_version());
        let (owner, other) = (owner.parse().unwrap(), other.parse().unwrap());
        let (public, private) = (public.parse().unwrap(), private.parse().unwrap());
        let all = store.images(Scope::All).unwrap();
        let visibility: Vec<_> = all.iter().map(|i| (i.id, i.visibility)).collect();
        assert_eq!(
            visibility,
            [(public, Visibility::Public), (private, Visibility::Private)]
        );
        assert!(store.image_memberships(other).unwrap().is_empty());
        assert!(store.image(Scope::Tenant(other), private).is_err());
        store
            .change_image(
                Scope::Tenant(owner),
                private,
                ImageChange {
                    visibility: Some(Visibility::Shared),
                    ..ImageChange::default()
                },
            )
            .unwrap();
        let member = store
            .add_image_member(Scope::Tenant(owner), private, other, MAX_IMAGE_MEMBERS)
            .unwrap();
        assert_eq!(member.status, MemberStatus::Pending);
        assert_eq!(
            store
                .image(Scope::Tenant(other), private)
                .unwrap()
                .visibility,
            Visibility::Shared
        );
    }

    /// A version 8 database with a user and an instance: migrations 9 and 10 give the instance no key,
    /// and the user takes key pairs.
    #[test]
    fn a_version_8_database_gains_key_pairs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v8.db");
        let user = "00000000-0000-0000-0000-000000000009";
        let id = "00000000-0000-0000-0000-00000000000a";
        database_at(
            &path,
            8,
            &format!(
                "INSERT INTO users VALUES ('{user}', 'alice', 'h', 0, 1, 0);
             INSERT INTO tenants VALUES ('00000000-0000-0000-0000-000000000001', 't', NULL, NULL,
                 NULL, 24, 0, 1);
             INSERT INTO flavors VALUES ('00000000-0000-0000-0000-000000000002', 'f', 1, 64, 1);
             INSERT INTO images VALUES ('00000000-0000-0000-0000-000000000003', NULL, 'i', 'raw',
                 'tiny', 0);
             INSERT INTO workloads VALUES ('00000000-0000-0000-0000-000000000004', NULL, 'w',
                 '00000000-0000-0000-0000-000000000002', '00000000-0000-0000-0000-000000000003',
                 '', 1, 0);
             INSERT INTO subnets VALUES ('00000000-0000-0000-0000-000000000005',
                 '00000000-0000-0000-0000-000000000001', 2886729728, 24, 253, 1);
             INSERT INTO instances (id, tenant_id, workload_id, name, vcpus, memory_mb, node,
                 state, reason, subnet_id, ip, cnci, created, updated, version)
             VALUES ('{id}', '00000000-0000-0000-0000-000000000001',
                 '00000000-0000-0000-0000-000000000004', 'vm', 1, 64, NULL, 'active',
                 NULL, '00000000-0000-0000-0000-000000000005', 2886729730, NULL, 0, 0, 1);"
            ),
        );
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), known_version());
        let old = store.instance(Scope::All, id.parse().unwrap()).unwrap();
        assert_eq!(old.key, None);
        // Nor a reservation id (migration 23).
        assert_eq!(old.reservation, None);
        let user = user.parse().unwrap();
        let k = store
            .create_keypair(
                crate::NewKeypair {
                    user,
                    name: "k1".into(),
                    kind: crate::KeypairKind::Ssh,
                    public_key: "ssh-ed25519 AAAA".into(),
                    fingerprint: "00:11".into(),
                },
                100,
            )
            .unwrap();
        assert_eq!(store.keypairs(user).unwrap(), vec![k]);
    }

    /// A version 7 database with a user: migration 8 gives it token generation 0 and an empty
    /// revocation list, which takes entries.
    #[test]
    fn a_version_7_database_gains_token_revocation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v7.db");
        let id = "00000000-0000-0000-0000-000000000001";
        database_at(
            &path,
            7,
            &format!("INSERT INTO users VALUES ('{id}', 'alice', 'h', 0, 1);"),
        );
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), known_version());
        let id = id.parse().unwrap();
        assert_eq!(store.user(id).unwrap().token_generation, 0);
        let token = TokenRef {
            id: "t".into(),
            expires: std::time::SystemTime::now() + std::time::Duration::from_secs(60),
        };
        let state = |revoked| TokenState {
            generation: 0,
            revoked,
        };
        assert_eq!(store.token_state(id, &token).unwrap(), state(false));
        store.revoke_token(&token).unwrap();
        assert_eq!(store.token_state(id, &token).unwrap(), state(true));
    }

    /// A version 3 database with an instance in error: migration 4 gives it no fault, and the
    /// instance can take one.
    #[test]
    fn a_version_3_database_gains_instance_faults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v3.db");
        let id = "00000000-0000-0000-0000-00000000000a";
        database_at(
            &path,
            3,
            &format!(
                "INSERT INTO tenants VALUES ('00000000-0000-0000-0000-000000000001', 't', NULL, NULL,
                 NULL, 24, 0, 1);
             INSERT INTO flavors VALUES ('00000000-0000-0000-0000-000000000002', 'f', 1, 64, 1);
             INSERT INTO images VALUES ('00000000-0000-0000-0000-000000000003', NULL, 'i', 'raw',
                 'tiny', 0);
             INSERT INTO workloads VALUES ('00000000-0000-0000-0000-000000000004', NULL, 'w',
                 '00000000-0000-0000-0000-000000000002', '00000000-0000-0000-0000-000000000003',
                 '', 1);
             INSERT INTO subnets VALUES ('00000000-0000-0000-0000-000000000005',
                 '00000000-0000-0000-0000-000000000001', 2886729728, 24, 253, 1);
             INSERT INTO instances (id, tenant_id, workload_id, name, vcpus, memory_mb, node,
                 state, reason, subnet_id, ip, cnci, created, updated, version)
             VALUES ('{id}', '00000000-0000-0000-0000-000000000001',
                 '00000000-0000-0000-0000-000000000004', 'vm', 1, 64, NULL, 'error',
                 'image_failure', '00000000-0000-0000-0000-000000000005', 2886729730, NULL, 0, 0,
                 1);"
            ),
        );
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), known_version());
        let id = id.parse().unwrap();
        let old = store.instance(Scope::All, id).unwrap();
        assert_eq!(old.state, InstanceState::Error("image_failure".into()));
        assert_eq!(old.fault, None);
        let fault = Fault {
            reason: "image_failure".into(),
            message: "the image is missing or broken".into(),
            created: std::time::UNIX_EPOCH,
        };
        let changed = store
            .update_instance(
                Scope::All,
                id,
                old.version,
                InstanceChange {
                    fault: Some(Some(fault.clone())),
                    ..InstanceChange::default()
                },
            )
            .unwrap();
        assert_eq!(changed.fault, Some(fault));
        assert_eq!(store.instance(Scope::All, id).unwrap(), changed);
    }

    /// A version 8 database with a clear launcher key and a sealed one: migration 9 drops the
    /// clear one (the controller issues sealed credentials in its place) and keeps the other.
    #[test]
    fn a_version_8_database_loses_its_clear_launcher_keys() {
        use crate::OperationQueue;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v8.db");
        let (clear, sealed) = (
            "00000000-0000-0000-0000-0000000000c1",
            "00000000-0000-0000-0000-0000000000c2",
        );
        let cert = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        let key = crate::sealed::MasterKey::derive(b"ca")
            .host_key(sealed.parse().unwrap())
            .seal(
                cert,
                "-----BEGIN PRIVATE KEY-----\nMIGH\n-----END PRIVATE KEY-----\n",
            )
            .unwrap();
        database_at(
            &path,
            8,
            &format!(
                "INSERT INTO remote_hosts VALUES ('{clear}', 'a', 'qemu:///a', 0);
                 INSERT INTO remote_hosts VALUES ('{sealed}', 'b', 'qemu:///b', 0);
                 INSERT INTO launcher_creds VALUES ('{clear}', '{cert}',
                     '-----BEGIN PRIVATE KEY-----\nMIGH\n-----END PRIVATE KEY-----\n', '{cert}', 0, 0);
                 INSERT INTO launcher_creds VALUES ('{sealed}', '{cert}', '{key}', '{cert}', 0, 0);"
            ),
        );
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), known_version());
        assert!(matches!(
            store.launcher_creds(clear.parse().unwrap()),
            Err(StoreError::NotFound { .. })
        ));
        assert_eq!(
            store
                .launcher_creds(sealed.parse().unwrap())
                .unwrap()
                .sealed_key,
            key
        );
    }
}
