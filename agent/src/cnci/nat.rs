//! The concentrator's address translation: outbound NAT of its tenant subnets to its own address
//! on the compute network, and 1:1 public IPs, behind [`NatOps`] ([`NftNat`] drives nftables
//! through the `nft` binary; [`FakeNat`] records for tests).
//!
//! One nftables table, `ip cumulo_cnci`, in the concentrator's namespace:
//!
//! - set `subnets` (intervals): the tenant subnets it serves; set `siblings`: the tenant's
//!   subnets that its other concentrators serve (REFRESH_CNCI);
//! - maps `public_in` (public → private) and `public_out` (private → public);
//! - chain `cnci_pre` (nat prerouting): `dnat to ip daddr map @public_in`;
//! - chain `cnci_post` (nat postrouting), leaving by the uplink only: nothing towards a
//!   sibling subnet (routed as it is), then `snat to ip saddr map @public_out`, then `ip saddr
//!   @subnets snat to <its address>` (outbound NAT);
//! - set `protected` (intervals): the cluster's management networks (`cumulo-cnci --protect`:
//!   the compute network, the network node's own addresses, what the node's operator adds);
//! - chain `cnci_fwd` (filter forward): nothing to link-local addresses (169.254.0.0/16: the
//!   node's relay and route channel beside a CNCI VM) passes; then replies pass; then nothing
//!   from the subnets to `protected` (a tenant opens no connection to the control plane); then
//!   mapped (DNATed) connections and the sibling subnets' traffic pass; anything else from
//!   outside the subnets to the subnets is dropped, so a private address is reached from
//!   outside only through a public IP.
//!
//! [`NftNat::setup`] makes the table if it is missing and rewrites its chains, keeping the
//! maps: a restarted concentrator keeps its public IPs and reads them back.

use std::collections::BTreeMap;
use std::future::Future;
use std::io::Write;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use crate::net::{Cidr, OpsError, OpsErrorKind};

/// The table's name.
pub const TABLE: &str = "cumulo_cnci";

/// The concentrator's translation rules. Every call is in the namespace the implementation
/// runs in.
pub trait NatOps: Send + Sync + 'static {
    /// Makes the table for an uplink (its name and address), keeping the public mappings and
    /// emptying the subnet set; returns the mappings (public, private) it holds.
    fn setup(
        &self,
        uplink: &str,
        uplink_ip: Ipv4Addr,
    ) -> impl Future<Output = Result<Vec<(Ipv4Addr, Ipv4Addr)>, OpsError>> + Send;
    /// Adds a subnet to translate outbound (nothing happens if it is there).
    fn add_subnet(&self, subnet: Cidr) -> impl Future<Output = Result<(), OpsError>> + Send;
    /// Removes a subnet (`NotFound` if it is not there).
    fn del_subnet(&self, subnet: Cidr) -> impl Future<Output = Result<(), OpsError>> + Send;
    /// Sets the sibling subnets (routed between, not translated).
    fn set_siblings(&self, siblings: &[Cidr]) -> impl Future<Output = Result<(), OpsError>> + Send;
    /// Sets the protected networks: what the tenant subnets may not open connections to through
    /// the concentrator (the cluster's management addresses).
    fn set_protected(&self, nets: &[Cidr]) -> impl Future<Output = Result<(), OpsError>> + Send;
    /// Maps a public address to a private one, both ways (`Exists` if either is mapped).
    fn map(
        &self,
        public: Ipv4Addr,
        private: Ipv4Addr,
    ) -> impl Future<Output = Result<(), OpsError>> + Send;
    /// Removes a mapping (`NotFound` if it is not there).
    fn unmap(
        &self,
        public: Ipv4Addr,
        private: Ipv4Addr,
    ) -> impl Future<Output = Result<(), OpsError>> + Send;
}

