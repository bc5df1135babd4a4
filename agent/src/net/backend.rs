//! [`NetBackend`]: tenant networking wrapped around any [`Backend`], so that neither the core
//! nor the VM backend needs to know about bridges and tunnels.
//!
//! - `create` of an instance whose START has a NIC first plugs its VNIC in
//!   ([`Network::attach`]); the inner backend then makes the VM with its NIC on the tap
//!   [`tap_name`]`(instance)` with the START's MAC (libvirt: `<interface type='ethernet'>`,
//!   `<target dev='…' managed='no'/>`, `<mac address='…'/>`). A failed attach is a
//!   `network_failure`; a failed inner create unplugs the VNIC again.
//!   The tap is filtered ([`Network::filter`]: anti-spoofing, and the START's firewall) before
//!   the VM is made; a failed filter is a `network_failure` too.
//! - `delete` removes the instance through the inner backend, then unplugs its VNIC (and its
//!   filter).
//! - [`Backend::filter_port`] refilters an instance's tap (a newer firewall, or after a
//!   restart).
//! - The subnet's first VNIC on the node sends [`TenantChange::Added`], its last
//!   [`TenantChange::Removed`], on a bounded channel the SSNTP wiring turns into
//!   TENANT_ADDED/TENANT_REMOVED ([`TenantChange::payload`]). An Added is sent as soon as the
//!   tunnel is up (before the VM is made), so a create that fails afterwards may send Added
//!   then Removed: harmless for the CNCI, and no subnet is ever left unannounced.
//! - With the metadata service ([`NetBackend::with_metadata`]), each instance's port is
//!   registered with its subnet's responder before it is filtered (a failure is a
//!   `network_failure`: the filter would send its requests nowhere), and unregistered when it
//!   is unplugged; [`Backend::serve_metadata`] registers an instance found again after a
//!   restart.
//! - [`NetBackend::rebuild`], at agent start, rebuilds the view from the kernel and unplugs the
//!   VNICs of instances the inner backend no longer has.

use std::collections::BTreeSet;
use std::net::IpAddr;
use tokio::sync::{Mutex, mpsc};
use uuid::Uuid;

use super::SubnetId;
use super::metadata::{Entry, Metadata};
use super::names::tap_name;
use super::network::{NetError, Network, Rebuilt, Vnic};
use super::ops::NetOps;
use crate::backend::{Backend, BackendError, ConsoleError, Existing};
use crate::model::{Action, InstanceSpec, NicSpec, Resources, Usage};

/// A tenant subnet came to this node or left it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TenantChange {
    /// The subnet's first VNIC on this node: TENANT_ADDED.
    Added(SubnetId),
    /// The subnet's last VNIC on this node is gone: TENANT_REMOVED.
    Removed(SubnetId),
}

impl TenantChange {
    /// The SSNTP event for the CNCI, from this node (`agent_ip`: its tunnel end point).
    pub fn payload(&self, agent_uuid: Uuid, agent_ip: IpAddr) -> ssntp::Payload {
        let (TenantChange::Added(s) | TenantChange::Removed(s)) = self;
        let event = ssntp::payload::TenantEvent {
            agent_uuid,
            agent_ip,
            tenant_uuid: s.tenant,
            tenant_subnet: s.subnet,
            concentrator_uuid: s.cnci,
            concentrator_ip: s.cnci_ip,
            subnet_key: s.key,
        };
        match self {
            TenantChange::Added(_) => ssntp::Payload::TenantAdded(event),
            TenantChange::Removed(_) => ssntp::Payload::TenantRemoved(event),
        }
    }
}

/// A [`Backend`] with tenant networking. See the module documentation.
pub struct NetBackend<B, O> {
    inner: B,
    net: Mutex<Network<O>>,
    changes: mpsc::Sender<TenantChange>,
    metadata: Option<Metadata>,
}

fn net_failure(e: NetError) -> BackendError {
    BackendError::Network(e.to_string())
}

impl<B: Backend, O: NetOps> NetBackend<B, O> {
    /// Wraps `inner`; tenant changes go to `changes` (a closed channel drops them).
    pub fn new(inner: B, net: Network<O>, changes: mpsc::Sender<TenantChange>) -> NetBackend<B, O> {
        NetBackend {
            inner,
            net: Mutex::new(net),
            changes,
            metadata: None,
        }
    }

