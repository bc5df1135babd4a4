//! The CNCI lifecycle: one concentrator per tenant subnet, launched on a network node when the
//! subnet's first instance is created, awaited (CONCENTRATOR_INSTANCE_ADDED) with a timeout,
//! restarted when it exits, removed a while after its subnet empties.
//!
//! A CNCI's START that meets a cluster with no room for it (`full_cloud`, `no_net_cn`) is sent
//! again, with a backoff, until the CNCI timeout: the scheduler places nothing on a network node
//! until its READY arrived, so a CNCI launched right after a network node connected (or before
//! it did, in a cluster whose network node comes up after the controller) meets those at first.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, SystemTime};

use ssntp::payload::{
    CNCI_CERT_KEY, CNCI_KEY_KEY, CNCI_ROLE, CnciPeer, ConcentratorAdded, FwType, Networking,
    ROLE_KEY, RefreshCnci, Requirements, Start, StartFailure, StartFailureReason, VmType,
};
use ssntp::{Operand, Payload};
use uuid::Uuid;

use super::{Engine, TenantNetwork};
use crate::cluster::ClusterError;
use crate::cnci_creds::CnciCreds;
use store::net::subnet_key;
use store::{
    Cnci, CnciChange, CnciState, EventKind, Instance, InstanceFilter, Scope, StoreError, net,
};

/// The first wait before a CNCI's START goes again after `full_cloud` / `no_net_cn`.
pub(super) const RETRY_FIRST: Duration = Duration::from_millis(200);
/// The longest wait between two of a CNCI's STARTs (the wait doubles up to it).
pub(super) const RETRY_MAX: Duration = Duration::from_secs(2);

/// A CNCI whose START met a cluster with no room for it yet.
#[derive(Debug, Clone)]
pub(super) struct Retry {
    /// When its START goes again; `None`: it went, and no answer came yet.
    due: Option<SystemTime>,
    /// The wait before `due`; the next one is twice as long (at most [`RETRY_MAX`]).
    delay: Duration,
    /// The START's `restart` flag.
    restart: bool,
    /// The last START_FAILURE's reason.
    reason: String,
}

/// Whether a CNCI's START that failed with `reason` is worth sending again: the cluster had no
/// network node with room yet (one may connect, or its READY arrive, in a moment).
fn worth_retrying(reason: StartFailureReason) -> bool {
    matches!(
        reason,
        StartFailureReason::FullCloud | StartFailureReason::NoNetCn
    )
}

/// The gateway of a tenant subnet: its first host address (the CNCI's side).
fn gateway(cidr: &ssntp::payload::Cidr) -> Ipv4Addr {
    match cidr.addr {
        IpAddr::V4(v4) => Ipv4Addr::from(u32::from(v4).wrapping_add(1)),
        IpAddr::V6(_) => Ipv4Addr::UNSPECIFIED,
    }
}

/// The START of a CNCI: a small instance on a network node that serves `cnci.cidr`, with its
/// own credentials when the controller issues them.
fn cnci_start(cnci: &Cnci, image: &str, restart: bool, creds: Option<CnciCreds>) -> Start {
    let gw = gateway(&cnci.cidr);
    let mut meta = BTreeMap::new();
    meta.insert("instance-id".to_string(), cnci.id.to_string());
    meta.insert("local-hostname".to_string(), format!("cnci-{}", cnci.id));
    meta.insert(ROLE_KEY.to_string(), CNCI_ROLE.to_string());
    if let Some(creds) = creds {
        meta.insert(CNCI_CERT_KEY.to_string(), creds.cert_pem);
        meta.insert(CNCI_KEY_KEY.to_string(), creds.key_pem);
    }
    Start {
        instance_uuid: cnci.id,
        tenant_uuid: cnci.tenant,
        workload_uuid: Uuid::nil(),
        vm_type: VmType::Qemu,
        fw_type: FwType::Legacy,
        image: image.to_string(),
        requirements: Requirements {
            vcpus: 1,
            mem_mb: 128,
            disk_mb: 0,
            network_node: true,
            node_id: None,
            hostname: None,
            avoid_nodes: Vec::new(),
            group: None,
            zone: None,
        },
        // The CNCI's own address on the compute network is not known until it announces
        // itself: the unspecified address says so.
        networking: Some(Networking {
            vnic_mac: net::mac_for(gw),
            vnic_uuid: cnci.id,
            concentrator_uuid: cnci.id,
            concentrator_ip: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            subnet: cnci.cidr,
            subnet_key: subnet_key(&cnci.cidr),
            private_ip: IpAddr::V4(gw),
            public_ip: false,
            firewall: None,
        }),
        storage: None,
        user_data: None,
        meta_data: Some(meta),
        restart,
        kernel: None,
    }
}

