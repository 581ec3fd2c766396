//! Attacks on the policy through what a Node lists: an address or name
//! far down a long list, and a Node named after a name another lists.

use super::*;

/// A Node listing `count` addresses (IPs `10.0.60.1..`, or names
/// `hN.nodes.example`) and nothing else of note.
fn many(name: &str, count: usize, names: bool) -> (String, Node) {
    let addrs: Vec<String> = (1..=count)
        .map(|i| {
            if names {
                format!("h{i}.nodes.example")
            } else {
                format!("10.0.{}.{}", 60 + i / 250, i % 250)
            }
        })
        .collect();
    let kind = if names { "InternalDNS" } else { "InternalIP" };
    let listed: Vec<(&str, &str)> = addrs.iter().map(|a| (kind, a.as_str())).collect();
    node(name, &listed)
}

/// Attack: a Node's addresses and names past the
/// 128th were indexed as no one's, so another node that listed the
/// 150th of a Node listing 200 got it (kube-controller-manager issued
/// it). Every address and name any Node lists is that Node's against
/// every other node, wherever it stands in the list.
#[test]
fn attack_the_150th_address_of_a_node_listing_200_is_still_that_nodes() {
    let mut nodes = nodes();
    nodes.extend([many("many", 200, false), many("manyd", 200, true)]);
    nodes.extend([node(
        "evil",
        &[
            ("InternalIP", "10.0.60.150"),
            ("InternalIP", "10.0.0.44"),
            ("InternalDNS", "h180.nodes.example"),
        ],
    )]);
    let index = Nodes::new(&nodes);
    // Everything listed is indexed: the cost is linear in what the Nodes
    // list (one entry per address), never capped into "no one's".
    let listed: usize = nodes
        .values()
        .map(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.addresses.as_ref())
                .map_or(0, Vec::len)
        })
        .sum();
    assert_eq!(
        entries(&index, &nodes),
        listed,
        "everything listed is indexed"
    );
    for (ip, dns) in [
        ("10.0.60.150", None),
        ("10.0.0.44", Some("h180.nodes.example")),
    ] {
        let mut a = kubelet("evil");
        a.ips = vec![ip.parse().unwrap()];
        a.dns = vec!["evil".into()];
        a.dns.extend(dns.map(str::to_owned));
        let (v, _) = decide_with(&csr(&a), &index, &the_cluster(), &policy());
        // evil lists them too: in dispute, never approved.
        assert_eq!(v.label(), "wait", "{ip} {dns:?}: {}", v.describe());
        let owner = if dns.is_some() { "manyd" } else { "many" };
        assert!(v.describe().contains(owner), "{}", v.describe());
    }
    // The control: evil's own address alone is approved.
    let mut a = kubelet("evil");
    a.ips = vec!["10.0.0.44".parse().unwrap()];
    a.dns = vec!["evil".into()];
    let (v, _) = decide_with(&csr(&a), &index, &the_cluster(), &policy());
    assert_eq!(v, Verdict::Approve, "{}", v.describe());
}

/// Attack: a Node named exactly a DNS name another
/// node lists (an attacker registers Node `web1.nodes.example`) got the
/// lister's own request for it denied. The name is in dispute for a
/// node that lists it (a person decides, naming both); one that does
/// not list it is still denied.
#[test]
fn attack_a_node_named_after_a_name_another_node_lists_puts_it_in_dispute() {
    let mut nodes = nodes();
    nodes.extend([
        node(
            "web1",
            &[
                ("InternalIP", "10.0.0.61"),
                ("InternalDNS", "web1.nodes.example"),
            ],
        ),
        node("web1.nodes.example", &[("InternalIP", "10.0.0.62")]),
    ]);
    let mut a = kubelet("web1");
    a.ips = vec!["10.0.0.61".parse().unwrap()];
    a.dns = vec!["web1".into(), "web1.nodes.example".into()];
    let (v, _) = decide(&csr(&a), &nodes, &the_cluster(), &policy());
    assert_eq!(
        (v.label(), v.check()),
        ("wait", Some(Check::DnsSan)),
        "{}",
        v.describe()
    );
    assert!(
        v.describe().contains("\"web1.nodes.example\"") && v.describe().contains("a person"),
        "{}",
        v.describe()
    );
    // A node that does not list it: denied, naming the Node.
    let mut a = kubelet("n2");
    a.ips = vec!["10.0.0.2".parse().unwrap()];
    a.dns = vec!["n2".into(), "web1.nodes.example".into()];
    let (v, _) = decide(&csr(&a), &nodes, &the_cluster(), &policy());
    assert_eq!(
        (v.label(), v.check()),
        ("deny", Some(Check::DnsSan)),
        "{}",
        v.describe()
    );
    // The Node so named still gets its own name.
    let mut a = kubelet("web1.nodes.example");
    a.ips = vec!["10.0.0.62".parse().unwrap()];
    let (v, _) = decide(&csr(&a), &nodes, &the_cluster(), &policy());
    assert_eq!(v, Verdict::Approve, "{}", v.describe());
}
