//! The plan: what adopt reads on the node, what it refuses, and every file,
//! manifest flag and ClusterConfiguration field it would write.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_yaml_ng::Value;

use super::manifest::{
    self, BY_FILE, CA_BUNDLE, ETCD_CA_BUNDLE, KUBECONFIGS, Manifest, P, PE, TRUST_ANNOTATION,
};
use super::{
    KubeadmError, Options, Refusal, cluster, cluster_info, digest, host, node, pod, trust,
};

pub use super::manifest::CONFIG;
pub use super::record::{BACKUPS, MADE_DIRS, STATE, backup_path};
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

/// The kubelet's own kubeconfigs: no business of certsync's, mounted
/// read-only when the node has them.
const KUBELET_FILES: [(&str, &str); 2] = [
    ("kubelet-conf", "/etc/kubernetes/kubelet.conf"),
    (
        "bootstrap-kubelet-conf",
        "/etc/kubernetes/bootstrap-kubelet.conf",
    ),
];

/// One `ca:` mapping: (name, CA under pki/, target, template under pki/ or
/// the client identity (cn, o), the kubeconfig it keeps renewed). A
/// template is also kubeadm's copy of the pair, kept in step
/// (`update-pair:`).
struct Cert {
    name: &'static str,
    ca: &'static str,
    target: String,
    template: Option<&'static str>,
    cn: Option<&'static str>,
    o: Option<&'static str>,
    kubeconfig: Option<&'static str>,
}

/// The mappings for the node at `dir`: every certificate `kubeadm certs
/// renew all` renews that the node has.
fn certs(dir: &Path) -> Vec<Cert> {
    let t = |name, ca, target: String, template| Cert {
        name,
        ca,
        target,
        template: Some(template),
        cn: None,
        o: None,
        kubeconfig: None,
    };
    let client = |name, cn| Cert {
        name,
        ca: "ca",
        target: format!("{P}/{name}"),
        template: None,
        cn: Some(cn),
        o: None,
        kubeconfig: None,
    };
    let embedded = |name, cn, o: Option<&'static str>, kubeconfig| Cert {
        kubeconfig: Some(kubeconfig),
        o,
        ..client(name, cn)
    };
    let [admin, super_admin, controller_manager, scheduler] = EMBEDDED;
    let mut all = vec![
        t("apiserver", "ca", format!("{P}/apiserver"), "apiserver"),
        t(
            "apiserver-kubelet-client",
            "ca",
            format!("{P}/apiserver-kubelet-client"),
            "apiserver-kubelet-client",
        ),
        t(
            "apiserver-etcd-client",
            "etcd/ca",
            format!("{P}/apiserver-etcd-client"),
            "apiserver-etcd-client",
        ),
        t(
            "front-proxy-client",
            "front-proxy-ca",
            format!("{P}/front-proxy-client"),
            "front-proxy-client",
        ),
        t(
            "etcd-server",
            "etcd/ca",
            format!("{PE}/server"),
            "etcd/server",
        ),
        t("etcd-peer", "etcd/ca", format!("{PE}/peer"), "etcd/peer"),
        t(
            "etcd-healthcheck-client",
            "etcd/ca",
            format!("{PE}/healthcheck-client"),
            "etcd/healthcheck-client",
        ),
        embedded(
            "controller-manager-client",
            "system:kube-controller-manager",
            None,
            controller_manager,
        ),
        embedded("scheduler-client", "system:kube-scheduler", None, scheduler),
        embedded(
            "admin-client",
            "kubernetes-admin",
            Some("kubeadm:cluster-admins"),
            admin,
        ),
        embedded(
            "super-admin-client",
            "kubernetes-super-admin",
            Some("system:masters"),
            super_admin,
        ),
    ];
    all.retain(|c| c.kubeconfig.is_none_or(|k| host(dir, k).is_file()));
    all
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

/// A file adopt writes.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FileWrite {
    pub path: String,
    /// `create` or `replace`.
    pub action: &'static str,
    pub mode: String,
    pub what: String,
    #[serde(skip)]
    pub bytes: Vec<u8>,
}

