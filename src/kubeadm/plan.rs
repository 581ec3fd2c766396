//! The plan: what adopt reads on the node, what it refuses, and every file
//! and manifest flag it would write.

use std::path::Path;

use k8s_openapi::api::core::v1::ConfigMap;
use serde_yaml_ng::Value;

use super::error::{FileProblem, KubeadmError, Refusal};
use super::manifest::{self, CA_BUNDLE, TRUST_ANNOTATION};
use super::options::Options;
use super::paths::host;
use super::{api, node, trust};
use crate::x509::KeyAlg;

mod changes;
mod files;
mod layout;
mod text;

pub use super::manifest::CONFIG;
pub use super::pod::POD;
use super::record::State;
pub use super::record::{BACKUPS, MADE_DIRS, STATE, backup_path};
pub use changes::Plan;
use changes::{ManifestChange, Read};
use files::{certsyncs_files, config_text, renewal};
use layout::Cert;
#[cfg(test)]
pub use layout::{CA_FILES, pairs};
pub use layout::{EMBEDDED, certs, pair_ca, read_only_in_pod, unrecorded};

/// What adopt does to `kube-public/cluster-info` so that `kubeadm join` trusts `bundle`;
/// why it cannot only once a renewal is there to miss (a join fails only after the old
/// certificate's end).
async fn cluster_info_change(
    client: Option<&kube::Client>,
    bundle: &[u8],
) -> (Option<String>, Option<ConfigMap>) {
    let renewed = node::certificates(Path::new(CA_BUNDLE), bundle).map_or(0, |c| c.len()) > 1;
    let not = |why: String| {
        renewed.then(|| {
            format!(
                "not updated ({why}); joins after the old CA certificate's end fail until its CA \
                 data holds {CA_BUNDLE}'s certificates (run adopt again, or see the guide)"
            )
        })
    };
    let Some(client) = client else {
        return (not("kubeadm-config was not read".into()), None);
    };
    let read = api::cluster_info(client, api::TIMEOUT).await;
    match read.and_then(|c| c.with_ca(bundle)) {
        Ok(None) => (None, None),
        Ok(Some(new)) => {
            let line = format!(
                "its CA data set to {CA_BUNDLE}'s certificates, so that a node joining after the \
                 old CA certificate's end trusts the API server (the controller-manager re-signs \
                 it for each bootstrap token)"
            );
            (Some(line), Some(new))
        }
        Err(e) => (not(e.to_string()), None),
    }
}

/// The trust plan of the CAs read once (`cas`), given the cluster's published CAs when
/// `client` reads them; and what adopt does to `kube-system/certsync-kubeadm-cas`, as the
/// plan's line.
async fn cluster_trust(
    opts: &Options,
    cas: Vec<(node::Cert, String)>,
    state: Option<&State>,
    client: Option<&kube::Client>,
) -> Result<(trust::Trust, String, Option<ConfigMap>), KubeadmError> {
    let read = match client {
        Some(c) => api::published(c).await.map_err(Some),
        None => Err(None),
    };
    let (none, pem) = (Default::default(), read.as_ref().ok().map(|p| &p.pem));
    let record = state.map_or(&none, |s| &s.trust);
    let trust = trust::plan(&opts.dir, cas, opts.now, record, state.is_some(), pem)?;
    let published = match read {
        Ok(p) => p,
        Err(why) => {
            let why = why.map_or("kubeadm-config was not read".into(), |e| e.to_string());
            let line = format!(
                "not read ({why}): a CA due is renewed on this node alone; the next adopt \
                 that reaches the API server takes the cluster's or writes this node's"
            );
            return Ok((trust, line, None));
        }
    };
    let new = trust
        .published
        .as_ref()
        .and_then(|want| published.with(want));
    let (map, certs) = (
        "ConfigMap kube-system/certsync-kubeadm-cas",
        "this node's CA certificates",
    );
    let takes = "which every other node's adopt takes";
    let line = match (&new, &published.object) {
        (None, _) => format!("{map} holds {certs}: nothing to write"),
        (Some(_), None) => format!("create {map} with {certs}, {takes}"),
        (Some(_), Some(_)) => format!("update {map} with {certs} (a renewal), {takes}"),
    };
    Ok((trust, line, new))
}

