//! The concentrator as an SSNTP client (CNCIAGENT role, UUID = its instance UUID): it announces
//! itself with CONCENTRATOR_INSTANCE_ADDED on every connect and turns TENANT_ADDED and
//! TENANT_REMOVED into tunnel ends ([`Hub`]).
//!
//! Every subnet the hub serves gets a DHCP server and outbound NAT ([`Edge`]);
//! ASSIGN_PUBLIC_IP and RELEASE_PUBLIC_IP map and unmap public IPs and are answered with
//! PUBLIC_IP_ASSIGNED / PUBLIC_IP_UNASSIGNED or their failure; REFRESH_CNCI routes the
//! tenant's other subnets via their concentrators. Events for another CNCI or another tenant are
//! refused with a warning. At start the hub's view is rebuilt from the kernel
//! ([`Hub::rebuild`]), and NAT keeps the public IPs of the previous run.

use ssntp::Payload;
use ssntp::Role;
use ssntp::handshake::HandshakeConfig;
use ssntp::payload::{
    ConcentratorAdded, MacAddr, PublicIpCommand, PublicIpEvent, PublicIpFailure,
    PublicIpFailureReason, TenantEvent,
};
use ssntp_net::client::Backoff;
use ssntp_net::{Client, ClientConfig, ClientError, ClientEvent, ClientHandle, TlsIdentity};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::announce::Announcer;
use super::edge::{Edge, EdgeConfig};
use super::hub::{Hub, HubConfig, NodeSubnet, Outcome};
use super::nat::{NatOps, NftNat};
use super::ops::{CnciOps, RtCnciOps};
use crate::net::{NetError, OpsError, RtNetOps, TunnelChoice, TunnelKind, resolve_tunnel};

/// How long a stopping concentrator waits for its last frames to be written.
const CLOSE_GRACE: Duration = Duration::from_secs(3);

/// Everything the concentrator runs with ([`super::cli::Args::into_config`]).
#[derive(Debug, Clone)]
pub struct CnciConfig {
    /// CA, certificate and key (with the CNCIAGENT role).
    pub tls: TlsIdentity,
    /// Its instance UUID, also its SSNTP UUID.
    pub uuid: Uuid,
    /// Its tenant.
    pub tenant: Uuid,
    /// The schedulers, `host:port`: the CNCI holds a session with each.
    pub servers: Vec<String>,
    /// A TCP relay to reach them through (`host:port`; each connection names its scheduler,
    /// and TLS still checks their names).
    pub via: Option<String>,
    /// The node's route channel (`host:port`), told the public IPs it holds.
    pub route_via: Option<String>,
    /// The cluster's management networks, which its tenants may not open connections to.
    pub protect: Vec<ssntp::payload::Cidr>,
    /// Its address on the compute network (the tunnels' end).
    pub ip: IpAddr,
    /// Its MAC on the compute network (`None`: [`run`] finds that of the link holding `ip`).
    pub mac: Option<MacAddr>,
    /// The tunnel kind (`auto` probes the kernel at start).
    pub tunnel: TunnelChoice,
    /// The VXLAN port.
    pub vxlan_port: u16,
    /// The MTU DHCP gives the instances (`None`: the uplink's less the tunnel's overhead).
    pub mtu: Option<u16>,
    /// SSNTP handshake and session limits.
    pub handshake: HandshakeConfig,
    /// Reconnection delays.
    pub backoff: Backoff,
}

