//! `cumulo up --tenant-network cnci`: tenant networks through CNCIs on the one host.
//!
//! The host gets an address on a compute network of its own: a link [`UPLINK`] that `up` makes
//! (a dummy where the kernel has one, else an empty bridge: either only holds the address) and
//! records in the cluster's directory, so that `down` deletes that link, by name, and only when
//! `up` made it. The agent runs as a network node too: each CNCI is a `cumulo-cnci` process (or
//! with the libvirt backend a VM booted from the CNCI guest) in a network namespace of its own,
//! with an address from the upper half of the compute network, reached through the host (a veth
//! pair, proxy ARP on [`UPLINK`]). `down` stops what the agent leaves behind: the CNCI processes
//! and their namespaces, as the agent's records under `<agent state>/cnci` name them.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::str::FromStr;

use ipnet::Ipv4Net;

use super::error::{UpError, io_err};
use super::layout::Layout;

/// How tenant instances are networked (the controller's `--tenant-network`, or `auto`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum TenantNetwork {
    /// `cnci` where this host allows it (root, `ip`, `nft`, network namespaces), else `none`
    /// with the reason.
    #[default]
    Auto,
    /// No tenant network: addresses are allocated and shown, nothing is plumbed.
    None,
    /// One CNCI per tenant subnet, run by the host's agent (root only).
    Cnci,
}

impl TenantNetwork {
    /// The controller's `--tenant-network` value (`auto` is resolved before it is passed on).
    pub fn as_str(self) -> &'static str {
        match self {
            TenantNetwork::Auto => "auto",
            TenantNetwork::None => "none",
            TenantNetwork::Cnci => "cnci",
        }
    }
}

/// Whether this host can have tenant networks through CNCIs; the reason when it cannot.
pub fn tenant_networks_possible() -> Result<(), String> {
    if !is_root() {
        return Err(
            "they need root (the CNCIs run in network namespaces, and the host gets a \
                    compute-network link)"
                .into(),
        );
    }
    for (tool, package) in [("ip", "iproute2"), ("nft", "nftables")] {
        let found = Command::new(tool)
            .arg("-V")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
        if !found {
            return Err(format!("`{tool}` is missing (install {package})"));
        }
    }
    let netns = Command::new("unshare")
        .args(["--net", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    match netns {
        Ok(s) if s.success() => Ok(()),
        _ => Err("this host does not allow network namespaces (`unshare --net` failed)".into()),
    }
}

/// The link `up` makes for the host's compute-network address.
pub const UPLINK: &str = "cumulo0";
/// The default compute-network address of the host.
pub const DEFAULT_ADDRESS: &str = "198.18.255.1/24";
/// The image name of the CNCI guest in the agent's image store (the controller's default
/// `--cnci-image`).
pub const CNCI_IMAGE: &str = "cnci";

/// The host's address on its compute network, with the network's prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ComputeNet {
    /// The host's address (the tunnels' local end).
    pub address: Ipv4Addr,
    /// The compute network's prefix length.
    pub prefix: u8,
}

/// Why an `ADDRESS/PREFIX` is not a compute network for `up`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ComputeNetError {
    /// Not `A.B.C.D/N`.
    #[error("{0:?}: not IPV4-ADDRESS/PREFIX")]
    Syntax(String),
    /// The prefix leaves too few addresses, or too many.
    #[error("prefix /{0}: must be 8 to 29 (the CNCIs take the upper half of the network)")]
    Prefix(u8),
    /// The host's address is where the CNCIs' addresses are, or not a host address.
    #[error(
        "{0}: the host's address must be a host address in the lower half of its network \
         (the CNCIs take the upper half)"
    )]
    Address(String),
}

impl FromStr for ComputeNet {
    type Err = ComputeNetError;

    fn from_str(s: &str) -> Result<ComputeNet, ComputeNetError> {
        let syntax = || ComputeNetError::Syntax(s.to_string());
        let (addr, prefix) = s.split_once('/').ok_or_else(syntax)?;
        let address: Ipv4Addr = addr.parse().map_err(|_| syntax())?;
        let prefix: u8 = prefix.parse().map_err(|_| syntax())?;
        if !(8..=29).contains(&prefix) {
            return Err(ComputeNetError::Prefix(prefix));
        }
        let net = ComputeNet { address, prefix };
        let (lower, _) = net.halves();
        if !lower.contains(&address)
            || address == lower.network()
            || address.is_loopback()
            || address.is_multicast()
        {
            return Err(ComputeNetError::Address(s.to_string()));
        }
        Ok(net)
    }
}