/// The script that makes the table and (re)writes its chains.
pub fn setup_script(uplink: &str, uplink_ip: Ipv4Addr) -> String {
    let t = format!("ip {TABLE}");
    [
        format!("add table {t}"),
        format!("add map {t} public_in {{ type ipv4_addr : ipv4_addr; }}"),
        format!("add map {t} public_out {{ type ipv4_addr : ipv4_addr; }}"),
        format!("add set {t} subnets {{ type ipv4_addr; flags interval; }}"),
        format!("flush set {t} subnets"),
        format!("add set {t} siblings {{ type ipv4_addr; flags interval; }}"),
        format!("add set {t} protected {{ type ipv4_addr; flags interval; }}"),
        format!(
            "add chain {t} cnci_pre {{ type nat hook prerouting priority dstnat; policy accept; }}"
        ),
        format!(
            "add chain {t} cnci_post {{ type nat hook postrouting priority srcnat; policy accept; }}"
        ),
        format!(
            "add chain {t} cnci_fwd {{ type filter hook forward priority filter; policy accept; }}"
        ),
        format!("flush chain {t} cnci_pre"),
        format!("flush chain {t} cnci_post"),
        format!("flush chain {t} cnci_fwd"),
        format!("add rule {t} cnci_pre dnat to ip daddr map @public_in"),
        format!("add rule {t} cnci_post oifname {uplink:?} ip daddr @siblings return"),
        format!("add rule {t} cnci_post oifname {uplink:?} snat to ip saddr map @public_out"),
        format!("add rule {t} cnci_post oifname {uplink:?} ip saddr @subnets snat to {uplink_ip}"),
        // Nothing is forwarded to link-local addresses: a tenant never reaches the node's relay
        // or route channel (169.254.0.1 beside a CNCI VM) through the CNCI. (The metadata
        // service, 169.254.169.254, will need an exception of its own when it comes.)
        format!("add rule {t} cnci_fwd ip daddr 169.254.0.0/16 drop"),
        format!("add rule {t} cnci_fwd ct state established,related accept"),
        // The tenant subnets open no connection to the cluster's management addresses (the
        // compute network, the nodes' own addresses, what the node adds): answers to
        // connections from there (a floating IP's) are established and pass above.
        format!("add rule {t} cnci_fwd ip saddr @subnets ip daddr @protected drop"),
        format!("add rule {t} cnci_fwd ct status dnat accept"),
        format!("add rule {t} cnci_fwd ip saddr @siblings ip daddr @subnets accept"),
        format!("add rule {t} cnci_fwd ip daddr @subnets ip saddr != @subnets drop"),
    ]
    .join("\n")
        + "\n"
}

/// The elements of the `protected` set for `nets`: IPv4 networks with their host bits cleared,
/// without those inside another (an interval set takes no overlap), sorted.
pub fn protected_elements(nets: &[Cidr]) -> Vec<String> {
    let mut v4: Vec<(u32, u8)> = nets
        .iter()
        .filter_map(|n| match n.addr {
            std::net::IpAddr::V4(a) if n.prefix <= 32 => {
                let mask = if n.prefix == 0 {
                    0
                } else {
                    u32::MAX << (32 - u32::from(n.prefix))
                };
                Some((u32::from(a) & mask, n.prefix))
            }
            _ => None,
        })
        .collect();
    v4.sort_unstable();
    v4.dedup();
    let inside = |(a, p): (u32, u8), (b, q): (u32, u8)| {
        q <= p && (q == 0 || (a ^ b) >> (32 - u32::from(q)) == 0)
    };
    v4.iter()
        .filter(|&&n| !v4.iter().any(|&m| m != n && inside(n, m)))
        .map(|(a, p)| format!("{}/{p}", Ipv4Addr::from(*a)))
        .collect()
}

/// An interface name nft can quote: what the kernel allows, without quotes or backslashes.
fn sane_ifname(name: &str) -> bool {
    !name.is_empty()
        && name.len() < 16
        && name
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
}

/// Reads the (public, private) pairs of `nft -j list map` output.
pub fn parse_map(json: &str) -> Vec<(Ipv4Addr, Ipv4Addr)> {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(json) else {
        return Vec::new();
    };
    let items = v
        .get("nftables")
        .and_then(|n| n.as_array())
        .cloned()
        .unwrap_or_default();
    items
        .iter()
        .filter_map(|i| i.get("map")?.get("elem")?.as_array().cloned())
        .flatten()
        .filter_map(|pair| {
            let pair = pair.as_array()?;
            let ip = |i: usize| pair.get(i)?.as_str()?.parse::<Ipv4Addr>().ok();
            Some((ip(0)?, ip(1)?))
        })
        .collect()
}

