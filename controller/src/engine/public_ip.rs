//! Floating IPs on their CNCIs. The store says which public address goes to which instance's
//! port (the Networking API's floating IPs); the engine makes the CNCI of the instance's subnet
//! map it (ASSIGN_PUBLIC_IP) and unmap what no longer is (RELEASE_PUBLIC_IP), and remembers what
//! each CNCI confirmed (PUBLIC_IP_ASSIGNED / PUBLIC_IP_UNASSIGNED) or refused, which the API
//! shows as the floating IP's `status` (`ACTIVE`, `ERROR`, else `DOWN`).
//!
//! A tenant is brought in line (`reconcile`) when its floating IPs change (the API calls
//! [`Cluster::floating_ips_changed`](crate::cluster::Cluster::floating_ips_changed)), when one of
//! its CNCIs announces itself (a restarted CNCI VM lost its mappings: they are all sent again;
//! ASSIGN_PUBLIC_IP of a mapping the CNCI holds is a success there), when the record of an
//! instance with a mapping goes, and by the sweep: a command unanswered for [`RESEND`] goes
//! again (a RELEASE at most [`RELEASE_TRIES`] times), and the first sweep with a scheduler
//! session sends every tenant's mappings (the engine keeps them in memory only). A mapping
//! released while the controller was down stays on its CNCI until that CNCI starts afresh.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, SystemTime};

use ssntp::payload::{PublicIpCommand, PublicIpEvent, PublicIpFailure};
use ssntp::{Operand, Payload};
use uuid::Uuid;

use super::Engine;
use crate::cluster::{ClusterError, FloatingStatus};
use store::{CnciState, EventKind, Scope, StoreError};

/// How long a command may go unanswered before it is sent again.
pub(super) const RESEND: Duration = Duration::from_secs(5);
/// How many times a RELEASE_PUBLIC_IP goes before its mapping is given up (its CNCI is gone or
/// does not answer).
pub(super) const RELEASE_TRIES: u32 = 5;

/// What should be (or is being) mapped on a CNCI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Target {
    cnci: Uuid,
    tenant: Uuid,
    instance: Uuid,
    private: Ipv4Addr,
    mac: ssntp::payload::MacAddr,
}

impl Target {
    fn command(&self, public: Ipv4Addr) -> PublicIpCommand {
        PublicIpCommand {
            concentrator_uuid: self.cnci,
            tenant_uuid: self.tenant,
            instance_uuid: self.instance,
            public_ip: IpAddr::V4(public),
            private_ip: IpAddr::V4(self.private),
            vnic_mac: self.mac,
        }
    }

    /// Whether the same CNCI, instance and private address (what a CNCI answers with).
    fn same(&self, other: &Target) -> bool {
        self.cnci == other.cnci && self.instance == other.instance && self.private == other.private
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    /// ASSIGN_PUBLIC_IP sent at this time, not answered yet.
    Assigning(SystemTime),
    /// The CNCI confirmed it.
    Assigned,
    /// The CNCI refused it, for this reason.
    Failed(String),
}

#[derive(Debug, Clone)]
struct Mapping {
    target: Target,
    phase: Phase,
}

#[derive(Debug, Clone)]
struct Release {
    target: Target,
    sent: SystemTime,
    tries: u32,
}

/// The engine's memory of public IPs (part of its state).
#[derive(Debug, Default)]
pub(super) struct PublicIps {
    /// What each public address is (being) mapped to.
    mapped: HashMap<Ipv4Addr, Mapping>,
    /// Mappings being removed, by public address and CNCI.
    releasing: HashMap<(Ipv4Addr, Uuid), Release>,
    /// Whether every tenant's mappings went out since the engine started.
    synced: bool,
}

impl Engine {
    /// Brings `tenant`'s mappings on its CNCIs in line with its floating IPs in the store.
    pub(super) fn reconcile_public_ips(
        &self,
        tenant: Uuid,
        now: SystemTime,
    ) -> Result<(), ClusterError> {
        let wanted = self.wanted_public_ips(tenant)?;
        let mut frames = Vec::new();
        {
            let mut state = self.state();
            let ips = &mut state.public_ips;
            let stale: Vec<Ipv4Addr> = ips
                .mapped
                .iter()
                .filter(|(public, m)| {
                    m.target.tenant == tenant
                        && wanted.get(*public).is_none_or(|t| !t.same(&m.target))
                })
                .map(|(public, _)| *public)
                .collect();
            for public in stale {
                if let Some(m) = ips.mapped.remove(&public) {
                    frames.push(Payload::ReleasePublicIp(m.target.command(public)));
                    ips.releasing.insert(
                        (public, m.target.cnci),
                        Release {
                            target: m.target,
                            sent: now,
                            tries: 1,
                        },
                    );
                }
            }
            for (public, target) in &wanted {
                let due = match ips.mapped.get(public) {
                    Some(m) => match m.phase {
                        Phase::Assigning(sent) => {
                            now.duration_since(sent).unwrap_or_default() >= RESEND
                        }
                        Phase::Assigned => false,
                        // Asked again (the tenant changed something, its CNCI came back).
                        Phase::Failed(_) => true,
                    },
                    None => true,
                };
                if due {
                    frames.push(Payload::AssignPublicIp(target.command(*public)));
                    ips.mapped.insert(
                        *public,
                        Mapping {
                            target: *target,
                            phase: Phase::Assigning(now),
                        },
                    );
                }
            }
        }
        for frame in frames {
            if let Err(e) = self.out.send(&frame) {
                // The sweep sends it again.
                tracing::warn!(error = %e, operand = %frame.operand(), "public IP command not sent");
            }
        }
        Ok(())
    }

