//! SSNTP roles: the bitmask a certificate proves and a session claims (PROTOCOL.md §2), and the
//! side of a connection an endpoint is on.

use std::fmt;
use std::str::FromStr;

bitflags::bitflags! {
    /// A set of SSNTP roles, as carried in certificates, CONNECT and CONNECTED (`u32` on the wire).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
    pub struct Role: u32 {
        /// A generic SSNTP server.
        const SERVER = 0x01;
        /// A cluster controller (REST API, tenants, instances).
        const CONTROLLER = 0x02;
        /// A compute node launcher.
        const AGENT = 0x04;
        /// The scheduler (the cluster's SSNTP server).
        const SCHEDULER = 0x08;
        /// A network node launcher (hosts CNCIs).
        const NETAGENT = 0x10;
        /// The agent inside a tenant's Compute Node Concentrator Instance.
        const CNCIAGENT = 0x20;
    }
}

/// Which end of the connection a session is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// The end that dialled and sent CONNECT.
    Client,
    /// The end that accepted and sent CONNECTED.
    Server,
}

/// The DER content bytes of the arc `2.25.15223806111904034722754700881208103483`, the prefix of
/// every role OID. The arc is a UUID-derived OID (ITU-T X.667).
const ROLE_ARC: u128 = 15223806111904034722754700881208103483;

/// Every single role with its lowercase name and the last arc of its OID.
const TABLE: [(Role, &str, u8); 6] = [
    (Role::SERVER, "server", 5),
    (Role::CONTROLLER, "controller", 3),
    (Role::AGENT, "agent", 1),
    (Role::SCHEDULER, "scheduler", 2),
    (Role::NETAGENT, "netagent", 4),
    (Role::CNCIAGENT, "cnciagent", 6),
];

/// An unknown role name, or an empty list, given where roles were expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RoleParseError {
    /// A name that is not a role.
    #[error(
        "unknown role {0:?}; valid roles: server, controller, agent, scheduler, netagent, cnciagent"
    )]
    Unknown(String),
    /// No role named at all.
    #[error(
        "no role given; valid roles: server, controller, agent, scheduler, netagent, cnciagent"
    )]
    Empty,
}

impl Role {
    /// The role of a dual-role launcher: compute and network node at once (0x14).
    pub const DUAL: Role = Role::AGENT.union(Role::NETAGENT);

    /// The lowercase name of a single role (`None` for a combination or the empty set).
    pub fn name(self) -> Option<&'static str> {
        TABLE
            .iter()
            .find(|(r, _, _)| *r == self)
            .map(|(_, n, _)| *n)
    }

    /// The dotted OID of a single role (`None` for a combination or the empty set).
    pub fn oid(self) -> Option<String> {
        TABLE
            .iter()
            .find(|(r, _, _)| *r == self)
            .map(|(_, _, last)| format!("2.25.{ROLE_ARC}.{last}"))
    }

    /// The DER content bytes (no tag, no length) of the OID of a single role.
    pub fn oid_der(self) -> Option<Vec<u8>> {
        let (_, _, last) = TABLE.iter().find(|(r, _, _)| *r == self)?;
        Some(oid_content(*last))
    }

    /// The role named by the DER content bytes of an OID; `None` for any other OID.
    pub fn from_oid_der(content: &[u8]) -> Option<Role> {
        let prefix = oid_prefix();
        let rest = content.strip_prefix(prefix.as_slice())?;
        match rest {
            [last] => TABLE.iter().find(|(_, _, l)| l == last).map(|(r, _, _)| *r),
            _ => None,
        }
    }

    /// The role named by a dotted OID string; `None` for any other OID.
    pub fn from_oid(dotted: &str) -> Option<Role> {
        TABLE
            .iter()
            .find(|(r, _, _)| r.oid().as_deref() == Some(dotted))
            .map(|(r, _, _)| *r)
    }

    /// The OR of the roles among the given OIDs (DER content bytes); unknown OIDs are ignored.
    pub fn from_oids<'a>(oids: impl IntoIterator<Item = &'a [u8]>) -> Role {
        oids.into_iter()
            .filter_map(Role::from_oid_der)
            .fold(Role::empty(), |acc, r| acc | r)
    }

    /// The single roles this set holds, in bit order.
    pub fn singles(self) -> impl Iterator<Item = Role> {
        self.iter()
    }

    /// Whether this is a role a client may claim in CONNECT (PROTOCOL.md §4).
    pub fn is_valid_claim(self) -> bool {
        [
            Role::CONTROLLER,
            Role::AGENT,
            Role::NETAGENT,
            Role::DUAL,
            Role::CNCIAGENT,
        ]
        .contains(&self)
    }
}

