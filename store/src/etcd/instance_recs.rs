//! The JSON records of instances kept in etcd (`instance/<id>`), and their conversions to and
//! from the store's model types. Records are the schema: see [`super::records`].

use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::common::{from_millis, millis};
use crate::net;
use crate::*;

/// An instance.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct InstanceRec {
    pub(super) id: Uuid,
    pub(super) tenant: Uuid,
    pub(super) workload: Uuid,
    pub(super) name: String,
    pub(super) vcpus: u32,
    pub(super) memory_mb: u64,
    pub(super) node: Option<Uuid>,
    pub(super) state: String,
    pub(super) reason: Option<String>,
    pub(super) subnet: Uuid,
    pub(super) base: u32,
    pub(super) prefix: u8,
    pub(super) ip: u32,
    pub(super) cnci: Option<Uuid>,
    pub(super) created_ms: i64,
    pub(super) updated_ms: i64,
    pub(super) version: u64,
    /// Its place in the tenant's creation order.
    pub(super) seq: u64,
    /// Why it is in error (added with issue 18: absent in older records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) fault: Option<FaultRec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) previous_workload: Option<Uuid>,
    /// The key pair it was made with (added with issue 22: absent in older records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) key: Option<KeyRec>,
    /// Its user metadata (added with issue 24: absent in older records and when empty).
    #[serde(default, skip_serializing_if = "Metadata::is_empty")]
    pub(super) metadata: Metadata,
    /// Who locked it: `owner` or `admin` (added with issue 24).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) locked_by: Option<String>,
    /// The user who created it (added with issue 24).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) user: Option<Uuid>,
    /// The server group it joined (added with issue 24; kept when the group goes, which then
    /// reads as none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) server_group: Option<Uuid>,
    /// The reservation id of its create (added with issue 24).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) reservation: Option<String>,
    /// The availability zone it was asked for (added with issue 24).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) zone: Option<String>,
    /// Its place in the creation index (`created/<stamp>/<id>`, schema 4): none for an instance
    /// made before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) stamp: Option<u64>,
}

/// An instance in brief, kept in its node's index key (`node/<node>/<instance>`, schema 3) and
/// written with every change of the record there: a node's report reads its instances' briefs
/// in one range, not their records. An index key of schema 2 holds nothing: its brief is read
/// from the record.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct BriefRec {
    /// The record's creation revision (the listing's order, with the id).
    pub(super) c: i64,
    /// The record's version.
    pub(super) v: u64,
    /// Its state, and the state's reason.
    pub(super) s: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) r: Option<String>,
}

impl BriefRec {
    /// The brief of `rec`, whose record was created at revision `created`.
    pub(super) fn of(rec: &InstanceRec, created: i64) -> BriefRec {
        BriefRec {
            c: created,
            v: rec.version,
            s: rec.state.clone(),
            r: rec.reason.clone(),
        }
    }

    /// The brief of instance `id` on `node`.
    pub(super) fn model(&self, id: Uuid, node: Uuid) -> Result<InstanceBrief> {
        Ok(InstanceBrief {
            id,
            state: parse_state(id, &self.s, self.r.clone())?,
            node: Some(node),
            version: self.v,
        })
    }
}

/// The state named `name` (with `reason`) of instance `id`.
fn parse_state(id: Uuid, name: &str, reason: Option<String>) -> Result<InstanceState> {
    InstanceState::from_name(name, reason)
        .ok_or_else(|| StoreError::Backend(format!("instance {id}: unknown state {name:?}")))
}

/// An instance's key: its key pair's name and a copy of its public key.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct KeyRec {
    name: String,
    public_key: String,
}

impl From<&InstanceKey> for KeyRec {
    fn from(k: &InstanceKey) -> KeyRec {
        KeyRec {
            name: k.name.clone(),
            public_key: k.public_key.clone(),
        }
    }
}

/// An instance's fault.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct FaultRec {
    reason: String,
    message: String,
    created_ms: i64,
}

impl From<&Fault> for FaultRec {
    fn from(f: &Fault) -> FaultRec {
        FaultRec {
            reason: f.reason.clone(),
            message: f.message.clone(),
            created_ms: millis(f.created),
        }
    }
}

impl FaultRec {
    pub(super) fn model(&self) -> Fault {
        Fault {
            reason: self.reason.clone(),
            message: self.message.clone(),
            created: from_millis(self.created_ms),
        }
    }
}

/// An instance state as text and reason.
pub(super) fn state_text(state: &InstanceState) -> (&'static str, Option<String>) {
    let (name, reason) = state.text();
    (name, reason.map(str::to_string))
}

impl InstanceRec {
    pub(super) fn model(&self) -> Result<Instance> {
        let state = parse_state(self.id, &self.state, self.reason.clone())?;
        let ip = Ipv4Addr::from(self.ip);
        Ok(Instance {
            id: self.id,
            tenant: self.tenant,
            workload: self.workload,
            name: self.name.clone(),
            vcpus: self.vcpus,
            memory_mb: self.memory_mb,
            node: self.node,
            state,
            subnet: net::cidr(self.base, self.prefix),
            ip,
            mac: net::mac_for(ip),
            cnci: self.cnci,
            fault: self.fault.as_ref().map(FaultRec::model),
            created: from_millis(self.created_ms),
            updated: from_millis(self.updated_ms),
            version: self.version,
            previous_workload: self.previous_workload,
            key: self.key.as_ref().map(|k| InstanceKey {
                name: k.name.clone(),
                public_key: k.public_key.clone(),
            }),
            metadata: self.metadata.clone(),
            user: self.user,
            reservation: self.reservation.clone(),
            zone: self.zone.clone(),
            locked_by: match &self.locked_by {
                None => None,
                Some(name) => Some(LockedBy::from_name(name).ok_or_else(|| {
                    StoreError::Backend(format!("instance {}: unknown locker {name:?}", self.id))
                })?),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    // Test code: a failed unwrap is a failed test.
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A record written before reservation ids were kept reads as none; one with an id keeps it,
    /// and a record without one is written without the field.
    #[test]
    fn records_without_a_reservation_id_read_as_none() {
        let old = serde_json::json!({
            "id": Uuid::from_u128(1), "tenant": Uuid::from_u128(2),
            "workload": Uuid::from_u128(3), "name": "vm", "vcpus": 1, "memory_mb": 64,
            "node": null, "state": "active", "reason": null, "subnet": Uuid::from_u128(4),
            "base": 0xac10_0000u32, "prefix": 24, "ip": 0xac10_0002u32, "cnci": null,
            "created_ms": 0, "updated_ms": 0, "version": 1, "seq": 0,
        });
        let mut rec: InstanceRec = serde_json::from_value(old).unwrap();
        assert_eq!(rec.model().unwrap().reservation, None);
        assert!(!serde_json::to_string(&rec).unwrap().contains("reservation"));
        rec.reservation = Some("r-0a1b2c3d".into());
        let again: InstanceRec =
            serde_json::from_str(&serde_json::to_string(&rec).unwrap()).unwrap();
        assert_eq!(
            again.model().unwrap().reservation.as_deref(),
            Some("r-0a1b2c3d")
        );
    }
}
