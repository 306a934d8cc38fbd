//! Private-network protection: which addresses a webhook may never reach, at create and at
//! send (contract section 5). The tables follow IANA's IPv4 and IPv6 Special-Purpose Address
//! Registries (RFC 6890 and the RFCs that added to them), plus multicast: every block there
//! that is not globally reachable, and also the few IETF blocks whose anycast services are
//! (no receiver lives there). IPv6 forms that embed an IPv4 address are judged by it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// A network written `address/length` (or a bare address: that one address), such as
/// `127.0.0.0/8` or `::1/128`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Network {
    address: IpAddr,
    length: u8,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a network (address/length, such as 127.0.0.0/8 or ::1/128)")]
pub struct InvalidNetwork(String);

impl FromStr for Network {
    type Err = InvalidNetwork;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || InvalidNetwork(text.to_owned());
        let (address, length) = match text.trim().split_once('/') {
            Some((address, length)) => (address, Some(length)),
            None => (text.trim(), None),
        };
        let address: IpAddr = address.parse().map_err(|_| invalid())?;
        let bits = if address.is_ipv4() { 32 } else { 128 };
        let length = match length {
            Some(length) => length.parse().ok().filter(|length| *length <= bits).ok_or_else(invalid)?,
            None => bits,
        };
        Ok(Network { address, length })
    }
}

impl std::fmt::Display for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.address, self.length)
    }
}

impl Network {
    /// Whether `ip` is in this network; an IPv4 address is never in an IPv6 network nor the
    /// other way round (`::ffff:127.0.0.1` is not in `127.0.0.0/8`).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.address, ip) {
            (IpAddr::V4(network), IpAddr::V4(ip)) => same_prefix(u32::from(ip), u32::from(network), self.length),
            (IpAddr::V6(network), IpAddr::V6(ip)) => same_prefix(u128::from(ip), u128::from(network), self.length),
            _ => false,
        }
    }
}

/// The private-network guard of one deployment: the tables below, except the networks it
/// allows (`WEBHOOK_ALLOWED_NETWORKS`; none on AWS, loopback in the local stack, whose
/// receivers all listen there).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Guard {
    allowed: Vec<Network>,
}

impl Guard {
    pub fn allowing(allowed: Vec<Network>) -> Self {
        Guard { allowed }
    }

    pub fn allowed(&self) -> &[Network] {
        &self.allowed
    }

    /// True for an address a webhook may not reach: forbidden by the tables and in no
    /// allowed network.
    pub fn refuses(&self, ip: IpAddr) -> bool {
        is_forbidden(ip) && !self.allowed.iter().any(|network| network.contains(ip))
    }
}

/// IPv4 blocks a webhook may not reach: address, prefix length, what it is.
const FORBIDDEN_V4: &[(Ipv4Addr, u8, &str)] = &[
    (Ipv4Addr::new(0, 0, 0, 0), 8, "this network (RFC 791)"),
    (Ipv4Addr::new(10, 0, 0, 0), 8, "private use (RFC 1918)"),
    (Ipv4Addr::new(100, 64, 0, 0), 10, "shared address space, CGNAT (RFC 6598)"),
    (Ipv4Addr::new(127, 0, 0, 0), 8, "loopback (RFC 1122)"),
    (Ipv4Addr::new(169, 254, 0, 0), 16, "link local, the metadata address included (RFC 3927)"),
    (Ipv4Addr::new(172, 16, 0, 0), 12, "private use (RFC 1918)"),
    (Ipv4Addr::new(192, 0, 0, 0), 24, "IETF protocol assignments (RFC 6890)"),
    (Ipv4Addr::new(192, 0, 2, 0), 24, "documentation, TEST-NET-1 (RFC 5737)"),
    (Ipv4Addr::new(192, 88, 99, 0), 24, "6to4 relay anycast, deprecated (RFC 7526)"),
    (Ipv4Addr::new(192, 168, 0, 0), 16, "private use (RFC 1918)"),
    (Ipv4Addr::new(198, 18, 0, 0), 15, "benchmarking (RFC 2544)"),
    (Ipv4Addr::new(198, 51, 100, 0), 24, "documentation, TEST-NET-2 (RFC 5737)"),
    (Ipv4Addr::new(203, 0, 113, 0), 24, "documentation, TEST-NET-3 (RFC 5737)"),
    (Ipv4Addr::new(224, 0, 0, 0), 4, "multicast (RFC 5771)"),
    (Ipv4Addr::new(240, 0, 0, 0), 4, "reserved (RFC 1112)"),
    (Ipv4Addr::new(255, 255, 255, 255), 32, "limited broadcast (RFC 919)"),
];

