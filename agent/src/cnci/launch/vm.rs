//! CNCIs as VMs: the CNCI guest's settings in its user data, its MAC, the tap and bridge in its
//! namespace, and a watcher of the domain's end.

use super::*;

/// The CNCI VM's own link-local address, beside its compute network address.
pub(super) const GUEST_LINK_ADDR: Ipv4Addr = Ipv4Addr::new(169, 254, 0, 2);

/// The link-local network's prefix length.
pub(super) const LINK_PREFIX: u8 = 24;

/// The bridge in a CNCI VM's namespace (its tap and `u0`).
pub(super) const VM_BRIDGE: &str = "cb0";

/// A CNCI VM's MAC: `02:cc` and its IPv4 address.
pub fn vm_mac(addr: Ipv4Addr) -> [u8; 6] {
    let [a, b, c, d] = addr.octets();
    [2, 0xcc, a, b, c, d]
}

/// What a CNCI VM's guest reads from its user data (`scripts/cnci-guest.sh` documents the
/// format): `#cumulo-cnci`, then `KEY=value` lines for `cumulo-cnci`'s environment and the
/// guest's addresses, then the CA, certificate and key as `--- file NAME` sections.
pub fn vm_user_data(c: &LaunchConfig, id: Uuid, r: &Record) -> Result<String, BackendError> {
    let read = |p: &std::path::Path| {
        std::fs::read_to_string(p).map_err(|e| launch(format!("{}: {e}", p.display())))
    };
    let mut out = String::from("#cumulo-cnci\n");
    let vars = [
        ("CUMULO_CNCI_UUID", id.to_string()),
        ("CUMULO_CNCI_TENANT", r.tenant.to_string()),
        ("CUMULO_CNCI_IP", r.ip.to_string()),
        ("CUMULO_CNCI_PREFIX", c.prefix.to_string()),
        (
            "CUMULO_CNCI_LINK_ADDR",
            format!("{GUEST_LINK_ADDR}/{LINK_PREFIX}"),
        ),
        ("CUMULO_CNCI_SCHEDULER", c.servers.join(",")),
        ("CUMULO_CNCI_VIA", format!("{RELAY_ADDR}:{RELAY_PORT}")),
        (
            "CUMULO_CNCI_ROUTE_VIA",
            format!("{RELAY_ADDR}:{}", routes::ROUTE_PORT),
        ),
        ("CUMULO_CNCI_PROTECT", protected(c, r.ip, &node_addresses())),
        ("CUMULO_CNCI_TUNNEL", c.tunnel.clone()),
        ("CUMULO_CNCI_VXLAN_PORT", c.vxlan_port.to_string()),
    ];
    for (k, v) in vars {
        // The guest takes only plain values (it checks again).
        if !v
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ".:,/-_[]".contains(ch))
        {
            return Err(launch(format!("{k}: {v:?} is not a plain value")));
        }
        out.push_str(&format!("{k}={v}\n"));
    }
    let (cert, key) = credentials::for_cnci(c, id).map_err(launch)?;
    for (name, path) in [
        ("ca.pem", &c.ca_cert),
        ("cert.pem", &cert),
        ("key.pem", &key),
    ] {
        out.push_str(&format!("--- file {name}\n"));
        let text = read(path)?;
        out.push_str(text.trim_end());
        out.push('\n');
    }
    Ok(out)
}

/// The certificate (PEM) a CNCI VM's seed gets now: its own, else the node's shared one.
pub(super) fn seeded_cert(c: &LaunchConfig, id: Uuid) -> Result<String, BackendError> {
    let (cert, _) = credentials::for_cnci(c, id).map_err(launch)?;
    std::fs::read_to_string(&cert).map_err(|e| launch(format!("{}: {e}", cert.display())))
}

/// The meta data of a CNCI VM's seed (as the controller's CNCI START gives it).
fn vm_meta_data(id: Uuid) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("instance-id".to_string(), id.to_string()),
        ("local-hostname".to_string(), format!("cnci-{id}")),
        (
            ssntp::payload::ROLE_KEY.to_string(),
            ssntp::payload::CNCI_ROLE.to_string(),
        ),
    ])
}