/// The real [`NatOps`]: the `nft` binary, in the namespace of the process.
#[derive(Debug, Clone, Default)]
pub struct NftNat;

/// Runs `nft` with `args`, feeding `script` on stdin when given; its stdout.
fn nft(
    op: &'static str,
    what: &str,
    args: &[&str],
    script: Option<String>,
) -> Result<String, OpsError> {
    let other = |m: String| OpsError::new(op, what, OpsErrorKind::Other(m));
    let mut child = Command::new("nft")
        .args(args)
        .stdin(if script.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| other(format!("running nft: {e}")))?;
    if let (Some(script), Some(mut stdin)) = (script, child.stdin.take()) {
        stdin
            .write_all(script.as_bytes())
            .map_err(|e| other(format!("writing to nft: {e}")))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| other(format!("running nft: {e}")))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let kind = if err.contains("File exists") {
        OpsErrorKind::Exists
    } else if err.contains("No such file or directory") {
        OpsErrorKind::NotFound
    } else {
        OpsErrorKind::Other(err.lines().next().unwrap_or("nft failed").to_string())
    };
    Err(OpsError::new(op, what, kind))
}

/// [`nft`] on a blocking thread.
async fn nft_async(
    op: &'static str,
    what: String,
    args: &'static [&'static str],
    script: Option<String>,
) -> Result<String, OpsError> {
    let w = what.clone();
    tokio::task::spawn_blocking(move || nft(op, &w, args, script))
        .await
        .map_err(|e| OpsError::new(op, &what, OpsErrorKind::Other(e.to_string())))?
}

impl NatOps for NftNat {
    async fn setup(
        &self,
        uplink: &str,
        uplink_ip: Ipv4Addr,
    ) -> Result<Vec<(Ipv4Addr, Ipv4Addr)>, OpsError> {
        const OP: &str = "set up NAT";
        if !sane_ifname(uplink) {
            return Err(OpsError::new(
                OP,
                uplink,
                OpsErrorKind::Other("not an interface name".into()),
            ));
        }
        let script = setup_script(uplink, uplink_ip);
        nft_async(OP, uplink.to_string(), &["-f", "-"], Some(script)).await?;
        let json = nft_async(
            OP,
            uplink.to_string(),
            &["-j", "list", "map", "ip", TABLE, "public_in"],
            None,
        )
        .await?;
        Ok(parse_map(&json))
    }

    async fn add_subnet(&self, subnet: Cidr) -> Result<(), OpsError> {
        let s = format!("add element ip {TABLE} subnets {{ {subnet} }}\n");
        nft_async("add NAT subnet", subnet.to_string(), &["-f", "-"], Some(s))
            .await
            .map(drop)
    }

    async fn del_subnet(&self, subnet: Cidr) -> Result<(), OpsError> {
        let s = format!("delete element ip {TABLE} subnets {{ {subnet} }}\n");
        nft_async(
            "remove NAT subnet",
            subnet.to_string(),
            &["-f", "-"],
            Some(s),
        )
        .await
        .map(drop)
    }

    async fn set_siblings(&self, siblings: &[Cidr]) -> Result<(), OpsError> {
        let mut s = format!("flush set ip {TABLE} siblings\n");
        if !siblings.is_empty() {
            let list: Vec<String> = siblings.iter().map(ToString::to_string).collect();
            s += &format!(
                "add element ip {TABLE} siblings {{ {} }}\n",
                list.join(", ")
            );
        }
        nft_async("set sibling subnets", String::new(), &["-f", "-"], Some(s))
            .await
            .map(drop)
    }

    async fn set_protected(&self, nets: &[Cidr]) -> Result<(), OpsError> {
        let mut s = format!("flush set ip {TABLE} protected\n");
        let list = protected_elements(nets);
        if !list.is_empty() {
            s += &format!(
                "add element ip {TABLE} protected {{ {} }}\n",
                list.join(", ")
            );
        }
        nft_async(
            "set protected networks",
            String::new(),
            &["-f", "-"],
            Some(s),
        )
        .await
        .map(drop)
    }

