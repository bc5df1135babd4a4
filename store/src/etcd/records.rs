//! The JSON records kept in etcd, and their conversions to and from the store's model types.
//!
//! Records are the schema: a field may be added with `#[serde(default)]`; anything else needs a
//! new schema version. Times are milliseconds since the Unix epoch (as in the SQLite store).

use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::common::{from_millis, millis};
use crate::*;

pub(super) use super::flavor_recs::{FlavorAccessRec, FlavorRec};
pub(super) use super::instance_recs::{BriefRec, FaultRec, InstanceRec, KeyRec, state_text};

/// The schema version this code writes and reads. 2: a tenant's full subnets have keys of their
/// own (`fullnet/`), which code of version 1 does not read (it would leak their addresses on a
/// deletion); a store of version 1 is raised to 2 when this code opens it, so that code of
/// version 1 refuses it from then on. 3: a node's index keys (`node/<node>/<instance>`) hold
/// their instance's brief ([`BriefRec`]), rewritten with every change of its record; code of
/// version 2 writes the record alone and would leave the brief stale (an index key it wrote
/// holds nothing, and is read from the record). 4: each instance has a key in the creation index
/// (`created/<stamp>/<instance>`), which every tenant's listing pages through; code of version 3
/// would make instances without one, which such a listing would not show.
pub(super) const SCHEMA_VERSION: u32 = 4;

/// The value of the schema key.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct SchemaRec {
    pub(super) version: u32,
}

/// A quota.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(super) struct QuotaRec {
    instances: Option<u32>,
    vcpus: Option<u32>,
    memory_mb: Option<u64>,
}

impl From<Quota> for QuotaRec {
    fn from(q: Quota) -> QuotaRec {
        QuotaRec {
            instances: q.instances,
            vcpus: q.vcpus,
            memory_mb: q.memory_mb,
        }
    }
}

impl From<QuotaRec> for Quota {
    fn from(q: QuotaRec) -> Quota {
        Quota {
            instances: q.instances,
            vcpus: q.vcpus,
            memory_mb: q.memory_mb,
        }
    }
}

/// A tenant.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct TenantRec {
    pub(super) id: Uuid,
    pub(super) name: String,
    pub(super) quota: QuotaRec,
    pub(super) subnet_prefix: u8,
    pub(super) created_ms: i64,
    pub(super) version: u64,
    /// Absent in records written before issue 24: none.
    #[serde(default)]
    pub(super) description: String,
}

impl TenantRec {
    pub(super) fn model(&self) -> Tenant {
        Tenant {
            id: self.id,
            name: self.name.clone(),
            quota: self.quota.into(),
            subnet_prefix: self.subnet_prefix,
            description: self.description.clone(),
            created: from_millis(self.created_ms),
            version: self.version,
        }
    }
}

/// What a tenant's instances hold.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub(super) struct UsageRec {
    pub(super) instances: u32,
    pub(super) vcpus: u32,
    pub(super) memory_mb: u64,
}

impl From<UsageRec> for Usage {
    fn from(u: UsageRec) -> Usage {
        Usage {
            instances: u.instances,
            vcpus: u.vcpus,
            memory_mb: u.memory_mb,
        }
    }
}

/// One subnet of a tenant with its address bitmap (bit `n` is the address `base + n`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct SubnetRec {
    pub(super) id: Uuid,
    pub(super) base: u32,
    pub(super) prefix: u8,
    pub(super) used: u32,
    pub(super) capacity: u32,
    #[serde(with = "hex_bits")]
    pub(super) taken: Vec<u8>,
    pub(super) cnci: Option<Uuid>,
}

impl SubnetRec {
    /// An empty subnet `base`/`prefix`.
    pub(super) fn new(base: u32, prefix: u8) -> SubnetRec {
        let (first, last) = net::instance_hosts(base, prefix);
        let bits = usize::try_from(net::block_size(prefix)).unwrap_or(usize::MAX);
        SubnetRec {
            id: Uuid::new_v4(),
            base,
            prefix,
            used: 0,
            capacity: last.saturating_sub(first).saturating_add(1),
            taken: vec![0; bits.div_ceil(8)],
            cnci: None,
        }
    }

    fn bit(&self, ip: u32) -> Option<(usize, u8)> {
        let n = usize::try_from(ip.checked_sub(self.base)?).ok()?;
        Some((n / 8, 1u8 << (n % 8)))
    }

