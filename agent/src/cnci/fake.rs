//! [`FakeCnciOps`]: a recording [`CnciOps`] for tests: a table of links and flood entries like
//! a namespace's, every call recorded, a call that fails once on demand.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex, MutexGuard};

use super::ops::{CnciOps, HubSpec};
use crate::net::{Link, LinkKind, OpsError, OpsErrorKind, TunnelSpec};

/// One link of the fake namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeLink {
    /// `bridge`, `vxlan` (a hub: VNI, local, port) or `gretap`.
    pub kind: String,
    /// Its bridge.
    pub master: Option<String>,
    /// Up.
    pub up: bool,
    /// Hairpin on.
    pub hairpin: bool,
    /// Its alias.
    pub alias: Option<String>,
    /// Its addresses (address, prefix length).
    pub addresses: BTreeSet<(IpAddr, u8)>,
}

#[derive(Debug, Default)]
struct State {
    links: BTreeMap<String, FakeLink>,
    flood: BTreeSet<(String, IpAddr)>,
    routes: BTreeMap<(Ipv4Addr, u8), Ipv4Addr>,
    calls: Vec<String>,
    fail: Option<&'static str>,
}

/// The fake. Clones share the namespace.
#[derive(Debug, Clone, Default)]
pub struct FakeCnciOps(Arc<Mutex<State>>);