/// Why the concentrator could not run, or stopped on its own.
#[derive(Debug, thiserror::Error)]
pub enum CnciError {
    /// No `--mac`, and no link holds `--ip`.
    #[error("no link holds {0}: give the MAC with --mac")]
    NoMac(IpAddr),
    /// Netlink could not be opened.
    #[error("{0}")]
    Ops(#[from] OpsError),
    /// The tunnel kind cannot be had here.
    #[error("{0}")]
    Tunnel(#[from] NetError),
    /// The view could not be rebuilt from the kernel at start.
    #[error("rebuilding from the kernel: {0}")]
    Rebuild(#[from] super::hub::HubError),
    /// The SSNTP client refused its configuration, or gave up for good.
    #[error("ssntp: {0}")]
    Client(#[from] ClientError),
    /// The SSNTP client stopped.
    #[error("the SSNTP client stopped")]
    Stopped,
    /// Its certificate expired, so it cannot connect again: it exits, and its node reports it
    /// exited; the controller starts it again with new credentials.
    #[error(
        "its certificate expired at {not_after} (Unix time): exiting, to be started again with a new one"
    )]
    CertificateExpired {
        /// The certificate's notAfter.
        not_after: i64,
    },
}

/// `cumulo-cnci`'s exit status when its certificate expired ([`CnciError::CertificateExpired`]).
pub const EXIT_CERTIFICATE_EXPIRED: u8 = 3;

/// How long before its certificate's end a disconnected CNCI stops trying to reconnect: a
/// handshake that starts this close to the end may not finish before it.
pub const EXPIRY_MARGIN: std::time::Duration = std::time::Duration::from_secs(60);

/// Whether a certificate ending at `not_after` is too close to its end (or past it) at `now` to
/// connect with.
pub fn expired(not_after: i64, now: std::time::SystemTime) -> bool {
    let now = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let margin = i64::try_from(EXPIRY_MARGIN.as_secs()).unwrap_or(0);
    now.saturating_add(margin) >= not_after
}

/// The frame it announces itself with.
pub fn announcement(config: &CnciConfig) -> Payload {
    Payload::ConcentratorInstanceAdded(ConcentratorAdded {
        instance_uuid: config.uuid,
        tenant_uuid: config.tenant,
        concentrator_ip: config.ip,
        concentrator_mac: config.mac.unwrap_or(MacAddr([0; 6])),
    })
}

/// The overhead of a tunnel over IPv4: outer IP, UDP or GRE with key, inner Ethernet.
pub fn tunnel_overhead(kind: TunnelKind) -> u16 {
    match kind {
        TunnelKind::Vxlan => 20 + 8 + 8 + 14,
        TunnelKind::GreTap => 20 + 8 + 14,
    }
}

/// Runs the concentrator over the kernel of this thread's network namespace until `shutdown`.
pub async fn run(mut config: CnciConfig, shutdown: CancellationToken) -> Result<(), CnciError> {
    let tunnel = resolve_tunnel(&RtNetOps::new()?, config.tunnel).await?;
    let ops = RtCnciOps::new()?;
    let uplink = ops.uplink_of(config.ip).await?;
    if config.mac.is_none() {
        let mac = uplink
            .as_ref()
            .and_then(|u| u.mac)
            .ok_or(CnciError::NoMac(config.ip))?;
        config.mac = Some(MacAddr(mac));
    }
    let mtu = config.mtu.unwrap_or_else(|| {
        let under = uplink
            .as_ref()
            .and_then(|u| u.mtu)
            .and_then(|m| u16::try_from(m).ok())
            .unwrap_or(1500);
        under.saturating_sub(tunnel_overhead(tunnel))
    });
    // The concentrator routes: between its subnets and its uplink.
    if let Err(e) = std::fs::write("/proc/sys/net/ipv4/ip_forward", "1") {
        tracing::warn!(error = %e, "IPv4 forwarding not turned on");
    }
    let uplink_ip = match config.ip {
        IpAddr::V4(a) => a,
        IpAddr::V6(_) => Ipv4Addr::UNSPECIFIED,
    };
    let edge = Edge::new(
        NftNat,
        EdgeConfig {
            uplink: uplink.map(|u| u.name).filter(|_| config.ip.is_ipv4()),
            uplink_ip,
            mtu,
            dhcp: true,
            protect: config.protect.clone(),
        },
    );
    let hub = Hub::new(
        ops,
        HubConfig {
            local: config.ip,
            tunnel,
            vxlan_port: config.vxlan_port,
        },
    );
    run_with(&config, hub, edge, shutdown).await
}

/// Runs the concentrator over `hub` and `edge` until `shutdown`.
pub async fn run_with<O: CnciOps, N: NatOps>(
    config: &CnciConfig,
    mut hub: Hub<O>,
    mut edge: Edge<N>,
    shutdown: CancellationToken,
) -> Result<(), CnciError> {
    // Before any event: what a previous run left in the kernel.
    let rebuilt = hub.rebuild().await?;
    tracing::info!(subnets = ?rebuilt.subnets, deleted = ?rebuilt.deleted, "rebuilt from the kernel");
    if let Err(e) = edge.start(hub.ops()).await {
        tracing::error!(error = %e, "NAT not set up: no outbound NAT and no public IPs");
    }
    edge.reconcile(&hub).await;
    // The node routes the public IPs it holds to it: told at start (NAT kept them across a
    // restart) and again on every connect.
    let routes = Announcer::start(config.route_via.clone());
    let announce_all = |edge: &Edge<N>| {
        for public in edge.public().keys() {
            routes.tell(true, *public);
        }
    };
    announce_all(&edge);
    let not_after = config.tls.not_after();
    let expired_now = || {
        not_after
            .filter(|end| expired(*end, std::time::SystemTime::now()))
            .map(|not_after| CnciError::CertificateExpired { not_after })
    };
    if let Some(e) = expired_now() {
        return Err(e);
    }
    // A session with every scheduler: the agents of each reach this CNCI through their own.
    let hello = announcement(config);
    let mut clients = Vec::with_capacity(config.servers.len());
    let mut streams = Vec::with_capacity(config.servers.len());
    // Each named once: two sessions with the same scheduler would replace each other.
    let mut servers: Vec<&String> = Vec::with_capacity(config.servers.len());
    for server in &config.servers {
        if !servers.contains(&server) {
            servers.push(server);
        }
    }
    for server in &servers {
        let mut client_config = ClientConfig::new(
            config.tls.clone(),
            config.uuid,
            Role::CNCIAGENT,
            vec![server.to_string()],
        );
        client_config.handshake = config.handshake;
        client_config.backoff = config.backoff;
        client_config.via = config.via.clone();
        let hello = hello.clone();
        client_config.announce = Some(Arc::new(move || vec![hello.clone()]));
        let (client, events) = match Client::start(client_config) {
            Ok(started) => started,
            Err(e) => {
                close(&clients, &mut ssntp_net::client::merge(streams)).await;
                return Err(e.into());
            }
        };
        clients.push(client);
        streams.push(events);
    }
    let mut events = ssntp_net::client::merge(streams);
    tracing::info!(
        cnci = %config.uuid,
        tenant = %config.tenant,
        ip = %config.ip,
        tunnel = %hub.config().tunnel,
        schedulers = ?config.servers,
        via = ?config.via,
        "cumulo-cnci running"
    );
    let ended = loop {
        let event = tokio::select! {
            _ = shutdown.cancelled() => break Ok(()),
            event = events.recv() => event,
        };
        match event {
            Some((_, ClientEvent::Connected { server_uuid, .. })) => {
                tracing::info!(scheduler = %server_uuid, "connected; announced");
                announce_all(&edge);
            }
            Some((link, ClientEvent::Disconnected { reason })) => {
                // A certificate past its end cannot connect again: exit, so that the node
                // reports the CNCI exited and the controller starts it with a new one.
                if let Some(e) = expired_now() {
                    break Err(e);
                }
                tracing::warn!(scheduler = %servers[link], %reason, "disconnected; reconnecting")
            }
            Some((link, ClientEvent::Frames { messages, .. })) => {
                // Answers go back the way the command came.
                for m in messages {
                    handle(
                        config,
                        &mut hub,
                        &mut edge,
                        &clients[link],
                        &routes,
                        &m.payload,
                    )
                    .await;
                }
            }
            Some((_, ClientEvent::Stopped(e))) => break Err(e.into()),
            None => break Err(CnciError::Stopped),
        }
    };
    edge.stop();
    close(&clients, &mut events).await;
    ended
}

/// One frame from the scheduler.
async fn handle<O: CnciOps, N: NatOps>(
    config: &CnciConfig,
    hub: &mut Hub<O>,
    edge: &mut Edge<N>,
    client: &ClientHandle,
    routes: &Announcer,
    payload: &Payload,
) {
    match payload {
        Payload::TenantAdded(e) | Payload::TenantRemoved(e) => {
            let added = matches!(payload, Payload::TenantAdded(_));
            if let Some(why) = misaddressed(config, e) {
                tracing::warn!(operand = %payload.operand(), agent = %e.agent_uuid, "{why}: ignored");
                return;
            }
            let n = NodeSubnet::of(e);
            let done = if added {
                hub.add(&n).await
            } else {
                hub.remove(&n).await
            };
            match done {
                Ok(Outcome::Unchanged) => {
                    tracing::debug!(operand = %payload.operand(), node = %n.node, "nothing to change")
                }
                Ok(outcome) => tracing::info!(
                    operand = %payload.operand(),
                    node = %n.node,
                    node_ip = %n.node_ip,
                    subnet = %n.subnet,
                    key = n.key,
                    ?outcome,
                    "tunnel end changed"
                ),
                Err(e) => {
                    tracing::error!(operand = %payload.operand(), node = %n.node, error = %e, "tunnel end not changed")
                }
            }
            edge.reconcile(hub).await;
        }
        Payload::RefreshCnci(r) => {
            if r.cnci_uuid != config.uuid {
                tracing::warn!(cnci = %r.cnci_uuid, "REFRESH_CNCI for another CNCI: ignored");
                return;
            }
            match edge.refresh(hub.ops(), r).await {
                Ok(()) => tracing::info!(siblings = ?edge.siblings(), "REFRESH_CNCI: routes set"),
                Err(e) => tracing::error!(error = %e, "REFRESH_CNCI: routes not set"),
            }
        }
        Payload::AssignPublicIp(c) | Payload::ReleasePublicIp(c) => {
            let assign = matches!(payload, Payload::AssignPublicIp(_));
            let done = if c.concentrator_uuid != config.uuid || c.tenant_uuid != config.tenant {
                tracing::warn!(operand = %payload.operand(), "for another CNCI or tenant");
                Err(PublicIpFailureReason::InvalidData)
            } else if assign {
                edge.assign(hub.ops(), c).await
            } else {
                edge.release(hub.ops(), c).await
            };
            let reply = match done {
                Ok(()) => {
                    tracing::info!(operand = %payload.operand(), public_ip = %c.public_ip, private_ip = %c.private_ip, "done");
                    if let IpAddr::V4(public) = c.public_ip {
                        routes.tell(assign, public);
                    }
                    let r = PublicIpEvent {
                        concentrator_uuid: config.uuid,
                        instance_uuid: c.instance_uuid,
                        public_ip: c.public_ip,
                        private_ip: c.private_ip,
                    };
                    if assign {
                        Payload::PublicIpAssigned(r)
                    } else {
                        Payload::PublicIpUnassigned(r)
                    }
                }
                Err(reason) => failure(c, reason, assign),
            };
            if let Err(e) = client.send_payload(&reply) {
                tracing::warn!(error = %e, "answer not sent");
            }
        }
        other => tracing::debug!(operand = %other.operand(), "ignored"),
    }
}

/// Why an event is not for this concentrator, if it is not.
fn misaddressed(config: &CnciConfig, e: &TenantEvent) -> Option<&'static str> {
    if e.concentrator_uuid != config.uuid {
        Some("for another CNCI")
    } else if e.tenant_uuid != config.tenant {
        Some("for another tenant")
    } else {
        None
    }
}

/// The failure answer to a public IP command.
fn failure(c: &PublicIpCommand, reason: PublicIpFailureReason, assign: bool) -> Payload {
    tracing::warn!(instance = %c.instance_uuid, public_ip = %c.public_ip, ?reason, "public IP command failed");
    let failure = PublicIpFailure {
        concentrator_uuid: Some(c.concentrator_uuid),
        tenant_uuid: Some(c.tenant_uuid),
        instance_uuid: c.instance_uuid,
        public_ip: Some(c.public_ip),
        private_ip: Some(c.private_ip),
        vnic_mac: Some(c.vnic_mac),
        reason,
    };
    if assign {
        Payload::AssignPublicIpFailure(failure)
    } else {
        Payload::UnassignPublicIpFailure(failure)
    }
}

/// Closes the clients: queued frames are written, then the sessions are shut down.
async fn close(clients: &[ClientHandle], events: &mut mpsc::Receiver<(usize, ClientEvent)>) {
    for client in clients {
        client.close();
    }
    let drained = tokio::time::timeout(CLOSE_GRACE, async {
        while events.recv().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!("the SSNTP client did not finish within {CLOSE_GRACE:?}");
    }
}

#[cfg(test)]
mod expiry_tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn a_certificate_within_the_margin_of_its_end_counts_as_expired() {
        let at = |secs| UNIX_EPOCH + Duration::from_secs(secs);
        let end = 1_000_000;
        assert!(!expired(end, at(end as u64 - 61)));
        assert!(expired(end, at(end as u64 - 60)));
        assert!(expired(end, at(end as u64 + 5)));
    }
}