    /// The lowest free instance address.
    pub(super) fn first_free(&self) -> Option<u32> {
        let (first, last) = net::instance_hosts(self.base, self.prefix);
        (first..=last).find(|&ip| {
            self.bit(ip)
                .and_then(|(byte, mask)| self.taken.get(byte).map(|b| b & mask == 0))
                .unwrap_or(false)
        })
    }

    /// Marks `ip` taken (`true`) or free.
    pub(super) fn mark(&mut self, ip: u32, taken: bool) {
        if let Some((byte, mask)) = self.bit(ip)
            && let Some(b) = self.taken.get_mut(byte)
        {
            let was = *b & mask != 0;
            if taken && !was {
                *b |= mask;
                self.used += 1;
            } else if !taken && was {
                *b &= !mask;
                self.used = self.used.saturating_sub(1);
            }
        }
    }

    pub(super) fn model(&self, tenant: Uuid) -> Subnet {
        Subnet {
            id: self.id,
            tenant,
            cidr: net::cidr(self.base, self.prefix),
        }
    }
}

/// A tenant's network and usage: updated in the same transaction as every instance it counts, so
/// that the quota and the address allocation hold across controllers.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct NetRec {
    pub(super) usage: UsageRec,
    /// The creation sequence number of the tenant's next instance.
    pub(super) next_seq: u64,
    /// Its subnets, by base address.
    pub(super) subnets: Vec<SubnetRec>,
}

/// A carved block of the pool (one per subnet, keyed by base address).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct BlockRec {
    pub(super) tenant: Uuid,
    pub(super) subnet: Uuid,
    pub(super) prefix: u8,
}

/// A user.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct UserRec {
    pub(super) id: Uuid,
    pub(super) name: String,
    pub(super) password_hash: String,
    pub(super) created_ms: i64,
    pub(super) version: u64,
    /// Absent in records written before issue 21: generation 0.
    #[serde(default)]
    pub(super) token_generation: u64,
    /// Absent in records written before issue 24: enabled.
    #[serde(default = "enabled")]
    pub(super) enabled: bool,
    /// Absent in records written before issue 24: none.
    #[serde(default)]
    pub(super) default_project: Option<Uuid>,
}

fn enabled() -> bool {
    true
}

impl UserRec {
    pub(super) fn model(&self) -> User {
        User {
            id: self.id,
            name: self.name.clone(),
            password_hash: self.password_hash.clone(),
            created: from_millis(self.created_ms),
            version: self.version,
            token_generation: self.token_generation,
            enabled: self.enabled,
            default_project: self.default_project,
        }
    }
}

/// The text of a role in keys.
pub(super) fn role_text(role: Role) -> &'static str {
    role.as_str()
}

/// A role from its text.
pub(super) fn role_from(text: &str) -> Option<Role> {
    Role::from_name(text)
}

/// An image format.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum KindRec {
    Qcow2,
    Raw,
    Iso,
    Kernel,
    Ramdisk,
    Container,
}

/// An image.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ImageRec {
    pub(super) id: Uuid,
    pub(super) owner: Option<Uuid>,
    pub(super) name: String,
    pub(super) kind: KindRec,
    pub(super) reference: String,
    pub(super) created_ms: i64,
    /// Records written before the Image API had none: registered, hence active.
    #[serde(default = "active")]
    pub(super) status: ImageStatus,
    #[serde(default)]
    pub(super) file: Option<ImageFile>,
    #[serde(default)]
    pub(super) props: ImageProps,
    /// 0: when it was made.
    #[serde(default)]
    pub(super) updated_ms: i64,
    /// Records written before image sharing had none: public without an owner, else private.
    #[serde(default)]
    pub(super) visibility: Option<Visibility>,
}

fn active() -> ImageStatus {
    ImageStatus::Active
}

fn kind_rec(kind: ImageKind) -> KindRec {
    match kind {
        ImageKind::Qcow2 => KindRec::Qcow2,
        ImageKind::Raw => KindRec::Raw,
        ImageKind::Iso => KindRec::Iso,
        ImageKind::Kernel => KindRec::Kernel,
        ImageKind::Ramdisk => KindRec::Ramdisk,
        ImageKind::Container => KindRec::Container,
    }
}

impl ImageRec {
    pub(super) fn new(
        id: Uuid,
        new: NewImage,
        created: std::time::SystemTime,
        status: ImageStatus,
        visibility: Visibility,
        props: ImageProps,
    ) -> ImageRec {
        ImageRec {
            id,
            visibility: Some(visibility),
            owner: new.owner,
            name: new.name,
            kind: kind_rec(new.kind),
            reference: new.reference,
            created_ms: millis(created),
            status,
            file: None,
            props,
            updated_ms: millis(created),
        }
    }

