//! The concentrator's DHCP server: fixed leases on each tenant subnet's bridge.
//!
//! The controller's plan is in the MACs: an instance's VNIC MAC is `02:00` followed by the four
//! bytes of its private IPv4 address (`store::net::mac_for`), so the lease of a
//! MAC is that address when it lies in the subnet the request came in on and is none of the
//! subnet's network, broadcast or gateway addresses. Nothing else answers: a MAC that is not
//! the plan's gets no offer (another server, or none, may serve it).
//!
//! The server answers DISCOVER with OFFER, REQUEST with ACK (or NAK when the client asks for
//! another address), INFORM with ACK; DECLINE and RELEASE change nothing (the lease is fixed).
//! Replies are broadcast on the subnet's bridge (the client has no address yet) from the
//! gateway, and carry the subnet mask, the router (the gateway: the concentrator's address on
//! the subnet), the interface MTU (the overlay's) and the lease times. Relayed requests
//! (`giaddr` set) are ignored: the subnet's clients are on the bridge.
//!
//! [`parse`] reads at most the datagram it is given, checks every length against it and
//! returns a typed [`DhcpError`] for anything it cannot use: it never panics on garbage.
//!
//! Why the packet codec is ours and not `dhcproto`'s (measured 2026-12-02, issue 19): the codec
//! is the ~150 lines of [`parse`] and the reply writer, for the three options a fixed-lease server
//! reads and the nine it writes, fuzzed (`fuzz/fuzz_targets/dhcp_packet.rs`: every reply it
//! writes must parse back to what was meant). dhcproto 0.15 would bring `hickory-proto` (a DNS
//! protocol library) and 13 other crates new to our lock file; a release build of a
//! probe that only decodes and encodes one message spent 26.9 s compiling hickory-proto and
//! 18.8 s compiling dhcproto (`cargo build --release --timings`, 2 cores, loaded), to replace
//! those 150 lines. The lease logic ([`Plan`]) would stay ours either way. Revisit if the server ever needs more than fixed leases (options from the tenant,
//! DHCPv6).

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use crate::net::Cidr;

/// The server's port.
pub const SERVER_PORT: u16 = 67;
/// The client's port.
pub const CLIENT_PORT: u16 = 68;
/// The lease time: the leases are fixed, so a long one.
pub const LEASE_SECS: u32 = 86_400;
/// The largest datagram read: anything longer is cut (and then usually refused).
pub const MAX_PACKET: usize = 1_500;

const MAGIC: [u8; 4] = [99, 130, 83, 99];
const OPTIONS_AT: usize = 240;
/// BOOTP's minimum message size: some clients drop shorter replies.
const MIN_REPLY: usize = 300;

/// DHCP message types (option 53).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageType {
    /// 1.
    Discover,
    /// 2.
    Offer,
    /// 3.
    Request,
    /// 4.
    Decline,
    /// 5.
    Ack,
    /// 6.
    Nak,
    /// 7.
    Release,
    /// 8.
    Inform,
}

impl MessageType {
    fn from_u8(b: u8) -> Option<MessageType> {
        Some(match b {
            1 => MessageType::Discover,
            2 => MessageType::Offer,
            3 => MessageType::Request,
            4 => MessageType::Decline,
            5 => MessageType::Ack,
            6 => MessageType::Nak,
            7 => MessageType::Release,
            8 => MessageType::Inform,
            _ => return None,
        })
    }

    fn code(self) -> u8 {
        match self {
            MessageType::Discover => 1,
            MessageType::Offer => 2,
            MessageType::Request => 3,
            MessageType::Decline => 4,
            MessageType::Ack => 5,
            MessageType::Nak => 6,
            MessageType::Release => 7,
            MessageType::Inform => 8,
        }
    }
}

/// Why a datagram is not a request this server can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DhcpError {
    /// Shorter than a BOOTP header with the magic cookie.
    #[error("{0} bytes: too short for DHCP")]
    Short(usize),
    /// Not a BOOTREQUEST.
    #[error("op {0}: not a request")]
    NotRequest(u8),
    /// Not Ethernet MACs.
    #[error("hardware type {htype} length {hlen}: not Ethernet")]
    NotEthernet {
        /// `htype`.
        htype: u8,
        /// `hlen`.
        hlen: u8,
    },
    /// No DHCP magic cookie (plain BOOTP).
    #[error("no DHCP magic cookie")]
    NoCookie,
    /// An option runs past the end of the datagram.
    #[error("option {0} runs past the end")]
    Truncated(u8),
    /// No message type option, or an unknown one.
    #[error("no usable message type")]
    NoType,
}