    /// With the metadata service for the instances' ports (their filters send the requests
    /// to it from then on).
    pub fn with_metadata(mut self, metadata: Metadata) -> NetBackend<B, O> {
        self.net.get_mut().set_metadata(true);
        self.metadata = Some(metadata);
        self
    }

    /// Registers `spec`'s instance with its subnet's metadata responder on `bridge`.
    async fn serve(&self, bridge: &str, spec: &InstanceSpec) -> Result<(), BackendError> {
        let (Some(md), Some(nic), Some(entry)) =
            (&self.metadata, spec.nic.as_ref(), Entry::of(spec))
        else {
            return Ok(());
        };
        md.register(bridge, nic.subnet_key, entry)
            .await
            .map_err(BackendError::Network)
    }

    /// The inner backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    async fn tell(&self, change: TenantChange) {
        let _ = self.changes.send(change).await;
    }

    /// At start: rebuilds the view from the kernel, unplugs the VNICs of instances the inner
    /// backend does not have, and sends TENANT_REMOVED for every subnet that is gone.
    pub async fn rebuild(&self) -> Result<Rebuilt, BackendError> {
        if let Some(md) = &self.metadata {
            md.sweep().await;
        }
        let have: BTreeSet<Uuid> = self
            .inner
            .list()
            .await?
            .into_iter()
            .map(|e| e.instance)
            .collect();
        let mut net = self.net.lock().await;
        let rebuilt = net.rebuild().await.map_err(net_failure)?;
        let pruned = net
            .prune(|i| have.contains(&i))
            .await
            .map_err(net_failure)?;
        drop(net);
        for s in &rebuilt.removed {
            self.tell(TenantChange::Removed(*s)).await;
        }
        for d in pruned.into_iter().filter(|d| d.last) {
            self.tell(TenantChange::Removed(d.subnet)).await;
        }
        // The subnets still here are announced again: their CNCIs may have restarted (a CNCI
        // VM's new kernel knows no tunnel ends) while this agent was down.
        let current: Vec<SubnetId> = self.net.lock().await.subnets().copied().collect();
        for s in current {
            self.tell(TenantChange::Added(s)).await;
        }
        Ok(rebuilt)
    }

    async fn unplug(&self, instance: Uuid) -> Result<(), BackendError> {
        let detached = self
            .net
            .lock()
            .await
            .detach(instance)
            .await
            .map_err(net_failure)?;
        let Some(d) = detached else {
            return Ok(());
        };
        if let Some(md) = &self.metadata {
            md.unregister(d.subnet.key, instance, d.last).await;
        }
        if d.last {
            self.tell(TenantChange::Removed(d.subnet)).await;
        }
        Ok(())
    }
}

impl<B: Backend, O: NetOps> Backend for NetBackend<B, O> {
    async fn create(&self, spec: &InstanceSpec) -> Result<(), BackendError> {
        let Some(nic) = &spec.nic else {
            return self.inner.create(spec).await;
        };
        let mut vnic = Vnic::of(spec.instance, spec.tenant, nic);
        vnic.veth = spec.kind == crate::model::VmKind::Container;
        let mut net = self.net.lock().await;
        let attached = net.attach(&vnic).await.map_err(net_failure)?;
        debug_assert_eq!(attached.tap, tap_name(spec.instance));
        // Served, then filtered, before the VM is made: it never sends unfiltered, and its
        // requests to the metadata service find the responder.
        let filtered = match self.serve(&attached.bridge, spec).await {
            Ok(()) => net.filter(spec.instance, nic).await.map_err(net_failure),
            Err(e) => Err(e),
        };
        drop(net);
        if attached.first {
            self.tell(TenantChange::Added(vnic.subnet)).await;
        }
        let made = match filtered {
            Ok(()) => self.inner.create(spec).await,
            Err(e) => Err(e),
        };
        match made {
            Ok(()) => Ok(()),
            Err(e) => {
                if let Err(undo) = self.unplug(spec.instance).await {
                    tracing::warn!(instance = %spec.instance, error = %undo, "unplugging after a failed create");
                }
                Err(e)
            }
        }
    }