    /// The tenant's floating IPs that can be mapped now: associated with an instance that has
    /// an address on a subnet whose CNCI is active.
    fn wanted_public_ips(&self, tenant: Uuid) -> Result<HashMap<Ipv4Addr, Target>, ClusterError> {
        let mut wanted = HashMap::new();
        let mut active = HashMap::new();
        for ip in self.store.floating_ips(tenant)? {
            let Some(port) = ip.port else { continue };
            let instance = match self.store.instance(Scope::All, port) {
                Ok(i) => i,
                Err(StoreError::NotFound { .. }) => continue,
                Err(e) => return Err(e.into()),
            };
            let Some(cnci) = instance.cnci else { continue };
            let up = match active.get(&cnci) {
                Some(up) => *up,
                None => {
                    let up = match self.store.cnci(Scope::All, cnci) {
                        Ok(c) => c.state == CnciState::Active,
                        Err(StoreError::NotFound { .. }) => false,
                        Err(e) => return Err(e.into()),
                    };
                    active.insert(cnci, up);
                    up
                }
            };
            if up {
                wanted.insert(
                    ip.address,
                    Target {
                        cnci,
                        tenant,
                        instance: instance.id,
                        private: ip.fixed_ip.unwrap_or(instance.ip),
                        mac: instance.mac,
                    },
                );
            }
        }
        Ok(wanted)
    }

    /// A CNCI announced itself: what it should map goes to it again.
    pub(super) fn public_ips_cnci_added(&self, cnci: Uuid, tenant: Uuid, now: SystemTime) {
        self.state()
            .public_ips
            .mapped
            .retain(|_, m| m.target.cnci != cnci);
        if let Err(e) = self.reconcile_public_ips(tenant, now) {
            tracing::warn!(error = %e, %tenant, "public IPs not sent to CNCI {cnci}");
        }
    }

    /// An instance's record went: its floating IPs' mappings go too.
    pub(super) fn public_ips_instance_gone(&self, instance: Uuid, tenant: Uuid) {
        let mapped = self
            .state()
            .public_ips
            .mapped
            .values()
            .any(|m| m.target.instance == instance);
        if mapped && let Err(e) = self.reconcile_public_ips(tenant, SystemTime::now()) {
            tracing::warn!(error = %e, %tenant, "public IPs of instance {instance} not released");
        }
    }

    /// The sweep's part: what went unanswered goes again; the first sweep with a session sends
    /// every tenant's mappings.
    pub(super) fn sweep_public_ips(&self, now: SystemTime) -> Result<(), ClusterError> {
        if !self.out.connected() {
            return Ok(());
        }
        let (synced, late, resend) = {
            let mut state = self.state();
            let ips = &mut state.public_ips;
            let synced = std::mem::replace(&mut ips.synced, true);
            let late: Vec<Uuid> = ips
                .mapped
                .values()
                .filter(|m| match m.phase {
                    Phase::Assigning(sent) => {
                        now.duration_since(sent).unwrap_or_default() >= RESEND
                    }
                    _ => false,
                })
                .map(|m| m.target.tenant)
                .collect();
            let mut resend = Vec::new();
            ips.releasing.retain(|(public, _), r| {
                if now.duration_since(r.sent).unwrap_or_default() < RESEND {
                    return true;
                }
                if r.tries >= RELEASE_TRIES {
                    tracing::warn!(%public, cnci = %r.target.cnci, "public IP release unanswered: given up");
                    return false;
                }
                r.tries += 1;
                r.sent = now;
                resend.push(Payload::ReleasePublicIp(r.target.command(*public)));
                true
            });
            (synced, late, resend)
        };
        for frame in resend {
            if let Err(e) = self.out.send(&frame) {
                tracing::warn!(error = %e, "public IP release not sent");
            }
        }
        let mut tenants: Vec<Uuid> = if synced {
            late
        } else {
            self.store.tenants()?.into_iter().map(|t| t.id).collect()
        };
        tenants.sort_unstable();
        tenants.dedup();
        for tenant in tenants {
            self.reconcile_public_ips(tenant, now)?;
        }
        Ok(())
    }