/// A manifest adopt changes.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ManifestChange {
    pub path: String,
    /// (flag, old value, new value).
    pub flags: Vec<(String, String, String)>,
    pub volumes_added: Vec<String>,
    /// (annotation, old value, new value): the trust bundles' digest.
    pub annotations: Vec<(String, String, String)>,
    #[serde(skip)]
    pub before: Vec<u8>,
    #[serde(skip)]
    pub after: Vec<u8>,
}

/// Everything adopt would do on the node, and what it read to decide.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Plan {
    pub kubeadm_dir: PathBuf,
    /// Where the ClusterConfiguration came from, or why it could not be read.
    pub cluster_configuration_from: String,
    pub files: Vec<FileWrite>,
    pub manifests: Vec<ManifestChange>,
    /// (field, name, value) an earlier certsync adopt set in the
    /// ClusterConfiguration, taken out.
    pub cluster_configuration: Vec<cluster::Field>,
    /// Whether the kubeadm-config ConfigMap can be written (read through admin.conf).
    pub cluster_configuration_reachable: bool,
    #[serde(skip)]
    pub cluster_configuration_new: Option<Value>,
    #[serde(skip)]
    pub stored: Option<std::sync::Arc<cluster::Stored>>,
    /// What adopt does to `kube-public/cluster-info`'s CA data, or why it
    /// cannot (`None`: it already trusts the CA's certificates).
    pub cluster_info: Option<String>,
    /// The ConfigMap to write, when it lacks a CA certificate.
    #[serde(skip)]
    pub cluster_info_new: Option<k8s_openapi::api::core::v1::ConfigMap>,
    /// Where the files changed are copied first.
    pub backup: String,
    /// kubeadm's kubeconfigs whose embedded pair certsync renews.
    pub kubeconfigs_renewed: Vec<String>,
    /// kubeadm's pairs (prefixes) certsync keeps in step.
    pub pairs_renewed: Vec<String>,
    /// Each CA: its end, and its renewal's when adopt renews it.
    pub cas: Vec<trust::CaEnd>,
    /// kubeconfigs whose CA data adopt sets to the CA's certificates side
    /// by side.
    pub kubeconfigs_trusted: Vec<String>,
    /// That CA data (PEM).
    #[serde(skip)]
    pub ca_bundle: Vec<u8>,
    /// The trust bundles' digest (the components' annotation).
    pub trust: String,
    /// The bundles' certificates, for adopt's record.
    #[serde(skip)]
    pub trust_record: trust::Record,
    /// certsync's static pod's image.
    pub image: String,
    /// The image of the certsync pod adopt replaces, when it is another
    /// (a re-adopt that upgrades certsync or corrects a typo).
    pub image_before: Option<String>,
    /// The token certsync's pod answers `/readyz` with for this
    /// configuration and image (`run --generation`): adopt waits for it.
    pub generation: String,
    /// Where adopt asks certsync's pod whether it is ready: its readiness
    /// probe's address (`--admin-addr`, an unspecified one on loopback).
    pub probe: std::net::SocketAddr,
    /// Each `ca:` mapping of certsync.yaml: (name, target, renewal options
    /// as written, or the defaults).
    pub mappings: Vec<(String, String, String)>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
            && self.manifests.is_empty()
            && self.cluster_configuration.is_empty()
            && self.kubeconfigs_trusted.is_empty()
    }

    /// The plan as a person reads it.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "node: {}", self.kubeadm_dir.display());
        let _ = writeln!(
            s,
            "ClusterConfiguration: {}",
            self.cluster_configuration_from
        );
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
        let _ = writeln!(s, "mappings in {CONFIG}:");
        for (name, target, options) in &self.mappings {
            let _ = writeln!(s, "  {name} -> {target} ({options})");
        }
        // An expired template is fine as a template (only its shape is
        // copied), and revert issues it again from the backup.
        s.push_str(
            "templates: kubeadm's certificates stay in place; certsync copies only their subject, \
             names and usages, so it keeps issuing from one after it expires; revert hands back \
             kubeadm's copies from the backup, any that ends within 24 h issued again from its CA\n",
        );
        self.cas_text(&mut s);
        self.files_text(&mut s);
        self.manifests_text(&mut s);
        self.cluster_configuration_text(&mut s);
        self.cluster_info_text(&mut s);
        s
    }

    fn cas_text(&self, s: &mut String) {
        s.push_str("CAs (renewed with their own key once less than 90% of their span is left):\n");
        for c in &self.cas {
            let _ = match c.renewed_to {
                Some(to) => writeln!(
                    s,
                    "  {} ({}): ends {}; renewed now, to end {}",
                    c.name,
                    c.path,
                    crate::validate::rfc3339(c.ends),
                    crate::validate::rfc3339(to)
                ),
                None => writeln!(
                    s,
                    "  {} ({}): ends {}; not due (the first adopt after {} renews it)",
                    c.name,
                    c.path,
                    crate::validate::rfc3339(c.ends),
                    crate::validate::rfc3339(c.due_from)
                ),
            };
        }
    }

    fn files_text(&self, s: &mut String) {
        s.push_str("files:\n");
        for f in &self.files {
            let _ = writeln!(s, "  {} {} ({}): {}", f.action, f.path, f.mode, f.what);
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
        // The kubelet stops the old etcd and API server (30 s grace, then
        // SIGKILL) before it starts the new ones.
        let restarted: Vec<&str> = ["etcd", "kube-apiserver"]
            .into_iter()
            .filter(|c| {
                self.manifests
                    .iter()
                    .any(|m| m.path == format!("/etc/kubernetes/manifests/{c}.yaml"))
            })
            .collect();
        if !restarted.is_empty() {
            let _ = writeln!(
                s,
                "  {} {}: this node's API server is unavailable for about 40 s (wait for \
                 its /readyz before adopting the next node)",
                restarted.join(" and "),
                if restarted.len() == 1 {
                    "restarts for its new manifest"
                } else {
                    "restart for their new manifests"
                },
            );
        }
    }

    fn cluster_configuration_text(&self, s: &mut String) {
        s.push_str(
            "ClusterConfiguration (kubeadm-config): stays kubeadm's; certsync's flags live in this \
             node's manifests only, so `kubeadm join --control-plane` writes kubeadm's own manifests \
             on a new node (adopt it afterwards), and `kubeadm upgrade` puts this node back on \
             kubeadm's files, which certsync keeps renewed: run adopt again after it\n",
        );
        if !self.cluster_configuration.is_empty() {
            s.push_str(
                "  taking out what an earlier certsync adopt set there (a joining node would get \
                 manifests naming files it does not have):\n",
            );
        }
        for (field, name, value) in &self.cluster_configuration {
            let _ = writeln!(s, "  - {field}: {name}={value}");
        }
    }

    fn cluster_info_text(&self, s: &mut String) {
        if let Some(c) = &self.cluster_info {
            let _ = writeln!(
                s,
                "ConfigMap kube-public/cluster-info (`kubeadm join` discovery): {c}"
            );
        }
    }
}