    async fn start(&self, instance: Uuid) -> Result<(), BackendError> {
        self.inner.start(instance).await
    }

    async fn wait_exit(&self, instance: Uuid) {
        self.inner.wait_exit(instance).await
    }

    async fn stop(&self, instance: Uuid) -> Result<(), BackendError> {
        self.inner.stop(instance).await
    }

    async fn action(&self, instance: Uuid, action: Action) -> Result<(), BackendError> {
        self.inner.action(instance, action).await
    }

    async fn resize(&self, instance: Uuid, resources: Resources) -> Result<(), BackendError> {
        self.inner.resize(instance, resources).await
    }

    async fn delete(&self, instance: Uuid) -> Result<(), BackendError> {
        self.inner.delete(instance).await?;
        self.unplug(instance).await
    }

    async fn stats(&self) -> Vec<(Uuid, Usage)> {
        self.inner.stats().await
    }

    async fn list(&self) -> Result<Vec<Existing>, BackendError> {
        self.inner.list().await
    }

    async fn console(&self, instance: Uuid, lines: usize) -> Result<String, ConsoleError> {
        self.inner.console(instance, lines).await
    }

    async fn export_disk(
        &self,
        instance: Uuid,
        to: &std::path::Path,
    ) -> Result<(), crate::backend::ExportError> {
        self.inner.export_disk(instance, to).await
    }

    async fn attach_volume(
        &self,
        instance: Uuid,
        volume: &crate::model::VolumeSpec,
    ) -> Result<(), BackendError> {
        self.inner.attach_volume(instance, volume).await
    }

    async fn detach_volume(
        &self,
        instance: Uuid,
        volume: &crate::model::VolumeSpec,
        force: bool,
    ) -> Result<(), BackendError> {
        self.inner.detach_volume(instance, volume, force).await
    }

    async fn delete_volume(&self, volume: Uuid) -> Result<(), BackendError> {
        self.inner.delete_volume(volume).await
    }

    async fn serve_metadata(&self, spec: &InstanceSpec) -> Result<(), BackendError> {
        let Some(nic) = &spec.nic else {
            return Ok(());
        };
        let bridge = super::names::bridge_name(nic.subnet_key);
        self.serve(&bridge, spec).await
    }