impl Engine {
    /// The CNCI of an instance's subnet, launched now if the subnet has none.
    pub(super) fn cnci_for(&self, instance: &Instance) -> Result<Cnci, ClusterError> {
        let scope = Scope::Tenant(instance.tenant);
        let subnet = self
            .store
            .subnets(scope)?
            .into_iter()
            .find(|s| s.cidr == instance.subnet)
            .ok_or_else(|| StoreError::not_found("subnet", instance.subnet))?;
        self.state().idle_subnets.remove(&subnet.id);
        if let Some(cnci) = self
            .store
            .cncis(scope)?
            .into_iter()
            .find(|c| c.subnet == subnet.id)
        {
            return Ok(cnci);
        }
        let cnci = match self.store.create_cnci(subnet.id) {
            Ok(cnci) => cnci,
            // Another launch of the same subnet won the race: use its CNCI.
            Err(StoreError::Conflict(_)) => self
                .store
                .cncis(scope)?
                .into_iter()
                .find(|c| c.subnet == subnet.id)
                .ok_or_else(|| StoreError::not_found("cnci of subnet", subnet.id))?,
            Err(e) => return Err(e.into()),
        };
        self.launch_cnci(&cnci, false);
        Ok(cnci)
    }

    /// Sends a CNCI's START; a START that cannot be queued fails the CNCI.
    pub(super) fn launch_cnci(&self, cnci: &Cnci, restart: bool) {
        self.event(
            Some(cnci.tenant),
            EventKind::Info,
            format!("CNCI {} launched for subnet {}", cnci.id, cnci.cidr),
        );
        self.send_cnci_start(cnci, restart);
    }

    fn send_cnci_start(&self, cnci: &Cnci, restart: bool) {
        let creds = match &self.config.cnci_creds {
            None => None,
            Some(issuer) => match issuer.issue(cnci.id, SystemTime::now()) {
                Ok(creds) => Some(creds),
                Err(e) => {
                    self.cnci_failed(cnci, &e.to_string());
                    return;
                }
            },
        };
        let start = cnci_start(cnci, &self.config.cnci_image, restart, creds);
        if let Err(e) = self.send(&Payload::Start(Box::new(start))) {
            self.cnci_failed(cnci, &format!("START not sent: {e}"));
        }
    }

    /// A CNCI's START_FAILURE at `now`: `full_cloud` / `no_net_cn` on a pending CNCI within its
    /// timeout → its START goes again after a backoff; anything else fails the CNCI (and the
    /// instances waiting for it).
    pub(super) fn cnci_start_failed(&self, cnci: &Cnci, failure: &StartFailure, now: SystemTime) {
        let reason = super::fault::serde_name(&failure.reason);
        let deadline = cnci.updated + self.config.cnci_timeout;
        if !worth_retrying(failure.reason) || cnci.state != CnciState::Pending || now >= deadline {
            self.cnci_failed(cnci, &format!("START failed: {reason}"));
            return;
        }
        let (delay, first) = {
            let mut state = self.state();
            let retry = state.cnci_retries.entry(cnci.id).or_insert(Retry {
                due: None,
                delay: Duration::ZERO,
                restart: failure.restart,
                reason: String::new(),
            });
            let first = retry.delay.is_zero();
            retry.delay = if first {
                RETRY_FIRST
            } else {
                retry.delay.saturating_mul(2).min(RETRY_MAX)
            };
            retry.due = Some(now + retry.delay);
            retry.restart = failure.restart;
            retry.reason.clone_from(&reason);
            (retry.delay, first)
        };
        let message = format!(
            "CNCI {} of subnet {}: START failed ({reason}); sent again in {delay:?}, until {:?} after its launch",
            cnci.id, cnci.cidr, self.config.cnci_timeout
        );
        if first {
            // One event per CNCI: the retries themselves are logged.
            self.event(Some(cnci.tenant), EventKind::Warning, message);
        } else {
            tracing::info!("{message}");
        }
    }

    /// When the next CNCI START is due to go again, if any is.
    pub fn next_cnci_retry(&self) -> Option<SystemTime> {
        self.state()
            .cnci_retries
            .values()
            .filter_map(|r| r.due)
            .min()
    }

