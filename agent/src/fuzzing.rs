//! Fuzz entry points of the agent crate. Each takes arbitrary bytes, must never panic on them,
//! and asserts a property beyond "no panic". The targets under `fuzz/` are one-line calls to
//! these; the seed corpus under `fuzz/corpus/` is replayed by this module's tests.

// A broken property is a crash for libFuzzer: that is what the panics are for.
#![allow(clippy::panic)]

use std::net::Ipv4Addr;

use crate::cnci::dhcp::{self, MAX_PACKET, MessageType, Plan, Request};

/// The subnets the DHCP target serves: a /24 and a /30 (one host), with the MTUs of VXLAN and
/// GRE-tap overlays.
fn plans() -> [Plan; 2] {
    [
        Plan {
            network: Ipv4Addr::new(10, 250, 0, 0),
            prefix: 24,
            gateway: Ipv4Addr::new(10, 250, 0, 1),
            mtu: 1450,
        },
        Plan {
            network: Ipv4Addr::new(10, 250, 1, 0),
            prefix: 30,
            gateway: Ipv4Addr::new(10, 250, 1, 1),
            mtu: 1462,
        },
    ]
}

/// The leases: MACs of the controller's plan (`02:00` + the address), one or two per subnet.
const LEASED: [[u8; 6]; 3] = [
    [2, 0, 10, 250, 0, 7],
    [2, 0, 10, 250, 0, 254],
    [2, 0, 10, 250, 1, 2],
];

/// The DHCP server's datagram parser ([`dhcp::parse`]) on arbitrary bytes and, when it reads a
/// request, the answer ([`Plan::answer`]) of each subnet to it as it is and as if each leased
/// MAC had sent it. Every answer must be a well-formed BOOTREPLY that the parser reads back
/// (with its `op` turned into a request's): the same transaction, flags and MAC, the expected
/// message type, the server's own address as server identifier, and the MAC's lease as
/// `yiaddr` where one is given.
pub fn dhcp_packet(data: &[u8]) {
    let Ok(request) = dhcp::parse(data) else {
        return;
    };
    for plan in plans() {
        check(&plan, &request);
        for mac in LEASED {
            check(
                &plan,
                &Request {
                    chaddr: mac,
                    ..request
                },
            );
        }
    }
}

fn check(plan: &Plan, request: &Request) {
    let lease = plan.lease(&request.chaddr);
    let Some(reply) = plan.answer(request) else {
        return;
    };
    assert!(
        request.giaddr.is_unspecified(),
        "a relayed request was answered"
    );
    let Some(lease) = lease else {
        panic!("answered a MAC without a lease: {:?}", request.chaddr);
    };
    assert!(
        (300..=MAX_PACKET).contains(&reply.len()),
        "reply of {} bytes",
        reply.len()
    );
    assert_eq!(reply.first(), Some(&2), "not a BOOTREPLY");
    let mut back = reply.clone();
    back[0] = 1;
    let read = dhcp::parse(&back).unwrap_or_else(|e| panic!("the reply does not parse: {e}"));
    assert_eq!(read.xid, request.xid);
    assert_eq!(read.flags, request.flags);
    assert_eq!(read.chaddr, request.chaddr);
    assert_eq!(read.server, Some(plan.gateway), "server identifier");
    let yiaddr = reply
        .get(16..20)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(Ipv4Addr::from);
    let expected = match (request.kind, read.kind) {
        (MessageType::Discover, MessageType::Offer) | (MessageType::Request, MessageType::Ack) => {
            lease
        }
        (MessageType::Request, MessageType::Nak) | (MessageType::Inform, MessageType::Ack) => {
            Ipv4Addr::UNSPECIFIED
        }
        (asked, answered) => panic!("{answered:?} in answer to {asked:?}"),
    };
    assert_eq!(yiaddr, Some(expected), "yiaddr of a {:?}", read.kind);
}

#[cfg(test)]
mod tests {
    use super::*;

    const CORPUS: &str = "../fuzz/corpus/dhcp_packet";

    /// The seeds: a DISCOVER and a REQUEST (for its lease, naming this server) of a leased MAC.
    fn seeds() -> [(&'static str, Vec<u8>); 2] {
        let mac = LEASED[0];
        let mut asks = vec![50, 4, 10, 250, 0, 7, 54, 4, 10, 250, 0, 1];
        // A client's parameter request list, as dhclient sends it.
        asks.extend_from_slice(&[55, 6, 1, 3, 6, 15, 26, 28]);
        [
            (
                "discover",
                dhcp::request_packet(1, mac, &[55, 4, 1, 3, 26, 28]),
            ),
            ("request", dhcp::request_packet(3, mac, &asks)),
        ]
    }

    #[test]
    fn the_seeds_are_answered() {
        let plan = plans()[0];
        for (name, seed) in seeds() {
            let request = dhcp::parse(&seed).unwrap();
            assert!(plan.answer(&request).is_some(), "{name}");
            dhcp_packet(&seed);
        }
    }

    /// Replays every committed corpus and crash-regression file.
    #[test]
    fn seed_corpus_replays() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
        let mut n = 0;
        for dir in [
            root.join("corpus/dhcp_packet"),
            root.join("regressions/dhcp_packet"),
        ] {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries {
                let path = entry.unwrap().path();
                dhcp_packet(&std::fs::read(&path).unwrap());
                n += 1;
            }
        }
        assert!(n > 0, "no seed corpus for dhcp_packet");
    }

    /// Writes the seed corpus: `cargo test -p agent --lib -- --ignored write_seed_corpus`
    /// (then commit `fuzz/corpus/dhcp_packet`).
    #[test]
    #[ignore = "writes files; run by hand to refresh the seed corpus"]
    fn write_seed_corpus() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(CORPUS);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, seed) in seeds() {
            std::fs::write(dir.join(format!("seed-{name}")), seed).unwrap();
        }
    }
}