/// What adopt does to `kube-public/cluster-info` so that `kubeadm join`
/// trusts `bundle` (the CA data of the kubeconfigs adopt keeps): nothing
/// when it already does; when the API server cannot be reached or the
/// ConfigMap is not kubeadm's shape, why not, and only once a renewal is
/// there to miss (a join fails only after the old certificate's end).
async fn cluster_info_change(
    stored: Option<&cluster::Stored>,
    bundle: &[u8],
) -> (
    Option<String>,
    Option<k8s_openapi::api::core::v1::ConfigMap>,
) {
    let renewed = crate::pem::blocks(bundle).map_or(0, |b| b.len()) > 1;
    let not = |why: String| {
        renewed.then(|| {
            format!(
                "not updated ({why}); joins after the old CA certificate's end fail until its CA \
                 data holds {CA_BUNDLE}'s certificates (run adopt again, or see the guide)"
            )
        })
    };
    let Some(stored) = stored else {
        return (not("kubeadm-config was not read".into()), None);
    };
    let read = cluster_info::read(stored.client()).await;
    match read.and_then(|c| c.with_ca(bundle)) {
        Ok(None) => (None, None),
        Ok(Some(new)) => (
            Some(format!(
                "its CA data set to {CA_BUNDLE}'s certificates, so that a node joining after the \
                 old CA certificate's end trusts the API server (the controller-manager re-signs \
                 it for each bootstrap token)"
            )),
            Some(new),
        ),
        Err(e) => (not(e.to_string()), None),
    }
}

