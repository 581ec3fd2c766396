//! The node's layout as adopt knows it: certsync's mappings, kubeadm's CA files and what
//! certsync's pod mounts read-only.

use std::path::Path;

use super::super::error::FileProblem;
use super::super::manifest::{
    self, BOOTSTRAP_KUBELET_CONF, CA_BUNDLE, CONFIG, ETCD_CA_BUNDLE, KUBELET_CONF, P,
};
use super::super::moves::reach;
use super::super::paths::host;
use super::super::record::State;

/// kubeconfigs with an embedded client pair, renewed in place (`update-kubeconfig:`) when
/// the node has them. The components read certsync's own kubeconfigs (by file, which
/// client-go re-reads); these are kept in step for people, kubeadm and revert.
pub const EMBEDDED: [&str; 4] = [
    "/etc/kubernetes/admin.conf",
    "/etc/kubernetes/super-admin.conf",
    "/etc/kubernetes/controller-manager.conf",
    "/etc/kubernetes/scheduler.conf",
];

/// kubeadm's CA and service-account files: certsync's pod mounts each read-only over the
/// read-write `pki/`, so the CA keys stay unchangeable from its container.
pub const CA_FILES: [&str; 8] = [
    "/etc/kubernetes/pki/ca.crt",
    "/etc/kubernetes/pki/ca.key",
    "/etc/kubernetes/pki/front-proxy-ca.crt",
    "/etc/kubernetes/pki/front-proxy-ca.key",
    "/etc/kubernetes/pki/etcd/ca.crt",
    "/etc/kubernetes/pki/etcd/ca.key",
    "/etc/kubernetes/pki/sa.key",
    "/etc/kubernetes/pki/sa.pub",
];

/// Whether certsync's pod mounts `node_path` read-only as a file of its own.
pub fn read_only_in_pod(node_path: &str) -> bool {
    CA_FILES.contains(&node_path)
        || [CA_BUNDLE, ETCD_CA_BUNDLE, CONFIG].contains(&node_path)
        || KUBELET_FILES.iter().any(|(_, f)| *f == node_path)
}

pub(super) const KUBELET_FILES: [(&str, &str); 2] = [
    ("kubelet-conf", KUBELET_CONF),
    ("bootstrap-kubelet-conf", BOOTSTRAP_KUBELET_CONF),
];

/// One `ca:` mapping. A template (under pki/) is also kubeadm's copy of the pair, kept in
/// step (`update-pair:`); a client has an identity (cn, o) and its kubeconfig instead.
pub struct Cert {
    pub name: String,
    pub ca: &'static str,
    pub target: String,
    pub template: Option<&'static str>,
    /// A client's (cn, o, kubeconfig).
    pub client: Option<(&'static str, Option<&'static str>, &'static str)>,
}

impl Cert {
    /// The pair under pki/ it keeps in step, as a prefix.
    pub fn pair(&self) -> Option<String> {
        self.template.map(|t| format!("/etc/kubernetes/pki/{t}"))
    }

    pub fn ca_crt(&self) -> String {
        format!("/etc/kubernetes/pki/{}.crt", self.ca)
    }
}

/// kubeadm's pairs: (CA under pki/, the pair under pki/), each mapping named after its pair
/// (`etcd/server`: `etcd-server`).
const PAIRS: [(&str, &str); 7] = [
    ("ca", "apiserver"),
    ("ca", "apiserver-kubelet-client"),
    ("etcd/ca", "apiserver-etcd-client"),
    ("front-proxy-ca", "front-proxy-client"),
    ("etcd/ca", "etcd/server"),
    ("etcd/ca", "etcd/peer"),
    ("etcd/ca", "etcd/healthcheck-client"),
];

/// The client pairs embedded in kubeconfigs, issued by `ca`: (kubeconfig, cn, o), each
/// mapping named after its kubeconfig (`scheduler.conf`: `scheduler-client`).
const CLIENTS: [(&str, &str, Option<&str>); 4] = [
    (EMBEDDED[2], "system:kube-controller-manager", None),
    (EMBEDDED[3], "system:kube-scheduler", None),
    (
        EMBEDDED[0],
        "kubernetes-admin",
        Some("kubeadm:cluster-admins"),
    ),
    (
        EMBEDDED[1],
        "kubernetes-super-admin",
        Some("system:masters"),
    ),
];

/// Every certificate `kubeadm certs renew all` renews that the node at `dir` has: a client
/// when its kubeconfig is there or adopt's record (`recorded`) names it. certsync's
/// container may delete a kubeconfig, never drop a client's mapping (a component would
/// run on a target nothing renews) or hide its target from revert.
pub fn certs(dir: &Path, recorded: Option<&State>) -> Vec<Cert> {
    let clients = CLIENTS
        .into_iter()
        .filter(|(kubeconfig, ..)| {
            host(dir, kubeconfig).is_file()
                || recorded.is_some_and(|s| s.kubeconfigs.contains_key(*kubeconfig))
        })
        .map(|(kubeconfig, cn, o)| {
            let file = kubeconfig.trim_start_matches("/etc/kubernetes/");
            let name = format!("{}-client", file.trim_end_matches(".conf"));
            Cert {
                target: format!("{P}/{name}"),
                name,
                ca: "ca",
                template: None,
                client: Some((cn, o, kubeconfig)),
            }
        });
    pair_certs().chain(clients).collect()
}

/// The mappings of kubeadm's pairs: every node has them all, so nothing on disk is looked at.
fn pair_certs() -> impl Iterator<Item = Cert> {
    PAIRS.into_iter().map(|(ca, template)| Cert {
        name: template.replace('/', "-"),
        ca,
        target: manifest::target(template),
        template: Some(template),
        client: None,
    })
}

/// The kubeadm files certsync keeps in step whose copy adopt's record lacks (revert hands
/// back only recorded ones): kubeconfigs, then pairs' certificates. Anything at a kubeconfig's path counts, a link
/// or what cannot be looked at included: certsync's container could have put it there.
pub fn unrecorded(dir: &Path, state: &State) -> Vec<String> {
    let kubeconfigs = EMBEDDED
        .into_iter()
        .filter(|k| !state.kubeconfigs.contains_key(*k))
        .filter(|k| !matches!(reach(dir, k), Err(FileProblem::Missing)))
        .map(str::to_owned);
    let pairs = pairs()
        .filter(|p| !state.pairs.contains_key(p))
        .map(|p| format!("{p}.crt"));
    kubeconfigs.chain(pairs).collect()
}

/// kubeadm's pairs certsync keeps in step, as prefixes (without `.crt`/`.key`).
pub fn pairs() -> impl Iterator<Item = String> {
    pair_certs().filter_map(|c| c.pair())
}

/// The CA certificate of kubeadm's pair at `prefix`; `None`: no pair of kubeadm's.
pub fn pair_ca(prefix: &str) -> Option<String> {
    let cert = pair_certs().find(|c| c.pair().as_deref() == Some(prefix));
    cert.map(|c| c.ca_crt())
}
