//! Attaching block volumes to servers and detaching them: the rules both the engine and the API's
//! fake cluster apply, over the store alone (no frame is sent here).
//!
//! - An attach takes a volume of the server's tenant (another tenant's is not found) that is
//!   `available` and attached to nothing, and a server that is active, stopped or paused
//!   ([`attach_allowed`]). A volume whose file a node holds already (its `node`, set by its first
//!   attach) attaches only to a server on that node: its file is local to it.
//! - The device is the one asked for (`vdb` to `vdz`), or the first of them that no other volume
//!   attached to (or being attached to, or detached from) the server uses; the guest sees it as
//!   `/dev/vdX`, which is what the attachment records.
//! - The attach's store change ([`begin_attach`]) moves the volume from `available` to
//!   `attaching` with a new attachment; the node's STATS moves it to `in-use` (the engine). A
//!   detach ([`begin_detach`]) moves it from `in-use` to `detaching`; STATS without it moves it
//!   to `available`, its attachment gone, its `node` kept (its file stays there).
//! - A server that goes releases its volumes ([`release_instance`]): `available`, detached.

use std::time::SystemTime;

use uuid::Uuid;

use crate::cluster::ClusterError;
use store::{
    Instance, InstanceState, Scope, Store, StoreError, Volume, VolumeAttachment, VolumeChange,
    VolumeLimits, VolumeStatus,
};

/// The devices a volume may be attached as, in the order they are given out (`vda` is the
/// server's own disk).
pub const DEVICES: std::ops::RangeInclusive<u8> = b'b'..=b'z';

/// How many times a change that lost a race with another writer is tried again.
const RETRIES: usize = 4;

/// Whether a server in `state` can have volumes attached or detached: active, stopped (on its
/// node) or paused.
pub fn attach_allowed(state: &InstanceState) -> bool {
    matches!(
        state,
        InstanceState::Active | InstanceState::Exited | InstanceState::Paused
    )
}

/// The device named by `text` (`/dev/vdc` or `vdc`), as the node takes it (`vdc`): `None` for a
/// name outside `vdb`..`vdz`.
pub fn device_name(text: &str) -> Option<String> {
    let name = text.strip_prefix("/dev/").unwrap_or(text);
    match name.as_bytes() {
        [b'v', b'd', x] if DEVICES.contains(x) => Some(name.to_string()),
        _ => None,
    }
}

/// The path the guest sees device `name` (`vdb`) at: `/dev/vdb`.
pub fn device_path(name: &str) -> String {
    format!("/dev/{name}")
}

/// The device `asked` for (a name [`device_name`] gives), or the first free one, given the
/// devices `used` by the server's other volumes (as the attachments record them): `Conflict` for
/// one in use, or when none is free.
pub fn choose_device(
    used: &[&str],
    asked: Option<&str>,
    server: Uuid,
) -> Result<String, ClusterError> {
    let taken = |name: &str| used.iter().any(|u| device_name(u).as_deref() == Some(name));
    if let Some(name) = asked {
        if taken(name) {
            return Err(ClusterError::Conflict(format!(
                "device {} is in use on server {server}",
                device_path(name)
            )));
        }
        return Ok(name.to_string());
    }
    DEVICES
        .map(|x| format!("vd{}", char::from(x)))
        .find(|name| !taken(name))
        .ok_or_else(|| {
            ClusterError::Conflict(format!(
                "server {server} has no free device for another volume (vdb to vdz are in use)"
            ))
        })
}

/// The volumes of `instance`'s tenant attached (or being attached or detached) to it.
pub fn attached_to(store: &dyn Store, instance: &Instance) -> Result<Vec<Volume>, StoreError> {
    let mut volumes: Vec<Volume> = store
        .volumes(Scope::Tenant(instance.tenant))?
        .into_iter()
        .filter(|v| {
            v.attachment
                .as_ref()
                .is_some_and(|a| a.instance == instance.id)
        })
        .collect();
    volumes.sort_by(|a, b| {
        let device = |v: &Volume| v.attachment.as_ref().map(|a| a.device.clone());
        device(a).cmp(&device(b))
    });
    Ok(volumes)
}

/// An attach that the rules allow, not made yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachPlan {
    /// The server.
    pub instance: Instance,
    /// The volume, `available`.
    pub volume: Volume,
    /// The device it gets (`vdb`).
    pub device: String,
}

impl AttachPlan {
    /// The volume's size in MiB, as ATTACH_VOLUME carries it (`Invalid` past `u32`).
    pub fn size_mb(&self) -> Result<u32, ClusterError> {
        self.volume.size_gb.checked_mul(1024).ok_or_else(|| {
            ClusterError::Invalid(format!(
                "volume {} is too large to attach ({} GiB)",
                self.volume.id, self.volume.size_gb
            ))
        })
    }
}

