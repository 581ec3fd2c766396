//! What adopt changes in each kubeadm component (flags and extra volumes), applied the way
//! `kubeadm upgrade` applies `extraArgs`/`extraVolumes`, and taken out again.

use std::path::Path;

use serde_yaml_ng::{Mapping, Value};

use super::error::{FileProblem, KubeadmError};

pub const P: &str = "/etc/kubernetes/pki/certsync";
pub const PE: &str = "/etc/kubernetes/pki/etcd/certsync";
pub const KUBECONFIGS: &str = "/etc/kubernetes/certsync";

/// kubeadm's CAs' certificates side by side, for the components that load trust at start.
pub const CA_BUNDLE: &str = "/etc/kubernetes/pki/ca-bundle.crt";
pub const ETCD_CA_BUNDLE: &str = "/etc/kubernetes/pki/etcd/ca-bundle.crt";

/// The bundles' digest on each component loading one at start: a renewal restarts it.
pub const TRUST_ANNOTATION: &str = "certsync.io/trust-sha256";

pub const CONFIG: &str = "/etc/kubernetes/certsync.yaml";

pub const KUBELET_CONF: &str = "/etc/kubernetes/kubelet.conf";
pub const BOOTSTRAP_KUBELET_CONF: &str = "/etc/kubernetes/bootstrap-kubelet.conf";

pub fn manifest_path(name: &str) -> String {
    format!("/etc/kubernetes/manifests/{name}.yaml")
}

/// certsync's kubeconfigs naming a client pair by file, which client-go re-reads (an
/// embedded copy never is): (file under [`KUBECONFIGS`], user, mapping, component).
pub const BY_FILE: [(&str, &str, &str, &str); 2] = [
    (
        "controller-manager.conf",
        "system:kube-controller-manager",
        "controller-manager-client",
        "kube-controller-manager",
    ),
    (
        "scheduler.conf",
        "system:kube-scheduler",
        "scheduler-client",
        "kube-scheduler",
    ),
];

/// A hostPath volume and its mount in the first container (a component's, adopt's extra
/// volume; or certsync's pod's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Volume {
    pub name: String,
    pub path: String,
    pub kind: &'static str,
    /// Mounted read-only (adopt's extra volumes always are: [`Manifest::add_volume`]).
    pub read_only: bool,
}

impl Volume {
    /// Its mount (read-only with `read_only`) and its volume, keys in kubeadm's (sorted) order.
    pub fn json(&self, read_only: bool) -> (serde_json::Value, serde_json::Value) {
        let (name, path) = (&self.name, &self.path);
        let mut mount = serde_json::json!({"mountPath": path, "name": name});
        if read_only {
            mount["readOnly"] = true.into();
        }
        let volume =
            serde_json::json!({"hostPath": {"path": path, "type": self.kind}, "name": name});
        (mount, volume)
    }
}

#[derive(Debug, Clone)]
pub struct Component {
    pub name: &'static str,
    pub flags: Vec<Flag>,
    pub volumes: Vec<Volume>,
    /// Whether it loads a CA bundle at start (and so carries [`TRUST_ANNOTATION`]).
    pub trusts: bool,
}

/// certsync's target for kubeadm's pair `pair` (under pki/, without `.crt`).
pub fn target(pair: &str) -> String {
    match pair.strip_prefix("etcd/") {
        Some(etcd) => format!("{PE}/{etcd}"),
        None => format!("{P}/{pair}"),
    }
}

const PKI: &str = "/etc/kubernetes/pki";

