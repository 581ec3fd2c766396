//! The node's layout as adopt knows it: certsync's mappings (kubeadm's
//! pairs and the clients embedded in its kubeconfigs), kubeadm's CA files
//! and what certsync's pod mounts read-only.

use std::path::Path;

use super::super::manifest::{
    self, BOOTSTRAP_KUBELET_CONF, CA_BUNDLE, CONFIG, ETCD_CA_BUNDLE, KUBELET_CONF, P,
};
use super::super::paths::host;
use super::super::record::State;

/// certsync's static pod.
pub const POD: &str = "/etc/kubernetes/manifests/certsync.yaml";

/// kubeconfigs with an embedded client pair that people and kubeadm read:
/// kept renewed in place (`update-kubeconfig:`) when the node has them
/// (a joined control-plane node has no super-admin.conf). The components
/// read certsync's own kubeconfigs (client certificate by file, which
/// client-go re-reads); controller-manager.conf and scheduler.conf are
/// kept in step for `kubeadm certs check-expiration` and for revert.
pub const EMBEDDED: [&str; 4] = [
    "/etc/kubernetes/admin.conf",
    "/etc/kubernetes/super-admin.conf",
    "/etc/kubernetes/controller-manager.conf",
    "/etc/kubernetes/scheduler.conf",
];

/// kubeadm's CA and service-account files: certsync's pod mounts each one
/// read-only over the read-write `pki/` (the pairs it keeps in step live
/// there), so the CA keys stay unchangeable from its container.
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

/// Whether certsync's pod mounts `node_path` read-only as a file of its
/// own (over a read-write directory): kubeadm's CA and service-account
/// files, the trust bundles, certsync's configuration, the kubelet's
/// kubeconfigs.
pub fn read_only_in_pod(node_path: &str) -> bool {
    CA_FILES.contains(&node_path)
        || [CA_BUNDLE, ETCD_CA_BUNDLE, CONFIG].contains(&node_path)
        || KUBELET_FILES.iter().any(|(_, f)| *f == node_path)
}

/// The kubelet's own kubeconfigs by the name of their mount in
/// certsync's pod.
pub(super) const KUBELET_FILES: [(&str, &str); 2] = [
    ("kubelet-conf", KUBELET_CONF),
    ("bootstrap-kubelet-conf", BOOTSTRAP_KUBELET_CONF),
];

/// One `ca:` mapping: (name, CA under pki/, target, template under pki/ or
/// the client identity (cn, o), the kubeconfig it keeps renewed). A
/// template is also kubeadm's copy of the pair, kept in step
/// (`update-pair:`).
pub(super) struct Cert {
    pub name: &'static str,
    pub ca: &'static str,
    pub target: String,
    pub template: Option<&'static str>,
    pub cn: Option<&'static str>,
    pub o: Option<&'static str>,
    pub kubeconfig: Option<&'static str>,
}

/// kubeadm's pairs: (mapping, CA under pki/, the pair under pki/, which is
/// the template). The target is [`manifest::target`]'s.
const PAIRS: [(&str, &str, &str); 7] = [
    ("apiserver", "ca", "apiserver"),
    ("apiserver-kubelet-client", "ca", "apiserver-kubelet-client"),
    ("apiserver-etcd-client", "etcd/ca", "apiserver-etcd-client"),
    ("front-proxy-client", "front-proxy-ca", "front-proxy-client"),
    ("etcd-server", "etcd/ca", "etcd/server"),
    ("etcd-peer", "etcd/ca", "etcd/peer"),
    (
        "etcd-healthcheck-client",
        "etcd/ca",
        "etcd/healthcheck-client",
    ),
];

/// The client pairs embedded in kubeconfigs, issued by `ca`: (mapping, cn,
/// o, the kubeconfig). The target is the mapping's name under [`P`].
const CLIENTS: [(&str, &str, Option<&str>, &str); 4] = [
    (
        "controller-manager-client",
        "system:kube-controller-manager",
        None,
        EMBEDDED[2],
    ),
    (
        "scheduler-client",
        "system:kube-scheduler",
        None,
        EMBEDDED[3],
    ),
    (
        "admin-client",
        "kubernetes-admin",
        Some("kubeadm:cluster-admins"),
        EMBEDDED[0],
    ),
    (
        "super-admin-client",
        "kubernetes-super-admin",
        Some("system:masters"),
        EMBEDDED[1],
    ),
];

/// The mappings for the node at `dir`: every certificate `kubeadm certs
/// renew all` renews that the node has.
pub(super) fn certs(dir: &Path) -> Vec<Cert> {
    let pairs = PAIRS.into_iter().map(|(name, ca, template)| Cert {
        name,
        ca,
        target: manifest::target(template),
        template: Some(template),
        cn: None,
        o: None,
        kubeconfig: None,
    });
    let clients = CLIENTS
        .into_iter()
        .filter(|(.., kubeconfig)| host(dir, kubeconfig).is_file())
        .map(|(name, cn, o, kubeconfig)| Cert {
            name,
            ca: "ca",
            target: format!("{P}/{name}"),
            template: None,
            cn: Some(cn),
            o,
            kubeconfig: Some(kubeconfig),
        });
    pairs.chain(clients).collect()
}

/// The kubeadm files certsync keeps in step that the node has and whose
/// kubeadm copy adopt's record does not name: kubeconfigs, then pairs as
/// prefixes followed by `pair_as`. Anything at a kubeconfig's path counts,
/// a link included, and so does what cannot be looked at: one that
/// appeared after the first adoption is one certsync's container could
/// have put there, never kubeadm's.
pub fn unrecorded(dir: &Path, state: &State, pair_as: &str) -> Vec<String> {
    let kubeconfigs = EMBEDDED
        .into_iter()
        .filter(|k| !state.kubeconfigs.contains_key(*k))
        .filter(|k| {
            !matches!(std::fs::symlink_metadata(host(dir, k)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound)
        })
        .map(str::to_owned);
    let pairs = pairs(dir)
        .into_iter()
        .filter(|p| !state.pairs.contains_key(p))
        .map(|p| format!("{p}{pair_as}"));
    kubeconfigs.chain(pairs).collect()
}

/// kubeadm's pairs certsync keeps in step (`update-pair:`), as prefixes
/// (node paths, without `.crt`/`.key`).
pub fn pairs(dir: &Path) -> Vec<String> {
    certs(dir)
        .into_iter()
        .filter_map(|c| c.template.map(|t| format!("/etc/kubernetes/pki/{t}")))
        .collect()
}

/// The CA certificate (node path) that issues the pair at `prefix` (one
/// of [`pairs`]).
pub fn pair_ca(dir: &Path, prefix: &str) -> Option<String> {
    certs(dir)
        .into_iter()
        .find(|c| {
            c.template
                .is_some_and(|t| format!("/etc/kubernetes/pki/{t}") == prefix)
        })
        .map(|c| format!("/etc/kubernetes/pki/{}.crt", c.ca))
}

/// Every target adopt's configuration names for the node (node paths).
pub fn targets(dir: &Path) -> Vec<String> {
    certs(dir).into_iter().map(|c| c.target).collect()
}

/// Every target with the CA certificate that issues it (node paths).
pub fn target_cas(dir: &Path) -> Vec<(String, String)> {
    certs(dir)
        .into_iter()
        .map(|c| (c.target, format!("/etc/kubernetes/pki/{}.crt", c.ca)))
        .collect()
}