/// The renewal options every mapping gets, as the plan shows them.
fn renewal(set: &[(String, String)]) -> String {
    if set.is_empty() {
        return "certsync's defaults: lifetime=365d, renew=70%-90%".into();
    }
    set.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A value given to `--set`, as YAML would read it (`keep-key=true` a bool).
fn set_value(v: &str) -> Value {
    match v {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        _ => Value::String(v.to_owned()),
    }
}

/// certsync's configuration: one `ca:` mapping per certificate.
pub fn config_text(opts: &Options, key_alg: &str) -> Result<String, KubeadmError> {
    let mut mappings = Vec::new();
    for c in certs(&opts.dir) {
        let mut m = serde_yaml_ng::Mapping::new();
        let mut put = |k: &str, v: Value| {
            m.insert(k.into(), v);
        };
        put("name", c.name.into());
        put("source", format!("ca:/etc/kubernetes/pki/{}", c.ca).into());
        put("target", c.target.clone().into());
        if let Some(t) = c.template {
            put("template", format!("/etc/kubernetes/pki/{t}.crt").into());
            put("update-pair", format!("/etc/kubernetes/pki/{t}").into());
        }
        if let Some(cn) = c.cn {
            put("cn", cn.into());
            put(
                "usage",
                serde_yaml_ng::to_value(["digital-signature", "key-encipherment", "client-auth"])
                    .unwrap_or_default(),
            );
            if let Some(o) = c.o {
                put("o", serde_yaml_ng::to_value([o]).unwrap_or_default());
            }
            put("key-alg", key_alg.into());
        }
        if let Some(k) = c.kubeconfig {
            put("update-kubeconfig", k.into());
        }
        for (k, v) in &opts.set {
            put(k, set_value(v));
        }
        mappings.push(Value::Mapping(m));
    }
    let mut doc = serde_yaml_ng::Mapping::new();
    doc.insert("mappings".into(), Value::Sequence(mappings));
    let body = serde_yaml_ng::to_string(&doc).map_err(KubeadmError::Issue)?;
    Ok(format!(
        "# Written by `certsync kubeadm adopt`: every certificate `kubeadm certs renew all`\n\
         # renews on this node, issued from kubeadm's CAs (docs/guides/kubeadm-control-plane.md).\n\
         # Edit freely; `certsync kubeadm revert` undoes adoption.\n{body}"
    ))
}

/// A kubeconfig of certsync's for a component: its client target by file.
fn kubeconfig_text(server: &str, user: &str, target: &str) -> Result<String, KubeadmError> {
    let context = format!("{user}@kubernetes");
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kubernetes", "cluster": {
            "certificate-authority": format!("{target}/ca.crt"),
            "server": server,
        }}],
        "contexts": [{"name": context, "context": {"cluster": "kubernetes", "user": user}}],
        "current-context": context,
        "users": [{"name": user, "user": {
            "client-certificate": format!("{target}/tls.crt"),
            "client-key": format!("{target}/tls.key"),
        }}],
    });
    let body = serde_yaml_ng::to_string(&doc).map_err(KubeadmError::Issue)?;
    Ok(format!(
        "# Written by `certsync kubeadm adopt`: the client certificate is certsync's target,\n\
         # re-read by client-go when it is renewed.\n{body}"
    ))
}