/// What the server reads from a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// The message type.
    pub kind: MessageType,
    /// The transaction ID.
    pub xid: [u8; 4],
    /// The flags (the broadcast bit).
    pub flags: [u8; 2],
    /// The client's address, when it has one.
    pub ciaddr: Ipv4Addr,
    /// The relay's address (unspecified when not relayed).
    pub giaddr: Ipv4Addr,
    /// The client's MAC.
    pub chaddr: [u8; 6],
    /// Option 50: the address the client asks for.
    pub requested: Option<Ipv4Addr>,
    /// Option 54: the server the client chose.
    pub server: Option<Ipv4Addr>,
}

fn ipv4(b: &[u8]) -> Option<Ipv4Addr> {
    <[u8; 4]>::try_from(b).ok().map(Ipv4Addr::from)
}

/// Reads a request. Bounded by `packet` itself; garbage is an error, never a panic.
pub fn parse(packet: &[u8]) -> Result<Request, DhcpError> {
    if packet.len() < OPTIONS_AT {
        return Err(DhcpError::Short(packet.len()));
    }
    let field = |from: usize, len: usize| packet.get(from..from + len).unwrap_or(&[]);
    let byte = |at: usize| packet.get(at).copied().unwrap_or(0);
    if byte(0) != 1 {
        return Err(DhcpError::NotRequest(byte(0)));
    }
    let (htype, hlen) = (byte(1), byte(2));
    if htype != 1 || hlen != 6 {
        return Err(DhcpError::NotEthernet { htype, hlen });
    }
    if field(236, 4) != MAGIC {
        return Err(DhcpError::NoCookie);
    }
    let mut kind = None;
    let mut requested = None;
    let mut server = None;
    let mut at = OPTIONS_AT;
    while let Some(&code) = packet.get(at) {
        match code {
            0 => {
                at += 1;
                continue;
            }
            255 => break,
            _ => {}
        }
        let len = usize::from(*packet.get(at + 1).ok_or(DhcpError::Truncated(code))?);
        let value = packet
            .get(at + 2..at + 2 + len)
            .ok_or(DhcpError::Truncated(code))?;
        match code {
            53 => kind = value.first().copied().and_then(MessageType::from_u8),
            50 => requested = ipv4(value),
            54 => server = ipv4(value),
            _ => {}
        }
        at += 2 + len;
    }
    let kind = kind.ok_or(DhcpError::NoType)?;
    let mut chaddr = [0; 6];
    chaddr.copy_from_slice(field(28, 6));
    let mut xid = [0; 4];
    xid.copy_from_slice(field(4, 4));
    let mut flags = [0; 2];
    flags.copy_from_slice(field(10, 2));
    Ok(Request {
        kind,
        xid,
        flags,
        ciaddr: ipv4(field(12, 4)).unwrap_or(Ipv4Addr::UNSPECIFIED),
        giaddr: ipv4(field(24, 4)).unwrap_or(Ipv4Addr::UNSPECIFIED),
        chaddr,
        requested,
        server,
    })
}

/// The gateway of a tenant subnet: its first host address (the concentrator's side; the
/// controller's plan says the same).
pub fn gateway(subnet: &Cidr) -> Option<Ipv4Addr> {
    match subnet.addr {
        std::net::IpAddr::V4(a) if subnet.prefix <= 30 => {
            Some(Ipv4Addr::from(u32::from(a).checked_add(1)?))
        }
        _ => None,
    }
}

/// The netmask of a prefix length (at most 32), as an integer.
fn mask(prefix: u8) -> u32 {
    ipnet::Ipv4Net::new(Ipv4Addr::UNSPECIFIED, prefix.min(32))
        .map_or(u32::MAX, |n| u32::from(n.netmask()))
}

/// One subnet's DHCP parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// The subnet (IPv4).
    pub network: Ipv4Addr,
    /// Its prefix length.
    pub prefix: u8,
    /// The gateway: the server's own address and the router it gives.
    pub gateway: Ipv4Addr,
    /// The MTU it gives (the overlay's).
    pub mtu: u16,
}