/// IPv6 blocks a webhook may not reach, checked before an embedded IPv4 address is.
const FORBIDDEN_V6: &[(Ipv6Addr, u8, &str)] = &[
    (Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 0), 128, "unspecified (RFC 4291)"),
    (Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 1), 128, "loopback (RFC 4291)"),
    (Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48, "local-use IPv4/IPv6 translation (RFC 8215)"),
    (Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0), 64, "discard-only (RFC 6666)"),
    (Ipv6Addr::new(0x100, 0, 0, 1, 0, 0, 0, 0), 64, "dummy prefix (RFC 9780)"),
    (
        Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0),
        23,
        "IETF protocol assignments, Teredo and benchmarking in it (RFC 2928)",
    ),
    (Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0), 32, "documentation (RFC 3849)"),
    (Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 0), 20, "documentation (RFC 9637)"),
    (Ipv6Addr::new(0x5f00, 0, 0, 0, 0, 0, 0, 0), 16, "segment routing SIDs (RFC 9602)"),
    (Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7, "unique local (RFC 4193)"),
    (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10, "link local (RFC 4291)"),
    (Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10, "site local, deprecated (RFC 3879)"),
    (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8, "multicast (RFC 4291)"),
];

/// True for an address in a block of the tables, or an IPv6 form that embeds such an IPv4
/// address.
fn is_forbidden(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_forbidden_v4(v4),
        IpAddr::V6(v6) => is_forbidden_v6(v6),
    }
}

fn is_forbidden_v4(ip: Ipv4Addr) -> bool {
    FORBIDDEN_V4.iter().any(|(network, length, _)| same_prefix(u32::from(ip), u32::from(*network), *length))
}

fn is_forbidden_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = embedded_v4(ip) {
        return is_forbidden_v4(v4);
    }
    FORBIDDEN_V6.iter().any(|(network, length, _)| same_prefix(u128::from(ip), u128::from(*network), *length))
}

/// Whether `a` and `b` share their first `length` bits.
fn same_prefix<T>(a: T, b: T, length: u8) -> bool
where
    T: Copy + std::ops::BitXor<Output = T> + std::ops::Shr<u32, Output = T> + PartialEq + From<u8>,
{
    let bits = u32::try_from(std::mem::size_of::<T>() * 8).expect("an address is small");
    let length = u32::from(length).min(bits);
    length == 0 || ((a ^ b) >> (bits - length) == T::from(0))
}

/// The IPv4 address inside IPv4-mapped (`::ffff:a.b.c.d`), IPv4-translated
/// (`::ffff:0:a.b.c.d`), IPv4-compatible (`::a.b.c.d`), NAT64 well-known prefix
/// (`64:ff9b::a.b.c.d`) and 6to4 (`2002:ab:cd::`) addresses.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let tail = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, _, _] | [0, 0, 0, 0, 0xffff, 0, _, _] => Some(tail),
        [0, 0, 0, 0, 0, 0, _, _] if !ip.is_loopback() && !ip.is_unspecified() => Some(tail),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(tail),
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8)),
        _ => None,
    }
}

/// What a subscription URL may be in one deployment (contract section 5): `https` only and
/// no private target on AWS; the local stack, whose receivers listen on loopback without
/// TLS, allows `http` and the loopback networks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UrlPolicy {
    /// `ALLOW_HTTP_WEBHOOK_URLS`: `http` besides `https`.
    pub allow_http: bool,
    /// The private-network guard, with its allow-list (`WEBHOOK_ALLOWED_NETWORKS`).
    pub guard: Guard,
}

