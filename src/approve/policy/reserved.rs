//! Check 8 (see [`super`]): the cluster's names and addresses, denied. A
//! Service's address or name the requester lists (or is named) is left to
//! [`super::whose::service_dispute`]: any namespace user writes those, and
//! must not get a node's renewals denied by naming the node's own.

use std::net::IpAddr;

use super::index::Nodes;
use super::ranges::{Reserved, canonical, dns_matches};
use super::verdict::{Asker, Check, Cluster, Facts, Policy, Verdict, deny};

/// Check 8: every DNS name, then every address.
pub(super) fn check(
    facts: &Facts,
    asker: &Asker,
    nodes: &Nodes,
    cluster: &Cluster,
    policy: &Policy,
) -> Result<(), Verdict> {
    let name = |d: &String| Some((d.clone(), reserved_name(d, asker, cluster, policy)?));
    if let Some((d, why)) = facts.dns.iter().find_map(name) {
        let message = format!("DNS name {d:?} is {why}; never a node's");
        return Err(deny(Check::DnsSan, message));
    }
    let address = |ip: &IpAddr| Some((*ip, reserved_address(*ip, asker, nodes, cluster, policy)?));
    if let Some((ip, why)) = facts.ips.iter().find_map(address) {
        return Err(deny(
            Check::IpSan,
            format!("IP address {ip} is {why}; never a node's"),
        ));
    }
    Ok(())
}

/// Why DNS name `d` is the cluster's, if it is.
fn reserved_name(d: &str, asker: &Asker, cluster: &Cluster, policy: &Policy) -> Option<String> {
    well_known(d)
        .map(str::to_owned)
        .or_else(|| {
            cluster
                .names
                .iter()
                // For `*.BASE` any name under BASE at any depth: a deeper
                // name is as much the API server's domain, and nothing is
                // lost refusing it to a node.
                .find(|(n, _)| dns_matches(n, d))
                .map(|(n, what)| {
                    if n == d {
                        what.clone()
                    } else {
                        format!("under {n:?}, {what}")
                    }
                })
        })
        .or_else(|| {
            cluster
                .service_names
                .iter()
                .find(|(n, _)| n == d && !asker.claims(d))
                .map(|(_, what)| what.clone())
        })
        .or_else(|| {
            policy
                .reserved
                .iter()
                .any(|r| matches!(r, Reserved::Name(n) if n == d))
                .then(|| "reserved (--reserved)".to_owned())
        })
}

/// Names that are the cluster's in every cluster: the API server's
/// Service name, any Service name (under `.svc`), and the /etc/hosts
/// names of the loopback address (localhost.localdomain,
/// localhost4.localdomain4, ...).
fn well_known(d: &str) -> Option<&'static str> {
    let labels: Vec<&str> = d.split('.').collect();
    if labels[0] == "kubernetes" && (labels.len() == 1 || labels.get(1) == Some(&"default")) {
        Some("the API server's Service name")
    } else if labels[1..].contains(&"svc") || labels.last() == Some(&"svc") {
        Some("a Service name (under .svc)")
    } else if labels.last() == Some(&"localhost")
        || matches!(
            labels[0],
            "localhost" | "localhost4" | "localhost6" | "ip6-localhost" | "ip6-loopback"
        )
    {
        Some("localhost")
    } else {
        None
    }
}

/// Why address `ip` is the cluster's, if it is.
fn reserved_address(
    ip: IpAddr,
    asker: &Asker,
    nodes: &Nodes,
    cluster: &Cluster,
    policy: &Policy,
) -> Option<String> {
    special(ip)
        .map(str::to_owned)
        .or_else(|| address_in(&cluster.addresses, ip).cloned())
        .or_else(|| {
            address_in(&cluster.services, ip)
                .filter(|_| !asker.lists_ip(&ip))
                .cloned()
        })
        .or_else(|| {
            cluster
                .ranges
                .iter()
                .find(|(c, _)| c.contains(ip))
                .map(|(c, what)| format!("in Service range {c} ({what})"))
        })
        .or_else(|| {
            policy
                .service_cidrs
                .iter()
                .find(|c| c.contains(ip))
                .map(|c| format!("in Service range {c} (--service-cidr)"))
        })
        .or_else(|| {
            policy.reserved.iter().find_map(|r| match r {
                Reserved::Range(c) if c.contains(ip) => {
                    Some(format!("in reserved range {c} (--reserved)"))
                }
                _ => None,
            })
        })
        .or_else(|| {
            nodes
                .pod_range(ip)
                .map(|(c, n)| format!("in node {n:?}'s Pod range {c}"))
        })
}

/// What the first entry of `list` at address `ip` is.
pub(super) fn address_in(list: &[(IpAddr, String)], ip: IpAddr) -> Option<&String> {
    list.iter()
        .find(|(a, _)| canonical(*a) == ip)
        .map(|(_, what)| what)
}

/// Addresses no node can own: loopback, link-local, multicast,
/// unspecified, broadcast.
pub(super) fn special(ip: IpAddr) -> Option<&'static str> {
    let ip = canonical(ip);
    let link_local = match ip {
        IpAddr::V4(a) => a.is_link_local(),
        IpAddr::V6(a) => a.is_unicast_link_local(),
    };
    match ip {
        _ if ip.is_loopback() => Some("a loopback address"),
        _ if link_local => Some("a link-local address"),
        _ if ip.is_multicast() => Some("a multicast address"),
        _ if ip.is_unspecified() => Some("the unspecified address"),
        IpAddr::V4(a) if a.is_broadcast() => Some("the broadcast address"),
        IpAddr::V6(a) if embeds_ipv4(a) => Some(
            "an IPv6 form of an IPv4 address (IPv4-compatible, IPv4-translated, NAT64, 6to4, Teredo or ISATAP)",
        ),
        _ => None,
    }
}

/// IPv6 forms of an IPv4 address (but the mapped one, [`canonical`]): no
/// node's own, and each could carry a reserved IPv4 address past the
/// IPv4 checks.
fn embeds_ipv4(a: std::net::Ipv6Addr) -> bool {
    let s = a.segments();
    // ::a.b.c.d (IPv4-compatible, deprecated), ::ffff:0:a.b.c.d (IPv4-translated)
    (s[..6] == [0; 6] && !(s[6] == 0 && s[7] <= 1))
        || (s[..4] == [0; 4] && s[4] == 0xffff && s[5] == 0)
        // 64:ff9b::/96 (NAT64 well-known), 64:ff9b:1::/48 (local NAT64)
        || s[..6] == [0x64, 0xff9b, 0, 0, 0, 0]
        || s[..3] == [0x64, 0xff9b, 1]
        // 2002::/16 (6to4)
        || s[0] == 0x2002
        // 2001:0::/32 (Teredo: a server's IPv4 address, and the client's
        // with its bits inverted)
        || s[..2] == [0x2001, 0]
        // ISATAP (RFC 5214), under any /64 prefix: interface identifier
        // 0000:5efe or 0200:5efe (the u bit), the g bit set too, then the
        // IPv4 address, which a host's ISATAP tunnel sends it to. Go does
        // not read it as that IPv4 address; kubelet takes it as a node IP.
        || (s[4] & !0x0300 == 0 && s[5] == 0x5efe)
}