impl Plan {
    /// The plan of an IPv4 subnet of at most /30 (`None` for IPv6 or smaller subnets).
    pub fn of(subnet: &Cidr, mtu: u16) -> Option<Plan> {
        let gateway = gateway(subnet)?;
        Some(Plan {
            network: subnet.v4()?.network(),
            prefix: subnet.prefix,
            gateway,
            mtu,
        })
    }

    /// The fixed lease of a MAC: the address in its last four bytes if it starts `02:00` and
    /// that address is one of the subnet's hosts other than the gateway.
    pub fn lease(&self, mac: &[u8; 6]) -> Option<Ipv4Addr> {
        let [0x02, 0x00, a, b, c, d] = *mac else {
            return None;
        };
        let ip = u32::from_be_bytes([a, b, c, d]);
        let m = mask(self.prefix);
        let net = u32::from(self.network);
        let host = ip & !m;
        let ours = ip & m == net && host != 0 && host != !m && ip != u32::from(self.gateway);
        ours.then(|| Ipv4Addr::from(ip))
    }

    /// The answer to a request, if it gets one.
    pub fn answer(&self, req: &Request) -> Option<Vec<u8>> {
        if req.giaddr != Ipv4Addr::UNSPECIFIED {
            return None;
        }
        let lease = self.lease(&req.chaddr)?;
        let (kind, yiaddr) = match req.kind {
            MessageType::Discover => (MessageType::Offer, lease),
            MessageType::Request => {
                if req.server.is_some_and(|s| s != self.gateway) {
                    // The client took another server's offer.
                    return None;
                }
                let wanted = req.requested.unwrap_or(req.ciaddr);
                if wanted == lease {
                    (MessageType::Ack, lease)
                } else {
                    (MessageType::Nak, Ipv4Addr::UNSPECIFIED)
                }
            }
            MessageType::Inform => (MessageType::Ack, Ipv4Addr::UNSPECIFIED),
            _ => return None,
        };
        Some(self.reply(req, kind, yiaddr))
    }

    fn reply(&self, req: &Request, kind: MessageType, yiaddr: Ipv4Addr) -> Vec<u8> {
        let mut p = vec![0u8; OPTIONS_AT];
        p[0] = 2;
        p[1] = 1;
        p[2] = 6;
        p[4..8].copy_from_slice(&req.xid);
        p[10..12].copy_from_slice(&req.flags);
        if kind != MessageType::Nak {
            p[12..16].copy_from_slice(&req.ciaddr.octets());
        }
        p[16..20].copy_from_slice(&yiaddr.octets());
        p[28..34].copy_from_slice(&req.chaddr);
        p[236..240].copy_from_slice(&MAGIC);
        let mut opt = |code: u8, value: &[u8]| {
            p.push(code);
            p.push(u8::try_from(value.len()).unwrap_or(0));
            p.extend_from_slice(value);
        };
        opt(53, &[kind.code()]);
        opt(54, &self.gateway.octets());
        if kind != MessageType::Nak {
            if kind != MessageType::Ack || req.kind != MessageType::Inform {
                opt(51, &LEASE_SECS.to_be_bytes());
                opt(58, &(LEASE_SECS / 2).to_be_bytes());
                opt(59, &(LEASE_SECS / 8 * 7).to_be_bytes());
            }
            opt(1, &mask(self.prefix).to_be_bytes());
            opt(3, &self.gateway.octets());
            let broadcast = u32::from(self.network) | !mask(self.prefix);
            opt(28, &broadcast.to_be_bytes());
            opt(26, &self.mtu.to_be_bytes());
        }
        p.push(255);
        if p.len() < MIN_REPLY {
            p.resize(MIN_REPLY, 0);
        }
        p
    }
}

/// A client's request as a DHCP client sends it (BOOTREQUEST, Ethernet, transaction ID
/// `01020304`, the broadcast flag): message type `kind`, MAC `mac`, then the options in
/// `extra` (each code, length, value) and the end option. For tests and the fuzz seeds.
#[cfg(any(test, fuzzing))]
pub fn request_packet(kind: u8, mac: [u8; 6], extra: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; OPTIONS_AT];
    p[0] = 1;
    p[1] = 1;
    p[2] = 6;
    p[4..8].copy_from_slice(&[1, 2, 3, 4]);
    p[10] = 0x80;
    p[28..34].copy_from_slice(&mac);
    p[236..240].copy_from_slice(&MAGIC);
    p.extend_from_slice(&[0, 0, 53, 1, kind]);
    p.extend_from_slice(extra);
    p.push(255);
    p
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
#[error("DHCP on {bridge}: {error}")]
pub struct ServeError {
    /// The bridge.
    pub bridge: String,
    /// What failed.
    pub error: std::io::Error,
}