impl ComputeNet {
    /// The network (prefix 8 to 29, checked by the parser).
    fn net(self) -> Ipv4Net {
        Ipv4Net::new(self.address, self.prefix).map_or_else(|_| Ipv4Net::default(), |n| n.trunc())
    }

    /// The network's lower half (the hosts') and upper half (the CNCIs').
    fn halves(self) -> (Ipv4Net, Ipv4Net) {
        let net = self.net();
        let mut halves = net.subnets(self.prefix + 1).into_iter().flatten();
        let lower = halves.next().unwrap_or(net);
        (lower, halves.next().unwrap_or(lower))
    }

    /// The network's address.
    pub fn network(self) -> Ipv4Addr {
        self.net().network()
    }

    /// The floating range, the controller's and the agent's `--floating-range` alike (the
    /// controller's default): the agent routes each floating IP of it to the CNCI that holds it.
    pub const FLOATING_RANGE: &'static str = "192.168.233.0/24";

    /// The CNCIs' addresses (the agent's `--cnci-addresses`): the upper half of the network.
    pub fn cnci_addresses(self) -> String {
        self.halves().1.to_string()
    }
}

impl std::fmt::Display for ComputeNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.address, self.prefix)
    }
}

/// Whether this process runs as root (CNCIs need namespaces, links and sysctls).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Where `up` records the link it made.
fn record(layout: &Layout) -> PathBuf {
    layout.root.join("uplink")
}

/// Runs `ip ARGS`; its stderr as the error.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ip: {e} (install iproute2)"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists() || ip(&["link", "show", "dev", name]).is_ok()
}

/// Makes [`UPLINK`] with the host's compute-network address (or keeps the one an earlier `up`
/// made) and brings it up. Returns the link's kind, for the progress line.
pub fn make_uplink(layout: &Layout, net: ComputeNet) -> Result<String, UpError> {
    let path = record(layout);
    let ours = uplink(layout).as_deref() == Some(UPLINK);
    let link_err = |e: String| UpError::Other(format!("the compute network link: {e}"));
    let kind = if link_exists(UPLINK) {
        if !ours {
            return Err(UpError::LinkTaken(UPLINK.to_string()));
        }
        // Ours: only this run's address on it (an earlier `up` may have had another).
        ip(&["addr", "flush", "dev", UPLINK]).map_err(link_err)?;
        "kept".to_string()
    } else {
        // Recorded before it is made: a crash in between leaves a record `down` clears.
        std::fs::write(&path, format!("{UPLINK}\n")).map_err(io_err(&path))?;
        // A dummy where the kernel has one; an empty bridge holds an address just as well.
        let made = ip(&["link", "add", UPLINK, "type", "dummy"])
            .map(|()| "dummy")
            .or_else(|_| ip(&["link", "add", UPLINK, "type", "bridge"]).map(|()| "bridge"));
        match made {
            Ok(kind) => kind.to_string(),
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                return Err(link_err(e));
            }
        }
    };
    let address = net.to_string();
    let set_up = ip(&["addr", "replace", &address, "dev", UPLINK])
        .and_then(|()| ip(&["link", "set", UPLINK, "up"]));
    if let Err(e) = set_up {
        remove_uplink(layout);
        return Err(link_err(e));
    }
    Ok(format!("{UPLINK} {address} ({kind})"))
}

/// Uses `link`, a link of the host's that holds the compute-network address already (`up
/// --compute-link`): checked, recorded (so that `down` knows the cluster has tenant networks)
/// but never changed nor deleted. Returns the progress line's note.
pub fn use_link(layout: &Layout, link: &str, net: ComputeNet) -> Result<String, UpError> {
    if link == UPLINK {
        return Err(UpError::Other(format!(
            "--compute-link {UPLINK}: that is the name of the link `up` makes; give the host's \
             own interface, or no --compute-link"
        )));
    }
    // A link an earlier `up` made goes first: the record names only one.
    remove_uplink(layout);
    let listing = Command::new("ip")
        .args(["-o", "addr", "show", "dev", link])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| UpError::Other(format!("ip: {e} (install iproute2)")))?;
    if !listing.status.success() {
        return Err(UpError::Other(format!(
            "--compute-link {link}: {}",
            String::from_utf8_lossy(&listing.stderr).trim()
        )));
    }
    if !holds_address(&String::from_utf8_lossy(&listing.stdout), net) {
        return Err(UpError::Other(format!(
            "--compute-link {link} does not hold {net} (--compute-address): give the address \
             and prefix it has on the compute network"
        )));
    }
    let path = record(layout);
    std::fs::write(&path, format!("{link}\n")).map_err(io_err(&path))?;
    Ok(format!("{link} {net} (this host's)"))
}

