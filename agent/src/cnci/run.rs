//! The concentrator as an SSNTP client (CNCIAGENT role, UUID = its instance UUID): it announces
//! itself with CONCENTRATOR_INSTANCE_ADDED on every connect and turns TENANT_ADDED and
//! TENANT_REMOVED into tunnel ends ([`Hub`]).
//!
//! REFRESH_CNCI is logged (routing between the tenant's subnets comes later);
//! ASSIGN_PUBLIC_IP and RELEASE_PUBLIC_IP are answered with their failure (public IPs come
//! later). Events for another CNCI or another tenant are refused with a warning. At start the
//! hub's view is rebuilt from the kernel ([`Hub::rebuild`]).

use ssntp::Payload;
use ssntp::Role;
use ssntp::handshake::HandshakeConfig;
use ssntp::net::client::Backoff;
use ssntp::net::{Client, ClientConfig, ClientError, ClientEvent, ClientHandle, TlsIdentity};
use ssntp::payload::{
    ConcentratorAdded, MacAddr, PublicIpCommand, PublicIpFailure, PublicIpFailureReason,
    TenantEvent,
};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::hub::{Hub, HubConfig, NodeSubnet, Outcome};
use super::ops::{CnciOps, RtCnciOps};
use crate::net::{NetError, OpsError, RtNetOps, TunnelChoice, resolve_tunnel};

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
    /// The schedulers, `host:port`, tried in order.
    pub servers: Vec<String>,
    /// Its address on the compute network (the tunnels' end).
    pub ip: IpAddr,
    /// Its MAC on the compute network (`None`: [`run`] finds that of the link holding `ip`).
    pub mac: Option<MacAddr>,
    /// The tunnel kind (`auto` probes the kernel at start).
    pub tunnel: TunnelChoice,
    /// The VXLAN port.
    pub vxlan_port: u16,
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

/// Runs the concentrator over the kernel of this thread's network namespace until `shutdown`.
pub async fn run(mut config: CnciConfig, shutdown: CancellationToken) -> Result<(), CnciError> {
    let tunnel = resolve_tunnel(&RtNetOps::new()?, config.tunnel).await?;
    let ops = RtCnciOps::new()?;
    if config.mac.is_none() {
        let mac = ops
            .mac_of(config.ip)
            .await?
            .ok_or(CnciError::NoMac(config.ip))?;
        config.mac = Some(MacAddr(mac));
    }
    let hub = Hub::new(
        ops,
        HubConfig {
            local: config.ip,
            tunnel,
            vxlan_port: config.vxlan_port,
        },
    );
    run_with(&config, hub, shutdown).await
}

/// Runs the concentrator over `hub` until `shutdown`.
pub async fn run_with<O: CnciOps>(
    config: &CnciConfig,
    mut hub: Hub<O>,
    shutdown: CancellationToken,
) -> Result<(), CnciError> {
    // Before any event: what a previous run left in the kernel.
    let rebuilt = hub.rebuild().await?;
    tracing::info!(subnets = ?rebuilt.subnets, deleted = ?rebuilt.deleted, "rebuilt from the kernel");
    let mut client_config = ClientConfig::new(
        config.tls.clone(),
        config.uuid,
        Role::CNCIAGENT,
        config.servers.clone(),
    );
    client_config.handshake = config.handshake;
    client_config.backoff = config.backoff;
    let hello = announcement(config);
    client_config.announce = Some(Arc::new(move || vec![hello.clone()]));
    let (client, mut events) = Client::start(client_config)?;
    tracing::info!(
        cnci = %config.uuid,
        tenant = %config.tenant,
        ip = %config.ip,
        tunnel = %hub.config().tunnel,
        schedulers = ?config.servers,
        "cumulo-cnci running"
    );
    let ended = loop {
        let event = tokio::select! {
            _ = shutdown.cancelled() => break Ok(()),
            event = events.recv() => event,
        };
        match event {
            Some(ClientEvent::Connected { server_uuid, .. }) => {
                tracing::info!(scheduler = %server_uuid, "connected; announced")
            }
            Some(ClientEvent::Disconnected { reason }) => {
                tracing::warn!(%reason, "disconnected; reconnecting")
            }
            Some(ClientEvent::Frames(messages)) => {
                for m in messages {
                    handle(config, &mut hub, &client, &m.payload).await;
                }
            }
            Some(ClientEvent::Stopped(e)) => break Err(e.into()),
            None => break Err(CnciError::Stopped),
        }
    };
    close(&client, &mut events).await;
    ended
}

/// One frame from the scheduler.
async fn handle<O: CnciOps>(
    config: &CnciConfig,
    hub: &mut Hub<O>,
    client: &ClientHandle,
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
        }
        Payload::RefreshCnci(r) => {
            tracing::info!(
                cncis = r.cncis.len(),
                "REFRESH_CNCI: routing between subnets is not done yet"
            );
        }
        Payload::AssignPublicIp(c) => {
            refuse(client, c, PublicIpFailureReason::AssignFailure, true);
        }
        Payload::ReleasePublicIp(c) => {
            refuse(client, c, PublicIpFailureReason::ReleaseFailure, false);
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

/// Answers a public IP command with its failure: public IPs are not mapped yet.
fn refuse(client: &ClientHandle, c: &PublicIpCommand, reason: PublicIpFailureReason, assign: bool) {
    tracing::warn!(instance = %c.instance_uuid, public_ip = %c.public_ip, "public IPs are not mapped yet: refused");
    let failure = PublicIpFailure {
        concentrator_uuid: Some(c.concentrator_uuid),
        tenant_uuid: Some(c.tenant_uuid),
        instance_uuid: c.instance_uuid,
        public_ip: Some(c.public_ip),
        private_ip: Some(c.private_ip),
        vnic_mac: Some(c.vnic_mac),
        reason,
    };
    let reply = if assign {
        Payload::AssignPublicIpFailure(failure)
    } else {
        Payload::UnassignPublicIpFailure(failure)
    };
    if let Err(e) = client.send_payload(&reply) {
        tracing::warn!(error = %e, "answer not sent");
    }
}

/// Closes the client: queued frames are written, then the session is shut down.
async fn close(client: &ClientHandle, events: &mut mpsc::Receiver<ClientEvent>) {
    client.close();
    let drained = tokio::time::timeout(CLOSE_GRACE, async {
        while events.recv().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!("the SSNTP client did not finish within {CLOSE_GRACE:?}");
    }
}
