//! Server groups over etcd: [`ServerGroupStore`] for [`EtcdStore`]. A group is one record
//! (`sgroup/<tenant>/<id>`) holding its members, found by id alone through `sgroupid/<id>`; an
//! instance's record names its group (`server_group`). Adding a member rewrites the group's
//! record and the instance's under compares, so parallel additions never pass the bound; an
//! instance's deletion takes it out of its group in the same transaction ([`forget_member`]).
//! A deleted group's members keep its id, which then reads as no group.

use uuid::Uuid;

use super::group_recs::{GroupRec, group_in, still};
use super::{EtcdStore, decode_all};
use crate::common::{check_name, millis, now};
use crate::*;

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
