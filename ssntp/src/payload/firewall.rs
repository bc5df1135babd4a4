//! The port firewall: the security-group rules a compute node enforces on an instance's NIC
//! (docs/protocol.md §7.2, "Port firewall"). START carries the first one (`networking.firewall`,
//! optional); the node's HTTPS endpoint takes later ones (`PUT /v1/instances/{uuid}/firewall`,
//! the same CBOR map), so that rule changes reach a running instance.
//!
//! The rules are an allow-list, compiled by the controller from the port's security groups: a
//! group's members are already resolved to addresses. What no rule lets through is dropped,
//! replies to what a rule let through pass (the node tracks connections), and the node adds its
//! own anti-spoofing whatever the rules say.

use serde::{Deserialize, Serialize};

use super::cbor;
use super::types::Cidr;

/// The most rules in one firewall.
pub const MAX_FIREWALL_RULES: usize = 512;
/// The most remote prefixes over all the rules of one firewall.
pub const MAX_FIREWALL_PREFIXES: usize = 4096;

/// Which way a rule lets traffic through, seen from the instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FirewallDirection {
    /// Into the instance.
    Ingress,
    /// Out of the instance.
    Egress,
}

/// One allow rule (IPv4: tenant subnets are IPv4).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FirewallRule {
    /// Which way.
    pub direction: FirewallDirection,
    /// The IP protocol number; absent: any protocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<u8>,
    /// The first port (TCP, UDP, SCTP, DCCP, UDP-Lite) or the ICMP type; absent: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_min: Option<u16>,
    /// The last port, or the ICMP code; absent: any (for ports: `port_min` alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_max: Option<u16>,
    /// The far end's addresses (the source of ingress, the destination of egress); absent:
    /// any address. An empty list matches nothing (a remote group without members).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "opt_cidr_list"
    )]
    pub remote: Option<Vec<Cidr>>,
}

/// A port's firewall.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Firewall {
    /// Orders firewalls of one port: a node keeps the one with the highest revision it was
    /// given and ignores older ones that arrive late.
    pub revision: u64,
    /// The allow rules.
    pub rules: Vec<FirewallRule>,
}

/// Why a firewall is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FirewallError {
    /// Too many rules.
    #[error("{0} rules: at most {MAX_FIREWALL_RULES} are taken")]
    TooManyRules(usize),
    /// Too many remote prefixes.
    #[error("{0} remote prefixes: at most {MAX_FIREWALL_PREFIXES} are taken")]
    TooManyPrefixes(usize),
    /// A remote prefix that is not IPv4.
    #[error("remote prefix {0} is not IPv4")]
    NotIpv4(Cidr),
    /// A port range whose end is before its start.
    #[error("port range {0}-{1} ends before it starts")]
    BadRange(u16, u16),
}

impl Firewall {
    /// Checks the bounds and the shape of the rules.
    pub fn check(&self) -> Result<(), FirewallError> {
        if self.rules.len() > MAX_FIREWALL_RULES {
            return Err(FirewallError::TooManyRules(self.rules.len()));
        }
        let prefixes: usize = self
            .rules
            .iter()
            .map(|r| r.remote.as_ref().map_or(0, Vec::len))
            .sum();
        if prefixes > MAX_FIREWALL_PREFIXES {
            return Err(FirewallError::TooManyPrefixes(prefixes));
        }
        for rule in &self.rules {
            for cidr in rule.remote.iter().flatten() {
                if !cidr.addr.is_ipv4() {
                    return Err(FirewallError::NotIpv4(*cidr));
                }
            }
            if let (Some(min), Some(max)) = (rule.port_min, rule.port_max)
                && rule.is_port_protocol()
                && max < min
            {
                return Err(FirewallError::BadRange(min, max));
            }
        }
        Ok(())
    }
}

impl FirewallRule {
    /// Whether the rule's protocol has ports (TCP, UDP, DCCP, SCTP, UDP-Lite).
    pub fn is_port_protocol(&self) -> bool {
        matches!(self.protocol, Some(6 | 17 | 33 | 132 | 136))
    }

    /// Whether the rule's protocol is ICMP (its "ports" are a type and a code).
    pub fn is_icmp(&self) -> bool {
        self.protocol == Some(1)
    }
}

/// An optional list of CIDRs written as text.
mod opt_cidr_list {
    use super::*;
    use serde::{Deserializer, Serializer};

    /// Serialises a present list as texts.
    pub fn serialize<S: Serializer>(v: &Option<Vec<Cidr>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => cbor::text_list::serialize(v, s),
            None => s.serialize_none(),
        }
    }

    /// Deserialises a list of texts into `Some`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<Cidr>>, D::Error> {
        cbor::text_list::deserialize(d).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(direction: FirewallDirection) -> FirewallRule {
        FirewallRule {
            direction,
            protocol: Some(6),
            port_min: Some(22),
            port_max: Some(22),
            remote: Some(vec!["10.0.0.0/8".parse().unwrap()]),
        }
    }

    #[test]
    fn a_firewall_goes_through_cbor_unchanged() {
        let fw = Firewall {
            revision: 7,
            rules: vec![
                rule(FirewallDirection::Ingress),
                FirewallRule {
                    direction: FirewallDirection::Egress,
                    protocol: None,
                    port_min: None,
                    port_max: None,
                    remote: None,
                },
            ],
        };
        let mut out = Vec::new();
        cbor::encode_into(&fw, &mut out);
        let back: Firewall = cbor::decode_one(&out).unwrap();
        assert_eq!(back, fw);
        assert_eq!(back.check(), Ok(()));
    }

    #[test]
    fn bounds_and_shapes_are_checked() {
        let many = Firewall {
            revision: 1,
            rules: vec![rule(FirewallDirection::Ingress); MAX_FIREWALL_RULES + 1],
        };
        assert_eq!(
            many.check(),
            Err(FirewallError::TooManyRules(MAX_FIREWALL_RULES + 1))
        );
        let mut wide = rule(FirewallDirection::Egress);
        wide.remote = Some(vec![
            "10.0.0.1/32".parse().unwrap();
            MAX_FIREWALL_PREFIXES + 1
        ]);
        let wide = Firewall {
            revision: 1,
            rules: vec![wide],
        };
        assert!(matches!(
            wide.check(),
            Err(FirewallError::TooManyPrefixes(_))
        ));
        let mut v6 = rule(FirewallDirection::Ingress);
        v6.remote = Some(vec!["fd00::/8".parse().unwrap()]);
        let v6 = Firewall {
            revision: 1,
            rules: vec![v6],
        };
        assert!(matches!(v6.check(), Err(FirewallError::NotIpv4(_))));
        let mut backwards = rule(FirewallDirection::Ingress);
        backwards.port_min = Some(80);
        backwards.port_max = Some(79);
        let backwards = Firewall {
            revision: 1,
            rules: vec![backwards],
        };
        assert_eq!(backwards.check(), Err(FirewallError::BadRange(80, 79)));
    }
}
