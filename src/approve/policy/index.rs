//! Every Node's name, listed names and addresses and Pod ranges, indexed
//! once per change of the Nodes, so that deciding a request costs a
//! hash lookup per SAN whatever the Nodes list (a scan per SAN lets
//! nodes listing many names keep the approver busy for minutes).

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

use super::ranges::{Cidr, canonical, dns_name};

/// The most addresses (IPs and names) a Node may list and still have its
/// own requests decided (a kubelet lists tens); beyond, a person decides.
/// Everything it lists is indexed all the same, as that Node's against
/// every other: an entry left out would be free for another node, and a
/// cap making every request undecidable would let one node stall all. The
/// cost is linear in what the Nodes hold, which the API server bounds.
pub const MAX_NODE_ADDRESSES: usize = 128;

/// What one Node lists, lower-cased and parsed once.
#[derive(Debug, Default)]
pub struct Listed {
    pub ips: HashSet<IpAddr>,
    pub dns: HashSet<String>,
    /// How many addresses its status holds, when over [`MAX_NODE_ADDRESSES`].
    pub over: Option<usize>,
}

/// What one Node adds to the index, read when that Node changes.
#[derive(Debug)]
pub struct Piece {
    name: String,
    listed: Listed,
    pod_ranges: Vec<Cidr>,
}

impl Piece {
    pub fn of(name: &str, node: &Node) -> Self {
        let all = node
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_deref())
            .unwrap_or(&[]);
        let mut listed = Listed {
            over: (all.len() > MAX_NODE_ADDRESSES).then_some(all.len()),
            ..Listed::default()
        };
        for a in all {
            if let Ok(ip) = a.address.parse::<IpAddr>() {
                listed.ips.insert(canonical(ip));
            } else {
                listed.dns.insert(dns_name(&a.address));
            }
        }
        let pod_ranges = node
            .spec
            .iter()
            .flat_map(|spec| spec.pod_cidrs.iter().flatten().chain(spec.pod_cidr.iter()))
            .filter_map(|c| c.parse::<Cidr>().ok())
            .collect();
        Self {
            name: name.to_owned(),
            listed,
            pod_ranges,
        }
    }
}

#[derive(Debug, Default)]
pub struct Nodes {
    /// Per Node name: what it lists.
    listed: HashMap<String, Arc<Piece>>,
    /// Lower-case node name -> node name.
    names: HashMap<String, String>,
    /// Per address and per listed name: up to two Nodes listing it (enough
    /// to find one that is not the requester).
    ips: HashMap<IpAddr, Vec<String>>,
    dns: HashMap<String, Vec<String>>,
    /// Pod ranges (`spec.podCIDRs`, set by the controller manager) and whose.
    pod_ranges: Vec<(Cidr, String)>,
}

fn claim<K: std::hash::Hash + Eq>(map: &mut HashMap<K, Vec<String>>, key: K, node: &str) {
    let owners = map.entry(key).or_default();
    if owners.len() < 2 && !owners.iter().any(|o| o == node) {
        owners.push(node.to_owned());
    }
}

impl Nodes {
    pub fn new<'a>(nodes: impl IntoIterator<Item = (&'a String, &'a Node)>) -> Self {
        Self::from_pieces(
            nodes
                .into_iter()
                .map(|(n, node)| Arc::new(Piece::of(n, node))),
        )
    }

    /// The index of every Node's [`Piece`], in the order given.
    pub fn from_pieces(pieces: impl IntoIterator<Item = Arc<Piece>>) -> Self {
        let mut index = Self::default();
        for piece in pieces {
            let name = &piece.name;
            index.names.insert(name.to_ascii_lowercase(), name.clone());
            for ip in &piece.listed.ips {
                claim(&mut index.ips, *ip, name);
            }
            for d in &piece.listed.dns {
                claim(&mut index.dns, d.clone(), name);
            }
            for c in &piece.pod_ranges {
                index.pod_ranges.push((*c, name.clone()));
            }
            index.listed.insert(name.clone(), piece);
        }
        index
    }

    /// What Node `name` lists; `None` when there is no such Node.
    pub fn listed(&self, name: &str) -> Option<&Listed> {
        self.listed.get(name).map(|p| &p.listed)
    }

    /// The Node (other than `not`) named `d` exactly (lower-case).
    pub fn named(&self, d: &str, not: &str) -> Option<&str> {
        self.names.get(d).map(String::as_str).filter(|n| *n != not)
    }

    /// A Node other than `not` that lists address `ip`.
    pub fn listing_ip(&self, ip: &IpAddr, not: &str) -> Option<&str> {
        Self::other(self.ips.get(ip), not)
    }

    /// A Node other than `not` that lists name `d` (lower-case).
    pub fn listing_dns(&self, d: &str, not: &str) -> Option<&str> {
        Self::other(self.dns.get(d), not)
    }

    fn other<'a>(owners: Option<&'a Vec<String>>, not: &str) -> Option<&'a str> {
        owners?.iter().map(String::as_str).find(|o| *o != not)
    }

    /// Whose Pod range holds `ip`, and the range.
    pub fn pod_range(&self, ip: IpAddr) -> Option<(&Cidr, &str)> {
        self.pod_ranges
            .iter()
            .find(|(c, _)| c.contains(ip))
            .map(|(c, n)| (c, n.as_str()))
    }
}