/// A UDP socket on port 67 bound to `bridge` (other bridges have their own), allowed to
/// broadcast.
fn socket(bridge: &str) -> std::io::Result<tokio::net::UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_address(true)?;
    s.set_broadcast(true)?;
    s.bind_device(Some(bridge.as_bytes()))?;
    s.set_nonblocking(true)?;
    let any = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, SERVER_PORT);
    s.bind(&SocketAddr::V4(any).into())?;
    tokio::net::UdpSocket::from_std(s.into())
}

/// Serves DHCP on `bridge` with `plan` until `stop`. Returns once the socket is bound (the
/// serving goes on in a task of the current runtime).
pub fn serve(bridge: &str, plan: Plan, stop: CancellationToken) -> Result<(), ServeError> {
    let sock = socket(bridge).map_err(|error| ServeError {
        bridge: bridge.to_string(),
        error,
    })?;
    let bridge = bridge.to_string();
    tokio::spawn(async move {
        let mut buf = vec![0u8; MAX_PACKET];
        let to = SocketAddrV4::new(Ipv4Addr::BROADCAST, CLIENT_PORT);
        loop {
            let got = tokio::select! {
                _ = stop.cancelled() => break,
                got = sock.recv_from(&mut buf) => got,
            };
            let n = match got {
                Ok((n, _)) => n,
                Err(e) => {
                    tracing::warn!(%bridge, error = %e, "DHCP receive failed");
                    // A persistent error must not spin.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let req = match parse(buf.get(..n).unwrap_or(&[])) {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!(%bridge, error = %e, "DHCP datagram ignored");
                    continue;
                }
            };
            let Some(reply) = plan.answer(&req) else {
                tracing::debug!(%bridge, kind = ?req.kind, mac = ?req.chaddr, "no answer");
                continue;
            };
            tracing::info!(%bridge, kind = ?req.kind, mac = ?req.chaddr, lease = ?plan.lease(&req.chaddr), "DHCP answer");
            if let Err(e) = sock.send_to(&reply, to).await {
                tracing::warn!(%bridge, error = %e, "DHCP reply not sent");
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        Plan::of(&"10.250.0.0/24".parse().unwrap(), 1450).unwrap()
    }

    use super::request_packet as request;

    /// The options of a reply, as (code, value).
    fn options(p: &[u8]) -> Vec<(u8, Vec<u8>)> {
        let mut out = Vec::new();
        let mut at = OPTIONS_AT;
        while let Some(&code) = p.get(at) {
            if code == 255 {
                break;
            }
            let len = usize::from(p[at + 1]);
            out.push((code, p[at + 2..at + 2 + len].to_vec()));
            at += 2 + len;
        }
        out
    }

    const MAC: [u8; 6] = [2, 0, 10, 250, 0, 7];

    #[test]
    fn the_lease_is_the_address_in_the_mac() {
        let p = plan();
        assert_eq!(p.gateway, Ipv4Addr::new(10, 250, 0, 1));
        assert_eq!(p.lease(&MAC), Some(Ipv4Addr::new(10, 250, 0, 7)));
        for no in [
            [2, 0, 10, 250, 1, 7],    // another subnet
            [2, 0, 10, 250, 0, 0],    // the network
            [2, 0, 10, 250, 0, 255],  // the broadcast
            [2, 0, 10, 250, 0, 1],    // the gateway
            [0xfe, 0, 10, 250, 0, 7], // not the plan's
            [2, 1, 10, 250, 0, 7],    // not the plan's
        ] {
            assert_eq!(p.lease(&no), None, "{no:?}");
        }
        assert!(Plan::of(&"10.0.0.0/31".parse().unwrap(), 1450).is_none());
        assert!(Plan::of(&"fd00::/64".parse().unwrap(), 1450).is_none());
    }

    #[test]
    fn discover_gets_an_offer_with_mask_router_and_mtu() {
        let req = parse(&request(1, MAC, &[])).unwrap();
        assert_eq!(req.kind, MessageType::Discover);
        let reply = plan().answer(&req).unwrap();
        assert!(reply.len() >= MIN_REPLY);
        assert_eq!(reply[0], 2);
        assert_eq!(&reply[4..8], &[1, 2, 3, 4]);
        assert_eq!(&reply[10..12], &[0x80, 0]);
        assert_eq!(&reply[16..20], &[10, 250, 0, 7]);
        assert_eq!(&reply[28..34], &MAC);
        let o = options(&reply);
        assert!(o.contains(&(53, vec![2])), "{o:?}");
        assert!(o.contains(&(54, vec![10, 250, 0, 1])));
        assert!(o.contains(&(1, vec![255, 255, 255, 0])));
        assert!(o.contains(&(3, vec![10, 250, 0, 1])));
        assert!(o.contains(&(26, 1450u16.to_be_bytes().to_vec())));
        assert!(o.contains(&(51, LEASE_SECS.to_be_bytes().to_vec())));
    }

    #[test]
    fn request_gets_ack_or_nak_and_other_servers_are_respected() {
        let p = plan();
        let ask = |ip: [u8; 4], server: [u8; 4]| {
            let mut extra = vec![50, 4];
            extra.extend_from_slice(&ip);
            extra.extend_from_slice(&[54, 4]);
            extra.extend_from_slice(&server);
            p.answer(&parse(&request(3, MAC, &extra)).unwrap())
        };
        let ack = ask([10, 250, 0, 7], [10, 250, 0, 1]).unwrap();
        assert!(options(&ack).contains(&(53, vec![5])));
        assert_eq!(&ack[16..20], &[10, 250, 0, 7]);
        let nak = ask([10, 250, 0, 9], [10, 250, 0, 1]).unwrap();
        assert!(options(&nak).contains(&(53, vec![6])));
        assert_eq!(&nak[16..20], &[0; 4]);
        assert!(ask([10, 250, 0, 7], [10, 250, 0, 2]).is_none());
        // Unknown MACs, releases, relayed requests: no answer.
        assert!(
            p.answer(&parse(&request(1, [2, 0, 9, 9, 9, 9], &[])).unwrap())
                .is_none()
        );
        assert!(p.answer(&parse(&request(7, MAC, &[])).unwrap()).is_none());
        let mut relayed = request(1, MAC, &[]);
        relayed[24] = 10;
        assert!(p.answer(&parse(&relayed).unwrap()).is_none());
        let inform = p.answer(&parse(&request(8, MAC, &[])).unwrap()).unwrap();
        assert!(options(&inform).contains(&(53, vec![5])));
        assert!(!options(&inform).iter().any(|(c, _)| *c == 51));
    }

    #[test]
    fn garbage_is_an_error_never_a_panic() {
        let good = request(1, MAC, &[50, 4, 10, 250, 0, 7]);
        assert!(parse(&good).is_ok());
        // Every truncation of a good packet.
        for n in 0..good.len() {
            let _ = parse(&good[..n]);
        }
        assert_eq!(parse(&good[..10]), Err(DhcpError::Short(10)));
        let mut bad = good.clone();
        bad[0] = 2;
        assert_eq!(parse(&bad), Err(DhcpError::NotRequest(2)));
        let mut bad = good.clone();
        bad[2] = 16;
        assert!(matches!(parse(&bad), Err(DhcpError::NotEthernet { .. })));
        let mut bad = good.clone();
        bad[236] = 0;
        assert_eq!(parse(&bad), Err(DhcpError::NoCookie));
        // An option longer than what is left.
        let mut bad = good[..OPTIONS_AT].to_vec();
        bad.extend_from_slice(&[53, 1, 1, 12, 200, b'x']);
        assert_eq!(parse(&bad), Err(DhcpError::Truncated(12)));
        let mut bad = good[..OPTIONS_AT].to_vec();
        bad.extend_from_slice(&[53, 1, 99, 255]);
        assert_eq!(parse(&bad), Err(DhcpError::NoType));
        // Pseudo-random garbage behind a valid header, and everywhere.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let p = plan();
        for round in 0..20_000 {
            let len = (x % 700) as usize;
            let mut buf = if round % 2 == 0 {
                good[..OPTIONS_AT].to_vec()
            } else {
                Vec::new()
            };
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                buf.push(x as u8);
            }
            if let Ok(req) = parse(&buf) {
                let _ = p.answer(&req);
            }
        }
    }
}