    /// The record of `image`.
    pub(super) fn of(image: &Image) -> ImageRec {
        ImageRec {
            id: image.id,
            visibility: Some(image.visibility),
            owner: image.owner,
            name: image.name.clone(),
            kind: kind_rec(image.kind),
            reference: image.reference.clone(),
            created_ms: millis(image.created),
            status: image.status,
            file: image.file.clone(),
            props: image.props.clone(),
            updated_ms: millis(image.updated),
        }
    }

    pub(super) fn model(&self) -> Image {
        let created = from_millis(self.created_ms);
        Image {
            id: self.id,
            owner: self.owner,
            visibility: self
                .visibility
                .unwrap_or_else(|| Visibility::of_owner(self.owner)),
            name: self.name.clone(),
            kind: match self.kind {
                KindRec::Qcow2 => ImageKind::Qcow2,
                KindRec::Raw => ImageKind::Raw,
                KindRec::Iso => ImageKind::Iso,
                KindRec::Kernel => ImageKind::Kernel,
                KindRec::Container => ImageKind::Container,
                KindRec::Ramdisk => ImageKind::Ramdisk,
            },
            reference: self.reference.clone(),
            created,
            status: self.status,
            file: self.file.clone(),
            props: self.props.clone(),
            updated: if self.updated_ms == 0 {
                created
            } else {
                from_millis(self.updated_ms)
            },
        }
    }
}

/// A tenant an image is shared with (`imember/<image>/<tenant>`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct MemberRec {
    pub(super) image: Uuid,
    pub(super) member: Uuid,
    pub(super) status: MemberStatus,
    pub(super) created_ms: i64,
    pub(super) updated_ms: i64,
}

impl MemberRec {
    pub(super) fn model(&self) -> ImageMember {
        ImageMember {
            image: self.image,
            member: self.member,
            status: self.status,
            created: from_millis(self.created_ms),
            updated: from_millis(self.updated_ms),
        }
    }
}

/// A workload, with its flavor's figures (flavors never change) so that creating an instance
/// need not read the flavor.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct WorkloadRec {
    pub(super) id: Uuid,
    pub(super) owner: Option<Uuid>,
    pub(super) name: String,
    pub(super) flavor: Uuid,
    pub(super) image: Uuid,
    pub(super) user_data: String,
    pub(super) version: u64,
    pub(super) vcpus: u32,
    #[serde(default)]
    pub(super) ephemeral: bool,
    pub(super) memory_mb: u64,
}

impl WorkloadRec {
    pub(super) fn model(&self) -> Workload {
        Workload {
            id: self.id,
            owner: self.owner,
            name: self.name.clone(),
            flavor: self.flavor,
            image: self.image,
            user_data: self.user_data.clone(),
            ephemeral: self.ephemeral,
            version: self.version,
        }
    }
}

/// A user's key pair, at `keypair/<user>/<name>`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct KeypairRec {
    pub(super) user: Uuid,
    pub(super) name: String,
    pub(super) kind: String,
    pub(super) public_key: String,
    pub(super) fingerprint: String,
    pub(super) created_ms: i64,
}

impl KeypairRec {
    pub(super) fn model(&self) -> Result<Keypair> {
        Ok(Keypair {
            user: self.user,
            name: self.name.clone(),
            kind: KeypairKind::from_name(&self.kind).ok_or_else(|| {
                StoreError::Backend(format!(
                    "key pair {:?} of user {}: unknown kind {:?}",
                    self.name, self.user, self.kind
                ))
            })?,
            public_key: self.public_key.clone(),
            fingerprint: self.fingerprint.clone(),
            created: from_millis(self.created_ms),
        })
    }
}

/// A CNCI state.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum CnciStateRec {
    Pending,
    Active,
    Exited,
    Failed,
}

impl From<CnciState> for CnciStateRec {
    fn from(s: CnciState) -> CnciStateRec {
        match s {
            CnciState::Pending => CnciStateRec::Pending,
            CnciState::Active => CnciStateRec::Active,
            CnciState::Exited => CnciStateRec::Exited,
            CnciState::Failed => CnciStateRec::Failed,
        }
    }
}

impl From<CnciStateRec> for CnciState {
    fn from(s: CnciStateRec) -> CnciState {
        match s {
            CnciStateRec::Pending => CnciState::Pending,
            CnciStateRec::Active => CnciState::Active,
            CnciStateRec::Exited => CnciState::Exited,
            CnciStateRec::Failed => CnciState::Failed,
        }
    }
}