    async fn filter_port(&self, instance: Uuid, nic: &NicSpec) -> Result<(), BackendError> {
        self.net
            .lock()
            .await
            .filter(instance, nic)
            .await
            .map_err(net_failure)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::fake::{FakeBackend, Op};
    use crate::model::{Firmware, NicSpec, Resources, VmKind};
    use crate::net::{FakeNetOps, NetConfig, TunnelKind, VXLAN_PORT};
    use std::collections::BTreeMap;

    fn spec(n: u8, key: u32) -> InstanceSpec {
        InstanceSpec {
            instance: Uuid::from_u128(u128::from(n) << 100),
            tenant: Uuid::from_u128(0xa),
            workload: Uuid::from_u128(0xb),
            kind: VmKind::Qemu,
            role: crate::model::InstanceRole::Workload,
            firmware: Firmware::Legacy,
            image: "tiny".into(),
            resources: Resources::default(),
            nic: Some(NicSpec {
                mac: [2, 0, 0, 0, 0, n],
                vnic_uuid: Uuid::from_u128(u128::from(n)),
                concentrator_uuid: Uuid::from_u128(0xc),
                concentrator_ip: "198.18.0.100".parse().unwrap(),
                subnet_addr: "10.250.0.0".parse().unwrap(),
                subnet_prefix: 24,
                subnet_key: key,
                private_ip: format!("10.250.0.{n}").parse().unwrap(),
                public_ip: false,
                firewall: None,
            }),
            disks: Vec::new(),
            volumes: Vec::new(),
            user_data: None,
            meta_data: BTreeMap::new(),
            restart: false,
            kernel: None,
        }
    }

    fn setup() -> (
        NetBackend<FakeBackend, FakeNetOps>,
        FakeBackend,
        FakeNetOps,
        mpsc::Receiver<TenantChange>,
    ) {
        let (backend, ops) = (FakeBackend::new(), FakeNetOps::new());
        let cfg = NetConfig {
            node_ip: "198.18.0.1".parse().unwrap(),
            tunnel: TunnelKind::Vxlan,
            vxlan_port: VXLAN_PORT,
            metadata: false,
        };
        let (tx, rx) = mpsc::channel(16);
        let nb = NetBackend::new(backend.clone(), Network::new(ops.clone(), cfg), tx);
        (nb, backend, ops, rx)
    }

    fn drain(rx: &mut mpsc::Receiver<TenantChange>) -> Vec<TenantChange> {
        let mut out = Vec::new();
        while let Ok(c) = rx.try_recv() {
            out.push(c);
        }
        out
    }

    #[tokio::test]
    async fn create_plugs_in_first_and_delete_unplugs_last() {
        let (nb, backend, ops, mut rx) = setup();
        let (s1, s2) = (spec(1, 7), spec(2, 7));
        nb.create(&s1).await.unwrap();
        assert!(ops.link(&tap_name(s1.instance)).is_some());
        let added = drain(&mut rx);
        assert!(
            matches!(added[..], [TenantChange::Added(s)] if s.key == 7),
            "{added:?}"
        );
        nb.create(&s2).await.unwrap();
        assert_eq!(drain(&mut rx), vec![]);

        nb.delete(s1.instance).await.unwrap();
        assert_eq!(drain(&mut rx), vec![]);
        assert!(ops.link(&tap_name(s1.instance)).is_none());
        nb.delete(s2.instance).await.unwrap();
        assert!(matches!(drain(&mut rx)[..], [TenantChange::Removed(s)] if s.key == 7));
        assert!(ops.links_now().is_empty());
        assert_eq!(backend.ops(s2.instance), vec![Op::Create, Op::Delete]);
    }

    #[tokio::test]
    async fn instances_without_a_nic_are_left_alone() {
        let (nb, _backend, ops, mut rx) = setup();
        let mut s = spec(1, 7);
        s.nic = None;
        nb.create(&s).await.unwrap();
        nb.delete(s.instance).await.unwrap();
        assert!(ops.calls().is_empty());
        assert_eq!(drain(&mut rx), vec![]);
    }

    #[tokio::test]
    async fn a_failed_attach_is_a_network_failure_and_makes_no_vm() {
        let (nb, backend, ops, mut rx) = setup();
        ops.fail_next("create tap");
        let s = spec(1, 7);
        assert!(matches!(nb.create(&s).await, Err(BackendError::Network(_))));
        assert!(backend.calls().is_empty());
        // Nothing is announced, and nothing of the subnet is left half made.
        assert_eq!(drain(&mut rx), vec![]);
        assert!(ops.links_now().is_empty(), "{:#?}", ops.links_now());
        nb.create(&s).await.unwrap();
        assert!(matches!(drain(&mut rx)[..], [TenantChange::Added(_)]));
    }

    #[tokio::test]
    async fn a_failed_create_unplugs_again() {
        let (nb, backend, ops, mut rx) = setup();
        backend.fail_next(Op::Create, BackendError::Launch("no".into()));
        let s = spec(1, 7);
        assert_eq!(nb.create(&s).await, Err(BackendError::Launch("no".into())));
        assert!(ops.links_now().is_empty());
        let changes = drain(&mut rx);
        assert!(
            matches!(changes[..], [TenantChange::Added(a), TenantChange::Removed(r)] if a == r),
            "{changes:?}"
        );
    }

    #[tokio::test]
    async fn rebuild_unplugs_instances_the_backend_lost() {
        let (nb, backend, ops, mut rx) = setup();
        let (s1, s2) = (spec(1, 7), spec(2, 8));
        nb.create(&s1).await.unwrap();
        nb.create(&s2).await.unwrap();
        drain(&mut rx);
        // Restart: the backend still has instance 1 only.
        backend.delete(s2.instance).await.unwrap();
        let cfg = *nb.net.lock().await.config();
        let (tx, mut rx) = mpsc::channel(16);
        let again = NetBackend::new(backend.clone(), Network::new(ops.clone(), cfg), tx);
        let r = again.rebuild().await.unwrap();
        assert_eq!(r.vnics.len(), 2, "both were in the kernel");
        let changes = drain(&mut rx);
        assert!(
            matches!(changes[..], [TenantChange::Removed(s), TenantChange::Added(a)] if s.key == 8 && a.key == 7),
            "{changes:?}"
        );
        assert!(ops.link(&tap_name(s1.instance)).is_some());
        assert!(ops.link(&tap_name(s2.instance)).is_none());
    }

    #[tokio::test]
    async fn taps_are_filtered_before_the_vm_is_made_and_unfiltered_with_it() {
        let (nb, backend, ops, _rx) = setup();
        let s = spec(1, 7);
        nb.create(&s).await.unwrap();
        let scripts = ops.scripts();
        assert_eq!(scripts.len(), 1);
        let bridge = crate::net::names::bridge_name(7);
        assert!(
            ops.calls()
                .contains(&crate::net::fake::Call::SetBridgeNetfilter(bridge))
        );
        let tap = tap_name(s.instance);
        assert!(
            scripts[0].contains(&format!("ports_in {{ \"{tap}\" : jump port_1 }}")),
            "{}",
            scripts[0]
        );
        assert!(scripts[0].contains("ip saddr != 10.250.0.1 drop"));
        // No firewall in the START: anti-spoofing only.
        assert!(!scripts[0].contains("egress_1"));

        // A newer firewall refills the port's chains.
        let mut nic = s.nic.clone().unwrap();
        nic.firewall = Some(ssntp::payload::Firewall {
            revision: 2,
            rules: Vec::new(),
        });
        nb.filter_port(s.instance, &nic).await.unwrap();
        let update = ops.scripts().pop().unwrap();
        assert!(
            update.contains("add element inet cumulo_ports egress { 0x00000001 : jump egress_1 }")
        );
        assert!(!update.contains("add table"), "{update}");
        // An instance without a VNIC here cannot be filtered.
        assert!(matches!(
            nb.filter_port(Uuid::from_u128(99), &nic).await,
            Err(BackendError::Network(_))
        ));

        nb.delete(s.instance).await.unwrap();
        let removal = ops.scripts().pop().unwrap();
        assert!(
            removal.contains("delete chain inet cumulo_ports egress_1"),
            "{removal}"
        );
        assert_eq!(backend.ops(s.instance), vec![Op::Create, Op::Delete]);
    }

    #[tokio::test]
    async fn a_failed_filter_is_a_network_failure_and_makes_no_vm() {
        let (nb, backend, ops, _rx) = setup();
        ops.fail_next("nft");
        let s = spec(1, 7);
        assert!(matches!(nb.create(&s).await, Err(BackendError::Network(_))));
        assert!(backend.calls().is_empty());
        assert!(ops.links_now().is_empty(), "{:#?}", ops.links_now());
        nb.create(&s).await.unwrap();
    }

    #[test]
    fn changes_become_tenant_events() {
        let s = SubnetId {
            tenant: Uuid::from_u128(1),
            subnet: "10.250.0.0/24".parse().unwrap(),
            key: 7,
            cnci: Uuid::from_u128(2),
            cnci_ip: "198.18.0.100".parse().unwrap(),
        };
        let agent = Uuid::from_u128(3);
        let ip: IpAddr = "198.18.0.1".parse().unwrap();
        let ssntp::Payload::TenantAdded(e) = TenantChange::Added(s).payload(agent, ip) else {
            panic!("not TENANT_ADDED")
        };
        assert_eq!(
            (e.agent_uuid, e.agent_ip, e.tenant_uuid, e.subnet_key),
            (agent, ip, s.tenant, 7)
        );
        assert_eq!(e.tenant_subnet.to_string(), "10.250.0.0/24");
        assert_eq!(
            (e.concentrator_uuid, e.concentrator_ip),
            (s.cnci, s.cnci_ip)
        );
        assert!(matches!(
            TenantChange::Removed(s).payload(agent, ip),
            ssntp::Payload::TenantRemoved(_)
        ));
    }
}
