//! Security groups on the compute nodes. The store says which groups each port (instance NIC)
//! is in and what their rules are; the engine compiles them, per port, into the allow-list
//! that the port's node enforces with nftables ([`ssntp::payload::Firewall`]: remote groups
//! resolved to their members' addresses, IPv4 rules only, protocols as numbers).
//!
//! An instance's START carries its firewall, so that the node applies it before the VM sends
//! its first packet. Later changes go to the node's HTTPS endpoint
//! (`PUT /v1/instances/{id}/firewall`, docs/protocol.md, "The console channel"), pushed by a task
//! beside the engine ([`push_loop`]): a tenant's firewalls are compiled again
//! (`Engine::reconcile_firewalls`) at once when its security groups, rules or ports' groups
//! change (the API calls [`Cluster::security_groups_changed`](crate::cluster::Cluster::security_groups_changed)),
//! and by the next sweep (every second) when one of its instances is dispatched or goes (both
//! change who is in a group: one compile per tenant for a whole burst of launches), and only the
//! ports whose rules differ from what their node was last given get a push. A push that fails
//! marks its tenant, and the sweep compiles it again. Every firewall carries a
//! revision (nanoseconds of the wall clock when it was compiled): a node keeps the newest, so
//! pushes that overtake one another do no harm.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use ssntp::payload::{Cidr, Firewall, FirewallDirection, FirewallRule};
use ssntp_net::TlsIdentity;
use uuid::Uuid;

use super::{Engine, TenantNetwork};
use crate::cluster::ClusterError;
use store::{
    Direction, EtherType, Instance, InstanceFilter, InstanceState, PortGroups, RuleRemote, Scope,
    SecurityGroup,
};

/// How many pushes may wait for the push task; more mark their tenant for the sweep.
pub const QUEUE: usize = 4096;
/// How many pushes run at once.
pub const PARALLEL: usize = 8;
/// How long a whole push may take.
pub const TOTAL_TIMEOUT: Duration = Duration::from_secs(10);

/// The IP protocol number of a rule's protocol (a name of Neutron's list or a number).
pub fn protocol_number(protocol: &str) -> Option<u8> {
    let number = match protocol {
        "hopopt" => 0,
        "icmp" => 1,
        "igmp" => 2,
        "ipip" => 4,
        "tcp" => 6,
        "egp" => 8,
        "udp" => 17,
        "dccp" => 33,
        "ipv6-encap" => 41,
        "ipv6-route" => 43,
        "ipv6-frag" => 44,
        "rsvp" => 46,
        "gre" => 47,
        "esp" => 50,
        "ah" => 51,
        "icmpv6" | "ipv6-icmp" => 58,
        "ipv6-nonxt" => 59,
        "ipv6-opts" => 60,
        "ospf" => 89,
        "vrrp" => 112,
        "pgm" => 113,
        "sctp" => 132,
        "udplite" => 136,
        other => return other.parse().ok(),
    };
    Some(number)
}

/// A tenant's port: the instance and its address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    /// The instance.
    pub instance: Uuid,
    /// Its address on its subnet.
    pub ip: Ipv4Addr,
}

/// The allow rules of `instance`'s port: the IPv4 rules of its groups (the `default` group
/// unless others were set), each remote group resolved to the addresses of the tenant's ports
/// in it (`members`), duplicates once, in the groups' order.
pub fn compile(
    instance: Uuid,
    groups: &[SecurityGroup],
    ports: &PortGroups,
    members: &[Member],
) -> Vec<FirewallRule> {
    TenantPorts::new(groups, ports, members).compile(instance)
}

/// A tenant's groups and ports' groups, with each group's member addresses worked out once, so
/// that compiling every port of a tenant costs the size of the rules it gets, not a pass over
/// the members per rule.
pub struct TenantPorts<'a> {
    groups: &'a [SecurityGroup],
    ports: &'a PortGroups,
    members_of: HashMap<Uuid, Vec<Cidr>>,
}

