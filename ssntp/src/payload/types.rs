//! Small value types that payloads carry as text: CIDR blocks and MAC addresses.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// Text that is not a CIDR block or a MAC address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddrParseError {
    /// Not `address/prefix`, or a prefix too long for the address family.
    #[error("not a CIDR block (address/prefix)")]
    Cidr,
    /// Not six colon-separated hex octets.
    #[error("not a MAC address (six hex octets separated by colons)")]
    Mac,
}

/// An IP network in CIDR notation (`172.16.0.0/24`). The address is kept as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cidr {
    /// The address part.
    pub addr: IpAddr,
    /// The prefix length (≤ 32 for IPv4, ≤ 128 for IPv6).
    pub prefix: u8,
}

impl Cidr {
    /// A CIDR block, if the prefix fits the address family.
    pub fn new(addr: IpAddr, prefix: u8) -> Option<Cidr> {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        (prefix <= max).then_some(Cidr { addr, prefix })
    }

    /// The IPv4 network (address as written; `trunc()` gives the network address), for the
    /// arithmetic (masks, hosts, containment) done by `ipnet`; `None` for IPv6.
    pub fn v4(&self) -> Option<ipnet::Ipv4Net> {
        match self.addr {
            IpAddr::V4(a) => ipnet::Ipv4Net::new(a, self.prefix).ok(),
            IpAddr::V6(_) => None,
        }
    }
}

impl FromStr for Cidr {
    type Err = AddrParseError;

    fn from_str(s: &str) -> Result<Cidr, AddrParseError> {
        let (addr, prefix) = s.split_once('/').ok_or(AddrParseError::Cidr)?;
        let addr: IpAddr = addr.parse().map_err(|_| AddrParseError::Cidr)?;
        if prefix.is_empty() || prefix.len() > 3 || !prefix.bytes().all(|b| b.is_ascii_digit()) {
            return Err(AddrParseError::Cidr);
        }
        let prefix: u8 = prefix.parse().map_err(|_| AddrParseError::Cidr)?;
        Cidr::new(addr, prefix).ok_or(AddrParseError::Cidr)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// A 48-bit MAC address, written `02:00:ac:10:00:05`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

impl FromStr for MacAddr {
    type Err = AddrParseError;

    fn from_str(s: &str) -> Result<MacAddr, AddrParseError> {
        let mut out = [0u8; 6];
        let mut parts = s.split(':');
        for byte in &mut out {
            let part = parts.next().ok_or(AddrParseError::Mac)?;
            if part.len() != 2 || !part.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(AddrParseError::Mac);
            }
            *byte = u8::from_str_radix(part, 16).map_err(|_| AddrParseError::Mac)?;
        }
        if parts.next().is_some() {
            return Err(AddrParseError::Mac);
        }
        Ok(MacAddr(out))
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_round_trip_and_rejects() {
        for ok in ["172.16.0.0/24", "10.0.0.1/32", "::/0", "fd00::/8"] {
            assert_eq!(ok.parse::<Cidr>().unwrap().to_string(), ok);
        }
        for bad in [
            "172.16.0.0",
            "172.16.0.0/33",
            "x/8",
            "1.2.3.4/",
            "1.2.3.4/+8",
            "::/129",
        ] {
            assert_eq!(bad.parse::<Cidr>(), Err(AddrParseError::Cidr), "{bad}");
        }
    }

    #[test]
    fn mac_round_trip_and_rejects() {
        let mac: MacAddr = "02:00:AC:10:00:05".parse().unwrap();
        assert_eq!(mac.to_string(), "02:00:ac:10:00:05");
        for bad in [
            "02:00:ac:10:00",
            "02:00:ac:10:00:05:06",
            "2:00:ac:10:00:05",
            "zz:00:ac:10:00:05",
        ] {
            assert_eq!(bad.parse::<MacAddr>(), Err(AddrParseError::Mac), "{bad}");
        }
    }
}
