//! Which IP addresses a tenant's URL may reach when private targets are not allowed: public
//! unicast only. IPv4 is a deny list of every special-purpose block (IANA's registry); IPv6 is
//! an allow list (global unicast `2000::/3`) minus its special blocks, so that a new or
//! forgotten form outside `2000::/3` is refused rather than let through.
//!
//! Addresses that embed an IPv4 address:
//! - IPv4-mapped `::ffff:a.b.c.d`: a dual-stack socket connecting to it reaches `a.b.c.d`,
//!   so the embedded address decides.
//! - NAT64's well-known prefix `64:ff9b::/96`: a translator forwards it to the embedded
//!   address, so that address decides (an IPv6-only host reaches public IPv4 sites this way).
//! - Refused whatever they embed: IPv4-compatible `::a.b.c.d` (deprecated; some stacks still
//!   route it as IPv4), NAT64's local-use `64:ff9b:1::/48` (its embedding is the network's
//!   choice), 6to4 `2002::/16` and Teredo `2001::/32` (tunnels whose far end we cannot see).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// IPv4 blocks that are not public unicast: (network, prefix length).
const V4_REFUSED: &[([u8; 4], u8)] = &[
    ([0, 0, 0, 0], 8),       // "this network", unspecified
    ([10, 0, 0, 0], 8),      // private
    ([100, 64, 0, 0], 10),   // carrier-grade NAT
    ([127, 0, 0, 0], 8),     // loopback
    ([169, 254, 0, 0], 16),  // link-local (cloud metadata at 169.254.169.254)
    ([172, 16, 0, 0], 12),   // private
    ([192, 0, 0, 0], 24),    // IETF protocol assignments
    ([192, 0, 2, 0], 24),    // documentation
    ([192, 88, 99, 0], 24),  // 6to4 relay anycast (deprecated)
    ([192, 168, 0, 0], 16),  // private
    ([198, 18, 0, 0], 15),   // benchmarking
    ([198, 51, 100, 0], 24), // documentation
    ([203, 0, 113, 0], 24),  // documentation
    ([224, 0, 0, 0], 4),     // multicast
    ([240, 0, 0, 0], 4),     // reserved, and 255.255.255.255 broadcast
];

/// Blocks inside global unicast `2000::/3` that are not public unicast: (network, prefix).
const V6_REFUSED: &[(u128, u8)] = &[
    (0x2001_0000_u128 << 96, 23), // IETF protocol assignments: Teredo, benchmarking, ORCHID
    (0x2001_0db8_u128 << 96, 32), // documentation
    (0x2002_u128 << 112, 16),     // 6to4
    (0x3ffe_u128 << 112, 16),     // the former 6bone, returned
    (0x3fff_u128 << 112, 20),     // documentation (RFC 9637)
];

/// NAT64's well-known prefix `64:ff9b::/96`.
const NAT64_WELL_KNOWN: u128 = 0x0064_ff9b_u128 << 96;

fn in_v4(ip: Ipv4Addr, network: [u8; 4], prefix: u8) -> bool {
    let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
    u32::from(ip) & mask == u32::from(Ipv4Addr::from(network)) & mask
}

fn in_v6(ip: u128, network: u128, prefix: u8) -> bool {
    let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
    ip & mask == network & mask
}