/// certsync's static pod ([`pod::manifest`]): `pki/` read-write
/// (kubeadm's pairs are kept in step there) with each CA and
/// service-account file mounted read-only over it, each target read-write,
/// the config read-only; restarted (a new pod) when the config changes,
/// through its hash in an annotation.
fn pod_text(
    dir: &Path,
    opts: &Options,
    config: &[u8],
    generation: &str,
) -> Result<String, KubeadmError> {
    let mut mounts = Vec::new();
    let mut add = |name: &str, path: &str, kind: &'static str, ro: bool| {
        mounts.push(pod::Mount {
            name: name.to_owned(),
            path: path.to_owned(),
            kind,
            read_only: ro,
        });
    };
    // A directory that holds a read-only file, or certsync's targets, is a
    // mount point of its own: one the container could rename would carry
    // those mounts away and let it put its own files (a CA) in their place.
    add("pki", "/etc/kubernetes/pki", "Directory", false);
    add("pki-etcd", "/etc/kubernetes/pki/etcd", "Directory", false);
    add("certsync-targets", P, "DirectoryOrCreate", false);
    add("certsync-etcd-targets", PE, "DirectoryOrCreate", false);
    for f in CA_FILES.iter().filter(|f| host(dir, f).is_file()) {
        // /etc/kubernetes/pki/etcd/ca.key -> kubeadm-etcd-ca-key
        let name = f
            .trim_start_matches("/etc/kubernetes/pki/")
            .replace(['/', '.'], "-");
        add(&format!("kubeadm-{name}"), f, "File", true);
    }
    // The bundles components load trust from: adopt writes them before
    // this pod starts.
    add("ca-bundle", CA_BUNDLE, "File", true);
    add("etcd-ca-bundle", ETCD_CA_BUNDLE, "File", true);
    add("config", CONFIG, "File", true);
    let certs = certs(dir);
    if certs.iter().any(|c| c.kubeconfig.is_some()) {
        // admin.conf and super-admin.conf are replaced by rename: their
        // directory is writable, and what else is in it (the static pod
        // manifests, adopt's kubeconfigs and backups) is not.
        add("etc-kubernetes", "/etc/kubernetes", "Directory", false);
        add("manifests", "/etc/kubernetes/manifests", "Directory", true);
        add("certsync-files", KUBECONFIGS, "Directory", true);
        // The kubelet's own kubeconfigs are no business of certsync's.
        for (name, f) in KUBELET_FILES {
            if host(dir, f).is_file() {
                add(name, f, "File", true);
            }
        }
    }
    for c in certs {
        add(c.name, &c.target, "DirectoryOrCreate", false);
    }
    pod::manifest(&pod::Spec {
        image: &opts.image,
        admin: opts.admin_addr,
        generation,
        config_hash: &digest(config)[..16],
        mounts,
    })
    .map_err(KubeadmError::Issue)
}

fn refused(opts: &Options, reason: Refusal) -> KubeadmError {
    KubeadmError::Refused {
        dir: opts.dir.clone(),
        reason: Box::new(reason),
    }
}

/// A file to write unless it already has these bytes; `owned` says whether
/// an existing file with other bytes is adopt's own to replace.
fn file(
    opts: &Options,
    path: &str,
    bytes: Vec<u8>,
    what: &str,
    owned: bool,
) -> Result<Option<FileWrite>, KubeadmError> {
    let action = match node::read_optional(&opts.dir, path)? {
        Some(old) if old == bytes => return Ok(None),
        Some(_) if !owned => {
            return Err(refused(
                opts,
                Refusal::Unowned {
                    path: path.to_owned(),
                },
            ));
        }
        Some(_) => "replace",
        None => "create",
    };
    Ok(Some(FileWrite {
        path: path.to_owned(),
        action,
        mode: "0600".into(),
        what: what.to_owned(),
        bytes,
    }))
}