    /// Sends again the CNCI STARTs due at `now` (of CNCIs still pending).
    pub fn retry_cncis(&self, now: SystemTime) -> Result<(), ClusterError> {
        let due: Vec<(Uuid, bool)> = {
            let mut state = self.state();
            state
                .cnci_retries
                .iter_mut()
                .filter(|(_, r)| r.due.is_some_and(|due| due <= now))
                .map(|(id, r)| {
                    r.due = None;
                    (*id, r.restart)
                })
                .collect()
        };
        for (id, restart) in due {
            let cnci = match self.store.cnci(Scope::All, id) {
                Ok(cnci) => cnci,
                Err(StoreError::NotFound { .. }) => {
                    self.state().cnci_retries.remove(&id);
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            if cnci.state != CnciState::Pending {
                self.state().cnci_retries.remove(&id);
                continue;
            }
            tracing::info!("CNCI {id}: START sent again");
            self.send_cnci_start(&cnci, restart);
        }
        Ok(())
    }

    /// Marks a CNCI failed and fails the instances waiting for it.
    pub(super) fn cnci_failed(&self, cnci: &Cnci, why: &str) {
        self.state().cnci_retries.remove(&cnci.id);
        self.event(
            Some(cnci.tenant),
            EventKind::Error,
            format!("CNCI {} of subnet {} failed: {why}", cnci.id, cnci.cidr),
        );
        let changed = self.store.update_cnci(
            cnci.id,
            cnci.version,
            CnciChange {
                state: Some(CnciState::Failed),
                ..CnciChange::default()
            },
        );
        if let Err(e) = changed
            .map_err(ClusterError::from)
            .and_then(|c| self.fail_waiting(&c, &format!("the subnet's CNCI failed: {why}")))
        {
            tracing::warn!("CNCI {}: {e}", cnci.id);
        }
    }

    /// CONCENTRATOR_INSTANCE_ADDED: the CNCI is up; its subnet's instances can start, and every
    /// CNCI of the tenant learns of its siblings. From `origin`, it must announce that CNCI, of
    /// the tenant the store gives it.
    pub(super) fn cnci_added(
        &self,
        origin: Option<Uuid>,
        added: &ConcentratorAdded,
    ) -> Result<(), ClusterError> {
        let id = added.instance_uuid;
        if let Some(from) = origin
            && from != id
        {
            self.refuse(
                Operand::ConcentratorInstanceAdded,
                from,
                format_args!("to be CNCI {id}"),
            );
            return Ok(());
        }
        let cnci = match self.store.cnci(Scope::All, id) {
            Ok(cnci) => cnci,
            Err(StoreError::NotFound { .. }) => {
                // Not in the tenant's events: the tenant it names is its word alone.
                self.event(
                    None,
                    EventKind::Warning,
                    format!(
                        "unknown CNCI {id} (of tenant {}) announced itself",
                        added.tenant_uuid
                    ),
                );
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        if let Some(from) = origin
            && cnci.tenant != added.tenant_uuid
        {
            self.refuse(
                Operand::ConcentratorInstanceAdded,
                from,
                format_args!(
                    "tenant {} for CNCI {id} of tenant {}",
                    added.tenant_uuid, cnci.tenant
                ),
            );
            return Ok(());
        }
        self.state().cnci_retries.remove(&cnci.id);
        let cnci = self.store.update_cnci(
            cnci.id,
            cnci.version,
            CnciChange {
                state: Some(CnciState::Active),
                ip: Some(Some(added.concentrator_ip)),
                node: None,
            },
        )?;
        self.event(
            Some(cnci.tenant),
            EventKind::Info,
            format!(
                "CNCI {} of subnet {} is up at {}",
                cnci.id, cnci.cidr, added.concentrator_ip
            ),
        );
        self.release_waiting(&cnci)?;
        self.public_ips_cnci_added(cnci.id, cnci.tenant, SystemTime::now());
        self.refresh_cncis(cnci.tenant)
    }

    /// Sends every active CNCI of `tenant` the list of all of them.
    fn refresh_cncis(&self, tenant: Uuid) -> Result<(), ClusterError> {
        let active: Vec<Cnci> = self
            .store
            .cncis(Scope::Tenant(tenant))?
            .into_iter()
            .filter(|c| c.state == CnciState::Active && c.ip.is_some())
            .collect();
        let peers: Vec<CnciPeer> = active
            .iter()
            .filter_map(|c| {
                Some(CnciPeer {
                    physical_ip: c.ip?,
                    subnet: c.cidr,
                    tunnel_ip: IpAddr::V4(gateway(&c.cidr)),
                    tunnel_id: subnet_key(&c.cidr),
                })
            })
            .collect();
        for cnci in &active {
            self.send(&Payload::RefreshCnci(RefreshCnci {
                cnci_uuid: cnci.id,
                cncis: peers.clone(),
            }))?;
        }
        Ok(())
    }

    /// A CNCI's instance stopped or was deleted under us: it is started again.
    pub(super) fn cnci_exited(&self, cnci: &Cnci) -> Result<(), ClusterError> {
        self.state().cnci_retries.remove(&cnci.id);
        let cnci = self.store.update_cnci(
            cnci.id,
            cnci.version,
            CnciChange {
                state: Some(CnciState::Exited),
                ip: Some(None),
                node: Some(None),
            },
        )?;
        self.event(
            Some(cnci.tenant),
            EventKind::Warning,
            format!("CNCI {} of subnet {} exited", cnci.id, cnci.cidr),
        );
        Ok(())
    }

    /// After an instance record went: if its subnet has no instance left, its CNCI goes after
    /// the linger time.
    pub(super) fn subnet_maybe_idle(&self, instance: &Instance) {
        if self.config.tenant_network != TenantNetwork::Cnci {
            return;
        }
        let scope = Scope::Tenant(instance.tenant);
        let mut left = false;
        let scanned = self.for_each_instance(scope, InstanceFilter::default(), |i| {
            left |= i.subnet == instance.subnet;
        });
        let subnet = self.store.subnets(scope).map(|subnets| {
            subnets
                .into_iter()
                .find(|s| s.cidr == instance.subnet)
                .map(|s| s.id)
        });
        match (scanned, subnet) {
            (Ok(()), Ok(Some(subnet))) if !left => {
                self.state().idle_subnets.insert(subnet, SystemTime::now());
            }
            (Err(e), _) | (_, Err(e)) => tracing::warn!("subnet of {}: {e}", instance.id),
            _ => {}
        }
    }

    /// The sweep's CNCI work at `now`: time out launches, restart exited CNCIs, remove those
    /// whose subnet stayed empty for the linger time.
    pub(super) fn sweep_cncis(&self, now: SystemTime) -> Result<(), ClusterError> {
        if self.config.tenant_network != TenantNetwork::Cnci {
            return Ok(());
        }
        let idle: Vec<Uuid> = {
            let state = self.state();
            state
                .idle_subnets
                .iter()
                .filter(|(_, since)| {
                    now.duration_since(**since).unwrap_or_default() >= self.config.cnci_linger
                })
                .map(|(subnet, _)| *subnet)
                .collect()
        };
        for cnci in self.store.cncis(Scope::All)? {
            let age = now.duration_since(cnci.updated).unwrap_or_default();
            if idle.contains(&cnci.subnet) {
                self.remove_cnci(&cnci)?;
                continue;
            }
            match cnci.state {
                CnciState::Pending if age >= self.config.cnci_timeout => {
                    // Still waiting to send its START again: it never found room.
                    let unplaced = self
                        .state()
                        .cnci_retries
                        .get(&cnci.id)
                        .and_then(|r| r.due.map(|_| r.reason.clone()));
                    match unplaced {
                        Some(reason) => self.cnci_failed(&cnci, &format!("START failed: {reason}")),
                        None => self.cnci_failed(&cnci, "it did not announce itself in time"),
                    }
                }
                CnciState::Exited => {
                    let cnci = self.store.update_cnci(
                        cnci.id,
                        cnci.version,
                        CnciChange {
                            state: Some(CnciState::Pending),
                            ..CnciChange::default()
                        },
                    )?;
                    self.launch_cnci(&cnci, true);
                }
                _ => {}
            }
        }
        {
            let mut state = self.state();
            for subnet in idle {
                state.idle_subnets.remove(&subnet);
            }
        }
        self.retry_cncis(now)
    }

    /// Removes an idle subnet's CNCI: DELETE to its node if it runs somewhere, and the record.
    fn remove_cnci(&self, cnci: &Cnci) -> Result<(), ClusterError> {
        self.state().cnci_retries.remove(&cnci.id);
        if let Some(node) = cnci.node
            && let Err(e) = self.send_delete(cnci.id, node, false)
        {
            tracing::warn!("DELETE of CNCI {} not sent: {e}", cnci.id);
        }
        match self.store.delete_cnci(cnci.id) {
            Ok(()) | Err(StoreError::NotFound { .. }) => {}
            // An instance arrived in the subnet meanwhile: keep the CNCI.
            Err(StoreError::Conflict(_)) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        self.event(
            Some(cnci.tenant),
            EventKind::Info,
            format!("CNCI {} of idle subnet {} removed", cnci.id, cnci.cidr),
        );
        Ok(())
    }
}