/// Whether `ip -o addr show` output holds the address with its prefix.
fn holds_address(listing: &str, net: ComputeNet) -> bool {
    let want = net.to_string();
    listing.lines().any(|line| {
        let mut words = line.split_whitespace();
        while let Some(w) = words.next() {
            if w == "inet" {
                return words.next() == Some(want.as_str());
            }
        }
        false
    })
}

/// The link the CNCIs are reached through, as `up` recorded it ([`UPLINK`] or the host's own
/// `--compute-link`), while the cluster has tenant networks.
pub fn uplink(layout: &Layout) -> Option<String> {
    let name = std::fs::read_to_string(record(layout))
        .ok()?
        .trim()
        .to_string();
    (!name.is_empty()).then_some(name)
}

/// Whether the cluster was brought up with tenant networks (a compute network link recorded).
pub fn uplink_recorded(layout: &Layout) -> bool {
    uplink(layout).is_some()
}

/// Deletes the link `up` made (by the name it recorded); `Some(name)` when there was one. A
/// host's own link (`--compute-link`) is left as it is: only the record goes.
pub fn remove_uplink(layout: &Layout) -> Option<String> {
    let path = record(layout);
    let name = std::fs::read_to_string(&path).ok()?.trim().to_string();
    // Only the name `up` uses is deleted: any other is the host's.
    if name != UPLINK {
        let _ = std::fs::remove_file(&path);
        return None;
    }
    if !link_exists(&name) {
        let _ = std::fs::remove_file(&path);
        return None;
    }
    match ip(&["link", "del", "dev", &name]) {
        Ok(()) => {
            let _ = std::fs::remove_file(&path);
            Some(name)
        }
        // Kept on record for a `down` that may (root).
        Err(e) => {
            warn(&format!("the compute network link is left: {e}"));
            None
        }
    }
}

/// The prefixes of the agent's tenant links (bridges, VXLAN and GRE-tap tunnels, taps, the
/// metadata responders' bridge ports): the agent's `net::names` and `net::metadata`.
const TENANT_LINK_PREFIXES: [&str; 5] = ["cb-", "cv-", "cg-", "ct-", "cm-"];
/// The prefix of the agent's metadata responders' namespaces (`net::metadata`).
const METADATA_NETNS_PREFIX: &str = "cumulo-md-";
/// What the agent writes at the start of its links' aliases.
const TENANT_LINK_ALIAS: &str = "alias cumulo/";
/// The nftables tables the agent filters its tenant ports with.
const PORT_TABLES: [(&str, &str); 2] = [("bridge", "cumulo_ports"), ("inet", "cumulo_ports")];

/// The agent's tenant links in `ip -o link show` output: a name with one of its prefixes and
/// an alias it wrote.
pub fn tenant_links(listing: &str) -> Vec<String> {
    listing
        .lines()
        .filter(|line| line.contains(TENANT_LINK_ALIAS))
        .filter_map(|line| line.split(": ").nth(1))
        .map(|name| name.split('@').next().unwrap_or(name).to_string())
        .filter(|name| TENANT_LINK_PREFIXES.iter().any(|p| name.starts_with(p)))
        .collect()
}

/// The namespaces of the agent's metadata responders in `ip -o link show` output: where its
/// metadata ports' peers are (`link-netns NAME`).
pub fn metadata_namespaces(listing: &str) -> Vec<String> {
    listing
        .lines()
        .filter(|line| line.contains(TENANT_LINK_ALIAS))
        .filter(|line| {
            line.split(": ")
                .nth(1)
                .is_some_and(|name| name.starts_with("cm-"))
        })
        .filter_map(|line| line.split(" link-netns ").nth(1))
        // `ip -o` ends each part of a record with a backslash.
        .filter_map(|rest| rest.split(|c: char| c.is_whitespace() || c == '\\').next())
        .filter(|ns| ns.starts_with(METADATA_NETNS_PREFIX))
        .map(str::to_string)
        .collect()
}