impl FakeCnciOps {
    /// An empty namespace.
    pub fn new() -> FakeCnciOps {
        FakeCnciOps::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a link that the hub does not make (the concentrator's uplink, say).
    pub fn add_link(&self, name: &str, kind: &str) {
        let mut s = self.lock();
        s.links.insert(
            name.to_string(),
            FakeLink {
                kind: kind.to_string(),
                master: None,
                up: true,
                hairpin: false,
                alias: None,
                addresses: BTreeSet::new(),
            },
        );
    }

    /// The concentrator's routes now: (destination, prefix) → via.
    pub fn routes(&self) -> BTreeMap<(Ipv4Addr, u8), Ipv4Addr> {
        self.lock().routes.clone()
    }

    /// The links now.
    pub fn links(&self) -> BTreeMap<String, FakeLink> {
        self.lock().links.clone()
    }

    /// The flood entries now, as (device, destination).
    pub fn flood(&self) -> BTreeSet<(String, IpAddr)> {
        self.lock().flood.clone()
    }

    /// Every call so far (`op name`).
    pub fn calls(&self) -> Vec<String> {
        self.lock().calls.clone()
    }

    /// The next call of `op` (`create bridge`, `create hub`, `create tunnel`, `set master`,
    /// `set hairpin`, `set up`, `add flood entry`, `remove flood entry`, `delete`) fails.
    pub fn fail_next(&self, op: &'static str) {
        self.lock().fail = Some(op);
    }

    fn call(&self, op: &'static str, name: &str) -> Result<MutexGuard<'_, State>, OpsError> {
        let mut s = self.lock();
        s.calls.push(format!("{op} {name}"));
        if s.fail == Some(op) {
            s.fail = None;
            return Err(OpsError::new(
                op,
                name,
                OpsErrorKind::Other("injected".into()),
            ));
        }
        Ok(s)
    }

    fn create(&self, op: &'static str, name: &str, kind: &str) -> Result<(), OpsError> {
        let mut s = self.call(op, name)?;
        if s.links.contains_key(name) {
            return Err(OpsError::new(op, name, OpsErrorKind::Exists));
        }
        s.links.insert(
            name.to_string(),
            FakeLink {
                kind: kind.to_string(),
                master: None,
                up: false,
                hairpin: false,
                alias: None,
                addresses: BTreeSet::new(),
            },
        );
        Ok(())
    }

    fn with_link(
        &self,
        op: &'static str,
        name: &str,
        f: impl FnOnce(&mut FakeLink),
    ) -> Result<(), OpsError> {
        let mut s = self.call(op, name)?;
        match s.links.get_mut(name) {
            Some(l) => {
                f(l);
                Ok(())
            }
            None => Err(OpsError::new(op, name, OpsErrorKind::NotFound)),
        }
    }
}

impl CnciOps for FakeCnciOps {
    async fn links(&self) -> Result<Vec<Link>, OpsError> {
        let s = self.call("links", "")?;
        Ok(s.links
            .iter()
            .map(|(name, l)| Link {
                name: name.clone(),
                kind: match l.kind.split(' ').next() {
                    Some("bridge") => LinkKind::Bridge,
                    Some("vxlan") => LinkKind::Vxlan,
                    Some("gretap") => LinkKind::GreTap,
                    other => LinkKind::Other(other.unwrap_or("").to_string()),
                },
                alias: l.alias.clone(),
                master: l.master.clone(),
                up: l.up,
                mac: None,
                learning: None,
            })
            .collect())
    }

    async fn set_alias(&self, name: &str, alias: &str) -> Result<(), OpsError> {
        let alias = alias.to_string();
        self.with_link("set alias", name, |l| l.alias = Some(alias))
    }

    async fn flood_list(&self, dev: &str) -> Result<Vec<IpAddr>, OpsError> {
        let s = self.call("list flood entries", dev)?;
        if !s.links.contains_key(dev) {
            return Err(OpsError::new(
                "list flood entries",
                dev,
                OpsErrorKind::NotFound,
            ));
        }
        Ok(s.flood
            .iter()
            .filter(|(d, _)| d == dev)
            .map(|(_, ip)| *ip)
            .collect())
    }

    async fn create_bridge(&self, name: &str) -> Result<(), OpsError> {
        self.create("create bridge", name, "bridge")
    }

    async fn create_hub(&self, spec: &HubSpec) -> Result<(), OpsError> {
        let kind = format!("vxlan {} {} {}", spec.vni, spec.local, spec.port);
        self.create("create hub", &spec.name, &kind)
    }

    async fn create_tunnel(&self, spec: &TunnelSpec) -> Result<(), OpsError> {
        let kind = match spec {
            TunnelSpec::GreTap {
                key, local, remote, ..
            } => format!("gretap {key} {local} {remote}"),
            TunnelSpec::Vxlan {
                vni, local, remote, ..
            } => format!("vxlan {vni} {local} {remote}"),
        };
        self.create("create tunnel", spec.name(), &kind)
    }

    async fn set_master(&self, name: &str, bridge: &str) -> Result<(), OpsError> {
        let bridge = bridge.to_string();
        self.with_link("set master", name, |l| l.master = Some(bridge))
    }

    async fn set_hairpin(&self, name: &str) -> Result<(), OpsError> {
        self.with_link("set hairpin", name, |l| l.hairpin = true)
    }

    async fn set_up(&self, name: &str) -> Result<(), OpsError> {
        self.with_link("set up", name, |l| l.up = true)
    }

    async fn flood_add(&self, dev: &str, dst: IpAddr) -> Result<(), OpsError> {
        let mut s = self.call("add flood entry", dev)?;
        if !s.links.contains_key(dev) {
            return Err(OpsError::new(
                "add flood entry",
                dev,
                OpsErrorKind::NotFound,
            ));
        }
        s.flood.insert((dev.to_string(), dst));
        Ok(())
    }

    async fn flood_del(&self, dev: &str, dst: IpAddr) -> Result<(), OpsError> {
        let mut s = self.call("remove flood entry", dev)?;
        if !s.flood.remove(&(dev.to_string(), dst)) {
            return Err(OpsError::new(
                "remove flood entry",
                dev,
                OpsErrorKind::NotFound,
            ));
        }
        Ok(())
    }

    async fn delete(&self, name: &str) -> Result<(), OpsError> {
        let mut s = self.call("delete", name)?;
        if s.links.remove(name).is_none() {
            return Err(OpsError::new("delete", name, OpsErrorKind::NotFound));
        }
        // Like the kernel: a device's forwarding entries go with it; its ports are released.
        s.flood.retain(|(dev, _)| dev != name);
        for l in s.links.values_mut() {
            if l.master.as_deref() == Some(name) {
                l.master = None;
            }
        }
        Ok(())
    }

    async fn add_address(&self, name: &str, ip: IpAddr, prefix: u8) -> Result<(), OpsError> {
        const OP: &str = "add address";
        let mut s = self.call(OP, name)?;
        let l = s
            .links
            .get_mut(name)
            .ok_or_else(|| OpsError::new(OP, name, OpsErrorKind::NotFound))?;
        if l.addresses.insert((ip, prefix)) {
            Ok(())
        } else {
            Err(OpsError::new(OP, name, OpsErrorKind::Exists))
        }
    }

    async fn routes(&self) -> Result<Vec<(Ipv4Addr, u8, Ipv4Addr)>, OpsError> {
        let s = self.call("list routes", "")?;
        Ok(s.routes.iter().map(|((d, p), v)| (*d, *p, *v)).collect())
    }

    async fn add_route(&self, dst: Ipv4Addr, prefix: u8, via: Ipv4Addr) -> Result<(), OpsError> {
        let mut s = self.call("add route", &format!("{dst}/{prefix}"))?;
        s.routes.insert((dst, prefix), via);
        Ok(())
    }

    async fn del_route(&self, dst: Ipv4Addr, prefix: u8, via: Ipv4Addr) -> Result<(), OpsError> {
        let what = format!("{dst}/{prefix}");
        let mut s = self.call("remove route", &what)?;
        if s.routes.get(&(dst, prefix)) != Some(&via) {
            return Err(OpsError::new("remove route", &what, OpsErrorKind::NotFound));
        }
        s.routes.remove(&(dst, prefix));
        Ok(())
    }

    async fn del_address(&self, name: &str, ip: IpAddr, prefix: u8) -> Result<(), OpsError> {
        const OP: &str = "remove address";
        let mut s = self.call(OP, name)?;
        let removed = s
            .links
            .get_mut(name)
            .is_some_and(|l| l.addresses.remove(&(ip, prefix)));
        if removed {
            Ok(())
        } else {
            Err(OpsError::new(OP, name, OpsErrorKind::NotFound))
        }
    }
}