/// The base-128 encoding of one OID arc, most significant group first.
fn push_arc(out: &mut Vec<u8>, mut arc: u128) {
    let mut groups = [0u8; 19];
    let mut n = 0;
    loop {
        groups[n] = (arc & 0x7f) as u8;
        n += 1;
        arc >>= 7;
        if arc == 0 {
            break;
        }
    }
    for i in (0..n).rev() {
        out.push(groups[i] | if i > 0 { 0x80 } else { 0 });
    }
}

/// The last arc of [`api_admin_oid`].
const API_ADMIN_LAST: u8 = 100;

/// The dotted OID that marks a REST API admin's client certificate: in the role arc, but not an
/// SSNTP role (SSNTP ignores it, as any unknown OID), so a certificate without it (a launcher's
/// libvirt credential, say) is never an API admin's, whatever else it carries.
pub fn api_admin_oid() -> String {
    format!("2.25.{ROLE_ARC}.{API_ADMIN_LAST}")
}

/// The DER content bytes of [`api_admin_oid`].
pub fn api_admin_oid_der() -> Vec<u8> {
    oid_content(API_ADMIN_LAST)
}

fn oid_prefix() -> Vec<u8> {
    // First two arcs 2.25 encode as one byte: 2 * 40 + 25.
    let mut out = vec![2 * 40 + 25];
    push_arc(&mut out, ROLE_ARC);
    out
}

fn oid_content(last: u8) -> Vec<u8> {
    let mut out = oid_prefix();
    push_arc(&mut out, u128::from(last));
    out
}

impl fmt::Display for Role {
    /// Names joined with `|` (`agent|netagent`); `none` for the empty set; unknown bits in hex.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.bits() == 0 {
            return f.write_str("none");
        }
        let mut first = true;
        for (_, name, _) in TABLE.iter().filter(|(r, _, _)| self.contains(*r)) {
            if !first {
                f.write_str("|")?;
            }
            f.write_str(name)?;
            first = false;
        }
        let unknown = self.bits() & !Role::all().bits();
        if unknown != 0 {
            if !first {
                f.write_str("|")?;
            }
            write!(f, "{unknown:#x}")?;
        }
        Ok(())
    }
}

impl FromStr for Role {
    type Err = RoleParseError;

