//! [`FakeNetOps`]: a recording fake of the kernel's links, for tests.
//!
//! It keeps a table of links like a network namespace would (names unique, a bridge's ports
//! let go when it is deleted) and records every call. Clones share the table and the record, so
//! a test keeps one clone and gives the other away. GRE-tap can be made unsupported (as in a
//! kernel without it), and any call can be made to fail once.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::ops::{Link, LinkKind, NetOps, OpsError, OpsErrorKind, TunnelSpec};

/// One recorded call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// [`NetOps::links`].
    Links,
    /// [`NetOps::create_bridge`].
    CreateBridge(String),
    /// [`NetOps::create_tunnel`].
    CreateTunnel(TunnelSpec),
    /// [`NetOps::create_tap`].
    CreateTap(String, [u8; 6]),
    /// [`NetOps::create_veth`]: the node's end, its peer, the MAC.
    CreateVeth(String, String, [u8; 6]),
    /// [`NetOps::set_master`].
    SetMaster(String, String),
    /// [`NetOps::set_up`].
    SetUp(String, bool),
    /// [`NetOps::set_learning`].
    SetLearning(String, bool),
    /// [`NetOps::set_alias`].
    SetAlias(String, String),
    /// [`NetOps::delete`].
    Delete(String),
    /// [`NetOps::nft`]: the script.
    Nft(String),
    /// [`NetOps::set_bridge_netfilter`].
    SetBridgeNetfilter(String),
}

impl Call {
    /// Whether the call changes something.
    pub fn is_change(&self) -> bool {
        !matches!(self, Call::Links)
    }
}

#[derive(Default)]
struct State {
    links: BTreeMap<String, Link>,
    calls: Vec<Call>,
    gretap_unsupported: bool,
    /// Fail the next call whose [`op_name`] is this, once.
    fail: Vec<&'static str>,
}

/// The recording fake. See the module documentation.
#[derive(Clone, Default)]
pub struct FakeNetOps {
    state: Arc<Mutex<State>>,
}

fn op_name(call: &Call) -> &'static str {
    match call {
        Call::Links => "links",
        Call::CreateBridge(_) => "create bridge",
        Call::CreateTunnel(_) => "create tunnel",
        Call::CreateTap(..) => "create tap",
        Call::CreateVeth(..) => "create veth",
        Call::SetMaster(..) => "set master",
        Call::SetUp(..) => "set up",
        Call::SetLearning(..) => "set learning",
        Call::SetAlias(..) => "set alias",
        Call::Delete(_) => "delete",
        Call::Nft(_) => "nft",
        Call::SetBridgeNetfilter(_) => "set bridge netfilter",
    }
}

impl FakeNetOps {
    /// An empty namespace where every link kind exists.
    pub fn new() -> FakeNetOps {
        FakeNetOps::default()
    }

    /// An empty namespace whose kernel has no GRE-tap (like this project's build machine).
    pub fn without_gretap() -> FakeNetOps {
        let fake = FakeNetOps::new();
        fake.lock().gretap_unsupported = true;
        fake
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// The calls that change something, and forgets all calls.
    pub fn take_changes(&self) -> Vec<Call> {
        let calls = std::mem::take(&mut self.lock().calls);
        calls.into_iter().filter(Call::is_change).collect()
    }

    /// The nft scripts run so far.
    pub fn scripts(&self) -> Vec<String> {
        self.lock()
            .calls
            .iter()
            .filter_map(|c| match c {
                Call::Nft(s) => Some(s.clone()),
                _ => None,
            })
            .collect()
    }

    /// The links now.
    pub fn links_now(&self) -> BTreeMap<String, Link> {
        self.lock().links.clone()
    }

    /// One link now.
    pub fn link(&self, name: &str) -> Option<Link> {
        self.lock().links.get(name).cloned()
    }

    /// Puts a link in the table without recording a call (a test's "someone else made this").
    pub fn insert(&self, link: Link) {
        self.lock().links.insert(link.name.clone(), link);
    }

    /// Removes a link from the table without recording a call (a test's "the kernel lost it").
    pub fn remove(&self, name: &str) {
        let mut st = self.lock();
        st.links.remove(name);
        for l in st.links.values_mut() {
            if l.master.as_deref() == Some(name) {
                l.master = None;
                l.learning = None;
            }
        }
    }

    /// Makes the next call of this operation (`"create tunnel"`, `"delete"`, ...) fail once.
    pub fn fail_next(&self, op: &'static str) {
        self.lock().fail.push(op);
    }

    fn record(&self, call: Call, link: &str) -> Result<MutexGuard<'_, State>, OpsError> {
        let mut st = self.lock();
        let op = op_name(&call);
        st.calls.push(call);
        if let Some(i) = st.fail.iter().position(|f| *f == op) {
            st.fail.remove(i);
            return Err(OpsError::new(
                op,
                link,
                OpsErrorKind::Other("injected".into()),
            ));
        }
        Ok(st)
    }