/// Reads the node and works out the plan; refuses what it does not recognise.
pub async fn plan(opts: &Options) -> Result<Plan, KubeadmError> {
    let current = super::pod::Current::read(&opts.dir)?;
    let probed = current.as_ref().and_then(|c| c.probe.as_ref().ok());
    let adopts_record = State::read(&opts.dir)?;
    let state = adopts_record.as_ref().map(|(_, s)| s);
    let recorded = state.map_or((None, None), |s| (s.admin_addr, s.image.as_deref()));
    let (opts, choices) = super::choices::kept(opts, probed, recorded);
    let opts = &opts;
    let dir = &opts.dir;
    preflight(opts, probed.map(|p| p.addr))?;
    let bootstrap = super::audit::kubelet_bootstrap(dir, state.is_some(), current.as_ref())
        .map_err(|r| KubeadmError::refused(dir, *r))?;
    // Each CA read once: admin.conf's pair (once adopt backed admin.conf up) and the trust
    // plan both judge by it; one that could not be read stops here.
    let cas = trust::Cas::read(dir).all()?;
    let admin = super::admin::Access::read(dir, state.map(|s| (s, &cas[0].0))).await;
    let (stored, from) = cluster_configuration(opts, &admin).await?;
    let client = stored.as_ref().map(|(_, c)| c);
    let (trust, cluster_cas, cluster_cas_new) = cluster_trust(opts, cas, state, client).await?;
    let (manifests, mirror) = manifest_changes(dir, &trust.digest)?;
    // The node's mappings, looked at once: the configuration, the pod's mounts, the pairs
    // read and the plan's lines all name these.
    let certs = certs(dir, state);
    recorded_gone(dir, state)?;
    linked_targets(dir, certs.iter().map(|c| &c.target))?;
    let key_alg = key_alg(opts, stored.as_ref().map(|(c, _)| c))?;
    let config = config_text(opts, &certs, key_alg)?;
    super::judge::judge(opts, &config)?;
    let (kubeconfigs_trusted, kubeadms) = kubeadms(dir, &certs, state, &trust)?;
    let config = config.into_bytes();
    let (files, generation) =
        certsyncs_files(opts, &certs, &trust, config, (state, &kubeadms), bootstrap)?;
    let image_before = probed
        .and_then(|p| p.image.clone())
        .filter(|old| *old != crate::escape(opts.image()));
    let (cluster_info, cluster_info_new) = cluster_info_change(client, &trust.ca_bundle).await;
    Ok(Plan {
        kubeadm_dir: dir.clone(),
        cluster_configuration_from: from,
        admin,
        cluster_info,
        cluster_info_new,
        cluster_cas,
        cluster_cas_new,
        files,
        manifests,
        record: adopts_record,
        pod: current,
        mirror,
        backup: format!("{BACKUPS}/{}", time_stamp()),
        kubeconfigs_renewed: (certs.iter())
            .filter_map(|c| c.client.map(|(.., k)| k.to_owned()))
            .collect(),
        pairs_renewed: certs.iter().filter_map(Cert::pair).collect(),
        cas: trust.cas,
        kubeconfigs_trusted,
        kubeadms,
        ca_bundle: trust.ca_bundle,
        trust: trust.digest,
        trust_record: trust.record,
        image: opts.image().to_owned(),
        image_before,
        generation,
        probe: super::pod::probe_addr(opts.admin()),
        admin_addr: opts.admin(),
        choices,
        mappings: (certs.into_iter())
            .map(|c| (c.name, c.target, renewal(&opts.set)))
            .collect(),
    })
}

/// Refused before the node is read further: a bad image reference, an admin address the
/// node cannot listen on (certsync's own pod holding it is fine: it is replaced), and
/// private keys others may read.
fn preflight(opts: &Options, current: Option<std::net::SocketAddr>) -> Result<(), KubeadmError> {
    let dir = &opts.dir;
    if opts.image.is_none() {
        return Err(KubeadmError::refused(dir, Refusal::NoImage));
    }
    super::preflight::image(dir, opts.image())?;
    let free = super::preflight::admin_addr(dir, opts.admin())?;
    if !free && current != Some(super::pod::probe_addr(opts.admin())) {
        let taken = Refusal::PortTaken { addr: opts.admin() };
        return Err(KubeadmError::refused(dir, taken));
    }
    let exposed = super::audit::exposed(dir);
    if !exposed.is_empty() {
        return Err(KubeadmError::refused(dir, Refusal::KeysExposed { exposed }));
    }
    Ok(())
}