    /// PUBLIC_IP_ASSIGNED / PUBLIC_IP_UNASSIGNED from CNCI `origin`.
    pub(super) fn on_public_ip_event(
        &self,
        origin: Option<Uuid>,
        e: &PublicIpEvent,
        assigned: bool,
    ) -> Result<(), ClusterError> {
        let operand = if assigned {
            Operand::PublicIpAssigned
        } else {
            Operand::PublicIpUnassigned
        };
        if let Some(from) = origin
            && from != e.concentrator_uuid
        {
            self.refuse(
                operand,
                from,
                format_args!("to be CNCI {}", e.concentrator_uuid),
            );
            return Ok(());
        }
        let (IpAddr::V4(public), IpAddr::V4(private)) = (e.public_ip, e.private_ip) else {
            tracing::warn!(public = %e.public_ip, "{}: not IPv4: ignored", operand.name());
            return Ok(());
        };
        let answer = Target {
            cnci: e.concentrator_uuid,
            tenant: Uuid::nil(),
            instance: e.instance_uuid,
            private,
            mac: ssntp::payload::MacAddr([0; 6]),
        };
        let mut state = self.state();
        let ips = &mut state.public_ips;
        if assigned {
            match ips.mapped.get_mut(&public) {
                Some(m) if m.target.same(&answer) => {
                    tracing::info!(%public, %private, cnci = %answer.cnci, "public IP mapped");
                    m.phase = Phase::Assigned;
                }
                _ => {
                    tracing::info!(%public, "PUBLIC_IP_ASSIGNED for a mapping no longer asked for")
                }
            }
        } else if ips.releasing.remove(&(public, answer.cnci)).is_some() {
            tracing::info!(%public, cnci = %answer.cnci, "public IP unmapped");
        }
        Ok(())
    }

    /// ASSIGN_PUBLIC_IP_FAILURE / UNASSIGN_PUBLIC_IP_FAILURE from CNCI `origin`.
    pub(super) fn on_public_ip_failure(
        &self,
        origin: Option<Uuid>,
        f: &PublicIpFailure,
        assign: bool,
    ) -> Result<(), ClusterError> {
        let operand = if assign {
            Operand::AssignPublicIpFailure
        } else {
            Operand::UnassignPublicIpFailure
        };
        if let (Some(from), Some(cnci)) = (origin, f.concentrator_uuid)
            && from != cnci
        {
            self.refuse(operand, from, format_args!("to be CNCI {cnci}"));
            return Ok(());
        }
        let Some(IpAddr::V4(public)) = f.public_ip else {
            tracing::warn!("{} without an IPv4 public address: ignored", operand.name());
            return Ok(());
        };
        let cnci = f.concentrator_uuid.or(origin).unwrap_or_default();
        let reason = serde_json::to_value(f.reason)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_else(|| "unknown".into());
        let tenant = {
            let mut state = self.state();
            let ips = &mut state.public_ips;
            if assign {
                match ips.mapped.get_mut(&public) {
                    Some(m) if m.target.cnci == cnci && m.target.instance == f.instance_uuid => {
                        m.phase = Phase::Failed(reason.clone());
                        Some(m.target.tenant)
                    }
                    _ => None,
                }
            } else {
                ips.releasing
                    .remove(&(public, cnci))
                    .map(|r| r.target.tenant)
            }
        };
        if let Some(tenant) = tenant {
            self.event(
                Some(tenant),
                EventKind::Warning,
                format!(
                    "floating IP {public} of instance {}: CNCI {cnci} could not {} it: {reason}",
                    f.instance_uuid,
                    if assign { "map" } else { "unmap" }
                ),
            );
        }
        Ok(())
    }

    /// Where the mapping of `public` to `port` stands.
    pub(super) fn public_ip_status(&self, public: Ipv4Addr, port: Option<Uuid>) -> FloatingStatus {
        let Some(port) = port else {
            return FloatingStatus::Down;
        };
        match self.state().public_ips.mapped.get(&public) {
            Some(m) if m.target.instance == port => match m.phase {
                Phase::Assigned => FloatingStatus::Active,
                Phase::Failed(_) => FloatingStatus::Error,
                Phase::Assigning(_) => FloatingStatus::Down,
            },
            _ => FloatingStatus::Down,
        }
    }
}