    fn add(
        &self,
        call: Call,
        name: &str,
        kind: LinkKind,
        mac: Option<[u8; 6]>,
    ) -> Result<(), OpsError> {
        let op = op_name(&call);
        let mut st = self.record(call, name)?;
        if kind == LinkKind::GreTap && st.gretap_unsupported {
            return Err(OpsError::new(op, name, OpsErrorKind::Unsupported));
        }
        if st.links.contains_key(name) {
            return Err(OpsError::new(op, name, OpsErrorKind::Exists));
        }
        st.links.insert(
            name.to_string(),
            Link {
                name: name.to_string(),
                kind,
                alias: None,
                master: None,
                up: false,
                mac,
                learning: None,
            },
        );
        Ok(())
    }

    fn change(&self, call: Call, name: &str, f: impl FnOnce(&mut Link)) -> Result<(), OpsError> {
        let op = op_name(&call);
        let mut st = self.record(call, name)?;
        let link = st
            .links
            .get_mut(name)
            .ok_or_else(|| OpsError::new(op, name, OpsErrorKind::NotFound))?;
        f(link);
        Ok(())
    }
}

impl NetOps for FakeNetOps {
    async fn links(&self) -> Result<Vec<Link>, OpsError> {
        let st = self.record(Call::Links, "")?;
        Ok(st.links.values().cloned().collect())
    }

    async fn create_bridge(&self, name: &str) -> Result<(), OpsError> {
        self.add(
            Call::CreateBridge(name.into()),
            name,
            LinkKind::Bridge,
            None,
        )
    }

    async fn create_tunnel(&self, spec: &TunnelSpec) -> Result<(), OpsError> {
        let kind = LinkKind::of_tunnel(spec.kind());
        self.add(Call::CreateTunnel(spec.clone()), spec.name(), kind, None)
    }

    async fn create_veth(&self, name: &str, peer: &str, mac: [u8; 6]) -> Result<(), OpsError> {
        if self.lock().links.contains_key(peer) {
            return Err(OpsError::new("create veth", peer, OpsErrorKind::Exists));
        }
        self.add(
            Call::CreateVeth(name.into(), peer.into(), mac),
            name,
            LinkKind::Veth,
            Some(mac),
        )?;
        // The peer, as the kernel makes it beside the first end (no call of its own).
        let mut st = self.lock();
        let mut end = st.links[name].clone();
        end.name = peer.to_string();
        end.mac = None;
        st.links.insert(peer.to_string(), end);
        Ok(())
    }

    async fn create_tap(&self, name: &str, mac: [u8; 6]) -> Result<(), OpsError> {
        self.add(
            Call::CreateTap(name.into(), mac),
            name,
            LinkKind::Tun,
            Some(mac),
        )
    }

    async fn set_master(&self, name: &str, bridge: &str) -> Result<(), OpsError> {
        let not_found = |link: &str| OpsError::new("set master", link, OpsErrorKind::NotFound);
        let mut st = self.record(Call::SetMaster(name.into(), bridge.into()), name)?;
        if st.links.get(bridge).map(|b| &b.kind) != Some(&LinkKind::Bridge) {
            return Err(not_found(bridge));
        }
        let link = st.links.get_mut(name).ok_or_else(|| not_found(name))?;
        if link.master.as_deref() != Some(bridge) {
            link.master = Some(bridge.to_string());
            link.learning = Some(true);
        }
        Ok(())
    }

    async fn set_up(&self, name: &str, up: bool) -> Result<(), OpsError> {
        self.change(Call::SetUp(name.into(), up), name, |l| l.up = up)
    }

    async fn set_learning(&self, name: &str, on: bool) -> Result<(), OpsError> {
        let call = Call::SetLearning(name.into(), on);
        let mut st = self.record(call, name)?;
        let link = st
            .links
            .get_mut(name)
            .filter(|l| l.master.is_some())
            .ok_or_else(|| OpsError::new("set learning", name, OpsErrorKind::NotFound))?;
        link.learning = Some(on);
        Ok(())
    }

    async fn set_alias(&self, name: &str, alias: &str) -> Result<(), OpsError> {
        self.change(Call::SetAlias(name.into(), alias.into()), name, |l| {
            l.alias = (!alias.is_empty()).then(|| alias.to_string())
        })
    }

    async fn delete(&self, name: &str) -> Result<(), OpsError> {
        let mut st = self.record(Call::Delete(name.into()), name)?;
        if st.links.remove(name).is_none() {
            return Err(OpsError::new("delete", name, OpsErrorKind::NotFound));
        }
        for l in st.links.values_mut() {
            if l.master.as_deref() == Some(name) {
                l.master = None;
                l.learning = None;
            }
        }
        Ok(())
    }

    async fn set_bridge_netfilter(&self, bridge: &str) -> Result<(), OpsError> {
        let mut st = self.record(Call::SetBridgeNetfilter(bridge.into()), bridge)?;
        match st.links.get_mut(bridge) {
            Some(l) if l.kind == LinkKind::Bridge => Ok(()),
            _ => Err(OpsError::new(
                "set bridge netfilter",
                bridge,
                OpsErrorKind::NotFound,
            )),
        }
    }

    async fn nft(&self, script: &str) -> Result<(), OpsError> {
        self.record(Call::Nft(script.into()), "").map(drop)
    }
}
