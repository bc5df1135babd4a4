//! What both implementations share: times as the stores keep them (milliseconds since the Unix
//! epoch), the name rule, the version check of compare-and-swap updates, the event log's default
//! size, and the quota check.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use uuid::Uuid;

use crate::{
    Image, InstanceKey, Keypair, NewKeypair, Quota, QuotaKind, Result, StoreError, Usage,
    Visibility,
};

/// How many events the event log keeps by default (the oldest go first).
pub const DEFAULT_EVENT_CAPACITY: u64 = 10_000;

/// Milliseconds since the Unix epoch.
pub(crate) fn millis(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The time `ms` milliseconds after the Unix epoch.
pub(crate) fn from_millis(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// The current time, truncated to what the stores keep.
pub(crate) fn now() -> SystemTime {
    from_millis(millis(SystemTime::now()))
}

/// `Invalid` unless `image` is shared and `member` is not its owner.
pub(crate) fn check_shareable(image: &Image, member: Uuid) -> Result<()> {
    if image.visibility != Visibility::Shared {
        return Err(StoreError::Invalid(format!(
            "only shared images have members: image {} is {}",
            image.id,
            image.visibility.as_str()
        )));
    }
    if image.owner == Some(member) {
        return Err(StoreError::Invalid(format!(
            "tenant {member} owns image {}: it is not one of its members",
            image.id
        )));
    }
    Ok(())
}

/// `Conflict`: `member` is a member of `image` already.
pub(crate) fn already_member(image: Uuid, member: Uuid) -> StoreError {
    StoreError::Conflict(format!(
        "tenant {member} is a member of image {image} already"
    ))
}

/// `QuotaExceeded` when an image with `count` members may have no more than `limit`.
pub(crate) fn check_member_limit(count: usize, limit: u32) -> Result<()> {
    if count >= usize::try_from(limit).unwrap_or(usize::MAX) {
        return Err(StoreError::QuotaExceeded {
            what: QuotaKind::ImageMembers,
            limit: u64::from(limit),
        });
    }
    Ok(())
}

/// A non-empty name of at most 255 bytes.
pub(crate) fn check_name(what: &str, name: &str) -> Result<()> {
    if name.trim().is_empty() || name.len() > 255 {
        return Err(StoreError::Invalid(format!(
            "{what} name must be 1 to 255 bytes and not blank"
        )));
    }
    Ok(())
}

/// A public key or fingerprint: 1 to `max` bytes of one line.
fn check_line(what: &str, text: &str, max: usize) -> Result<()> {
    if text.trim().is_empty() || text.len() > max || text.contains(['\n', '\r', '\0']) {
        return Err(StoreError::Invalid(format!(
            "{what} must be one line of 1 to {max} bytes"
        )));
    }
    Ok(())
}

/// What both stores check of a new key pair: its name, public key and fingerprint.
pub(crate) fn check_keypair(new: &NewKeypair) -> Result<()> {
    if !Keypair::valid_name(&new.name) {
        return Err(StoreError::Invalid(format!(
            "key pair name must be 1 to {} bytes of letters, digits, '_', '-' and space",
            Keypair::MAX_NAME
        )));
    }
    check_line("public key", &new.public_key, Keypair::MAX_PUBLIC_KEY)?;
    check_line("fingerprint", &new.fingerprint, Keypair::MAX_FINGERPRINT)
}

/// What both stores check of an instance's key.
pub(crate) fn check_instance_key(key: &Option<InstanceKey>) -> Result<()> {
    let Some(key) = key else {
        return Ok(());
    };
    if !Keypair::valid_name(&key.name) {
        return Err(StoreError::Invalid("bad key pair name".into()));
    }
    check_line("public key", &key.public_key, Keypair::MAX_PUBLIC_KEY)
}

/// `QuotaExceeded` when a user with `count` key pairs may not have one more.
pub(crate) fn check_keypair_quota(count: usize, limit: u32) -> Result<()> {
    if u64::try_from(count).unwrap_or(u64::MAX) >= u64::from(limit) {
        return Err(StoreError::QuotaExceeded {
            what: QuotaKind::Keypairs,
            limit: u64::from(limit),
        });
    }
    Ok(())
}

/// The longest token id the revocation list takes.
pub(crate) const MAX_TOKEN_ID_LEN: usize = 64;

/// A token id: 1 to [`MAX_TOKEN_ID_LEN`] bytes of URL-safe base64 (safe in an etcd key).
pub(crate) fn check_token_id(id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= MAX_TOKEN_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(StoreError::Invalid(format!(
            "a token id must be 1 to {MAX_TOKEN_ID_LEN} characters of A-Z a-z 0-9 - _"
        )))
    }
}

/// `Conflict` unless `found` is `expected`.
/// An instance may move to another workload only if its (vCPUs, memory) stay the same: its
/// quota usage is counted from them.
pub(crate) fn check_same_size(instance: (u32, u64), workload: (u32, u64)) -> Result<()> {
    if instance == workload {
        Ok(())
    } else {
        Err(StoreError::Invalid(format!(
            "the workload has {} vCPUs and {} MB of memory; the instance {} and {}",
            workload.0, workload.1, instance.0, instance.1
        )))
    }
}

pub(crate) fn check_version(kind: &str, id: Uuid, found: u64, expected: u64) -> Result<()> {
    if found != expected {
        return Err(StoreError::Conflict(format!(
            "{kind} {id} is at version {found}, not {expected}"
        )));
    }
    Ok(())
}

impl Usage {
    /// The usage without one instance of `vcpus` and `memory_mb` (to check it at another size).
    pub(crate) fn without(&self, vcpus: u32, memory_mb: u64) -> Usage {
        Usage {
            instances: self.instances.saturating_sub(1),
            vcpus: self.vcpus.saturating_sub(vcpus),
            memory_mb: self.memory_mb.saturating_sub(memory_mb),
        }
    }
}

impl Quota {
    /// Whether one more instance of `vcpus` and `memory_mb` fits beside `used`; the figure it
    /// would exceed otherwise.
    pub fn check(&self, used: &Usage, vcpus: u32, memory_mb: u64) -> Result<()> {
        if let Some(limit) = self.instances
            && u64::from(used.instances) + 1 > u64::from(limit)
        {
            return Err(StoreError::QuotaExceeded {
                what: QuotaKind::Instances,
                limit: u64::from(limit),
            });
        }
        if let Some(limit) = self.vcpus
            && u64::from(used.vcpus) + u64::from(vcpus) > u64::from(limit)
        {
            return Err(StoreError::QuotaExceeded {
                what: QuotaKind::Vcpus,
                limit: u64::from(limit),
            });
        }
        if let Some(limit) = self.memory_mb
            && used.memory_mb.saturating_add(memory_mb) > limit
        {
            return Err(StoreError::QuotaExceeded {
                what: QuotaKind::MemoryMb,
                limit,
            });
        }
        Ok(())
    }
}

/// A disabled node's reason: at most [`crate::DisabledNode::MAX_REASON`] bytes.
pub(crate) fn check_disabled_reason(reason: &Option<String>) -> Result<()> {
    match reason {
        Some(r) if r.chars().count() > crate::DisabledNode::MAX_REASON => {
            Err(StoreError::Invalid(format!(
                "a disabled node's reason is at most {} characters",
                crate::DisabledNode::MAX_REASON
            )))
        }
        _ => Ok(()),
    }
}

/// Refuses disabling one more node when `count` are disabled.
pub(crate) fn check_disabled_count(count: usize) -> Result<()> {
    if count >= crate::DisabledNode::MAX_NODES {
        return Err(StoreError::Invalid(format!(
            "at most {} nodes are disabled at once",
            crate::DisabledNode::MAX_NODES
        )));
    }
    Ok(())
}

/// What both stores check of a token use: its secret (compared in constant time) and expiry,
/// and that it is unused.
pub(crate) fn check_join_token(
    token: &crate::JoinToken,
    secret_hash: &[u8; 32],
    now: std::time::SystemTime,
) -> Result<()> {
    let same = token
        .secret_hash
        .iter()
        .zip(secret_hash)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
        == 0;
    if !same {
        return Err(StoreError::Invalid("not the join token's secret".into()));
    }
    if token.used.is_some() {
        return Err(StoreError::Conflict(
            "the join token was used already".into(),
        ));
    }
    if now >= token.expires {
        return Err(StoreError::Invalid("the join token has expired".into()));
    }
    Ok(())
}

/// What both stores check of a joined node: its host name, and the bound on how many.
pub(crate) fn check_joined_node(node: &crate::JoinedNode, count: usize) -> Result<()> {
    if node.hostname.is_empty() || node.hostname.len() > crate::JoinedNode::MAX_HOSTNAME {
        return Err(StoreError::Invalid(format!(
            "a joined node's host name is 1 to {} characters",
            crate::JoinedNode::MAX_HOSTNAME
        )));
    }
    if count >= crate::JoinedNode::MAX_NODES {
        return Err(StoreError::Invalid(format!(
            "at most {} nodes join",
            crate::JoinedNode::MAX_NODES
        )));
    }
    Ok(())
}

/// What both stores check of a new token: the bound on how many are kept.
pub(crate) fn check_join_token_count(count: usize) -> Result<()> {
    if count >= crate::JoinToken::MAX_TOKENS {
        return Err(StoreError::Invalid(format!(
            "at most {} join tokens are kept; delete some",
            crate::JoinToken::MAX_TOKENS
        )));
    }
    Ok(())
}

/// What both stores check of a new instance: its name, key, metadata, reservation id and zone.
pub(crate) fn check_new_instance(new: &crate::NewInstance) -> Result<()> {
    check_name("instance", &new.name)?;
    check_instance_key(&new.key)?;
    crate::Instance::check_metadata(&new.metadata)?;
    if let Some(reservation) = &new.reservation {
        crate::Instance::check_reservation(reservation)?;
    }
    if let Some(zone) = &new.zone
        && !ssntp::payload::valid_zone(zone)
    {
        return Err(StoreError::Invalid(format!(
            "zone {zone:?} is not 1 to {} letters, digits, '-', '_' or '.'",
            ssntp::payload::MAX_ZONE
        )));
    }
    Ok(())
}
