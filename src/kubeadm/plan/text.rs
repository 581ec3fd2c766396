//! The plan as a person reads it.

use std::fmt::Write as _;

use super::super::manifest::{CA_BUNDLE, CONFIG, manifest_path};
use super::changes::Plan;
use crate::validate::rfc3339;

impl Plan {
    pub fn text(&self) -> String {
        let mut s = String::new();
        let (node, from) = (self.kubeadm_dir.display(), &self.cluster_configuration_from);
        let _ = writeln!(s, "node: {node}\nClusterConfiguration: {from}");
        if self.is_empty() {
            s.push_str("already adopted: nothing to change\n");
            self.cluster_info_text(&mut s);
            return s;
        }
        let _ = writeln!(s, "backup of every file changed: {}/", self.backup);
        let image = match &self.image_before {
            Some(before) => format!("{before} -> {}", self.image),
            None => self.image.clone(),
        };
        let _ = writeln!(
            s,
            "certsync image: {image} (generation {}: adopt waits for this pod to be ready before \
             changing any component manifest)",
            self.generation
        );
        if !self.choices.is_empty() {
            s.push_str("options (the node's own unless given now):\n");
            for c in &self.choices {
                let _ = match &c.before {
                    Some(before) if c.changed() => {
                        writeln!(s, "  {}: {before} -> {}", c.what, c.after)
                    }
                    _ => writeln!(s, "  {}: {} (kept)", c.what, c.after),
                };
            }
        }
        let _ = writeln!(s, "mappings in {CONFIG}:");
        for (name, target, options) in &self.mappings {
            let _ = writeln!(s, "  {name} -> {target} ({options})");
        }
        s.push_str(
            "templates: kubeadm's certificates stay in place; certsync copies only their subject, \
             names and usages, so it keeps issuing from one after it expires; revert hands back \
             kubeadm's copies from the backup, any that ends within 24 h issued again from its CA\n",
        );
        self.cas_text(&mut s);
        self.files_text(&mut s);
        self.manifests_text(&mut s);
        s.push_str(
            "ClusterConfiguration (kubeadm-config): stays kubeadm's; certsync's flags live in this \
             node's manifests only, so `kubeadm join --control-plane` writes kubeadm's own manifests \
             on a new node (adopt it afterwards), and `kubeadm upgrade` puts this node back on \
             kubeadm's files, which certsync keeps renewed: run adopt again after it\n",
        );
        self.cluster_info_text(&mut s);
        s
    }

    fn cas_text(&self, s: &mut String) {
        s.push_str("CAs (renewed with their own key once less than 90% of their span is left):\n");
        for c in &self.cas {
            let then = match c.renewed_to {
                Some(to) => format!("renewed now, to end {}", rfc3339(to)),
                None => format!(
                    "not due (the first adopt after {} renews it)",
                    rfc3339(c.due_from)
                ),
            };
            let (name, path, ends) = (c.name, c.path, rfc3339(c.ends));
            let _ = writeln!(s, "  {name} ({path}): ends {ends}; {then}");
        }
    }

    fn files_text(&self, s: &mut String) {
        s.push_str("files:\n");
        for f in &self.files {
            let action = f.action();
            let _ = writeln!(s, "  {action} {} ({:04o}): {}", f.path, f.mode, f.what);
        }
        for k in &self.kubeconfigs_renewed {
            let _ = writeln!(
                s,
                "  renew in place {k}: its embedded client certificate (update-kubeconfig; backed up first)"
            );
        }
        for k in &self.kubeconfigs_trusted {
            let _ = writeln!(
                s,
                "  trust in place {k}: its certificate-authority-data becomes {CA_BUNDLE}'s \
                 certificates (backed up first)"
            );
        }
        for p in &self.pairs_renewed {
            let _ = writeln!(
                s,
                "  renew in place {p}.crt and {p}.key: kubeadm's copy of the pair, for `kubeadm certs \
                 check-expiration` and revert (update-pair; backed up first)"
            );
        }
    }

    fn manifests_text(&self, s: &mut String) {
        s.push_str("manifests:\n");
        if self.manifests.is_empty() {
            s.push_str("  none to change: each already names certsync's files\n");
        }
        for m in &self.manifests {
            let _ = writeln!(s, "  {}", m.path);
            for (flag, old, new) in &m.flags {
                let _ = writeln!(s, "    --{flag}: {old} -> {new}");
            }
            for v in &m.volumes_added {
                let _ = writeln!(s, "    + volume {v} (read-only)");
            }
            for (a, old, new) in &m.annotations {
                let old = if old.is_empty() { "none" } else { old };
                let _ = writeln!(
                    s,
                    "    annotation {a}: {old} -> {new} (restarted on the CAs' new trust)"
                );
            }
        }
        let changed = |c| self.manifests.iter().any(|m| m.path == manifest_path(c));
        let restarts = match ["etcd", "kube-apiserver"].map(changed) {
            [true, true] => "etcd and kube-apiserver restart for their new manifests",
            [true, false] => "etcd restarts for its new manifest",
            [false, true] => "kube-apiserver restarts for its new manifest",
            [false, false] => return,
        };
        let _ = writeln!(
            s,
            "  {restarts}: this node's API server is unavailable for about 40 s (wait for its \
             /readyz before adopting the next node)"
        );
    }

    fn cluster_info_text(&self, s: &mut String) {
        let _ = writeln!(s, "the cluster's CA certificates: {}", self.cluster_cas);
        if let Some(c) = &self.cluster_info {
            let _ = writeln!(
                s,
                "ConfigMap kube-public/cluster-info (`kubeadm join` discovery): {c}"
            );
        }
    }
}