/// Reads the node and works out the plan; refuses what it does not recognise.
pub async fn plan(opts: &Options) -> Result<Plan, KubeadmError> {
    let dir = &opts.dir;
    let adopted = node::read_optional(dir, STATE)?.is_some();
    let (stored, from) = cluster_configuration(opts).await?;
    let components = manifest::components();
    let parsed = component_manifests(opts, &components)?;
    // The CAs: each renewed when due, and the bundles of their
    // certificates the trusting components load.
    let record = super::record::State::read(dir)?
        .map(|s| s.trust)
        .unwrap_or_default();
    let trust = trust::plan(dir, opts.now, &record, adopted)?;
    let manifests = manifest_changes(dir, parsed, &trust.digest)?;
    kubeadms_files_present(opts)?;
    let key_alg = key_alg(opts, stored.as_ref())?;
    // Files: certsync's config, kubeconfigs and pod. The config is judged
    // as `certsync run` will judge it before anything is written.
    let config = config_text(opts, key_alg)?;
    super::judge::judge(opts, &config)?;
    if adopted {
        unrecorded_refused(opts)?;
    }
    let config = config.into_bytes();
    let generation = super::pod::generation(&config, &trust.digest, &opts.image);
    let files = certsyncs_files(opts, &trust, config, &generation, adopted)?;
    // The ClusterConfiguration stays kubeadm's: fields an earlier certsync
    // adopt put there are taken out (see `cluster`).
    let (cc, new) = match &stored {
        Some(s) => {
            let found = cluster::present(&s.config, &components);
            let mut config = s.config.clone();
            let changed = cluster::unadopt(&mut config, &components);
            (found, changed.then_some(config))
        }
        None => (Vec::new(), None),
    };
    // The image of the pod a re-adopt replaces: shown beside the new one.
    let image_before = node::read_optional(dir, POD)?
        .and_then(|old| super::pod::probe(&String::from_utf8_lossy(&old)).ok())
        .and_then(|(image, _, _)| image)
        .filter(|old| *old != crate::escape(&opts.image));
    let (cluster_info, cluster_info_new) =
        cluster_info_change(stored.as_ref(), &trust.ca_bundle).await;
    Ok(Plan {
        kubeadm_dir: dir.clone(),
        cluster_configuration_from: from,
        cluster_configuration_reachable: stored.is_some(),
        cluster_configuration: cc,
        cluster_configuration_new: new,
        stored: stored.map(std::sync::Arc::new),
        cluster_info,
        cluster_info_new,
        files,
        manifests,
        backup: format!("{BACKUPS}/{}", time_stamp()),
        kubeconfigs_renewed: certs(dir)
            .iter()
            .filter_map(|c| c.kubeconfig.map(str::to_owned))
            .collect(),
        pairs_renewed: pairs(dir),
        cas: trust.cas,
        kubeconfigs_trusted: kubeconfigs_trusted(dir, &trust.ca_bundle)?,
        ca_bundle: trust.ca_bundle,
        trust: trust.digest,
        trust_record: trust.record,
        image: opts.image.clone(),
        image_before,
        generation,
        probe: super::pod::probe_addr(opts.admin_addr),
        mappings: certs(dir)
            .into_iter()
            .map(|c| (c.name.to_owned(), c.target, renewal(&opts.set)))
            .collect(),
    })
}

/// The ClusterConfiguration, through admin.conf, and where it was read
/// (or why not: adopt needs no API server, the manifests are checked
/// alone); refused when it holds what adopt does not handle.
async fn cluster_configuration(
    opts: &Options,
) -> Result<(Option<cluster::Stored>, String), KubeadmError> {
    let admin = host(&opts.dir, "/etc/kubernetes/admin.conf");
    match cluster::read(&admin).await {
        Ok(s) => {
            if let Some(r) = cluster::refusal(&s.config) {
                return Err(refused(opts, r));
            }
            let from = format!(
                "ConfigMap kube-system/kubeadm-config, read through {}",
                admin.display()
            );
            Ok((Some(s), from))
        }
        Err(e) => Ok((
            None,
            format!(
                "not read ({e}); kubeadm keeps no copy on a control-plane node, so the manifests \
                 alone were checked"
            ),
        )),
    }
}

/// A component's manifest as found: its node path, bytes and parse.
type Parsed<'c> = (&'c manifest::Component, String, Vec<u8>, Manifest);