/// The server's state allows a volume `operation`, or `InvalidState`.
fn check_state(instance: &Instance, operation: &'static str) -> Result<(), ClusterError> {
    if attach_allowed(&instance.state) {
        Ok(())
    } else {
        Err(ClusterError::InvalidState {
            id: instance.id,
            state: instance.state.name().into(),
            operation,
        })
    }
}

/// A volume pinned to a node (its `node`) may not go to a server on another one.
fn check_pin(instance: &Instance, volume: &Volume) -> Result<(), ClusterError> {
    match (volume.node, instance.node) {
        (Some(pin), Some(node)) if pin != node => Err(ClusterError::Conflict(format!(
            "volume {} is on node {pin} (its file is there): it can only be attached to a server \
             on that node, and server {} runs on node {node}",
            volume.id, instance.id
        ))),
        _ => Ok(()),
    }
}

/// Checks an attach of `volume` to server `server` (visible in `scope`) as `device` (a name
/// [`device_name`] gives; `None`: the first free), and says what it will be. `NotFound` for an
/// unknown server, or a volume that is not the server's tenant's; `InvalidState` for a server
/// that cannot take it; `Invalid` (400, as Nova's) for a volume that is not `available`;
/// `Conflict` for a volume pinned to another node, or a device in use.
pub fn plan_attach(
    store: &dyn Store,
    scope: Scope,
    server: Uuid,
    volume: Uuid,
    device: Option<&str>,
) -> Result<AttachPlan, ClusterError> {
    let instance = store.instance(scope, server)?;
    let volume = store.volume(Scope::Tenant(instance.tenant), volume)?;
    check_state(&instance, "attach a volume")?;
    if let Some(a) = &volume.attachment {
        let to = if a.instance == server {
            "this server".to_string()
        } else {
            format!("server {}", a.instance)
        };
        return Err(ClusterError::Invalid(format!(
            "volume {} is {} and attached to {to}: only an available volume can be attached",
            volume.id,
            volume.status.as_str()
        )));
    }
    if volume.status != VolumeStatus::Available {
        return Err(ClusterError::Invalid(format!(
            "volume {} is {}: only an available volume can be attached",
            volume.id,
            volume.status.as_str()
        )));
    }
    check_pin(&instance, &volume)?;
    let attached = attached_to(store, &instance)?;
    let used: Vec<&str> = attached
        .iter()
        .filter_map(|v| v.attachment.as_ref().map(|a| a.device.as_str()))
        .collect();
    let device = choose_device(&used, device, server)?;
    Ok(AttachPlan {
        instance,
        volume,
        device,
    })
}

/// Makes the planned attach in the store: the volume from `available` to `to` (`attaching`, or
/// `in-use` where nothing reports it), with a new attachment of the server as the planned
/// device; `node` is set when given (the node that holds it now). `Conflict` if the volume
/// changed since it was planned.
pub fn begin_attach(
    store: &dyn Store,
    plan: &AttachPlan,
    to: VolumeStatus,
    node: Option<Uuid>,
) -> Result<Volume, ClusterError> {
    let change = VolumeChange {
        expect: Some(VolumeStatus::Available),
        status: Some(to),
        node: node.map(Some),
        attachment: Some(Some(VolumeAttachment {
            id: Uuid::new_v4(),
            instance: plan.instance.id,
            device: device_path(&plan.device),
            attached: SystemTime::now(),
        })),
        ..VolumeChange::default()
    };
    change_volume(store, plan.volume.id, change)
}

/// Checks a detach of `volume` from server `server` (visible in `scope`): the server and the
/// volume, `in-use` and attached to it. `NotFound` for an unknown server, or a volume that is
/// not the server's tenant's, or not attached to it (404, as Nova's); `InvalidState` for a
/// server that cannot take it; `Conflict` for a volume not `in-use`.
pub fn plan_detach(
    store: &dyn Store,
    scope: Scope,
    server: Uuid,
    volume: Uuid,
) -> Result<(Instance, Volume), ClusterError> {
    let instance = store.instance(scope, server)?;
    let volume = store.volume(Scope::Tenant(instance.tenant), volume)?;
    if volume
        .attachment
        .as_ref()
        .is_none_or(|a| a.instance != server)
    {
        return Err(ClusterError::Store(StoreError::NotFound {
            kind: "volume attachment",
            id: format!("{} on server {server}", volume.id),
        }));
    }
    if volume.status != VolumeStatus::InUse {
        return Err(ClusterError::Conflict(format!(
            "volume {} is {}: only an in-use volume can be detached",
            volume.id,
            volume.status.as_str()
        )));
    }
    check_state(&instance, "detach a volume")?;
    Ok((instance, volume))
}

