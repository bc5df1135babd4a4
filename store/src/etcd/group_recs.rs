//! Server group records over etcd, apart from the [`ServerGroupStore`](crate::ServerGroupStore)
//! implementation (`server_groups.rs`) so that instances and tenants, whose deletions take their
//! part of groups with them, need not import it: the record (`sgroup/<tenant>/<id>`), finding one
//! by id alone (`sgroupid/<id>`), and the deletions' clean-ups.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{Tx, decode_all};
use crate::common::from_millis;
use crate::*;

/// A server group's record.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct GroupRec {
    pub(super) id: Uuid,
    pub(super) tenant: Uuid,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) user: Option<Uuid>,
    pub(super) name: String,
    pub(super) policy: String,
    #[serde(default)]
    pub(super) members: Vec<Uuid>,
    pub(super) created_ms: i64,
}

impl GroupRec {
    pub(super) fn model(&self) -> ServerGroup {
        ServerGroup {
            id: self.id,
            tenant: self.tenant,
            user: self.user,
            name: self.name.clone(),
            policy: self.policy.clone(),
            members: self.members.clone(),
            created: from_millis(self.created_ms),
        }
    }
}

/// Group `id` as the scope sees it.
pub(super) fn group_in(tx: &mut Tx<'_>, scope: Scope, id: Uuid) -> Result<GroupRec> {
    let keys = tx.keys();
    let missing = || StoreError::not_found("server group", id);
    let tenant = match tx.get(&keys.server_group_owner(id))? {
        Some(kv) => Uuid::parse_str(kv.text()?)
            .map_err(|e| StoreError::Backend(format!("bad tenant at {}: {e}", kv.key)))?,
        None => return Err(missing()),
    };
    if !scope.sees(Some(tenant)) {
        return Err(missing());
    }
    tx.get_json(&keys.server_group(tenant, id))?
        .ok_or_else(missing)
}

/// Group `id` if it still exists.
pub(super) fn still(tx: &mut Tx<'_>, id: Uuid) -> Result<Option<GroupRec>> {
    match group_in(tx, Scope::All, id) {
        Ok(g) => Ok(Some(g)),
        Err(StoreError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Takes instance `id` out of `group` (its record is going), if the group still exists.
pub(super) fn forget_member(tx: &mut Tx<'_>, group: Uuid, id: Uuid) -> Result<()> {
    if let Some(mut g) = still(tx, group)? {
        g.members.retain(|m| *m != id);
        let key = tx.keys().server_group(g.tenant, g.id);
        tx.put(&key, &g)?;
    }
    Ok(())
}

/// Deletes every server group of `tenant` (which has no instances left, so no members).
pub(super) fn forget_tenant(tx: &mut Tx<'_>, tenant: Uuid) -> Result<()> {
    let keys = tx.keys();
    for g in decode_all::<GroupRec>(&tx.range(&keys.tenant_server_groups(tenant))?)? {
        tx.delete(&keys.server_group_owner(g.id));
    }
    tx.delete_prefix(&keys.tenant_server_groups(tenant));
    Ok(())
}