/// kubeadm's four manifests, parsed, each flag adopt sets either kubeadm's
/// or certsync's.
fn component_manifests<'c>(
    opts: &Options,
    components: &'c [manifest::Component],
) -> Result<Vec<Parsed<'c>>, KubeadmError> {
    let dir = &opts.dir;
    let mut parsed = Vec::new();
    for c in components {
        let path = format!("/etc/kubernetes/manifests/{}.yaml", c.name);
        let Some(before) = node::read_optional(dir, &path)? else {
            return Err(refused(
                opts,
                if c.name == "etcd" {
                    Refusal::NoEtcd { path }
                } else {
                    Refusal::NoManifest { path }
                },
            ));
        };
        let m = match manifest::read(c, before.clone()) {
            Ok(m) => m,
            Err(manifest::Unfit::Conflict(problem)) => {
                return Err(refused(opts, Refusal::Conflict { path, problem }));
            }
            Err(manifest::Unfit::NotUtf8) => {
                return Err(KubeadmError::file(&host(dir, &path), "not UTF-8"));
            }
            Err(manifest::Unfit::Manifest(e)) => {
                return Err(KubeadmError::file(&host(dir, &path), e));
            }
        };
        parsed.push((c, path, before, m));
    }
    Ok(parsed)
}

/// Each manifest as adopt leaves it (flags, volumes, and the trust
/// digest on the components that load trust at start); those it changes.
fn manifest_changes(
    dir: &Path,
    parsed: Vec<Parsed<'_>>,
    digest: &str,
) -> Result<Vec<ManifestChange>, KubeadmError> {
    let mut manifests = Vec::new();
    for (c, path, before, mut m) in parsed {
        let (flags, volumes_added) = manifest::adopt(c, &mut m);
        let mut annotations = Vec::new();
        if c.trusts {
            let old = m.annotation(TRUST_ANNOTATION).unwrap_or_default();
            if m.set_annotation(TRUST_ANNOTATION, digest) {
                annotations.push((TRUST_ANNOTATION.to_owned(), old, digest.to_owned()));
            }
        }
        if flags.is_empty() && volumes_added.is_empty() && annotations.is_empty() {
            continue;
        }
        let after = m
            .render()
            .map_err(|e| KubeadmError::file(&host(dir, &path), e))?
            .into_bytes();
        manifests.push(ManifestChange {
            path,
            flags,
            volumes_added,
            annotations,
            before,
            after,
        });
    }
    Ok(manifests)
}

/// Each template kubeadm made, issued by the CA its mapping names, and
/// both files of each pair adopt keeps in step from now on.
fn kubeadms_files_present(opts: &Options) -> Result<(), KubeadmError> {
    let dir = &opts.dir;
    for c in certs(dir) {
        if let Some(t) = c.template {
            node::issued_by(
                dir,
                &format!("/etc/kubernetes/pki/{t}.crt"),
                &format!("/etc/kubernetes/pki/{}.crt", c.ca),
            )
            .map_err(|e| refused(opts, Refusal::Template(e)))?;
        }
    }
    for p in pairs(dir) {
        for ext in ["crt", "key"] {
            let f = format!("{p}.{ext}");
            if node::read_optional(dir, &f)?.is_none() {
                return Err(refused(opts, Refusal::NoPair { file: f }));
            }
        }
    }
    Ok(())
}

/// The key algorithm certsync issues with: the ClusterConfiguration's
/// `encryptionAlgorithm`, or without it (adopt needs no API server: after
/// an outage the node's own may be down) what kubeadm's keys say.
fn key_alg(opts: &Options, stored: Option<&cluster::Stored>) -> Result<&'static str, KubeadmError> {
    if let Some(s) = stored {
        return match s.config["encryptionAlgorithm"]
            .as_str()
            .unwrap_or("RSA-2048")
        {
            "RSA-2048" => Ok("rsa-2048"),
            "RSA-3072" => Ok("rsa-3072"),
            "RSA-4096" => Ok("rsa-4096"),
            "ECDSA-P256" => Ok("ecdsa-p256"),
            "ECDSA-P384" => Ok("ecdsa-p384"),
            other => Err(refused(
                opts,
                Refusal::EncryptionAlgorithm {
                    found: other.to_owned(),
                },
            )),
        };
    }
    let apiserver_crt = "/etc/kubernetes/pki/apiserver.crt";
    match node::key_alg(&opts.dir, apiserver_crt) {
        Ok(Some(alg)) => Ok(alg),
        Ok(None) => Err(refused(
            opts,
            Refusal::KeySize {
                cert: apiserver_crt,
            },
        )),
        Err(e) => Err(refused(opts, Refusal::KeyAlg(e))),
    }
}

