//! Address arithmetic for tenant networks: subnets carved from 172.16.0.0/12, instance addresses
//! within a subnet, and MACs derived from addresses. Pure functions, shared by every store.

use std::net::{IpAddr, Ipv4Addr};

use ssntp::payload::{Cidr, MacAddr};

/// The block tenant subnets are carved from.
pub const POOL_BASE: Ipv4Addr = Ipv4Addr::new(172, 16, 0, 0);
/// The pool's prefix length.
pub const POOL_PREFIX: u8 = 12;
/// The smallest subnet prefix length a tenant may ask for.
pub const MIN_SUBNET_PREFIX: u8 = 16;
/// The largest subnet prefix length (a /30 holds one instance).
pub const MAX_SUBNET_PREFIX: u8 = 30;

/// How many addresses a block of `prefix` holds.
pub fn block_size(prefix: u8) -> u64 {
    1u64 << (32 - u32::from(prefix.min(32)))
}

/// The first and last address of the pool, as integers.
pub fn pool_bounds() -> (u64, u64) {
    let base = u64::from(u32::from(POOL_BASE));
    (base, base + block_size(POOL_PREFIX) - 1)
}

/// The lowest aligned block of `prefix` in the pool that overlaps none of `taken` (pairs of
/// base and prefix, sorted by base), if any.
pub fn first_free_block(taken: &[(u32, u8)], prefix: u8) -> Option<u32> {
    let size = block_size(prefix);
    let (start, end) = pool_bounds();
    let mut candidate = start;
    for &(base, p) in taken {
        let base = u64::from(base);
        let last = base + block_size(p) - 1;
        if last < candidate {
            continue;
        }
        if candidate + size <= base {
            break;
        }
        candidate = (last + 1).div_ceil(size) * size;
    }
    (candidate + size - 1 <= end)
        .then(|| u32::try_from(candidate).ok())
        .flatten()
}

/// The addresses instances may take in a subnet: all but the network address, the gateway (the
/// first host) and the broadcast address.
pub fn instance_hosts(base: u32, prefix: u8) -> (u32, u32) {
    let size = block_size(prefix);
    let first = u64::from(base) + 2;
    let last = u64::from(base) + size - 2;
    (
        u32::try_from(first).unwrap_or(u32::MAX),
        u32::try_from(last).unwrap_or(u32::MAX),
    )
}

/// The lowest instance address of the subnet not in `taken` (sorted), if any.
pub fn first_free_host(base: u32, prefix: u8, taken: &[u32]) -> Option<u32> {
    let (first, last) = instance_hosts(base, prefix);
    let mut candidate = first;
    for &t in taken {
        if t < candidate {
            continue;
        }
        if t > candidate {
            break;
        }
        candidate = candidate.checked_add(1)?;
    }
    (candidate <= last).then_some(candidate)
}

/// The MAC of an instance address: locally administered `02:00:` then the address's four bytes.
pub fn mac_for(ip: Ipv4Addr) -> MacAddr {
    let [a, b, c, d] = ip.octets();
    MacAddr([0x02, 0x00, a, b, c, d])
}

/// The tunnel key (VXLAN VNI, GRE key) of the subnet `cidr`: unique among the subnets that exist
/// at once, for every prefix from [`MIN_SUBNET_PREFIX`] to [`MAX_SUBNET_PREFIX`], and within
/// VXLAN's 24 bits.
///
/// Subnets are aligned blocks of the pool that never overlap, so a block's base names it. The
/// pool is a /12: 20 bits of offset, a /30's base has its 2 low bits clear, leaving 18 bits that
/// tell the smallest blocks apart. Two ranges that cannot meet:
///
/// - a /24 or larger block: its base's top 24 bits, `base >> 8` (`0xac1000..=0xac1fff`), the
///   scheme of earlier releases, so the keys of existing /24 subnets do not change;
/// - a smaller block (/25 to /30): `1 + (offset >> 2)` where `offset` is the base's offset in
///   the pool (`1..=0x40000`; never 0, which some tunnel drivers treat as no key).
///
/// Before this, every block took `base >> 8`, so two subnets inside one /24 shared a key.
/// Anything outside the pool (which the store never hands out) keeps `base >> 8`; IPv6 is 0.
pub fn subnet_key(cidr: &Cidr) -> u32 {
    let IpAddr::V4(v4) = cidr.addr else {
        return 0;
    };
    let base = u32::from(v4);
    match base.checked_sub(u32::from(POOL_BASE)) {
        Some(offset) if cidr.prefix > 24 && u64::from(offset) < block_size(POOL_PREFIX) => {
            1 + (offset >> 2)
        }
        _ => (base >> 8) & 0x00ff_ffff,
    }
}