/// Makes a detach in the store: the volume from `from` (`in-use`; anything attached, for a
/// forced detach) to `to` (`detaching`, or `available` at once, detached, where nothing reports
/// it). `Conflict` if it is not in `from`.
pub fn begin_detach(
    store: &dyn Store,
    volume: Uuid,
    from: VolumeStatus,
    to: VolumeStatus,
) -> Result<Volume, ClusterError> {
    let change = VolumeChange {
        expect: Some(from),
        status: Some(to),
        attachment: (to == VolumeStatus::Available).then_some(None),
        ..VolumeChange::default()
    };
    change_volume(store, volume, change)
}

/// Releases every volume attached to `instance` (its record goes, or its node removed it): each
/// `available` and detached, its `node` kept. The volumes released.
pub fn release_instance(store: &dyn Store, instance: &Instance) -> Result<Vec<Volume>, StoreError> {
    let mut released = Vec::new();
    for volume in attached_to(store, instance)? {
        if let Some(v) = release(store, volume.id, instance.id)? {
            released.push(v);
        }
    }
    Ok(released)
}

/// Detaches volume `id` from `instance` in the store, whatever its status (`available`); `None`
/// if it is not attached to it (any more).
pub fn release(store: &dyn Store, id: Uuid, instance: Uuid) -> Result<Option<Volume>, StoreError> {
    for _ in 0..RETRIES {
        let current = match store.volume(Scope::All, id) {
            Ok(v) => v,
            Err(StoreError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        if current
            .attachment
            .as_ref()
            .is_none_or(|a| a.instance != instance)
        {
            return Ok(None);
        }
        let change = VolumeChange {
            expect: Some(current.status),
            status: Some(VolumeStatus::Available),
            attachment: Some(None),
            ..VolumeChange::default()
        };
        match store.change_volume(Scope::All, id, change, VolumeLimits::default()) {
            Ok(v) => return Ok(Some(v)),
            Err(StoreError::Conflict(_)) => continue,
            Err(StoreError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        }
    }
    Err(StoreError::Conflict(format!("volume {id} keeps changing")))
}

/// `change` to volume `id` (no quota applies: nothing grows).
fn change_volume(
    store: &dyn Store,
    id: Uuid,
    change: VolumeChange,
) -> Result<Volume, ClusterError> {
    store
        .change_volume(Scope::All, id, change, VolumeLimits::default())
        .map_err(|e| match e {
            StoreError::Conflict(message) => {
                ClusterError::Conflict(format!("volume {id} changed meanwhile: {message}"))
            }
            other => other.into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_are_vdb_to_vdz() {
        assert_eq!(device_name("/dev/vdb").as_deref(), Some("vdb"));
        assert_eq!(device_name("vdz").as_deref(), Some("vdz"));
        for bad in [
            "/dev/vda",
            "vda",
            "/dev/sdb",
            "/dev/vdbb",
            "vd",
            "",
            "/dev/",
            "auto",
        ] {
            assert_eq!(device_name(bad), None, "{bad}");
        }
        assert_eq!(device_path("vdc"), "/dev/vdc");
    }

    #[test]
    fn the_first_free_device_is_chosen_and_a_taken_one_refused() {
        let s = Uuid::nil();
        assert_eq!(choose_device(&[], None, s).unwrap(), "vdb");
        assert_eq!(choose_device(&["/dev/vdb"], None, s).unwrap(), "vdc");
        assert_eq!(
            choose_device(&["/dev/vdc"], None, s).unwrap(),
            "vdb",
            "a gap is filled"
        );
        assert_eq!(choose_device(&["/dev/vdb"], Some("vdd"), s).unwrap(), "vdd");
        assert!(matches!(
            choose_device(&["/dev/vdb"], Some("vdb"), s),
            Err(ClusterError::Conflict(_))
        ));
        let all: Vec<String> = DEVICES
            .map(|x| format!("/dev/vd{}", char::from(x)))
            .collect();
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        assert!(matches!(
            choose_device(&all, None, s),
            Err(ClusterError::Conflict(_))
        ));
    }

    #[test]
    fn only_active_stopped_and_paused_servers_take_volumes() {
        for ok in [
            InstanceState::Active,
            InstanceState::Exited,
            InstanceState::Paused,
        ] {
            assert!(attach_allowed(&ok), "{ok:?}");
        }
        for no in [
            InstanceState::Pending,
            InstanceState::Stopping,
            InstanceState::Suspended,
            InstanceState::Deleted,
            InstanceState::Missing,
            InstanceState::Rebuilding,
            InstanceState::Resized,
            InstanceState::Error("x".into()),
        ] {
            assert!(!attach_allowed(&no), "{no:?}");
        }
    }
}