/// kubeadm's kubeconfigs whose embedded CA is not yet the bundle: they
/// get its certificates side by side, so kubectl and kubeadm trust the
/// renewal before the old one ends.
fn kubeconfigs_trusted(dir: &Path, bundle: &[u8]) -> Result<Vec<String>, KubeadmError> {
    let mut trusted = Vec::new();
    for k in EMBEDDED {
        let Some(text) = node::read_optional(dir, k)? else {
            continue;
        };
        let text = String::from_utf8_lossy(&text);
        let ca = crate::writer::embedded_ca(&host(dir, k), &text)?;
        if ca.as_deref() != Some(bundle) {
            trusted.push(k.to_owned());
        }
    }
    Ok(trusted)
}

/// The files adopt writes: the CAs' renewals and bundles, then certsync's
/// kubeconfigs, configuration and static pod, each unless it already has
/// these bytes.
fn certsyncs_files(
    opts: &Options,
    trust: &trust::Trust,
    config: Vec<u8>,
    generation: &str,
    adopted: bool,
) -> Result<Vec<FileWrite>, KubeadmError> {
    let dir = &opts.dir;
    let mut files: Vec<FileWrite> = trust
        .files
        .iter()
        .map(|f| FileWrite {
            path: f.path.clone(),
            action: f.action,
            mode: "0644".into(),
            what: f.what.clone(),
            bytes: f.bytes.clone(),
        })
        .collect();
    for (file_name, user, target, _) in BY_FILE {
        let server = node::server(dir, &format!("/etc/kubernetes/{file_name}"))?;
        let text = kubeconfig_text(&server, user, &format!("{P}/{target}"))?;
        files.extend(file(
            opts,
            &format!("{KUBECONFIGS}/{file_name}"),
            text.into_bytes(),
            &format!("{user}'s kubeconfig (client certificate by file)"),
            adopted,
        )?);
    }
    let pod = pod_text(dir, opts, &config, generation)?.into_bytes();
    files.extend(file(
        opts,
        CONFIG,
        config,
        "certsync's configuration (its pod must be ready on it before any manifest changes)",
        adopted,
    )?);
    files.extend(file(opts, POD, pod, "certsync's static pod", adopted)?);
    Ok(files)
}

/// On an adopted node, every kubeadm file certsync keeps in step must be in
/// adopt's record (backed up at the first adoption, before certsync's
/// container existed). One that appeared since is refused, never backed up
/// as kubeadm's: certsync's container may write /etc/kubernetes and pki/,
/// and a re-adopt that took its file for kubeadm's made revert later hand
/// that file back as root's (a kubeconfig pointing root's kubectl at the
/// container's server).
fn unrecorded_refused(opts: &Options) -> Result<(), KubeadmError> {
    let dir = &opts.dir;
    let state = super::record::State::read(dir)?.unwrap_or_default();
    let mut missing = Vec::new();
    for k in EMBEDDED {
        if !state.kubeconfigs.contains_key(k) && node::read_optional(dir, k)?.is_some() {
            missing.push(k.to_owned());
        }
    }
    for p in pairs(dir) {
        if !state.pairs.contains_key(&p) {
            missing.push(format!("{p}.crt and .key"));
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(refused(opts, Refusal::Unrecorded { missing }))
}

/// UTC, sortable, one per second: `20261124T221933Z` (the `time` that
/// x509-parser already links).
pub fn time_stamp() -> String {
    let t = x509_parser::time::ASN1Time::now().to_datetime();
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}