/// A CNCI.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct CnciRec {
    pub(super) id: Uuid,
    pub(super) tenant: Uuid,
    pub(super) subnet: Uuid,
    pub(super) base: u32,
    pub(super) prefix: u8,
    pub(super) state: CnciStateRec,
    pub(super) ip: Option<IpAddr>,
    pub(super) node: Option<Uuid>,
    pub(super) created_ms: i64,
    pub(super) updated_ms: i64,
    pub(super) version: u64,
}

impl CnciRec {
    pub(super) fn model(&self) -> Cnci {
        Cnci {
            id: self.id,
            tenant: self.tenant,
            subnet: self.subnet,
            cidr: net::cidr(self.base, self.prefix),
            state: self.state.into(),
            ip: self.ip,
            node: self.node,
            created: from_millis(self.created_ms),
            updated: from_millis(self.updated_ms),
            version: self.version,
        }
    }
}

/// An event kind.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum EventKindRec {
    Info,
    Warning,
    Error,
}

/// An event.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct EventRec {
    pub(super) seq: u64,
    pub(super) time_ms: i64,
    pub(super) tenant: Option<Uuid>,
    pub(super) kind: EventKindRec,
    pub(super) message: String,
}

impl EventRec {
    pub(super) fn new(seq: u64, time: std::time::SystemTime, new: NewEvent) -> EventRec {
        EventRec {
            seq,
            time_ms: millis(time),
            tenant: new.tenant,
            kind: match new.kind {
                EventKind::Info => EventKindRec::Info,
                EventKind::Warning => EventKindRec::Warning,
                EventKind::Error => EventKindRec::Error,
            },
            message: new.message,
        }
    }

    pub(super) fn model(&self) -> Event {
        Event {
            seq: self.seq,
            time: from_millis(self.time_ms),
            tenant: self.tenant,
            kind: match self.kind {
                EventKindRec::Info => EventKind::Info,
                EventKindRec::Warning => EventKind::Warning,
                EventKindRec::Error => EventKind::Error,
            },
            message: self.message.clone(),
        }
    }
}

/// An instance action, with its events.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ActionRec {
    request_id: String,
    instance: Uuid,
    tenant: Uuid,
    action: String,
    user: Option<Uuid>,
    project: Option<Uuid>,
    start_ms: i64,
    updated_ms: i64,
    message: Option<String>,
    events: Vec<crate::actions::EventRec>,
}

impl From<&InstanceAction> for ActionRec {
    fn from(a: &InstanceAction) -> ActionRec {
        ActionRec {
            request_id: a.request_id.clone(),
            instance: a.instance,
            tenant: a.tenant,
            action: a.action.clone(),
            user: a.user,
            project: a.project,
            start_ms: millis(a.start),
            updated_ms: millis(a.updated),
            message: a.message.clone(),
            events: a
                .events
                .iter()
                .map(crate::actions::EventRec::from)
                .collect(),
        }
    }
}

impl ActionRec {
    pub(super) fn model(&self) -> Result<InstanceAction> {
        Ok(InstanceAction {
            request_id: self.request_id.clone(),
            instance: self.instance,
            tenant: self.tenant,
            action: self.action.clone(),
            user: self.user,
            project: self.project,
            start: from_millis(self.start_ms),
            updated: from_millis(self.updated_ms),
            message: self.message.clone(),
            events: self
                .events
                .iter()
                .map(crate::actions::EventRec::model)
                .collect::<Result<_>>()?,
        })
    }
}

/// The launcher credentials of an off-host host.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct CredsRec {
    pub(super) cert: String,
    /// The private key, sealed for the host (`sealed:v1:...`); records written before sealing
    /// hold the clear PEM here (the controller's sweep replaces them).
    pub(super) key: String,
    pub(super) ca: String,
    pub(super) not_after_ms: i64,
    pub(super) issued_ms: i64,
}

/// An off-host host.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct RemoteHostRec {
    pub(super) id: Uuid,
    pub(super) name: String,
    pub(super) libvirt_uri: String,
    pub(super) created_ms: i64,
}

impl RemoteHostRec {
    pub(super) fn model(&self) -> RemoteHost {
        RemoteHost {
            id: self.id,
            name: self.name.clone(),
            libvirt_uri: self.libvirt_uri.clone(),
            created: from_millis(self.created_ms),
        }
    }
}