/// The start of the names of this cluster's agent's metadata responders' namespaces:
/// `cumulo-md-`, the node's UUID, `-` (`net::metadata`). The node is the UUID the agent's
/// certificate is bound to (`up` binds it), else the one the agent keeps in its state directory
/// (`ssntp-<roles>.uuid`, one per role set it ran with).
pub fn own_metadata_prefixes(layout: &Layout) -> Vec<String> {
    let (cert, _) = layout.cert("agent");
    let bound = certtool::files::read_certs(&cert)
        .ok()
        .and_then(|certs| ssntp::cert::CertInfo::parse(certs.first()?).ok())
        .and_then(|info| match info.binding {
            ssntp::UuidBinding::Bound(node) => Some(node),
            _ => None,
        });
    let kept = std::fs::read_dir(layout.state("agent"))
        .map(|dir| {
            dir.flatten()
                .filter(|e| {
                    let name = e.file_name();
                    let name = name.to_string_lossy();
                    name.starts_with("ssntp-") && name.ends_with(".uuid")
                })
                .filter_map(|e| std::fs::read_to_string(e.path()).ok())
                .filter_map(|text| uuid::Uuid::parse_str(text.trim()).ok())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    bound
        .into_iter()
        .chain(kept)
        .map(|node| format!("{METADATA_NETNS_PREFIX}{}-", node.simple()))
        .collect()
}

/// The namespaces in `names` whose name starts with one of `prefixes`.
pub fn namespaces_named(names: &[String], prefixes: &[String]) -> Vec<String> {
    names
        .iter()
        .filter(|n| prefixes.iter().any(|p| n.starts_with(p.as_str())))
        .cloned()
        .collect()
}

/// Deletes what the (stopped) agent left of its tenant networks on this host: its links (taps
/// and metadata ports first, then tunnels and bridges), its metadata responders' namespaces
/// (those its metadata ports lead to, and those named after its node, `own_metadata`: a
/// responder's namespace may be made before its port, and an agent killed in between leaves
/// it portless) and its port filters' nftables tables. Returns the links and namespaces
/// deleted.
pub fn remove_tenant_links(own_metadata: &[String]) -> Vec<String> {
    let listing = Command::new("ip")
        .args(["-o", "link", "show"])
        .stdin(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let mut links = tenant_links(&listing);
    // Taps and metadata ports before the bridges they are on.
    links.sort_by_key(|l| !(l.starts_with("ct-") || l.starts_with("cm-")));
    let mut deleted = Vec::new();
    for link in links {
        match ip(&["link", "del", "dev", &link]) {
            Ok(()) => deleted.push(link),
            Err(e) => warn(&format!("a tenant link is left: {e}")),
        }
    }
    // The metadata responders' namespaces: the peers of this host's metadata ports (those of
    // another cluster on the same machine are not ours).
    let mut spaces = metadata_namespaces(&listing);
    let named: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    for ns in namespaces_named(&named, own_metadata) {
        if !spaces.contains(&ns) {
            spaces.push(ns);
        }
    }
    for ns in spaces {
        match ip(&["netns", "del", &ns]) {
            Ok(()) => deleted.push(ns),
            Err(e) => warn(&format!("a metadata namespace is left: {e}")),
        }
    }
    for (family, table) in PORT_TABLES {
        // Absent when no port was filtered: nothing to say then.
        let _ = Command::new("nft")
            .args(["delete", "table", family, table])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    deleted
}

/// The agent's CNCI records.
pub fn records_dir(layout: &Layout) -> PathBuf {
    layout.state("agent").join("cnci")
}

/// The instance UUIDs of the CNCIs the agent has records of.
pub fn recorded(layout: &Layout) -> Vec<String> {
    std::fs::read_dir(records_dir(layout))
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("json"))
                .filter_map(|p| p.file_stem()?.to_str().map(str::to_string))
                .filter(|stem| uuid::Uuid::parse_str(stem).is_ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Stops the CNCI processes the agent left and deletes their namespaces and records (the agent
/// is stopped first: it would start them again), through `cumulo-agent clean-up-cncis`: the
/// agent knows its records. Returns the namespaces deleted.
pub fn clean_up(layout: &Layout) -> Vec<String> {
    if recorded(layout).is_empty() {
        return Vec::new();
    }
    let program = match super::error::binary("cumulo-agent") {
        Ok(p) => p,
        Err(e) => {
            warn(&format!("CNCIs not cleaned up: {e}"));
            return Vec::new();
        }
    };
    let grace = format!("{}ms", super::GRACE.as_millis());
    let state = layout.state("agent");
    let out = std::process::Command::new(&program)
        .arg("clean-up-cncis")
        .arg("--state-dir")
        .arg(&state)
        .args(["--grace", &grace])
        .stdin(std::process::Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect(),
        Ok(o) => {
            warn(&format!(
                "{} clean-up-cncis: {}",
                program.display(),
                String::from_utf8_lossy(&o.stderr).trim()
            ));
            Vec::new()
        }
        Err(e) => {
            warn(&format!("{}: {e}", program.display()));
            Vec::new()
        }
    }
}

/// `down` has no logger: a warning goes to stderr.
fn warn(what: &str) {
    eprintln!("cumulo: warning: {what}");
}

/// Builds the CNCI guest (`scripts/cnci-guest.sh` with the `cumulo-cnci` next to cumulo) into
/// the agent's image store as [`CNCI_IMAGE`].
pub fn install_cnci_guest(
    layout: &Layout,
    scripts: &Path,
    cnci: &Path,
) -> Result<PathBuf, UpError> {
    let script = scripts.join("cnci-guest.sh");
    let image = layout.state("agent").join("images").join(CNCI_IMAGE);
    std::fs::create_dir_all(&image).map_err(io_err(&image))?;
    let out = Command::new("bash")
        .arg(&script)
        .arg(cnci)
        .arg(&image)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .status()
        .map_err(io_err(&script))?;
    if !out.success() {
        return Err(UpError::Other(format!(
            "{} failed: the CNCI guest could not be built",
            script.display()
        )));
    }
    Ok(image)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agents_own_metadata_namespaces_are_named_after_its_uuid_files() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        assert!(
            own_metadata_prefixes(&layout).is_empty(),
            "no agent state yet"
        );
        let state = layout.state("agent");
        std::fs::create_dir_all(&state).unwrap();
        std::fs::write(
            state.join("ssntp-agent-netagent.uuid"),
            "4d4fb4ad-8a6e-40e6-9535-ac00c10ff804\n",
        )
        .unwrap();
        std::fs::write(state.join("ssntp-agent.uuid"), "not a uuid\n").unwrap();
        std::fs::write(
            state.join("other.uuid"),
            "0badcafe-0bad-cafe-0bad-cafe0badcafe",
        )
        .unwrap();
        let prefixes = own_metadata_prefixes(&layout);
        assert_eq!(prefixes, ["cumulo-md-4d4fb4ad8a6e40e69535ac00c10ff804-"]);
        let names: Vec<String> = [
            "cumulo-md-4d4fb4ad8a6e40e69535ac00c10ff804-00ac1000",
            "cumulo-md-0badcafe0badcafe0badcafe0badcafe-00ac1000",
            "cumulo-cnci-4d4fb4ad8a6e",
        ]
        .map(String::from)
        .into();
        assert_eq!(
            namespaces_named(&names, &prefixes),
            ["cumulo-md-4d4fb4ad8a6e40e69535ac00c10ff804-00ac1000"]
        );
    }

    #[test]
    fn the_agents_tenant_links_are_found_by_name_and_alias() {
        let listing = "\
1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN\\    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00
7: cb-0000a1b2: <BROADCAST,MULTICAST,UP> mtu 1500 qdisc noqueue state UP\\    link/ether 02:00:00:00:00:01 brd ff:ff:ff:ff:ff:ff\\    alias cumulo/1 bridge t=1 s=172.16.0.0/24
8: cv-0000a1b2: <BROADCAST,MULTICAST,UP> mtu 1450 qdisc noqueue master cb-0000a1b2\\    link/ether 02:00:00:00:00:02 brd ff:ff:ff:ff:ff:ff\\    alias cumulo/1 vxlan l=1 p=4789
9: ct-0123456789ab: <BROADCAST,MULTICAST,UP> mtu 1450 master cb-0000a1b2\\    link/ether 02:00:00:00:00:03 brd ff:ff:ff:ff:ff:ff\\    alias cumulo/1 tap i=1
10: cb-ffffffff: <BROADCAST,MULTICAST> mtu 1500\\    link/ether 02:00:00:00:00:04 brd ff:ff:ff:ff:ff:ff
11: veth0@if12: <BROADCAST> mtu 1500\\    link/ether 02:00:00:00:00:05 brd ff:ff:ff:ff:ff:ff\\    alias cumulo/1 not ours
13: cm-0000a1b2@if2: <BROADCAST,MULTICAST,UP> mtu 1500 master cb-0000a1b2\\    link/ether 02:00:00:00:00:06 brd ff:ff:ff:ff:ff:ff link-netns cumulo-md-0badcafe0badcafe0badcafe0badcafe-0000a1b2\\    alias cumulo/metadata
14: veth9@if2: <BROADCAST,MULTICAST,UP> mtu 1500\\    link/ether 02:00:00:00:00:07 brd ff:ff:ff:ff:ff:ff link-netns cumulo-md-other\\    alias cumulo/x
";
        // A link without the agent's alias (cb-ffffffff) is not taken, nor one with another name.
        assert_eq!(
            tenant_links(listing),
            [
                "cb-0000a1b2",
                "cv-0000a1b2",
                "ct-0123456789ab",
                "cm-0000a1b2"
            ]
        );
        // The metadata port's peer namespace, and no other.
        assert_eq!(
            metadata_namespaces(listing),
            ["cumulo-md-0badcafe0badcafe0badcafe0badcafe-0000a1b2"]
        );
    }

    #[test]
    fn a_hosts_own_link_must_hold_the_compute_address() {
        let net: ComputeNet = "10.77.0.1/24".parse().unwrap();
        let listing = "2: eth0    inet 10.77.0.1/24 scope global eth0\\       valid_lft forever\n\
                       2: eth0    inet6 fe80::1/64 scope link \\       valid_lft forever\n";
        assert!(holds_address(listing, net));
        assert!(!holds_address(listing, "10.77.0.2/24".parse().unwrap()));
        assert!(!holds_address(listing, "10.77.0.1/25".parse().unwrap()));
        assert!(!holds_address("", net));
    }

    #[test]
    fn the_cncis_take_the_upper_half_of_the_compute_network() {
        let net: ComputeNet = DEFAULT_ADDRESS.parse().unwrap();
        assert_eq!(net.address, Ipv4Addr::new(198, 18, 255, 1));
        assert_eq!(net.prefix, 24);
        assert_eq!(net.cnci_addresses(), "198.18.255.128/25");
        assert_eq!(net.to_string(), DEFAULT_ADDRESS);
        let wide: ComputeNet = "10.20.0.7/16".parse().unwrap();
        assert_eq!(wide.cnci_addresses(), "10.20.128.0/17");
        let small: ComputeNet = "192.168.3.9/29".parse().unwrap();
        assert_eq!(small.cnci_addresses(), "192.168.3.12/30");
    }

    #[test]
    fn bad_compute_networks_are_refused_with_the_reason() {
        for bad in [
            "",
            "198.18.255.1",
            "198.18.255.1/",
            "x/24",
            "198.18.255.1/x",
            "::1/64",
        ] {
            assert!(
                matches!(bad.parse::<ComputeNet>(), Err(ComputeNetError::Syntax(_))),
                "{bad}"
            );
        }
        for bad in ["10.0.0.1/7", "10.0.0.1/30", "10.0.0.1/32", "10.0.0.1/255"] {
            assert!(
                matches!(bad.parse::<ComputeNet>(), Err(ComputeNetError::Prefix(_))),
                "{bad}"
            );
        }
        // The network's own address, an address where the CNCIs go, loopback.
        for bad in [
            "198.18.255.0/24",
            "198.18.255.128/24",
            "198.18.255.200/24",
            "127.0.0.1/8",
        ] {
            assert!(
                matches!(bad.parse::<ComputeNet>(), Err(ComputeNetError::Address(_))),
                "{bad}"
            );
        }
    }
}