    async fn map(&self, public: Ipv4Addr, private: Ipv4Addr) -> Result<(), OpsError> {
        // One transaction: both directions or neither. `create` fails on an existing key.
        let s = format!(
            "create element ip {TABLE} public_in {{ {public} : {private} }}\n\
             create element ip {TABLE} public_out {{ {private} : {public} }}\n"
        );
        nft_async("map public IP", public.to_string(), &["-f", "-"], Some(s))
            .await
            .map(drop)
    }

    async fn unmap(&self, public: Ipv4Addr, private: Ipv4Addr) -> Result<(), OpsError> {
        let s = format!(
            "delete element ip {TABLE} public_in {{ {public} }}\n\
             delete element ip {TABLE} public_out {{ {private} }}\n"
        );
        nft_async("unmap public IP", public.to_string(), &["-f", "-"], Some(s))
            .await
            .map(drop)
    }
}

#[derive(Debug, Default)]
struct FakeState {
    uplink: Option<(String, Ipv4Addr)>,
    subnets: Vec<Cidr>,
    siblings: Vec<Cidr>,
    protected: Vec<String>,
    public: BTreeMap<Ipv4Addr, Ipv4Addr>,
    fail: Option<&'static str>,
}

/// A recording [`NatOps`]. Clones share the state.
#[derive(Debug, Clone, Default)]
pub struct FakeNat(Arc<Mutex<FakeState>>);

impl FakeNat {
    fn lock(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The public mappings now (public → private).
    pub fn public(&self) -> BTreeMap<Ipv4Addr, Ipv4Addr> {
        self.lock().public.clone()
    }

    /// The subnets now.
    pub fn subnets(&self) -> Vec<Cidr> {
        self.lock().subnets.clone()
    }

    /// The sibling subnets now.
    pub fn siblings(&self) -> Vec<Cidr> {
        self.lock().siblings.clone()
    }

    /// The protected networks, as the set's elements.
    pub fn protected(&self) -> Vec<String> {
        self.lock().protected.clone()
    }

    /// The uplink it was set up for.
    pub fn uplink(&self) -> Option<(String, Ipv4Addr)> {
        self.lock().uplink.clone()
    }

    /// The next call of `op` (`map`, `unmap`, `setup`, `add subnet`) fails.
    pub fn fail_next(&self, op: &'static str) {
        self.lock().fail = Some(op);
    }

    fn check(s: &mut FakeState, op: &'static str) -> Result<(), OpsError> {
        if s.fail == Some(op) {
            s.fail = None;
            return Err(OpsError::new(
                op,
                "",
                OpsErrorKind::Other("injected".into()),
            ));
        }
        Ok(())
    }
}

impl NatOps for FakeNat {
    async fn setup(
        &self,
        uplink: &str,
        uplink_ip: Ipv4Addr,
    ) -> Result<Vec<(Ipv4Addr, Ipv4Addr)>, OpsError> {
        let mut s = self.lock();
        FakeNat::check(&mut s, "setup")?;
        s.uplink = Some((uplink.to_string(), uplink_ip));
        s.subnets.clear();
        Ok(s.public.iter().map(|(a, b)| (*a, *b)).collect())
    }

    async fn add_subnet(&self, subnet: Cidr) -> Result<(), OpsError> {
        let mut s = self.lock();
        FakeNat::check(&mut s, "add subnet")?;
        if !s.subnets.contains(&subnet) {
            s.subnets.push(subnet);
        }
        Ok(())
    }

    async fn del_subnet(&self, subnet: Cidr) -> Result<(), OpsError> {
        let mut s = self.lock();
        let before = s.subnets.len();
        s.subnets.retain(|x| *x != subnet);
        if s.subnets.len() == before {
            return Err(OpsError::new(
                "remove NAT subnet",
                "",
                OpsErrorKind::NotFound,
            ));
        }
        Ok(())
    }

