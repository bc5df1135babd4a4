//! Server groups over etcd: [`ServerGroupStore`] for [`EtcdStore`]. A group is one record
//! (`sgroup/<tenant>/<id>`) holding its members, found by id alone through `sgroupid/<id>`; an
//! instance's record names its group (`server_group`). Adding a member rewrites the group's
//! record and the instance's under compares, so parallel additions never pass the bound; an
//! instance's deletion takes it out of its group in the same transaction ([`forget_member`]).
//! A deleted group's members keep its id, which then reads as no group.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{EtcdStore, Tx, decode_all};
use crate::common::{check_name, from_millis, millis, now};
use crate::*;

/// A server group's record.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct GroupRec {
    id: Uuid,
    tenant: Uuid,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    user: Option<Uuid>,
    name: String,
    policy: String,
    #[serde(default)]
    members: Vec<Uuid>,
    created_ms: i64,
}

impl GroupRec {
    fn model(&self) -> ServerGroup {
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
fn group_in(tx: &mut Tx<'_>, scope: Scope, id: Uuid) -> Result<GroupRec> {
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
fn still(tx: &mut Tx<'_>, id: Uuid) -> Result<Option<GroupRec>> {
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

/// Oldest first (then by id, for groups made in the same millisecond).
fn in_order(mut recs: Vec<GroupRec>) -> Vec<ServerGroup> {
    recs.sort_by_key(|g| (g.created_ms, g.id));
    recs.iter().map(GroupRec::model).collect()
}

impl ServerGroupStore for EtcdStore {
    fn create_server_group(&self, new: NewServerGroup) -> Result<ServerGroup> {
        check_name("server group", &new.name)?;
        ServerGroup::check_policy(&new.policy)?;
        let rec = GroupRec {
            id: Uuid::new_v4(),
            tenant: new.tenant,
            user: new.user,
            name: new.name,
            policy: new.policy,
            members: Vec::new(),
            created_ms: millis(now()),
        };
        self.atomically("creating a server group", |tx| {
            let keys = tx.keys();
            if tx.get(&keys.tenant(rec.tenant))?.is_none() {
                return Err(StoreError::not_found("tenant", rec.tenant));
            }
            ServerGroup::check_group_room(tx.range(&keys.tenant_server_groups(rec.tenant))?.len())?;
            tx.put(&keys.server_group(rec.tenant, rec.id), &rec)?;
            tx.put_text(&keys.server_group_owner(rec.id), &rec.tenant.to_string());
            Ok(())
        })?;
        Ok(rec.model())
    }

    fn server_group(&self, scope: Scope, id: Uuid) -> Result<ServerGroup> {
        self.read(|tx| group_in(tx, scope, id)).map(|g| g.model())
    }

    fn server_groups(&self, scope: Scope) -> Result<Vec<ServerGroup>> {
        let prefix = match scope {
            Scope::All => self.keys.server_groups(),
            Scope::Tenant(t) => self.keys.tenant_server_groups(t),
        };
        self.read(|tx| decode_all(&tx.range(&prefix)?))
            .map(in_order)
    }

    fn delete_server_group(&self, scope: Scope, id: Uuid) -> Result<()> {
        self.atomically("deleting a server group", |tx| {
            let g = group_in(tx, scope, id)?;
            let keys = tx.keys();
            tx.delete(&keys.server_group(g.tenant, id));
            tx.delete(&keys.server_group_owner(id));
            Ok(())
        })
    }

    fn add_server_group_member(
        &self,
        scope: Scope,
        group: Uuid,
        instance: Uuid,
    ) -> Result<ServerGroup> {
        self.atomically("adding a server group member", |tx| {
            let mut g = group_in(tx, scope, group)?;
            let (mut i, _) = super::instances::instance_in(tx, Scope::Tenant(g.tenant), instance)?;
            let other = match i.server_group {
                Some(other) => still(tx, other)?.map(|g| g.id),
                None => None,
            };
            g.model().check_joiner(instance, other)?;
            g.members.push(instance);
            let keys = tx.keys();
            tx.put(&keys.server_group(g.tenant, g.id), &g)?;
            i.server_group = Some(g.id);
            tx.put(&keys.instance(instance), &i)?;
            Ok(g.model())
        })
    }

    fn server_group_of(&self, instance: Uuid) -> Result<Option<ServerGroup>> {
        self.read(|tx| {
            let i = match super::instances::instance_in(tx, Scope::All, instance) {
                Ok((i, _)) => i,
                Err(StoreError::NotFound { .. }) => return Ok(None),
                Err(e) => return Err(e),
            };
            match i.server_group {
                Some(group) => still(tx, group),
                None => Ok(None),
            }
        })
        .map(|g| g.map(|g| g.model()))
    }
}
