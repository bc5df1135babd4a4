//! Our domains and their power: which domains are ours (the owner metadata, [`xml::NAMESPACE`]),
//! finding ours by UUID, reading the power state, and powering off, stopping and removing a
//! domain in the order that leaves nothing running.

use uuid::Uuid;
use virt::connect::Connect;
use virt::domain::Domain;
use virt::error::ErrorNumber;

use super::xml;
use crate::backend::Power;

/// Whether the domain carries our metadata and, when `owner` is given, names that owner (or
/// none). Only libvirt's "no such metadata" says no: any other failure (the connection
/// dropped) is an error, never a reason to leave a domain of ours behind.
pub(super) fn ours(d: &Domain, owner: Option<Uuid>) -> Result<bool, virt::error::Error> {
    let kind = virt::sys::VIR_DOMAIN_METADATA_ELEMENT as i32;
    match d.get_metadata(kind, Some(xml::NAMESPACE), 0) {
        Ok(text) => Ok(match (owner, xml::owner_of(&text)) {
            (Some(me), Some(its)) => me == its,
            _ => true,
        }),
        Err(e) if e.code() == ErrorNumber::NoDomainMetadata => Ok(false),
        Err(e) => Err(e),
    }
}

/// Our domain with this UUID: `None` when there is none, or when it is not ours (or
/// another owner's).
pub(super) fn our_domain(
    c: &Connect,
    instance: Uuid,
    owner: Option<Uuid>,
) -> Result<Option<Domain>, virt::error::Error> {
    let d = match Domain::lookup_by_uuid(c, instance) {
        Ok(d) => d,
        Err(e) if e.code() == ErrorNumber::NoDomain => return Ok(None),
        Err(e) => return Err(e),
    };
    if ours(&d, owner)? {
        Ok(Some(d))
    } else {
        tracing::warn!(%instance, "a domain with this UUID is not ours: left alone");
        Ok(None)
    }
}

/// Powers the domain off if it runs (a domain that stopped meanwhile is fine).
pub(super) fn power_off(d: &Domain) -> Result<(), virt::error::Error> {
    if !d.is_active()? {
        return Ok(());
    }
    match d.destroy() {
        Ok(()) => Ok(()),
        Err(_) if !d.is_active()? => Ok(()),
        Err(e) => Err(e),
    }
}

/// The domain's power state.
pub(super) fn power_of(d: &Domain) -> Result<Power, virt::error::Error> {
    let (state, reason) = d.get_state()?;
    let starting = u32::try_from(reason).ok() == Some(virt::sys::VIR_DOMAIN_PAUSED_STARTING_UP);
    Ok(match state {
        // Paused only while QEMU starts up: a boot in progress.
        virt::sys::VIR_DOMAIN_PAUSED if starting => Power::Running,
        virt::sys::VIR_DOMAIN_PAUSED | virt::sys::VIR_DOMAIN_PMSUSPENDED => Power::Paused,
        _ if d.is_active()? => Power::Running,
        _ if d.has_managed_save(0)? => Power::Saved,
        _ => Power::Off,
    })
}

/// Powers the domain off and drops a saved memory image (a suspend): its disks stay.
pub(super) fn stop_domain(d: &Domain) -> Result<(), virt::error::Error> {
    power_off(d)?;
    if d.has_managed_save(0)? {
        d.managed_save_remove(0)?;
    }
    Ok(())
}

/// Removes the domain: undefined first, then powered off. In this order a start still in
/// progress (from an agent killed mid-start, say; libvirt finishes it before the undefine gets
/// the domain) leaves a transient running domain that the power-off ends; the other order would
/// leave it running with no definition. A transient domain (a removal cut short between the
/// two) is only powered off; one gone meanwhile is fine.
pub(super) fn remove_domain(d: &Domain) -> Result<(), virt::error::Error> {
    let gone = |e: &virt::error::Error| e.code() == ErrorNumber::NoDomain;
    match d.is_persistent().and_then(|p| {
        if p {
            d.undefine_flags(virt::sys::VIR_DOMAIN_UNDEFINE_MANAGED_SAVE)
        } else {
            Ok(())
        }
    }) {
        Ok(()) => {}
        Err(e) if gone(&e) => return Ok(()),
        Err(e) => return Err(e),
    }
    match power_off(d) {
        Err(e) if gone(&e) => Ok(()),
        other => other,
    }
}
