//! etcd's users and roles for one cumulo key prefix ([`setup_auth`]), and the key ranges an
//! off-host launcher replica may touch ([`launcher_ranges`]).
//!
//! With etcd's `--client-cert-auth` and authentication enabled, a client that sends no token is
//! the etcd user named by its certificate's subject CN. Users are made without a password (only
//! a certificate logs them in). The set-up:
//! - user `root` with etcd's `root` role (required to enable authentication; the set-up itself
//!   runs as `root` once authentication is on);
//! - role `cumulo-controller:<prefix>`: read and write on every key under the prefix;
//! - role `cumulo-launcher:<prefix>`: only the ranges of [`launcher_ranges`];
//! - the users named in the [`AuthPlan`] with those roles;
//! - authentication enabled, and the prefix's schema version written (a launcher may not write it).
//!
//! Every step is idempotent: running it again (as `root`) adds users and restores permissions.

use etcd_client::{Client, Permission, UserAddOptions};

use super::keys::Keys;
use super::{EtcdOptions, EtcdStore, EtcdTransport, connect_client};
use crate::{Result, StoreError};

/// Who gets which role under one prefix.
#[derive(Debug, Clone, Default)]
pub struct AuthPlan {
    /// The key prefix (as the store's URL gives it: `/cumulo/` by default).
    pub prefix: String,
    /// etcd users (certificate CNs) of controllers: everything under the prefix.
    pub controllers: Vec<String>,
    /// etcd users (certificate CNs) of off-host launcher replicas: [`launcher_ranges`] only.
    pub launchers: Vec<String>,
}

/// What a role may do on a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read only.
    Read,
    /// Read and write.
    ReadWrite,
}

/// The role of controllers on `prefix`.
pub fn controller_role(prefix: &str) -> String {
    format!("cumulo-controller:{}", Keys::new(prefix).root())
}

/// The role of off-host launcher replicas on `prefix`.
pub fn launcher_role(prefix: &str) -> String {
    format!("cumulo-launcher:{}", Keys::new(prefix).root())
}

/// The key prefixes a launcher replica reads or writes under `prefix`, and how: the schema
/// version (read); the off-host hosts and their libvirt credentials (read); the operation queue,
/// its operations, leases and per-host index (claims, renewals, finishes); the instances it
/// reports on and what their records drag along in one transaction (per-node index, per-tenant
/// usage and address bitmaps, full subnets and carved blocks, which a deletion releases;
/// creation order,
/// workload references, instance actions and the gone-instance list, which a deletion trims;
/// the server group a deleted instance leaves, found by id); address reservations. Never users, tenants, roles, names, tokens and their revocations,
/// flavors, images and their members, workloads, events, CNCIs, users' key pairs, volumes.
pub fn launcher_ranges(prefix: &str) -> Vec<(String, Access)> {
    let root = Keys::new(prefix).root().to_string();
    let read = ["schema", "rhost/", "creds/", "sgroupid/"];
    let write = [
        "op/",
        "opq/",
        "lease/",
        "ophost/",
        "instance/",
        "node/",
        "bystate/",
        "created/",
        "net/",
        "fullnet/",
        "block/",
        "order/",
        "ref/workload/",
        "action/",
        "gone/",
        "counter/gone",
        "resv/",
        "resvowner/",
        "sgroup/",
    ];
    read.iter()
        .map(|k| (format!("{root}{k}"), Access::Read))
        .chain(
            write
                .iter()
                .map(|k| (format!("{root}{k}"), Access::ReadWrite)),
        )
        .collect()
}

/// A permission on `key`: that key alone, or every key under it when it ends with `/`.
fn permission(key: &str, access: Access) -> Permission {
    let perm = match access {
        Access::Read => Permission::read(key),
        Access::ReadWrite => Permission::read_write(key),
    };
    if key.ends_with('/') {
        perm.with_prefix()
    } else {
        perm
    }
}

/// Whether `e` is etcd saying that what was added exists already.
fn exists(e: &etcd_client::Error) -> bool {
    e.to_string().contains("already exists")
}