/// The ClusterConfiguration through admin.conf and where it was read, or why not (adopt
/// needs no API server); refused when it holds what adopt does not handle.
async fn cluster_configuration(
    opts: &Options,
    admin: &super::admin::Admin,
) -> Result<(Option<(Value, kube::Client)>, String), KubeadmError> {
    let read = match admin {
        Ok(access) => api::kubeadm_config(access).await.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    let s = match read {
        Ok(s) => s,
        Err(e) => {
            let from = format!(
                "not read ({e}); kubeadm keeps no copy on a control-plane node, so the manifests \
                 alone were checked"
            );
            return Ok((None, from));
        }
    };
    if let Some(r) = api::refusal(&s.0) {
        return Err(KubeadmError::refused(&opts.dir, r));
    }
    let from = format!(
        "ConfigMap kube-system/kubeadm-config, read through {}",
        host(&opts.dir, super::admin::ADMIN).display()
    );
    Ok((Some(s), from))
}

/// The manifests adopt changes (flags, volumes, and the trust digest on the components
/// that load trust at start), each read and refused as found: a value of someone else's
/// where adopt sets one is a refusal, not an unreadable file; and certsync's mirror pod
/// (`--name` of etcd's).
fn manifest_changes(
    dir: &Path,
    digest: &str,
) -> Result<(Vec<ManifestChange>, Option<String>), KubeadmError> {
    let (mut manifests, mut mirror) = (Vec::new(), None);
    for (c, path, before) in manifest::on_node(dir) {
        let Some(before) = before? else {
            let refusal = match c.name {
                "etcd" => Refusal::NoEtcd { path },
                _ => Refusal::NoManifest { path },
            };
            return Err(KubeadmError::refused(dir, refusal));
        };
        let mut m = manifest::read(&c, &before).map_err(|problem| match problem {
            p if p.is_conflict() => KubeadmError::refused(dir, Refusal::Cert(p.of(&path))),
            p => KubeadmError::file(&host(dir, &path), p),
        })?;
        if c.name == "etcd" {
            mirror = m.flag("name").map(|n| format!("certsync-{n}"));
        }
        let (flags, volumes_added) = manifest::adopt(&c, &mut m);
        let mut annotations = Vec::new();
        let old = m.annotation(TRUST_ANNOTATION).unwrap_or_default();
        if c.trusts && m.set_annotation(TRUST_ANNOTATION, digest) {
            annotations.push((TRUST_ANNOTATION.to_owned(), old, digest.to_owned()));
        }
        if flags.is_empty() && volumes_added.is_empty() && annotations.is_empty() {
            continue;
        }
        let after = m
            .render()
            .map_err(|e| KubeadmError::file(&host(dir, &path), e));
        manifests.push(ManifestChange {
            after: after?.into_bytes(),
            path,
            flags,
            volumes_added,
            annotations,
            before,
        });
    }
    Ok((manifests, mirror))
}

/// kubeadm's kubeconfigs whose embedded CA is not yet the bundle: given it, kubectl and
/// kubeadm trust the renewal before the old one ends; and kubeadm's files no earlier
/// adoption backed up (`recorded`), with their bytes: kubeconfigs, then both files of each
/// pair adopt keeps, each template judged issued by its mapping's CA (as the trust plan
/// read it). Each file read once: the bytes judged are the bytes backed up.
fn kubeadms(
    dir: &Path,
    certs: &[Cert],
    recorded: Option<&State>,
    trust: &trust::Trust,
) -> Result<(Vec<String>, Vec<Read>), KubeadmError> {
    let crts = (certs.iter().filter_map(|c| Some((c.pair()?, c.ca_crt()))))
        .map(|(pair, ca)| {
            let crt = format!("{pair}.crt");
            let read = node::issued_by(dir, &crt, &ca, trust::in_place(&trust.cas, &ca));
            let (bytes, mode) = read.map_err(|e| KubeadmError::refused(dir, Refusal::Cert(e)))?;
            Ok((pair, (crt, bytes, mode)))
        })
        .collect::<Result<Vec<_>, KubeadmError>>()?;
    let (mut trusted, mut first) = (Vec::new(), Vec::new());
    for k in EMBEDDED {
        let Some((bytes, mode)) = node::read_with_mode(dir, k)? else {
            continue;
        };
        let text = String::from_utf8_lossy(&bytes);
        let ca = crate::writer::ca_data(&text, crate::writer::CaCluster::Current)
            .map_err(|e| KubeadmError::file(&host(dir, k), e))?;
        if ca.as_deref() != Some(&trust.ca_bundle[..]) {
            trusted.push(k.to_owned());
        }
        if !recorded.is_some_and(|s| s.kubeconfigs.contains_key(k)) {
            first.push((k.to_owned(), bytes, mode));
        }
    }
    for (p, crt) in crts {
        let file = format!("{p}.key");
        let Some((bytes, mode)) = node::read_with_mode(dir, &file)? else {
            return Err(KubeadmError::refused(dir, Refusal::NoPair { file }));
        };
        if !recorded.is_some_and(|s| s.pairs.contains_key(&p)) {
            first.extend([crt, (file, bytes, mode)]);
        }
    }
    // On an adopted node, a kubeadm file certsync keeps in step that appeared after the
    // first adoption (where certsync's container may write) is refused, never backed up
    // as kubeadm's: revert would later hand it back as root's. Judged on the very reads
    // that would be backed up, so none can appear between the check and the backup.
    if recorded.is_some() && !first.is_empty() {
        let pair = |p| format!("{p}.crt and .key");
        let missing = (first.iter().filter(|(f, ..)| !f.ends_with(".key")))
            .map(|(f, ..)| f.strip_suffix(".crt").map_or_else(|| f.clone(), pair))
            .collect();
        return Err(KubeadmError::refused(dir, Refusal::Unrecorded { missing }));
    }
    Ok((trusted, first))
}

/// The ClusterConfiguration's `encryptionAlgorithm`, or without it (after an outage the
/// node's own API server may be down) what kubeadm's keys say.
fn key_alg(opts: &Options, stored: Option<&Value>) -> Result<KeyAlg, KubeadmError> {
    if let Some(config) = stored {
        let found = config["encryptionAlgorithm"].as_str().unwrap_or("RSA-2048");
        return node::encryption_algorithm(found).ok_or_else(|| {
            let found = found.to_owned();
            KubeadmError::refused(&opts.dir, Refusal::EncryptionAlgorithm { found })
        });
    }
    let cert = "/etc/kubernetes/pki/apiserver.crt";
    let refusal = match node::key_alg(&opts.dir, cert) {
        Ok(Some(alg)) => return Ok(alg),
        Ok(None) => Refusal::KeySize { cert },
        Err(e) => Refusal::Cert(e),
    };
    Err(KubeadmError::refused(&opts.dir, refusal))
}

/// Refused: a kubeconfig adopt's record names, gone since. certsync's container may delete
/// it, and its client stays a mapping ([`layout::certs`]) that needs it: put back, or revert.
fn recorded_gone(dir: &Path, state: Option<&State>) -> Result<(), KubeadmError> {
    for (k, backup) in state.into_iter().flat_map(|s| &s.kubeconfigs) {
        if let Ok(None) = node::read_optional(dir, k) {
            let (path, backup) = (k.clone(), backup.clone());
            return Err(KubeadmError::refused(
                dir,
                Refusal::RecordedGone { path, backup },
            ));
        }
    }
    Ok(())
}

/// Refused: a target reached through a symlink (its parents' and its own name). certsync's
/// pod mounts each target read-write, and `mkdir` and the kubelet's hostPath follow a link:
/// one the container planted would give it the host directory it names.
pub(super) fn linked_targets<'a>(
    dir: &Path,
    targets: impl IntoIterator<Item = &'a String>,
) -> Result<(), KubeadmError> {
    for target in targets {
        if let Err(FileProblem::Link(link)) = super::moves::reach(dir, target) {
            let path = target.clone();
            return Err(KubeadmError::refused(dir, Refusal::Link { path, link }));
        }
    }
    Ok(())
}

/// UTC, sortable, one per second: `20261124T221933Z`.
pub fn time_stamp() -> String {
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
    now.to_string().replace(['-', ':'], "")
}