    /// Parses `agent,netagent` (also `agent, netagent` or `Agent|NetAgent`): names are trimmed and
    /// case-insensitive, separated by `,` or `|`.
    fn from_str(s: &str) -> Result<Role, RoleParseError> {
        let mut role = Role::empty();
        for part in s.split([',', '|']) {
            let name = part.trim();
            if name.is_empty() {
                continue;
            }
            let found = TABLE
                .iter()
                .find(|(_, n, _)| n.eq_ignore_ascii_case(name))
                .ok_or_else(|| RoleParseError::Unknown(name.to_string()))?;
            role |= found.0;
        }
        if role.is_empty() {
            return Err(RoleParseError::Empty);
        }
        Ok(role)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_trimmed_and_case_insensitive() {
        assert_eq!("agent,netagent".parse::<Role>(), Ok(Role::DUAL));
        assert_eq!("agent, netagent".parse::<Role>(), Ok(Role::DUAL));
        assert_eq!(" AGENT |NetAgent ".parse::<Role>(), Ok(Role::DUAL));
        assert_eq!("cnciagent".parse::<Role>(), Ok(Role::CNCIAGENT));
        assert_eq!(Role::DUAL.bits(), 0x14);
    }

    #[test]
    fn rejects_unknown_and_empty_with_the_valid_names() {
        let err = "agent,bogus".parse::<Role>().unwrap_err();
        assert_eq!(err, RoleParseError::Unknown("bogus".into()));
        let text = err.to_string();
        for (_, name, _) in TABLE {
            assert!(text.contains(name), "{text} lacks {name}");
        }
        assert_eq!("".parse::<Role>(), Err(RoleParseError::Empty));
        assert_eq!(" , ".parse::<Role>(), Err(RoleParseError::Empty));
    }

    #[test]
    fn displays_with_pipes() {
        assert_eq!(Role::DUAL.to_string(), "agent|netagent");
        assert_eq!(Role::SCHEDULER.to_string(), "scheduler");
        assert_eq!(Role::empty().to_string(), "none");
        assert_eq!(Role::from_bits_retain(0x104).to_string(), "agent|0x100");
        for role in Role::all().iter() {
            assert_eq!(role.to_string().parse::<Role>(), Ok(role));
        }
        assert_eq!(Role::all().to_string().parse::<Role>(), Ok(Role::all()));
    }

    #[test]
    fn oids_match_the_contract() {
        let expect = [
            (
                Role::SERVER,
                "2.25.15223806111904034722754700881208103483.5",
            ),
            (
                Role::CONTROLLER,
                "2.25.15223806111904034722754700881208103483.3",
            ),
            (Role::AGENT, "2.25.15223806111904034722754700881208103483.1"),
            (
                Role::SCHEDULER,
                "2.25.15223806111904034722754700881208103483.2",
            ),
            (
                Role::NETAGENT,
                "2.25.15223806111904034722754700881208103483.4",
            ),
            (
                Role::CNCIAGENT,
                "2.25.15223806111904034722754700881208103483.6",
            ),
        ];
        for (role, oid) in expect {
            assert_eq!(role.oid().as_deref(), Some(oid));
            assert_eq!(Role::from_oid(oid), Some(role));
            let der = role.oid_der().unwrap();
            assert_eq!(Role::from_oid_der(&der), Some(role));
        }
        assert_eq!(Role::DUAL.oid(), None);
        assert_eq!(Role::from_oid("2.25.1"), None);
    }

    #[test]
    fn oid_der_is_standard_base128() {
        // 2.25.<arc>.1: 0x69 then the arc in base 128, then 0x01.
        let der = Role::AGENT.oid_der().unwrap();
        assert_eq!(der[0], 0x69);
        assert_eq!(*der.last().unwrap(), 0x01);
        // Decode the middle arc back.
        let mut arc: u128 = 0;
        for b in &der[1..der.len() - 1] {
            arc = (arc << 7) | u128::from(b & 0x7f);
        }
        assert_eq!(arc, ROLE_ARC);
    }

    #[test]
    fn or_of_known_oids_ignores_unknown() {
        let agent = Role::AGENT.oid_der().unwrap();
        let net = Role::NETAGENT.oid_der().unwrap();
        let unknown = oid_content(99);
        let server_auth = [0x2b, 6, 1, 5, 5, 7, 3, 1];
        let role = Role::from_oids([
            agent.as_slice(),
            net.as_slice(),
            unknown.as_slice(),
            &server_auth[..],
        ]);
        assert_eq!(role, Role::DUAL);
        assert_eq!(Role::from_oids([&server_auth[..]]), Role::empty());
    }

    #[test]
    fn valid_claims() {
        for ok in [
            Role::CONTROLLER,
            Role::AGENT,
            Role::NETAGENT,
            Role::DUAL,
            Role::CNCIAGENT,
        ] {
            assert!(ok.is_valid_claim());
        }
        for bad in [
            Role::empty(),
            Role::SERVER,
            Role::SCHEDULER,
            Role::CONTROLLER | Role::AGENT,
            Role::all(),
        ] {
            assert!(!bad.is_valid_claim());
        }
    }
}