/// Whether `ip` is a public unicast address (see the module's documentation).
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    !V4_REFUSED
        .iter()
        .any(|&(network, prefix)| in_v4(ip, network, prefix))
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    let bits = u128::from(ip);
    if in_v6(bits, NAT64_WELL_KNOWN, 96) {
        // The low 32 bits are the IPv4 address the translator forwards to.
        return is_public_v4(Ipv4Addr::from(bits as u32));
    }
    // Everything outside global unicast: loopback, unspecified, IPv4-compatible, NAT64
    // local-use, discard-only, unique local, link-local, site-local, multicast.
    if !in_v6(bits, 0x2000_u128 << 112, 3) {
        return false;
    }
    !V6_REFUSED
        .iter()
        .any(|&(network, prefix)| in_v6(bits, network, prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Addresses that must be refused, one per block, with the block's name.
    const REFUSED: &[(&str, &str)] = &[
        ("0.0.0.0", "unspecified"),
        ("0.1.2.3", "this network 0/8"),
        ("10.0.0.1", "private 10/8"),
        ("100.64.0.1", "CGNAT 100.64/10, first"),
        ("100.127.255.254", "CGNAT 100.64/10, last"),
        ("127.0.0.1", "loopback"),
        ("127.255.255.254", "loopback, end of 127/8"),
        ("169.254.169.254", "link-local (cloud metadata)"),
        ("172.16.0.1", "private 172.16/12"),
        ("172.31.255.255", "private 172.16/12, last"),
        ("192.0.0.8", "IETF protocol assignments 192.0.0/24"),
        ("192.0.2.1", "documentation TEST-NET-1"),
        ("192.88.99.1", "6to4 relay anycast"),
        ("192.168.1.1", "private 192.168/16"),
        ("198.18.0.1", "benchmarking 198.18/15"),
        ("198.19.255.255", "benchmarking 198.18/15, last"),
        ("198.51.100.7", "documentation TEST-NET-2"),
        ("203.0.113.9", "documentation TEST-NET-3"),
        ("224.0.0.1", "multicast"),
        ("239.255.255.250", "multicast (SSDP)"),
        ("240.0.0.1", "reserved 240/4"),
        ("255.255.255.255", "broadcast"),
        ("::", "IPv6 unspecified"),
        ("::1", "IPv6 loopback"),
        ("::127.0.0.1", "IPv4-compatible loopback"),
        ("::8.8.8.8", "IPv4-compatible, even of a public address"),
        ("::ffff:127.0.0.1", "IPv4-mapped loopback"),
        ("::ffff:10.0.0.1", "IPv4-mapped private"),
        ("::ffff:169.254.169.254", "IPv4-mapped link-local"),
        ("64:ff9b::7f00:1", "NAT64 of 127.0.0.1"),
        ("64:ff9b::a9fe:a9fe", "NAT64 of 169.254.169.254"),
        ("64:ff9b:1::808:808", "NAT64 local-use 64:ff9b:1::/48"),
        ("100::1", "discard-only 100::/64"),
        ("fc00::1", "unique local fc00::/7"),
        ("fd12:3456::1", "unique local fd00::/8"),
        ("fe80::1", "link-local fe80::/10"),
        ("febf::1", "link-local, end of fe80::/10"),
        ("fec0::1", "site-local fec0::/10"),
        ("ff02::1", "IPv6 multicast"),
        ("2001:db8::1", "IPv6 documentation 2001:db8::/32"),
        ("3fff::1", "IPv6 documentation 3fff::/20"),
        ("2002:7f00:1::1", "6to4 of 127.0.0.1"),
        ("2002:808:808::1", "6to4, even of a public address"),
        ("2001::1", "Teredo 2001::/32"),
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"),
        ("2001:2::1", "IPv6 benchmarking 2001:2::/48"),
        ("2001:20::1", "ORCHIDv2"),
        ("3ffe::1", "former 6bone"),
    ];

    const PUBLIC: &[&str] = &[
        "8.8.8.8",
        "1.1.1.1",
        "93.184.215.14",
        "100.63.255.255",
        "100.128.0.0",
        "172.15.255.255",
        "172.32.0.1",
        "192.0.1.1",
        "192.169.0.1",
        "198.17.255.255",
        "198.20.0.1",
        "223.255.255.255",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
        "2606:4700:4700::1111",
        "2001:4860:4860::8888",
        "2a00:1450:4001::1",
    ];

    #[test]
    fn every_special_purpose_block_is_refused() {
        for (raw, block) in REFUSED {
            let ip: IpAddr = raw.parse().expect(raw);
            assert!(!is_public(ip), "{raw} ({block}) must be refused");
        }
    }

    #[test]
    fn public_unicast_addresses_pass_including_their_ipv4_mapped_and_nat64_forms() {
        for raw in PUBLIC {
            let ip: IpAddr = raw.parse().expect(raw);
            assert!(is_public(ip), "{raw} is public");
        }
    }
}