/// The lease of a claimed operation (its own key, so that renewing it leaves the operation's
/// mod revision, the fencing token, as it is).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct LeaseRec {
    pub(super) owner: String,
    pub(super) expires_ms: i64,
}

/// The last claim of a finished operation, as it was when it finished.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ClaimRec {
    pub(super) owner: String,
    pub(super) token: u64,
    pub(super) expires_ms: i64,
}

/// An operation. While it is claimed its claim is the lease key plus the record's mod revision;
/// once finished, `claim` keeps the last one.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct OperationRec {
    pub(super) id: Uuid,
    pub(super) seq: u64,
    pub(super) host: Uuid,
    pub(super) instance: Uuid,
    pub(super) kind: String,
    #[serde(with = "hex_bits")]
    pub(super) payload: Vec<u8>,
    pub(super) state: String,
    pub(super) claim: Option<ClaimRec>,
    pub(super) result: Option<String>,
    pub(super) created_ms: i64,
    pub(super) updated_ms: i64,
}

impl OperationRec {
    /// The state as the model's.
    pub(super) fn state(&self) -> Result<OperationState> {
        OperationState::parse(&self.state).ok_or_else(|| {
            StoreError::Backend(format!(
                "operation {}: unknown state {:?}",
                self.id, self.state
            ))
        })
    }

    /// The model, given the record's mod revision and its lease (if claimed).
    pub(super) fn model(&self, mod_rev: i64, lease: Option<&LeaseRec>) -> Result<Operation> {
        let state = self.state()?;
        let kind = OperationKind::parse(&self.kind).ok_or_else(|| {
            StoreError::Backend(format!(
                "operation {}: unknown kind {:?}",
                self.id, self.kind
            ))
        })?;
        let claim = match (state, lease) {
            (OperationState::Claimed, Some(lease)) => Some(Claim {
                owner: lease.owner.clone(),
                token: u64::try_from(mod_rev).unwrap_or(0),
                expires: from_millis(lease.expires_ms),
            }),
            (OperationState::Claimed, None) => {
                return Err(StoreError::Backend(format!(
                    "claimed operation {} has no lease",
                    self.id
                )));
            }
            _ => self.claim.as_ref().map(|c| Claim {
                owner: c.owner.clone(),
                token: c.token,
                expires: from_millis(c.expires_ms),
            }),
        };
        Ok(Operation {
            id: self.id,
            host: self.host,
            instance: self.instance,
            kind,
            payload: self.payload.clone(),
            state,
            claim,
            result: self.result.clone(),
            created: from_millis(self.created_ms),
            updated: from_millis(self.updated_ms),
        })
    }
}

/// Bitmaps as lowercase hex text (a /24 is 64 characters, a /16 16 KiB).
mod hex_bits {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    const DIGITS: &[u8; 16] = b"0123456789abcdef";

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        let mut text = String::with_capacity(bytes.len() * 2);
        for b in bytes {
            text.push(char::from(DIGITS[usize::from(b >> 4)]));
            text.push(char::from(DIGITS[usize::from(b & 0xf)]));
        }
        s.serialize_str(&text)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = <&str>::deserialize(d)?;
        if text.len() % 2 != 0 {
            return Err(D::Error::custom("odd-length hex bitmap"));
        }
        let nibble = |c: u8| match c {
            b'0'..=b'9' => Ok(c - b'0'),
            b'a'..=b'f' => Ok(c - b'a' + 10),
            _ => Err(D::Error::custom("bad hex digit in bitmap")),
        };
        text.as_bytes()
            .chunks(2)
            .map(|pair| Ok(nibble(pair[0])? << 4 | nibble(pair[1])?))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    #[test]
    fn a_subnet_bitmap_gives_the_lowest_free_address_and_round_trips() {
        let base = u32::from(Ipv4Addr::new(172, 16, 0, 0));
        let mut s = SubnetRec::new(base, 29);
        assert_eq!(s.capacity, 5);
        assert_eq!(s.first_free(), Some(base + 2));
        for ip in base + 2..base + 7 {
            s.mark(ip, true);
        }
        assert_eq!((s.first_free(), s.used), (None, 5));
        s.mark(base + 4, false);
        s.mark(base + 4, false);
        assert_eq!((s.first_free(), s.used), (Some(base + 4), 4));
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains("\"taken\":\"6c\""), "{json}");
        let back: SubnetRec = serde_json::from_str(&json).unwrap();
        assert_eq!(back.taken, s.taken);
        assert!(serde_json::from_str::<SubnetRec>(&json.replace("6c", "6g")).is_err());
    }
}