/// The CIDR block of `base`/`prefix`.
pub fn cidr(base: u32, prefix: u8) -> Cidr {
    Cidr {
        addr: IpAddr::V4(Ipv4Addr::from(base)),
        prefix,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> u32 {
        u32::from(s.parse::<Ipv4Addr>().expect("address"))
    }

    #[test]
    fn blocks_are_aligned_and_skip_taken_ones() {
        assert_eq!(first_free_block(&[], 24), Some(ip("172.16.0.0")));
        let taken = [(ip("172.16.0.0"), 24), (ip("172.16.1.0"), 28)];
        assert_eq!(first_free_block(&taken, 28), Some(ip("172.16.1.16")));
        assert_eq!(first_free_block(&taken, 24), Some(ip("172.16.2.0")));
        assert_eq!(first_free_block(&taken, 16), Some(ip("172.17.0.0")));
        // A hole before a taken block is used.
        let taken = [(ip("172.16.1.0"), 24)];
        assert_eq!(first_free_block(&taken, 24), Some(ip("172.16.0.0")));
        assert_eq!(first_free_block(&taken, 23), Some(ip("172.16.2.0")));
    }

    #[test]
    fn the_pool_runs_out() {
        let all = [(ip("172.16.0.0"), 12)];
        assert_eq!(first_free_block(&all, 30), None);
        let all_but_last: Vec<(u32, u8)> = (0..15u32)
            .map(|i| (ip("172.16.0.0") + (i << 16), 16))
            .collect();
        assert_eq!(first_free_block(&all_but_last, 16), Some(ip("172.31.0.0")));
        assert_eq!(first_free_block(&all_but_last, 15), None);
    }

    #[test]
    fn hosts_skip_network_gateway_and_broadcast() {
        let base = ip("172.16.5.0");
        assert_eq!(
            instance_hosts(base, 24),
            (ip("172.16.5.2"), ip("172.16.5.254"))
        );
        assert_eq!(first_free_host(base, 24, &[]), Some(ip("172.16.5.2")));
        let taken = [ip("172.16.5.2"), ip("172.16.5.3"), ip("172.16.5.5")];
        assert_eq!(first_free_host(base, 24, &taken), Some(ip("172.16.5.4")));
        assert_eq!(first_free_host(base, 30, &[ip("172.16.5.2")]), None);
    }

    #[test]
    fn subnet_keys_differ_inside_a_slash_24_and_fit_24_bits() {
        let key = |s: &str| subnet_key(&s.parse::<Cidr>().expect("cidr"));
        // /24s keep the key they always had.
        assert_eq!(key("172.16.5.0/24"), 0x00ac_1005);
        assert_eq!(key("172.16.0.0/16"), 0x00ac_1000);
        // Blocks inside one /24 no longer share it.
        assert_ne!(key("172.16.5.0/28"), key("172.16.5.16/28"));
        assert_ne!(key("172.16.5.0/30"), key("172.16.5.4/30"));
        assert_eq!(key("172.16.0.0/30"), 1);
        let last = key("172.31.255.252/30");
        assert_eq!(last, 0x4_0000);
        assert!(last < key("172.16.0.0/24"), "the two ranges do not meet");
        assert!(key("172.31.255.0/24") < 1 << 24);
        assert_eq!(key("fd00::/64"), 0);
    }

    #[test]
    fn mac_is_derived_from_the_address() {
        let mac = mac_for(Ipv4Addr::new(172, 16, 5, 9));
        assert_eq!(mac.to_string(), "02:00:ac:10:05:09");
    }
}
