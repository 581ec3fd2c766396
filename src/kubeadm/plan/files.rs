//! The files adopt writes for certsync, each unless it already has these bytes.

use std::path::Path;

use serde_yaml_ng::Value;

use super::super::error::{FileProblem, KubeadmError, Refusal};
use super::super::manifest::{
    BY_FILE, CA_BUNDLE, CONFIG, ETCD_CA_BUNDLE, KUBECONFIGS, KUBELET_CONF, P, PE,
};
use super::super::options::Options;
use super::super::paths::{FileWrite, digest, host};
use super::super::pod::POD;
use super::super::record::{State, read_backup_text};
use super::super::{node, pod, trust};
use super::changes::Read;
use super::layout::{CA_FILES, Cert, KUBELET_FILES};
use crate::x509::KeyAlg;

pub(super) fn renewal(set: &[(String, String)]) -> String {
    if set.is_empty() {
        return "certsync's defaults: lifetime=365d, renew=70%-90%".into();
    }
    set.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn config_text(
    opts: &Options,
    certs: &[Cert],
    key_alg: KeyAlg,
) -> Result<String, KubeadmError> {
    let mut mappings = Vec::new();
    for c in certs {
        let mut m = serde_yaml_ng::Mapping::new();
        let mut put = |k: &str, v: Value| {
            m.insert(k.into(), v);
        };
        put("name", c.name.as_str().into());
        put("source", format!("ca:/etc/kubernetes/pki/{}", c.ca).into());
        put("target", c.target.clone().into());
        if let Some(t) = c.template {
            put("template", format!("/etc/kubernetes/pki/{t}.crt").into());
            put("update-pair", format!("/etc/kubernetes/pki/{t}").into());
        }
        if let Some((cn, o, kubeconfig)) = c.client {
            put("cn", cn.into());
            let usage = ["digital-signature", "key-encipherment", "client-auth"];
            put("usage", usage.to_vec().into());
            if let Some(o) = o {
                put("o", vec![o].into());
            }
            put("key-alg", key_alg.to_string().into());
            put("update-kubeconfig", kubeconfig.into());
        }
        // Each value given to `--set` as YAML would read it (`keep-key=true` a bool).
        for (k, v) in &opts.set {
            put(k, v.parse().map_or_else(|_| v.as_str().into(), Value::Bool));
        }
        mappings.push(Value::Mapping(m));
    }
    let mut doc = serde_yaml_ng::Mapping::new();
    doc.insert("mappings".into(), Value::Sequence(mappings));
    let body = serde_yaml_ng::to_string(&doc).map_err(KubeadmError::Issue)?;
    Ok(format!(
        "# Written by `certsync kubeadm adopt`: every certificate `kubeadm certs renew all`\n\
         # renews on this node, issued from kubeadm's CAs (docs/guides/kubeadm-control-plane.md).\n\
         # adopt writes it anew each time, keeping lifetime=, renew=, key-alg= and keep-key=\n\
         # unless `--set` changes them: change them that way, not here.\n{body}"
    ))
}

/// The kubelet's kubeconfig with `ca_bundle` as its CA data when it lacks one of its
/// certificates (a CA renewal), so the kubelet trusts the API server past the old
/// certificate's end. One naming its CA by file (kubeadm's `ca.crt`, kept) is left alone.
fn kubelet_conf(dir: &Path, ca_bundle: &[u8]) -> Result<Option<FileWrite>, KubeadmError> {
    let Some((text, held)) = trust::kubelet_conf(dir)? else {
        return Ok(None);
    };
    let (at, current) = (host(dir, KUBELET_CONF), crate::writer::CaCluster::Current);
    let Some(new) = trust::trusting(&at, (&text, &held), current, ca_bundle)? else {
        return Ok(None);
    };
    Ok(Some(FileWrite {
        path: KUBELET_CONF.to_owned(),
        before: Some(text.into_bytes()),
        mode: 0o600,
        what: format!(
            "the kubelet's kubeconfig: its certificate-authority-data becomes {CA_BUNDLE}'s \
             certificates (the kubelet reads it at its next start)"
        ),
        bytes: new.into_bytes(),
    }))
}

fn kubeconfig_text(server: &str, user: &str, target: &str) -> Result<String, KubeadmError> {
    let names = ["kubernetes", user, &format!("{user}@kubernetes")];
    let cluster =
        serde_json::json!({"certificate-authority": format!("{target}/ca.crt"), "server": server});
    let (cert, key) = (format!("{target}/tls.crt"), format!("{target}/tls.key"));
    let user = serde_json::json!({"client-certificate": cert, "client-key": key});
    let doc = crate::source::client::one_context(names, cluster, user);
    let body = serde_yaml_ng::to_string(&doc).map_err(KubeadmError::Issue)?;
    Ok(format!(
        "# Written by `certsync kubeadm adopt`: the client certificate is certsync's target,\n\
         # re-read by client-go when it is renewed.\n{body}"
    ))
}

/// Whether the file at `node_path` is there for certsync's pod to mount read-only. It is
/// looked at with no link followed, a regular file or refused: the kubelet's hostPath
/// follows a link (certsync's container may plant one in pki/ or /etc/kubernetes) into a
/// read-only mount of whatever host file it names, and what is not mounted the container
/// may replace.
fn there(dir: &Path, node_path: &str) -> Result<bool, KubeadmError> {
    let at = |e| KubeadmError::file(&host(dir, node_path), e);
    match super::super::moves::reach(dir, node_path) {
        Err(FileProblem::Missing) => Ok(false),
        Err(e) => Err(at(e)),
        Ok(w) => (w.open_read().map(|_| true)).map_err(|e| at(FileProblem::Read(e))),
    }
}

/// certsync's static pod and its generation: `pki/` read-write (kubeadm's pairs are kept
/// in step there) with each CA and service-account file mounted read-only over it, each
/// target read-write. The generation is over its configuration, the CAs' trust and the pod
/// as rendered without a generation.
fn pod_text(
    opts: &Options,
    certs: &[Cert],
    config: &[u8],
    trust: &str,
    bootstrap: bool,
) -> Result<(String, String), KubeadmError> {
    let dir = &opts.dir;
    let mut mounts = Vec::new();
    let mut add = |name: &str, path: &str, kind: &'static str, ro: bool| {
        mounts.push(super::super::manifest::Volume {
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
    for f in CA_FILES {
        if !there(dir, f)? {
            continue;
        }
        let name = f
            .trim_start_matches("/etc/kubernetes/pki/")
            .replace(['/', '.'], "-");
        add(&format!("kubeadm-{name}"), f, "File", true);
    }
    add("ca-bundle", CA_BUNDLE, "File", true);
    add("etcd-ca-bundle", ETCD_CA_BUNDLE, "File", true);
    add("config", CONFIG, "File", true);
    if certs.iter().any(|c| c.client.is_some()) {
        // admin.conf and super-admin.conf are replaced by rename: their
        // directory is writable, and what else is in it (the static pod
        // manifests, adopt's kubeconfigs and backups) is not.
        add("etc-kubernetes", "/etc/kubernetes", "Directory", false);
        add("manifests", "/etc/kubernetes/manifests", "Directory", true);
        add("certsync-files", KUBECONFIGS, "Directory", true);
        // The kubelet's own kubeconfigs are no business of certsync's.
        let [(conf, conf_path), (boot, boot_path)] = KUBELET_FILES;
        if there(dir, conf_path)? {
            add(conf, conf_path, "File", true);
        }
        if bootstrap {
            add(boot, boot_path, "File", true);
        }
    }
    for c in certs {
        add(&c.name, &c.target, "DirectoryOrCreate", false);
    }
    let config_hash = &digest(config)[..16];
    let mut spec = pod::Spec {
        image: opts.image(),
        admin: opts.admin(),
        generation: "",
        config_hash,
        mounts,
    };
    let shape = pod::manifest(&spec).map_err(KubeadmError::Issue)?;
    let generation = pod::generation(config, trust, &shape);
    spec.generation = &generation;
    let text = pod::manifest(&spec).map_err(KubeadmError::Issue)?;
    Ok((text, generation))
}

/// The CAs' renewals and bundles, then certsync's kubeconfigs, configuration and pod; and
/// the pod's generation. `read`: adopt's record and kubeadm's files as the plan read them
/// (on a node not yet adopted, every kubeconfig there).
pub(super) fn certsyncs_files(
    opts: &Options,
    certs: &[Cert],
    trust: &trust::Trust,
    config: Vec<u8>,
    (recorded, kubeadms): (Option<&State>, &[Read]),
    bootstrap: bool,
) -> Result<(Vec<FileWrite>, String), KubeadmError> {
    let (dir, adopted) = (&opts.dir, recorded.is_some());
    // On an adopted node one there with other bytes is adopt's own to replace.
    let file = |path: &str, bytes: Vec<u8>, what: &str| {
        let unowned = (!adopted).then(|| {
            let path = path.to_owned();
            KubeadmError::refused(dir, Refusal::Unowned { path })
        });
        node::to_write(dir, path, 0o600, what.to_owned(), bytes, unowned)
    };
    let mut files = trust.files.clone();
    files.extend(kubelet_conf(dir, &trust.ca_bundle)?);
    for (file_name, user, target, _) in BY_FILE {
        // On an adopted node the live kubeconfig is certsync's container's to rewrite: the
        // server its own by-file copy names (read-only to the container) is kubeadm's, from
        // adopt's backup, as admin.conf's is; else the container would choose where the
        // controller-manager and scheduler connect, and root would write it.
        let live = format!("/etc/kubernetes/{file_name}");
        let (at, text) = match recorded.and_then(|s| s.kubeconfigs.get(&live)) {
            Some(backup) => read_backup_text(dir, backup, &live)?,
            // Never the live file on an adopted node, even one whose record predates it.
            None if adopted => {
                let missing = vec![live];
                return Err(KubeadmError::refused(dir, Refusal::Unrecorded { missing }));
            }
            // The bytes read once (and backed up), never the file by its name again.
            None => {
                let read = kubeadms.iter().find(|(f, ..)| *f == live);
                let text = node::text(dir, &live, read.map(|(_, b, _)| b.clone()))?;
                (host(dir, &live), text)
            }
        };
        let server = node::server(&at, &text)?;
        let text = kubeconfig_text(&server, user, &format!("{P}/{target}"))?;
        let what = format!("{user}'s kubeconfig (client certificate by file)");
        let path = format!("{KUBECONFIGS}/{file_name}");
        files.extend(file(&path, text.into_bytes(), &what)?);
    }
    let (pod, generation) = pod_text(opts, certs, &config, &trust.digest, bootstrap)?;
    let what = "certsync's configuration (its pod must be ready on it before any manifest changes)";
    files.extend(file(CONFIG, config, what)?);
    files.extend(file(POD, pod.into_bytes(), "certsync's static pod")?);
    Ok((files, generation))
}