impl<'a> TenantPorts<'a> {
    /// Groups each member's address under the groups of its port.
    pub fn new(
        groups: &'a [SecurityGroup],
        ports: &'a PortGroups,
        members: &[Member],
    ) -> TenantPorts<'a> {
        let mut sets: HashMap<Uuid, BTreeSet<Ipv4Addr>> = HashMap::new();
        for m in members {
            for group in ports.of(m.instance) {
                sets.entry(group).or_default().insert(m.ip);
            }
        }
        let members_of = sets
            .into_iter()
            .map(|(group, ips)| {
                let cidrs = ips
                    .into_iter()
                    .map(|ip| Cidr {
                        addr: IpAddr::V4(ip),
                        prefix: 32,
                    })
                    .collect();
                (group, cidrs)
            })
            .collect();
        TenantPorts {
            groups,
            ports,
            members_of,
        }
    }

    /// The allow rules of `instance`'s port (see [`compile`]).
    pub fn compile(&self, instance: Uuid) -> Vec<FirewallRule> {
        let mine = self.ports.of(instance);
        let mut seen = HashSet::new();
        let mut rules = Vec::new();
        for group in mine
            .iter()
            .filter_map(|id| self.groups.iter().find(|g| g.id == *id))
        {
            for rule in &group.rules {
                if rule.ethertype != EtherType::IPv4 {
                    continue;
                }
                let protocol = match &rule.protocol {
                    None => None,
                    Some(p) => match protocol_number(p) {
                        Some(n) => Some(n),
                        // The store takes no other; skip rather than open more than asked.
                        None => continue,
                    },
                };
                let remote = match &rule.remote {
                    RuleRemote::Any => None,
                    RuleRemote::Prefix(prefix) => match prefix.parse::<Cidr>() {
                        Ok(cidr) if cidr.addr.is_ipv4() => Some(vec![cidr]),
                        _ => continue,
                    },
                    RuleRemote::Group(remote) => {
                        Some(self.members_of.get(remote).cloned().unwrap_or_default())
                    }
                };
                let compiled = FirewallRule {
                    direction: match rule.direction {
                        Direction::Ingress => FirewallDirection::Ingress,
                        Direction::Egress => FirewallDirection::Egress,
                    },
                    protocol,
                    port_min: rule.port_min,
                    port_max: rule.port_max,
                    remote,
                };
                if seen.insert(compiled.clone()) {
                    rules.push(compiled);
                }
            }
        }
        rules
    }
}

/// A revision for a firewall compiled now.
fn revision_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// One push: a port's firewall to its node.
#[derive(Debug, Clone)]
pub struct Push {
    /// The instance.
    pub instance: Uuid,
    /// Its tenant.
    pub tenant: Uuid,
    /// Its node.
    pub node: Uuid,
    /// The node's endpoint.
    pub addr: SocketAddr,
    /// The firewall.
    pub firewall: Firewall,
}

/// What the engine and the push task share.
#[derive(Debug, Default)]
pub(super) struct Shared {
    /// The rules each port was last given (in its START or by a push in flight or done).
    sent: HashMap<Uuid, Vec<FirewallRule>>,
    /// Tenants due for the sweep: their pushes failed, or their ports changed.
    retry: HashSet<Uuid>,
}

/// The engine's side of the pushes.
pub(super) struct Firewalls {
    shared: Arc<Mutex<Shared>>,
    queue: tokio::sync::mpsc::Sender<Push>,
    jobs: Mutex<Option<tokio::sync::mpsc::Receiver<Push>>>,
}

impl Default for Firewalls {
    fn default() -> Firewalls {
        let (queue, jobs) = tokio::sync::mpsc::channel(QUEUE);
        Firewalls {
            shared: Arc::default(),
            queue,
            jobs: Mutex::new(Some(jobs)),
        }
    }
}

