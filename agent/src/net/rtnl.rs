//! [`RtNetOps`]: [`NetOps`] over rtnetlink, with taps made through `/dev/net/tun`.
//!
//! It works in the network namespace of the thread that calls [`RtNetOps::new`]: the netlink
//! socket is opened there, and taps are made from that thread's namespace too (a tap belongs to
//! the namespace of the thread that opens `/dev/net/tun`). Tests move a thread into a namespace
//! of their own first; the agent uses its own namespace.
//!
//! Links are addressed by name: the kernel resolves IFLA_IFNAME in RTM_SETLINK and RTM_DELLINK
//! requests that carry no index.

use futures_util::TryStreamExt;
use rtnetlink::packet_route::link::{
    GreIOFlags, InfoBridge, InfoBridgePort, InfoKind, InfoPortData, LinkAttribute, LinkFlags,
    LinkInfo, LinkMessage,
};
use rtnetlink::{Handle, LinkBridge, LinkBridgePort, LinkGre, LinkUnspec, LinkVeth, LinkVxlan};
use std::collections::HashMap;
use std::net::IpAddr;

use super::ops::{Link, LinkKind, NetOps, OpsError, OpsErrorKind, TunnelSpec};

/// Runs `nft -f -` with `script`. The child is forked from the calling thread, so it works in
/// that thread's network namespace, like the netlink socket and the taps.
async fn run_nft(script: &str) -> Result<(), OpsError> {
    use tokio::io::AsyncWriteExt;
    const OP: &str = "nft";
    let other = |m: String| OpsError::new(OP, "", OpsErrorKind::Other(m));
    let mut child = tokio::process::Command::new("nft")
        .args(["-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| other(format!("running nft: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .await
            .map_err(|e| other(format!("writing to nft: {e}")))?;
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| other(format!("running nft: {e}")))?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let first = err
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("nft failed");
    Err(other(first.to_string()))
}

/// The real [`NetOps`]. See the module documentation.
#[derive(Clone)]
pub struct RtNetOps {
    handle: Handle,
}

const ENODEV: i32 = 19;
const EEXIST: i32 = 17;
const EOPNOTSUPP: i32 = 95;

fn kind_of(err: &rtnetlink::Error) -> OpsErrorKind {
    match err {
        rtnetlink::Error::NetlinkError(msg) => match -msg.raw_code() {
            ENODEV => OpsErrorKind::NotFound,
            EEXIST => OpsErrorKind::Exists,
            EOPNOTSUPP => OpsErrorKind::Unsupported,
            _ => OpsErrorKind::Other(msg.to_io().to_string()),
        },
        other => OpsErrorKind::Other(other.to_string()),
    }
}

fn fail(op: &'static str, link: &str) -> impl FnOnce(rtnetlink::Error) -> OpsError {
    move |e| OpsError::new(op, link, kind_of(&e))
}

/// The RTM_NEWLINK message that makes a tunnel.
pub(crate) fn tunnel_message(spec: &TunnelSpec) -> Result<LinkMessage, OpsError> {
    let refuse = |why: &str| {
        OpsError::new(
            "create tunnel",
            spec.name(),
            OpsErrorKind::Other(why.to_string()),
        )
    };
    match spec {
        TunnelSpec::Vxlan {
            name,
            vni,
            local,
            remote,
            port,
        } => {
            if *vni >= 1 << 24 {
                return Err(refuse("a VXLAN VNI has 24 bits"));
            }
            let b = LinkVxlan::new(name, *vni).port(*port);
            let b = match (local, remote) {
                (IpAddr::V4(l), IpAddr::V4(r)) => b.local(*l).remote(*r),
                (IpAddr::V6(l), IpAddr::V6(r)) => b.local6(*l).remote6(*r),
                _ => return Err(refuse("local and remote differ in family")),
            };
            Ok(b.build())
        }
        TunnelSpec::GreTap {
            name,
            key,
            local,
            remote,
        } => match (local, remote) {
            (IpAddr::V4(l), IpAddr::V4(r)) => Ok(LinkGre::new_gretap(name)
                .local(*l)
                .remote(*r)
                .iflags(GreIOFlags::Key)
                .oflags(GreIOFlags::Key)
                .ikey(*key)
                .okey(*key)
                .build()),
            _ => Err(refuse("GRE-tap over IPv6 (ip6gretap) is not made here")),
        },
    }
}

fn link_of(msg: &LinkMessage, names: &HashMap<u32, String>) -> Option<Link> {
    let mut name = None;
    let mut alias = None;
    let mut master = None;
    let mut mac = None;
    let mut kind = LinkKind::Other(String::new());
    let mut learning = None;
    for attr in &msg.attributes {
        match attr {
            LinkAttribute::IfName(n) => name = Some(n.clone()),
            LinkAttribute::IfAlias(a) if !a.is_empty() => alias = Some(a.clone()),
            LinkAttribute::Controller(i) => master = names.get(i).cloned(),
            LinkAttribute::Address(a) => mac = <[u8; 6]>::try_from(a.as_slice()).ok(),
            LinkAttribute::LinkInfo(infos) => {
                for info in infos {
                    if let LinkInfo::PortData(InfoPortData::BridgePort(port)) = info {
                        learning = port.iter().find_map(|p| match p {
                            InfoBridgePort::Learning(on) => Some(*on),
                            _ => None,
                        });
                    }
                    if let LinkInfo::Kind(k) = info {
                        kind = match k {
                            InfoKind::Bridge => LinkKind::Bridge,
                            InfoKind::Vxlan => LinkKind::Vxlan,
                            InfoKind::GreTap => LinkKind::GreTap,
                            InfoKind::Tun => LinkKind::Tun,
                            InfoKind::Veth => LinkKind::Veth,
                            other => LinkKind::Other(other.to_string()),
                        };
                    }
                }
            }
            _ => {}
        }
    }
    let learning = learning.filter(|_| master.is_some());
    Some(Link {
        name: name?,
        kind,
        alias,
        master,
        up: msg.header.flags.contains(LinkFlags::Up),
        mac,
        learning,
    })
}

fn by_name(name: &str) -> LinkMessage {
    LinkUnspec::new_with_name(name).build()
}

impl RtNetOps {
    /// Opens a netlink socket in the calling thread's network namespace; its connection task
    /// runs on the current tokio runtime.
    pub fn new() -> Result<RtNetOps, OpsError> {
        let (conn, handle, _) = rtnetlink::new_connection()
            .map_err(|e| OpsError::new("open netlink", "", OpsErrorKind::Other(e.to_string())))?;
        tokio::spawn(conn);
        Ok(RtNetOps { handle })
    }

    async fn index(&self, op: &'static str, name: &str) -> Result<u32, OpsError> {
        let mut links = self
            .handle
            .link()
            .get()
            .match_name(name.to_string())
            .execute();
        match links.try_next().await.map_err(fail(op, name))? {
            Some(msg) => Ok(msg.header.index),
            None => Err(OpsError::new(op, name, OpsErrorKind::NotFound)),
        }
    }

    async fn set(&self, op: &'static str, name: &str, msg: LinkMessage) -> Result<(), OpsError> {
        self.handle
            .link()
            .set(msg)
            .execute()
            .await
            .map_err(fail(op, name))
    }
}

impl NetOps for RtNetOps {
    async fn links(&self) -> Result<Vec<Link>, OpsError> {
        let msgs: Vec<LinkMessage> = self
            .handle
            .link()
            .get()
            .execute()
            .try_collect()
            .await
            .map_err(fail("list links", ""))?;
        let names: HashMap<u32, String> = msgs
            .iter()
            .filter_map(|m| {
                m.attributes.iter().find_map(|a| match a {
                    LinkAttribute::IfName(n) => Some((m.header.index, n.clone())),
                    _ => None,
                })
            })
            .collect();
        Ok(msgs.iter().filter_map(|m| link_of(m, &names)).collect())
    }

    async fn create_bridge(&self, name: &str) -> Result<(), OpsError> {
        self.handle
            .link()
            .add(LinkBridge::new(name).build())
            .execute()
            .await
            .map_err(fail("create bridge", name))
    }

    async fn create_tunnel(&self, spec: &TunnelSpec) -> Result<(), OpsError> {
        let msg = tunnel_message(spec)?;
        self.handle
            .link()
            .add(msg)
            .execute()
            .await
            .map_err(fail("create tunnel", spec.name()))
    }

    async fn create_veth(&self, name: &str, peer: &str, mac: [u8; 6]) -> Result<(), OpsError> {
        self.handle
            .link()
            .add(LinkVeth::new(name, peer).build())
            .execute()
            .await
            .map_err(fail("create veth", name))?;
        let msg = LinkUnspec::new_with_name(name)
            .address(mac.to_vec())
            .build();
        self.set("create veth", name, msg).await
    }

    async fn create_tap(&self, name: &str, mac: [u8; 6]) -> Result<(), OpsError> {
        let tap_err = |e: std::io::Error| {
            let kind = match e.raw_os_error() {
                Some(EEXIST) => OpsErrorKind::Exists,
                _ => OpsErrorKind::Other(e.to_string()),
            };
            OpsError::new("create tap", name, kind)
        };
        // TUNSETIFF with IFF_TAP | IFF_NO_PI (no multi-queue: a VMM reopens it with the same
        // type), then TUNSETPERSIST so it outlives this file descriptor, closed on drop.
        // Opening an existing persistent tap would succeed, so look first.
        if self.index("create tap", name).await.is_ok() {
            return Err(OpsError::new("create tap", name, OpsErrorKind::Exists));
        }
        let dev = tun_rs::DeviceBuilder::new()
            .name(name)
            .layer(tun_rs::Layer::L2)
            .enable(false)
            .build_sync()
            .map_err(tap_err)?;
        dev.persist().map_err(tap_err)?;
        drop(dev);
        let msg = LinkUnspec::new_with_name(name)
            .address(mac.to_vec())
            .build();
        self.set("create tap", name, msg).await
    }

    async fn set_master(&self, name: &str, bridge: &str) -> Result<(), OpsError> {
        let index = self.index("set master", bridge).await?;
        let msg = LinkUnspec::new_with_name(name).controller(index).build();
        self.set("set master", name, msg).await
    }

    async fn set_learning(&self, name: &str, on: bool) -> Result<(), OpsError> {
        // Bridge port settings go in RTM_NEWLINK (IFLA_INFO_SLAVE_DATA), not RTM_SETLINK.
        let index = self.index("set learning", name).await?;
        let msg = LinkBridgePort::new(index).learning(on).build();
        self.handle
            .link()
            .set_port(msg)
            .execute()
            .await
            .map_err(fail("set learning", name))
    }

    async fn set_bridge_netfilter(&self, bridge: &str) -> Result<(), OpsError> {
        // `ip link set BRIDGE type bridge nf_call_iptables 1`: RTM_NEWLINK without create.
        let msg = rtnetlink::LinkMessageBuilder::<LinkBridge>::new(bridge)
            .append_info_data(InfoBridge::NfCallIpTables(true))
            .build();
        self.handle
            .link()
            .change(msg)
            .execute()
            .await
            .map_err(fail("set bridge netfilter", bridge))
    }

    async fn set_up(&self, name: &str, up: bool) -> Result<(), OpsError> {
        let b = LinkUnspec::new_with_name(name);
        let msg = if up { b.up() } else { b.down() }.build();
        self.set("set up", name, msg).await
    }

    async fn set_alias(&self, name: &str, alias: &str) -> Result<(), OpsError> {
        let msg = LinkUnspec::new_with_name(name).alias(alias).build();
        self.set("set alias", name, msg).await
    }

    async fn delete(&self, name: &str) -> Result<(), OpsError> {
        self.handle
            .link()
            .del_with_message(by_name(name))
            .execute()
            .await
            .map_err(fail("delete", name))
    }

    async fn nft(&self, script: &str) -> Result<(), OpsError> {
        run_nft(script).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtnetlink::packet_route::link::{InfoData, InfoGre, InfoVxlan};

    fn info(msg: &LinkMessage) -> (Option<InfoKind>, Option<InfoData>, Option<String>) {
        let mut kind = None;
        let mut data = None;
        let mut name = None;
        for a in &msg.attributes {
            match a {
                LinkAttribute::IfName(n) => name = Some(n.clone()),
                LinkAttribute::LinkInfo(infos) => {
                    for i in infos {
                        match i {
                            LinkInfo::Kind(k) => kind = Some(k.clone()),
                            LinkInfo::Data(d) => data = Some(d.clone()),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        (kind, data, name)
    }

    #[test]
    fn vxlan_message_carries_vni_end_points_and_port() {
        let spec = TunnelSpec::Vxlan {
            name: "cv-00000007".into(),
            vni: 7,
            local: "198.18.0.1".parse().unwrap(),
            remote: "198.18.0.2".parse().unwrap(),
            port: 4789,
        };
        let (kind, data, name) = info(&tunnel_message(&spec).unwrap());
        assert_eq!(kind, Some(InfoKind::Vxlan));
        assert_eq!(name.as_deref(), Some("cv-00000007"));
        let Some(InfoData::Vxlan(attrs)) = data else {
            panic!("no VXLAN data: {data:?}")
        };
        assert!(attrs.contains(&InfoVxlan::Id(7)), "{attrs:?}");
        assert!(attrs.contains(&InfoVxlan::Port(4789)), "{attrs:?}");
        assert!(attrs.contains(&InfoVxlan::Local("198.18.0.1".parse().unwrap())));
        assert!(attrs.contains(&InfoVxlan::Group("198.18.0.2".parse().unwrap())));

        let v6 = TunnelSpec::Vxlan {
            name: "cv-00000007".into(),
            vni: 7,
            local: "2001:db8::1".parse().unwrap(),
            remote: "2001:db8::2".parse().unwrap(),
            port: 4789,
        };
        let (_, data, _) = info(&tunnel_message(&v6).unwrap());
        let Some(InfoData::Vxlan(attrs)) = data else {
            panic!("no VXLAN data")
        };
        assert!(attrs.contains(&InfoVxlan::Local6("2001:db8::1".parse().unwrap())));
        assert!(attrs.contains(&InfoVxlan::Group6("2001:db8::2".parse().unwrap())));
    }

    #[test]
    fn gretap_message_carries_key_both_ways_and_end_points() {
        let spec = TunnelSpec::GreTap {
            name: "cg-00abcdef".into(),
            key: 0x00ab_cdef,
            local: "198.18.0.1".parse().unwrap(),
            remote: "198.18.0.2".parse().unwrap(),
        };
        let (kind, data, name) = info(&tunnel_message(&spec).unwrap());
        assert_eq!(kind, Some(InfoKind::GreTap));
        assert_eq!(name.as_deref(), Some("cg-00abcdef"));
        let Some(InfoData::GreTap(attrs)) = data else {
            panic!("no GRE-tap data: {data:?}")
        };
        for want in [
            InfoGre::IKey(0x00ab_cdef),
            InfoGre::OKey(0x00ab_cdef),
            InfoGre::IFlags(GreIOFlags::Key),
            InfoGre::OFlags(GreIOFlags::Key),
            InfoGre::Local("198.18.0.1".parse().unwrap()),
            InfoGre::Remote("198.18.0.2".parse().unwrap()),
        ] {
            assert!(attrs.contains(&want), "{want:?} missing from {attrs:?}");
        }
    }

    #[test]
    fn impossible_tunnels_are_refused_before_the_kernel() {
        let bad = [
            TunnelSpec::Vxlan {
                name: "cv-01000000".into(),
                vni: 1 << 24,
                local: "198.18.0.1".parse().unwrap(),
                remote: "198.18.0.2".parse().unwrap(),
                port: 4789,
            },
            TunnelSpec::Vxlan {
                name: "cv-00000001".into(),
                vni: 1,
                local: "198.18.0.1".parse().unwrap(),
                remote: "2001:db8::2".parse().unwrap(),
                port: 4789,
            },
            TunnelSpec::GreTap {
                name: "cg-00000001".into(),
                key: 1,
                local: "2001:db8::1".parse().unwrap(),
                remote: "2001:db8::2".parse().unwrap(),
            },
        ];
        for spec in bad {
            assert!(tunnel_message(&spec).is_err(), "{spec:?}");
        }
    }
}
