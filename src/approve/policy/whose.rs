//! Checks 9 to 12 (see [`super`]): whose each name and address is.

use std::net::IpAddr;

use super::index::{Listed, MAX_NODE_ADDRESSES, Nodes};
use super::ranges::dns_matches;
use super::reserved::address_in;
use super::verdict::{Asker, Check, Cluster, Facts, Policy, Verdict, deny, wait};

/// Check 9: another node's name or addresses. One both Nodes list is in
/// dispute: one node could list the other's to get its requests denied.
/// The requester's own name is proven by its credentials: never in dispute.
pub(super) fn other_nodes(facts: &Facts, asker: &Asker, nodes: &Nodes) -> Result<(), Verdict> {
    let name = asker.name;
    for ip in &facts.ips {
        if let Some(other) = nodes.listing_ip(ip, name) {
            return Err(deny_unless_listed(
                Check::IpSan,
                format!("IP address {ip} belongs to node {other:?}"),
                asker.lists_ip(ip),
                name,
            ));
        }
    }
    for d in facts.dns.iter().filter(|d| **d != asker.lower) {
        // Another node's exact name is that node's; a name *under* it only
        // when that node lists it (anyone with a bootstrap token may name a
        // node after a domain). One the requester lists is in dispute:
        // whoever registers a Node chooses its name, and must not get
        // another's renewals denied.
        let another = nodes
            .named(d, name)
            .map(|other| format!("DNS name {d:?} is node {other:?}'s name"))
            .or_else(|| {
                nodes
                    .listing_dns(d, name)
                    .map(|other| format!("DNS name {d:?} belongs to node {other:?}"))
            });
        if let Some(message) = another {
            return Err(deny_unless_listed(
                Check::DnsSan,
                message,
                asker.lists_dns(d),
                name,
            ));
        }
        // `n2.nodes.example` where a node is named `n2`: likely that
        // node's FQDN, which it need not list; in dispute, as above.
        if let Some(other) = d
            .split_once('.')
            .and_then(|(first, _)| nodes.named(first, name))
        {
            return Err(wait(
                Check::DnsSan,
                format!(
                    "DNS name {d:?} begins with node {other:?}'s name (perhaps its FQDN); a person decides"
                ),
            ));
        }
    }
    Ok(())
}

/// Denied, or in dispute when the requester `name` lists it too.
fn deny_unless_listed(check: Check, message: String, listed: bool, name: &str) -> Verdict {
    if listed {
        wait(
            check,
            format!("{message}, and node {name:?} lists it too: in dispute, a person decides"),
        )
    } else {
        deny(check, message)
    }
}

/// Check 10.
pub(super) fn node_networks(ips: &[IpAddr], policy: &Policy) -> Result<(), Verdict> {
    if policy.any_node_address {
        return Ok(());
    }
    let Some(ip) = ips
        .iter()
        .find(|ip| !policy.node_cidrs.iter().any(|c| c.contains(**ip)))
    else {
        return Ok(());
    };
    let declared: Vec<String> = policy.node_cidrs.iter().map(ToString::to_string).collect();
    Err(deny(
        Check::IpSan,
        format!(
            "IP address {ip} is outside the node networks (--node-cidr {})",
            if declared.is_empty() {
                "none declared".to_owned()
            } else {
                declared.join(",")
            }
        ),
    ))
}

/// Check 11 (at most [`MAX_NODE_ADDRESSES`]). Returns what it lists.
pub(super) fn node<'a>(asker: &Asker<'a>) -> Result<&'a Listed, Verdict> {
    let name = asker.name;
    let Some(listed) = asker.own else {
        return Err(wait(
            Check::Node,
            format!("node {name:?} does not exist (yet)"),
        ));
    };
    if let Some(count) = listed.over {
        return Err(wait(
            Check::Node,
            format!(
                "node {name:?} lists {count} addresses; no kubelet lists more than \
                 {MAX_NODE_ADDRESSES} (a person decides)"
            ),
        ));
    }
    if listed.ips.is_empty() && listed.dns.is_empty() {
        return Err(wait(
            Check::Node,
            format!("node {name:?} lists no addresses (yet)"),
        ));
    }
    Ok(listed)
}

/// A Service address the requester lists too, or a Service's name it
/// lists or is named (left by check 8): in dispute.
pub(super) fn service_dispute(
    facts: &Facts,
    asker: &Asker,
    listed: &Listed,
    cluster: &Cluster,
) -> Result<(), Verdict> {
    let node = asker.name;
    for d in &facts.dns {
        if let Some((_, what)) = cluster.service_names.iter().find(|(n, _)| n == d) {
            let how = if listed.dns.contains(d) {
                "lists it as its own"
            } else {
                "is named so"
            };
            return Err(wait(
                Check::DnsSan,
                format!(
                    "DNS name {d:?} is {what}, and node {node:?} {how}: in dispute, a person decides"
                ),
            ));
        }
    }
    for ip in facts.ips.iter().filter(|ip| listed.ips.contains(ip)) {
        if let Some(what) = address_in(&cluster.services, *ip) {
            return Err(wait(
                Check::IpSan,
                format!(
                    "IP address {ip} is {what}, and node {node:?} lists it as its own: in dispute, a person decides"
                ),
            ));
        }
    }
    Ok(())
}

/// Check 12.
pub(super) fn listed_sans(
    facts: &Facts,
    asker: &Asker,
    listed: &Listed,
    policy: &Policy,
) -> Result<(), Verdict> {
    let name = asker.name;
    if let Some(ip) = facts.ips.iter().find(|ip| !listed.ips.contains(ip)) {
        return Err(wait(
            Check::IpSan,
            format!("IP address {ip} is not among node {name:?}'s addresses (yet)"),
        ));
    }
    let dns = &listed.dns;
    if let Some(d) = facts.dns.iter().find(|d| {
        **d != asker.lower
            && !(dns.contains(*d) && policy.allowed_dns.iter().any(|p| dns_matches(p, d)))
    }) {
        let why = if dns.contains(d.as_str()) {
            "matches no --allowed-dns pattern"
        } else {
            "is not among the node's addresses (yet)"
        };
        return Err(wait(
            Check::DnsSan,
            format!("DNS name {d:?} is not node {name:?}'s own name and {why}"),
        ));
    }
    Ok(())
}