impl Firewalls {
    fn shared(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Engine {
    /// The firewall of `instance`'s port, to go in its START (and remembered as sent); none
    /// without tenant networking.
    pub(super) fn firewall_for(
        &self,
        instance: &Instance,
    ) -> Result<Option<Firewall>, ClusterError> {
        if self.config.tenant_network == TenantNetwork::None {
            return Ok(None);
        }
        let (groups, ports, members) = self.tenant_ports(instance.tenant)?;
        let mut members = members;
        if !members.iter().any(|m| m.instance == instance.id) {
            members.push(Member {
                instance: instance.id,
                ip: instance.ip,
            });
        }
        let rules = compile(instance.id, &groups, &ports, &members);
        self.firewalls
            .shared()
            .sent
            .insert(instance.id, rules.clone());
        Ok(Some(Firewall {
            revision: revision_now(),
            rules,
        }))
    }

    /// The tenant's groups, ports' groups, and ports (instances on a tenant subnet).
    fn tenant_ports(
        &self,
        tenant: Uuid,
    ) -> Result<(Vec<SecurityGroup>, PortGroups, Vec<Member>), ClusterError> {
        let groups = self.store.security_groups(tenant)?;
        let ports = self.store.port_groups(tenant)?;
        let mut members = Vec::new();
        self.for_each_instance(Scope::Tenant(tenant), InstanceFilter::default(), |i| {
            if i.cnci.is_some() && i.state != InstanceState::Deleted {
                members.push(Member {
                    instance: i.id,
                    ip: i.ip,
                });
            }
        })?;
        Ok((groups, ports, members))
    }

    /// Compiles the tenant's firewalls again and queues a push for each port on a node whose
    /// rules changed since it was last given some.
    pub(super) fn reconcile_firewalls(&self, tenant: Uuid) -> Result<(), ClusterError> {
        if self.config.tenant_network == TenantNetwork::None {
            return Ok(());
        }
        self.firewalls.shared().retry.remove(&tenant);
        let (groups, ports, members) = self.tenant_ports(tenant)?;
        let mut on_nodes = Vec::new();
        self.for_each_instance(Scope::Tenant(tenant), InstanceFilter::default(), |i| {
            if let Some(node) = i.node
                && i.cnci.is_some()
                && i.state != InstanceState::Deleted
            {
                on_nodes.push((i.id, node));
            }
        })?;
        let tenant_ports = TenantPorts::new(&groups, &ports, &members);
        let mut pushes = Vec::new();
        {
            let state = self.state();
            let mut shared = self.firewalls.shared();
            for (instance, node) in on_nodes {
                let rules = tenant_ports.compile(instance);
                if shared.sent.get(&instance) == Some(&rules) {
                    continue;
                }
                let Some(ip) = state.nodes.get(&node).and_then(|n| n.ips.first().copied()) else {
                    // Its node has not reported an address yet: its next report brings it.
                    shared.retry.insert(tenant);
                    continue;
                };
                shared.sent.insert(instance, rules.clone());
                pushes.push(Push {
                    instance,
                    tenant,
                    node,
                    addr: SocketAddr::new(ip, self.config.console_port),
                    firewall: Firewall {
                        revision: revision_now(),
                        rules,
                    },
                });
            }
        }
        for push in pushes {
            let instance = push.instance;
            if self.firewalls.queue.try_send(push).is_err() {
                let mut shared = self.firewalls.shared();
                shared.sent.remove(&instance);
                shared.retry.insert(tenant);
            }
        }
        Ok(())
    }

    /// An instance's record went: its port leaves its groups (the next sweep tells the others).
    pub(super) fn firewalls_instance_gone(&self, instance: Uuid, tenant: Uuid) {
        let mut shared = self.firewalls.shared();
        shared.sent.remove(&instance);
        shared.retry.insert(tenant);
    }

    /// A port of `tenant` joined its groups (its instance was dispatched): the next sweep gives
    /// the tenant's other ports their new firewalls, once for a whole burst of launches.
    pub(super) fn firewalls_member_added(&self, tenant: Uuid) {
        if self.config.tenant_network != TenantNetwork::None {
            self.firewalls.shared().retry.insert(tenant);
        }
    }

    /// The sweep's part: tenants whose ports changed, or whose pushes failed, are compiled
    /// again.
    pub(super) fn sweep_firewalls(&self) -> Result<(), ClusterError> {
        let retry: Vec<Uuid> = self.firewalls.shared().retry.drain().collect();
        for tenant in retry {
            self.reconcile_firewalls(tenant)?;
        }
        Ok(())
    }

    /// The pushes to run, once: the daemon hands them to [`push_loop`]; tests read them.
    pub fn firewall_pushes(&self) -> Option<tokio::sync::mpsc::Receiver<Push>> {
        self.firewalls
            .jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Where pushes report their outcome.
    pub fn firewall_outcomes(&self) -> Outcomes {
        Outcomes(self.firewalls.shared.clone())
    }
}

/// Where the push task reports failures (the engine compiles their tenants again).
#[derive(Debug, Clone)]
pub struct Outcomes(Arc<Mutex<Shared>>);

impl Outcomes {
    /// A push failed: its port's rules count as not sent, its tenant as due.
    pub fn failed(&self, push: &Push) {
        let mut shared = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if shared.sent.get(&push.instance) == Some(&push.firewall.rules) {
            shared.sent.remove(&push.instance);
        }
        shared.retry.insert(push.tenant);
    }
}

/// Runs the pushes of `jobs` (at most [`PARALLEL`] at once) with the controller's TLS identity
/// until the queue closes. Without an identity every push is dropped (and logged once).
pub async fn push_loop(
    mut jobs: tokio::sync::mpsc::Receiver<Push>,
    tls: Option<TlsIdentity>,
    outcomes: Outcomes,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(PARALLEL));
    let mut warned = false;
    while let Some(push) = jobs.recv().await {
        let Some(tls) = tls.clone() else {
            if !warned {
                tracing::warn!(
                    "security group changes do not reach the nodes: this controller has no TLS identity for their endpoint"
                );
                warned = true;
            }
            continue;
        };
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let outcomes = outcomes.clone();
        tokio::spawn(async move {
            let _slot = slot;
            match put(&tls, &push).await {
                Ok(()) => {
                    tracing::debug!(instance = %push.instance, node = %push.node, "firewall pushed")
                }
                Err(PutError::Gone) => {
                    tracing::debug!(instance = %push.instance, node = %push.node, "firewall not pushed: the node does not have the instance")
                }
                Err(PutError::Failed(why)) => {
                    tracing::warn!(instance = %push.instance, node = %push.node, "firewall not pushed: {why}");
                    outcomes.failed(&push);
                }
            }
        });
    }
}

/// Why a push did not land.
#[derive(Debug)]
enum PutError {
    /// The node does not have the instance (it went, or moved): nothing to retry.
    Gone,
    /// Anything else: the cause.
    Failed(String),
}

impl From<String> for PutError {
    fn from(why: String) -> PutError {
        PutError::Failed(why)
    }
}

/// `PUT /v1/instances/{id}/firewall` to the push's node.
async fn put(tls: &TlsIdentity, push: &Push) -> Result<(), PutError> {
    let mut body = Vec::new();
    ssntp::payload::cbor::encode_into(&push.firewall, &mut body);
    let addr = push.addr;
    let id = push.instance;
    let exchange = async move {
        let (mut sender, driver) = super::console::dial(tls, push.node, addr)
            .await
            .map_err(|e| format!("{addr}: {e}"))?;
        let request = hyper::Request::put(format!("/v1/instances/{id}/firewall"))
            .header(hyper::header::HOST, addr.to_string())
            .header(hyper::header::CONTENT_TYPE, "application/cbor")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| format!("request: {e}"))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("{addr}: HTTP: {e}"))?;
        let status = response.status();
        let text = Limited::new(response.into_body(), 4096)
            .collect()
            .await
            .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
            .unwrap_or_default();
        driver.abort();
        match status {
            s if s.is_success() => Ok(()),
            hyper::StatusCode::NOT_FOUND => Err(PutError::Gone),
            s => Err(PutError::Failed(format!(
                "{addr} answered {s}: {}",
                text.trim()
            ))),
        }
    };
    tokio::time::timeout(TOTAL_TIMEOUT, exchange)
        .await
        .map_err(|_| PutError::Failed(format!("{addr}: no answer within {TOTAL_TIMEOUT:?}")))?
}