/// (flag, kubeadm's value, certsync's value).
type Flag = (&'static str, String, String);

/// The flags naming kubeadm's pairs (certificate flag, key flag, pair), pointed at targets.
fn pair_flags(pairs: &[(&'static str, &'static str, &str)]) -> Vec<Flag> {
    let file = |flag, pair: &str, ext| {
        let ours = format!("{}/tls.{ext}", target(pair));
        (flag, format!("{PKI}/{pair}.{ext}"), ours)
    };
    (pairs.iter())
        .flat_map(|&(crt, key, pair)| [file(crt, pair, "crt"), file(key, pair, "key")])
        .collect()
}

fn kubeconfig_flags(file: &str) -> Vec<Flag> {
    let flags = [
        "kubeconfig",
        "authentication-kubeconfig",
        "authorization-kubeconfig",
    ];
    let ours = format!("{KUBECONFIGS}/{file}");
    (flags.map(|f| (f, format!("/etc/kubernetes/{file}"), ours.clone()))).into()
}

/// A flag naming kubeadm's CA `ca` (under pki/, without `.crt`), given the bundle (a
/// renewal is trusted before the CA in place ends).
fn trust(flag: &'static str, ca: &str, bundle: &str) -> Flag {
    (flag, format!("{PKI}/{ca}.crt"), bundle.into())
}

pub fn components() -> Vec<Component> {
    let mut api = pair_flags(&[
        ("tls-cert-file", "tls-private-key-file", "apiserver"),
        (
            "kubelet-client-certificate",
            "kubelet-client-key",
            "apiserver-kubelet-client",
        ),
        ("etcd-certfile", "etcd-keyfile", "apiserver-etcd-client"),
        (
            "proxy-client-cert-file",
            "proxy-client-key-file",
            "front-proxy-client",
        ),
    ]);
    let etcd_trust = |flag| trust(flag, "etcd/ca", ETCD_CA_BUNDLE);
    api.push(etcd_trust("etcd-cafile"));
    let mut etcd = pair_flags(&[
        ("cert-file", "key-file", "etcd/server"),
        ("peer-cert-file", "peer-key-file", "etcd/peer"),
    ]);
    etcd.extend(["trusted-ca-file", "peer-trusted-ca-file"].map(etcd_trust));
    let component = |name, flags, volumes, trusts| Component {
        name,
        flags,
        volumes,
        trusts,
    };
    // The controller-manager and the scheduler: their kubeconfigs by file, mounted.
    let [mut kcm, mut scheduler] = BY_FILE.map(|(file, _, _, name)| {
        let conf = Volume {
            name: "certsync-kubeconfig".into(),
            path: format!("{KUBECONFIGS}/{file}"),
            kind: "File",
            read_only: true,
        };
        component(name, kubeconfig_flags(file), vec![conf], false)
    });
    kcm.flags.push(trust("root-ca-file", "ca", CA_BUNDLE));
    kcm.trusts = true;
    scheduler.volumes.push(Volume {
        name: "certsync-client".into(),
        path: format!("{P}/scheduler-client"),
        kind: "Directory",
        read_only: true,
    });
    vec![
        component("kube-apiserver", api, vec![], true),
        component("etcd", etcd, vec![], true),
        kcm,
        scheduler,
    ]
}

/// Each component, its manifest's node path and bytes (`None`: absent), read as the caller
/// comes to it: what plan, revert and status judge.
pub fn on_node(
    dir: &Path,
) -> impl Iterator<Item = (Component, String, Result<Option<Vec<u8>>, KubeadmError>)> {
    components().into_iter().map(move |c| {
        let path = manifest_path(c.name);
        let read = super::node::read_optional(dir, &path);
        (c, path, read)
    })
}

/// A Pod whose first container has a command, its volumes and mounts lists (or none).
pub struct Manifest {
    pub pod: Value,
}

impl Manifest {
    /// A manifest file's bytes, as UTF-8 text: the one reader of a manifest.
    pub fn read(bytes: &[u8]) -> Result<Self, FileProblem> {
        let text = std::str::from_utf8(bytes).map_err(|_| FileProblem::NotUtf8)?;
        // The one YAML reader: a tag, an alias or a merge key is refused, each of which
        // Kubernetes reads otherwise (`!!binary` decoded, `<<` merged) than this reader.
        let pod: Value = crate::files::parse_yaml(text).map_err(FileProblem::NotYaml)?;
        // Volumes and mounts are lists or none (null): anything else would be written back
        // as an empty list, dropping what it named.
        let list_or_none = |v: &Value| v.is_null() || v.is_sequence();
        if pod["kind"] != "Pod"
            || pod["spec"]["containers"][0]["command"]
                .as_sequence()
                .is_none()
            || !list_or_none(&pod["spec"]["volumes"])
            || !list_or_none(&pod["spec"]["containers"][0]["volumeMounts"])
        {
            return Err(FileProblem::NotAPod);
        }
        Ok(Self { pod })
    }

    pub fn render(&self) -> Result<String, FileProblem> {
        serde_yaml_ng::to_string(&self.pod).map_err(FileProblem::Render)
    }

    fn command(&mut self) -> &mut Vec<Value> {
        self.pod["spec"]["containers"][0]["command"]
            .as_sequence_mut()
            .expect("command checked in read")
    }

    pub fn flag(&self, flag: &str) -> Option<String> {
        let prefix = format!("--{flag}=");
        self.pod["spec"]["containers"][0]["command"]
            .as_sequence()?
            .iter()
            .find_map(|a| a.as_str()?.strip_prefix(&prefix).map(str::to_owned))
    }

    /// Sets `--flag=value` as kubeadm v1.36 does for an `extraArgs` entry: its own flag of
    /// that name taken out, the extra argument appended after kubeadm's sorted ones; with
    /// `sorted` (kubeadm's own value put back), in sorted order among its flags. One that
    /// already has the value stays where it is. Whether it changed.
    pub fn put_flag(&mut self, flag: &str, value: &str, sorted: bool) -> bool {
        let prefix = format!("--{flag}=");
        let arg = Value::String(format!("{prefix}{value}"));
        let cmd = self.command();
        if cmd.contains(&arg) {
            return false;
        }
        cmd.retain(|a| !a.as_str().is_some_and(|s| s.starts_with(&prefix)));
        let at = if sorted {
            cmd.iter()
                .skip(1)
                .position(|a| a.as_str().is_some_and(|s| s > prefix.as_str()))
                .map_or(cmd.len(), |i| i + 1)
        } else {
            cmd.len()
        };
        cmd.insert(at, arg);
        true
    }

    fn volumes(&mut self) -> &mut Vec<Value> {
        list(&mut self.pod["spec"]["volumes"])
    }

    fn mounts(&mut self) -> &mut Vec<Value> {
        list(&mut self.pod["spec"]["containers"][0]["volumeMounts"])
    }

    pub fn annotation(&self, key: &str) -> Option<String> {
        self.pod["metadata"]["annotations"][key]
            .as_str()
            .map(str::to_owned)
    }

    pub fn set_annotation(&mut self, key: &str, value: &str) -> bool {
        if self.annotation(key).as_deref() == Some(value) {
            return false;
        }
        let meta = &mut self.pod["metadata"];
        if !meta["annotations"].is_mapping()
            && let Value::Mapping(m) = meta
        {
            m.insert("annotations".into(), Value::Mapping(Mapping::new()));
        }
        if let Value::Mapping(a) = &mut meta["annotations"] {
            a.insert(key.into(), value.into());
            return true;
        }
        false
    }

    /// Removes the annotation `key` (and an annotations map it leaves empty).
    pub fn remove_annotation(&mut self, key: &str) -> bool {
        let meta = &mut self.pod["metadata"];
        let Some(Value::Mapping(a)) = meta.get_mut("annotations") else {
            return false;
        };
        let removed = a.remove(key).is_some();
        if removed
            && a.is_empty()
            && let Value::Mapping(m) = meta
        {
            m.remove("annotations");
        }
        removed
    }

    pub fn volume(&self, name: &str) -> Option<(String, String)> {
        let v = self.pod["spec"]["volumes"]
            .as_sequence()?
            .iter()
            .find(|v| v["name"] == name)?;
        Some((
            v["hostPath"]["path"].as_str().unwrap_or("").to_owned(),
            v["hostPath"]["type"].as_str().unwrap_or("").to_owned(),
        ))
    }

    /// Adds the volume and its read-only mount, sorted by name as kubeadm does.
    pub fn add_volume(&mut self, v: &Volume) -> bool {
        if self.volume(&v.name).is_some() {
            return false;
        }
        let yaml = |j| serde_yaml_ng::to_value(j).expect("strings and a bool are YAML");
        let (mount, volume) = v.json(true);
        insert_sorted(self.volumes(), yaml(volume), &v.name);
        insert_sorted(self.mounts(), yaml(mount), &v.name);
        true
    }
}

/// `v` as a list (made one when it is none: [`Manifest::read`] refuses any other value).
fn list(v: &mut Value) -> &mut Vec<Value> {
    if !v.is_sequence() {
        *v = Value::Sequence(vec![]);
    }
    v.as_sequence_mut().expect("made a sequence above")
}

fn insert_sorted(list: &mut Vec<Value>, item: Value, name: &str) {
    let at = list
        .iter()
        .position(|v| v["name"].as_str().is_some_and(|n| n > name))
        .unwrap_or(list.len());
    list.insert(at, item);
}

/// A flag adopt sets carrying a third value, or a volume of its name not its own.
pub fn conflict(c: &Component, m: &Manifest) -> Result<(), FileProblem> {
    for (flag, kubeadm, ours) in &c.flags {
        match m.flag(flag) {
            Some(v) if v == *kubeadm || v == *ours => {}
            Some(found) => {
                return Err(FileProblem::FlagValue {
                    flag,
                    found: crate::escape(&found).into_owned(),
                    kubeadm: kubeadm.clone(),
                    ours: ours.clone(),
                });
            }
            None => return Err(FileProblem::NoFlag { flag }),
        }
    }
    for v in &c.volumes {
        if let Some((path, kind)) = m.volume(&v.name)
            && (path != v.path || kind != v.kind)
        {
            return Err(FileProblem::Volume {
                name: v.name.clone(),
                path,
                kind,
            });
        }
    }
    Ok(())
}

pub fn read(c: &Component, bytes: &[u8]) -> Result<Manifest, FileProblem> {
    let m = Manifest::read(bytes)?;
    conflict(c, &m)?;
    Ok(m)
}

/// (flag, old value, new value) for each flag adopt changes, and the volumes it adds.
pub fn adopt(c: &Component, m: &mut Manifest) -> (Vec<(String, String, String)>, Vec<String>) {
    let mut flags = Vec::new();
    for (flag, _, ours) in &c.flags {
        let old = m.flag(flag).unwrap_or_default();
        if m.put_flag(flag, ours, false) {
            flags.push(((*flag).to_owned(), old, ours.clone()));
        }
    }
    let volumes = c
        .volumes
        .iter()
        .filter(|v| m.add_volume(v))
        .map(|v| v.name.clone())
        .collect();
    (flags, volumes)
}

/// The inverse: kubeadm's values back, certsync's volumes out.
pub fn unadopt(c: &Component, m: &mut Manifest) -> bool {
    let mut changed = false;
    for (flag, kubeadm, ours) in &c.flags {
        if m.flag(flag).as_deref() == Some(ours.as_str()) {
            changed |= m.put_flag(flag, kubeadm, true);
        }
    }
    for v in &c.volumes {
        if m.volume(&v.name) == Some((v.path.clone(), v.kind.to_owned())) {
            m.volumes().retain(|x| x["name"] != v.name.as_str());
            m.mounts().retain(|x| x["name"] != v.name.as_str());
            changed = true;
        }
    }
    changed |= m.remove_annotation(TRUST_ANNOTATION);
    changed
}