impl UrlPolicy {
    /// The local stack's policy: `http`, and the loopback networks (`127.0.0.0/8`, `::1`).
    pub fn local_stack() -> Self {
        let loopback = ["127.0.0.0/8", "::1/128"].map(|network| network.parse().expect("a network"));
        UrlPolicy { allow_http: true, guard: Guard::allowing(loopback.to_vec()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forbidden(text: &str) -> bool {
        is_forbidden(text.parse().unwrap())
    }

    #[test]
    fn every_block_is_written_as_its_network_address() {
        for &(network, length, what) in FORBIDDEN_V4 {
            let masked = u32::from(network) & u32::MAX.checked_shl(32 - u32::from(length)).unwrap_or(0);
            assert_eq!(u32::from(network), masked, "{what}");
        }
        for &(network, length, what) in FORBIDDEN_V6 {
            let masked = u128::from(network) & u128::MAX.checked_shl(128 - u32::from(length)).unwrap_or(0);
            assert_eq!(u128::from(network), masked, "{what}");
        }
        assert!(same_prefix(0u32, u32::MAX, 0), "a zero-length prefix holds every address");
        assert!(!same_prefix(0u32, 1, 32));
    }

    #[test]
    fn refuses_internal_ranges() {
        for ip in [
            "127.0.0.1",
            "127.9.9.9",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
            "2002:7f00:1::",
            "::127.0.0.1",
            "192.0.2.1",
            "198.51.100.200",
            "203.0.113.9",
            "::ffff:0:127.0.0.1",
            "::ffff:0:a9fe:a9fe",
            "::ffff:0:10.1.2.3",
            "::ffff:0:203.0.113.1",
            // The registries' other blocks (issue 31: 64:ff9b:1::/48 passed before).
            "64:ff9b:1::a00:1",
            "64:ff9b:1:ffff::808:808",
            "192.0.0.171",
            "192.88.99.1",
            "198.19.255.255",
            "240.0.0.1",
            "100::1",
            "100:0:0:1::1",
            "2001::1",
            "2001:2::1",
            "2001:1ff::1",
            "2001:db8::1",
            "3fff::1",
            "5f00::1",
            "fec0::1",
            "2002:c000:0201::",
            "::ffff:100.64.0.1",
        ] {
            assert!(forbidden(ip), "{ip} must be refused");
        }
    }

    #[test]
    fn the_guard_lets_through_only_what_its_allow_list_holds() {
        let loopback = Guard::allowing(vec!["127.0.0.0/8".parse().unwrap(), "::1".parse().unwrap()]);
        let one_host = Guard::allowing(vec!["10.0.0.7/32".parse().unwrap()]);
        let none = Guard::default();
        // address, refused by: no allow-list, loopback, one host
        let table = [
            ("127.0.0.1", true, false, true),
            ("127.255.0.9", true, false, true),
            ("::1", true, false, true),
            ("::ffff:127.0.0.1", true, true, true),
            ("::2", true, true, true),
            ("128.0.0.1", false, false, false),
            ("10.0.0.7", true, true, false),
            ("10.0.0.8", true, true, true),
            ("169.254.169.254", true, true, true),
            ("8.8.8.8", false, false, false),
        ];
        for (ip, by_none, by_loopback, by_one_host) in table {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(none.refuses(ip), by_none, "{ip}, no allow-list");
            assert_eq!(loopback.refuses(ip), by_loopback, "{ip}, loopback allowed");
            assert_eq!(one_host.refuses(ip), by_one_host, "{ip}, 10.0.0.7 allowed");
        }
    }

    #[test]
    fn networks_are_read_as_address_and_length() {
        for (text, written) in [("127.0.0.0/8", "127.0.0.0/8"), ("::1", "::1/128"), (" 10.0.0.7 ", "10.0.0.7/32")] {
            assert_eq!(text.parse::<Network>().unwrap().to_string(), written, "{text}");
        }
        for text in ["", "127.0.0.0/33", "::1/129", "localhost", "127.0.0.0/", "127.0.0.0/-1", "10.0.0.0/8/8"] {
            assert!(text.parse::<Network>().is_err(), "{text:?} is refused");
        }
    }

    #[test]
    fn allows_public_addresses() {
        for ip in [
            "93.184.216.34",
            "8.8.8.8",
            "100.63.255.255",
            "100.128.0.1",
            "172.32.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "::ffff:0:8.8.8.8",
            "192.0.3.1",
            "198.51.101.1",
            "203.0.114.1",
            "192.31.196.1",
            "192.175.48.1",
            "198.20.0.1",
            "64:ff9b::808:808",
            "64:ff9b:2::1",
            "2001:200::1",
            "2002:808:808::",
            "2620:4f:8000::1",
        ] {
            assert!(!forbidden(ip), "{ip} must be allowed");
        }
    }
}