/// Sets up etcd's users and roles for `plan` and enables authentication, connecting to
/// `endpoints` over `transport` (TLS with the certificate of user `root` once authentication is
/// on; before, any certificate etcd trusts). Then writes the prefix's schema version.
pub fn setup_auth(
    endpoints: &[String],
    transport: &EtcdTransport,
    plan: &AuthPlan,
    options: &EtcdOptions,
) -> Result<()> {
    if plan.prefix.is_empty() {
        return Err(StoreError::Invalid("empty etcd key prefix".into()));
    }
    let (runtime, mut client) = connect_client(endpoints, transport, options)?;
    let joined = endpoints.join(",");
    let limit = options.call_timeout;
    runtime
        .block_on(async {
            tokio::time::timeout(limit * 4, grant(&mut client, plan))
                .await
                .unwrap_or_else(|_| Err(format!("set-up not done within {:?}", limit * 4)))
        })
        .map_err(|e| StoreError::Backend(format!("etcd at {joined}: {e}")))?;
    runtime.shutdown_background();
    // The schema version, so that a launcher (which may only read it) finds it.
    EtcdStore::connect_with(endpoints, &plan.prefix, transport, options.clone()).map(drop)
}

async fn grant(client: &mut Client, plan: &AuthPlan) -> std::result::Result<(), String> {
    let step = |what: String| move |e: etcd_client::Error| format!("{what}: {e}");
    let add_user = async |client: &mut Client, user: &str| {
        if user.is_empty() {
            return Err("an empty etcd user name".to_string());
        }
        match client
            .user_add(user, "", Some(UserAddOptions::new().with_no_pwd()))
            .await
        {
            Err(e) if !exists(&e) => Err(step(format!("adding user {user}"))(e)),
            _ => Ok(()),
        }
    };
    let add_role = async |client: &mut Client, role: &str| match client.role_add(role).await {
        Err(e) if !exists(&e) => Err(step(format!("adding role {role}"))(e)),
        _ => Ok(()),
    };
    add_user(client, "root").await?;
    client
        .user_grant_role("root", "root")
        .await
        .map_err(step("granting root to root".into()))?;
    let controller = controller_role(&plan.prefix);
    add_role(client, &controller).await?;
    let root = Keys::new(&plan.prefix).root().to_string();
    client
        .role_grant_permission(&controller, permission(&root, Access::ReadWrite))
        .await
        .map_err(step(format!("granting {root} to {controller}")))?;
    let launcher = launcher_role(&plan.prefix);
    add_role(client, &launcher).await?;
    for (key, access) in launcher_ranges(&plan.prefix) {
        client
            .role_grant_permission(&launcher, permission(&key, access))
            .await
            .map_err(step(format!("granting {key} to {launcher}")))?;
    }
    let users = plan
        .controllers
        .iter()
        .map(|u| (u, &controller))
        .chain(plan.launchers.iter().map(|u| (u, &launcher)));
    for (user, role) in users {
        add_user(client, user).await?;
        client
            .user_grant_role(user.as_str(), role.as_str())
            .await
            .map_err(step(format!("granting {role} to {user}")))?;
    }
    client
        .auth_enable()
        .await
        .map_err(step("enabling authentication".into()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launcher_ranges_leave_out_identity_and_tokens() {
        let ranges = launcher_ranges("/c");
        let covered = |key: &str| {
            ranges
                .iter()
                .any(|(k, _)| key == k || (k.ends_with('/') && key.starts_with(k.as_str())))
        };
        for own in [
            "/c/schema",
            "/c/op/x",
            "/c/opq/1",
            "/c/instance/x",
            "/c/resv/p/k",
        ] {
            assert!(covered(own), "{own}");
        }
        for other in [
            "/c/user/x",
            "/c/tenant/x",
            "/c/revoked/1/t",
            "/c/name/user/a",
            "/c/role/user/x",
            "/c/event/1",
            "/c/counter/event",
            "/c/workload/x",
            "/c/keypair/u/k1",
            "/c/volume/t/v",
            "/c/volid/v",
            "/c/volquota/t",
            "/c/disabled/n",
        ] {
            assert!(!covered(other), "{other}");
        }
        assert_eq!(controller_role("/c"), "cumulo-controller:/c/");
    }
}