    async fn set_siblings(&self, siblings: &[Cidr]) -> Result<(), OpsError> {
        let mut s = self.lock();
        FakeNat::check(&mut s, "set siblings")?;
        s.siblings = siblings.to_vec();
        Ok(())
    }

    async fn set_protected(&self, nets: &[Cidr]) -> Result<(), OpsError> {
        let mut s = self.lock();
        FakeNat::check(&mut s, "set protected")?;
        s.protected = protected_elements(nets);
        Ok(())
    }

    async fn map(&self, public: Ipv4Addr, private: Ipv4Addr) -> Result<(), OpsError> {
        let mut s = self.lock();
        FakeNat::check(&mut s, "map")?;
        if s.public.contains_key(&public) || s.public.values().any(|p| *p == private) {
            return Err(OpsError::new("map public IP", "", OpsErrorKind::Exists));
        }
        s.public.insert(public, private);
        Ok(())
    }

    async fn unmap(&self, public: Ipv4Addr, private: Ipv4Addr) -> Result<(), OpsError> {
        let mut s = self.lock();
        FakeNat::check(&mut s, "unmap")?;
        if s.public.get(&public) != Some(&private) {
            return Err(OpsError::new("unmap public IP", "", OpsErrorKind::NotFound));
        }
        s.public.remove(&public);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protected_elements_are_networks_without_overlaps() {
        let nets: Vec<Cidr> = [
            "198.18.255.7/24",
            "198.18.255.1/32",
            "10.0.0.0/8",
            "10.1.2.3/32",
            "203.0.113.9/32",
            "203.0.113.9/32",
            "2001:db8::/32",
        ]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
        assert_eq!(
            protected_elements(&nets),
            ["10.0.0.0/8", "198.18.255.0/24", "203.0.113.9/32"]
        );
        assert!(protected_elements(&[]).is_empty());
        let s = setup_script("u0", Ipv4Addr::new(198, 18, 0, 100));
        let drop = s
            .lines()
            .position(|l| l.contains("@protected drop"))
            .unwrap();
        let replies = s
            .lines()
            .position(|l| l.contains("established,related accept"))
            .unwrap();
        let dnat = s
            .lines()
            .position(|l| l.contains("ct status dnat"))
            .unwrap();
        // Answers (a floating IP's connections) pass before; a tenant's new ones are dropped
        // before the DNAT rule could let them through.
        assert!(replies < drop && drop < dnat, "{s}");
    }

    #[test]
    fn the_setup_script_translates_by_the_uplink_only() {
        let s = setup_script("u0", Ipv4Addr::new(198, 18, 0, 100));
        assert!(s.contains("add rule ip cumulo_cnci cnci_pre dnat to ip daddr map @public_in"));
        assert!(s.contains(
            "add rule ip cumulo_cnci cnci_post oifname \"u0\" ip saddr @subnets snat to 198.18.0.100"
        ));
        assert!(s.contains("flush set ip cumulo_cnci subnets"));
        assert!(!s.contains("flush map"), "the public IPs survive a restart");
        assert!(sane_ifname("u0") && sane_ifname("eth0.12"));
        assert!(!sane_ifname("") && !sane_ifname("a\"b") && !sane_ifname("sixteen-chars-xx"));
    }

    #[test]
    fn the_maps_are_read_back() {
        let json = r#"{"nftables": [{"metainfo": {"version": "1.0.6"}}, {"map": {"family": "ip",
            "name": "public_in", "table": "cumulo_cnci", "type": "ipv4_addr", "map": "ipv4_addr",
            "elem": [["203.0.113.10", "10.250.0.7"], ["203.0.113.11", "10.250.0.8"]]}}]}"#;
        assert_eq!(
            parse_map(json),
            vec![
                (Ipv4Addr::new(203, 0, 113, 10), Ipv4Addr::new(10, 250, 0, 7)),
                (Ipv4Addr::new(203, 0, 113, 11), Ipv4Addr::new(10, 250, 0, 8)),
            ]
        );
        assert!(parse_map("not json").is_empty());
        assert!(parse_map(r#"{"nftables": [{"map": {"elem": [["x", 1]]}}]}"#).is_empty());
    }
}