/// Watches a CNCI VM until it stops, then stops its relay: `true` on the channel then.
fn watch_vm(vms: LibvirtBackend, id: Uuid, relay: CancellationToken) -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        vms.wait_exit(id).await;
        tracing::info!(cnci = %id, "CNCI VM stopped");
        relay.cancel();
        let _ = tx.send(true);
    });
    rx
}

impl<B: Backend> CnciLauncher<B> {
    /// Starts a CNCI VM: its tap where QEMU opens it, the relay, the domain; then the tap
    /// moves onto the bridge in the CNCI's namespace (before the guest has booted far enough
    /// to send anything).
    pub(super) async fn launch_vm(&self, id: Uuid, record: &Record) -> Result<(), BackendError> {
        let c = self.config()?;
        let Some((vms, _)) = self.vm_mode()? else {
            return Err(launch(
                "a CNCI VM's record, but CNCIs do not run as VMs here",
            ));
        };
        // New credentials since its seed was written (a restart's START brought them): the
        // seed is rewritten, so that the guest boots with them.
        let cert = seeded_cert(c, id)?;
        if record.seeded.as_deref() != Some(cert.as_str()) {
            vms.reseed(id, vm_user_data(c, id, record)?, vm_meta_data(id))
                .await?;
            let mut updated = record.clone();
            updated.seeded = Some(cert);
            self.save(id, &updated)?;
            self.lock().records.insert(id, updated);
            tracing::info!(cnci = %id, "CNCI VM's seed rewritten with its new credentials");
        }
        let tap = crate::net::tap_name(id);
        let netns = c.tap_netns.as_deref();
        // A tap of an earlier start, where QEMU runs or in the CNCI's namespace.
        let _ = ip_in(netns, &["link", "del", &tap]).await;
        let _ = ip(&["-n", &record.ns, "link", "del", &tap]).await;
        ip_in(netns, &["tuntap", "add", "dev", &tap, "mode", "tap"]).await?;
        let listener = listen_in(&record.ns, (RELAY_ADDR, RELAY_PORT)).map_err(launch)?;
        let route_listener =
            listen_in(&record.ns, (RELAY_ADDR, routes::ROUTE_PORT)).map_err(launch)?;
        let stop_relay = CancellationToken::new();
        relay(listener, c.servers.clone(), stop_relay.clone());
        self.serve_routes(id, route_listener, stop_relay.clone())?;
        let started = async {
            vms.start(id).await?;
            ip_in(netns, &["link", "set", &tap, "netns", &record.ns]).await?;
            ip(&["-n", &record.ns, "link", "set", &tap, "master", VM_BRIDGE]).await?;
            ip(&["-n", &record.ns, "link", "set", &tap, "up"]).await
        };
        if let Err(e) = started.await {
            stop_relay.cancel();
            let _ = vms.stop(id).await;
            let _ = ip_in(netns, &["link", "del", &tap]).await;
            return Err(e);
        }
        self.track(vms, id, stop_relay);
        tracing::info!(cnci = %id, ns = %record.ns, %tap, "CNCI VM started");
        Ok(())
    }

    /// Counts a started or re-attached CNCI VM as running; its end stops `relay`.
    fn track(&self, vms: &LibvirtBackend, id: Uuid, relay: CancellationToken) {
        let exited = watch_vm(vms.clone(), id, relay.clone());
        let running = Running {
            pid: None,
            exited,
            relay,
        };
        self.lock().running.insert(id, running);
    }

    /// Takes over a CNCI VM an earlier run of the agent started: its relay again, and a
    /// watcher of its end.
    pub(super) fn reattach_vm(&self, id: Uuid, record: &Record) -> Result<(), BackendError> {
        let c = self.config()?;
        let Some((vms, _)) = self.vm_mode()? else {
            return Err(launch("CNCIs do not run as VMs here"));
        };
        let listener = listen_in(&record.ns, (RELAY_ADDR, RELAY_PORT)).map_err(launch)?;
        let route_listener =
            listen_in(&record.ns, (RELAY_ADDR, routes::ROUTE_PORT)).map_err(launch)?;
        let stop_relay = CancellationToken::new();
        relay(listener, c.servers.clone(), stop_relay.clone());
        self.serve_routes(id, route_listener, stop_relay.clone())?;
        self.track(vms, id, stop_relay);
        tracing::info!(cnci = %id, "CNCI VM re-attached");
        Ok(())
    }
}
