//! The CAs' end: each kubeadm CA renewed with its own key
//! (`source::ca::renew_ca`) once less than [`RENEW_LEFT`] of its span is
//! left, and a bundle of its certificates (in place and renewed) for each
//! component that loads trust only at start (etcd, the API server's
//! `--etcd-cafile`, the controller-manager's `--root-ca-file`), whose
//! manifests carry the bundles' digest so a renewal restarts them.
//!
//! A bundle is made from adopt's record (`adopted.json`, which certsync's
//! container cannot write) and the CA in place, never from the bundle file:
//! one an older certsync pod wrote (the CA's subject and key, signed with the
//! CA key, ending in 2100) would otherwise stay trusted. Of the record, only
//! unended certificates of the CA's subject and key that Go reads are kept
//! (etcd refuses a bundle it cannot parse). A bundle adopt did not write is
//! refused.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use x509_parser::certificate::TbsCertificate;

use super::error::{FileProblem, KubeadmError};
use super::manifest::{CA_BUNDLE, ETCD_CA_BUNDLE, KUBELET_CONF as KUBELET};
use super::node::{self, Cert};
use super::paths::{FileWrite, host};
use super::record::STATE;
use super::warning::{Warning, WarningKind};
use crate::pem::encode;
use crate::validate::{rfc3339, unix_seconds};
use crate::x509::Certificate;

/// The CA certificate at `node_path`, read once through the no-link reader, as exactly one
/// certificate, parsed, and the file's text.
pub fn read_ca(dir: &Path, node_path: &str) -> Result<(Cert, String), KubeadmError> {
    let (at, text) = (host(dir, node_path), node::read(dir, node_path)?);
    let [der] = (node::certificates(&at, text.as_bytes())?.try_into()).map_err(|all: Vec<_>| {
        KubeadmError::file(&at, FileProblem::NotOneCertificate(all.len()))
    })?;
    let cert = Cert::parse(der).map_err(|e| KubeadmError::file(&at, e))?;
    Ok((cert, text))
}

/// kubeadm's CAs ([`CAS`]) as one command reads them, for its plan (then [`in_place`]),
/// status and admin.conf's pair check: each file once ([`read_ca`]); an unreadable one kept
/// as its error, which status reports and adopt stops on ([`Cas::all`]).
pub struct Cas<'a> {
    pub dir: &'a Path,
    read: Vec<Result<(Cert, String), KubeadmError>>,
}

impl<'a> Cas<'a> {
    pub fn read(dir: &'a Path) -> Self {
        let read = CAS.iter().map(|(_, c, _)| read_ca(dir, c)).collect();
        Self { dir, read }
    }

    /// `ca`'s certificate (`pki/ca.crt`, the first of [`CAS`]) as read; none: unreadable.
    pub fn ca(&self) -> Option<&Cert> {
        self.read[0].as_ref().ok().map(|(ca, _)| ca)
    }

    /// Each CA as read, in [`CAS`]' order, or the first one's error as it was said.
    pub fn all(self) -> Result<Vec<(Cert, String)>, KubeadmError> {
        self.read.into_iter().collect()
    }
}

/// The CA at `path` in place as the plan read it (`cas`); none: not one of [`CAS`].
pub fn in_place<'a>(cas: &'a [CaEnd], path: &str) -> Result<&'a Cert, FileProblem> {
    let ca = cas.iter().find(|c| c.path == path).map(|c| &c.in_place);
    ca.ok_or_else(|| FileProblem::Missing.of(path))
}

/// Renewed when less than this share of its span is left.
pub const RENEW_LEFT: (i64, i64) = (9, 10);

/// kubeadm's CAs: (name, certificate, its bundle, if any); each key is its `.key` beside.
pub const CAS: [(&str, &str, Option<&str>); 3] = [
    ("ca", "/etc/kubernetes/pki/ca.crt", Some(CA_BUNDLE)),
    (
        "front-proxy-ca",
        "/etc/kubernetes/pki/front-proxy-ca.crt",
        None,
    ),
    (
        "etcd-ca",
        "/etc/kubernetes/pki/etcd/ca.crt",
        Some(ETCD_CA_BUNDLE),
    ),
];

#[derive(Debug, Clone, serde::Serialize)]
pub struct CaEnd {
    pub name: &'static str,
    pub path: &'static str,
    /// notAfters (unix seconds): in place, of its renewal, when one is due.
    pub ends: i64,
    pub renewed_to: Option<i64>,
    pub due_from: i64,
    /// The certificate in place as [`Cas`] read it: the plan's template check and adopt's
    /// waits judge by it (a renewal keeps its subject and key), never reading it again.
    #[serde(skip)]
    pub in_place: Cert,
}

#[derive(Debug, Clone, Default)]
pub struct Trust {
    /// Renewed CA certificates and the bundles (0644, as kubeadm's).
    pub files: Vec<FileWrite>,
    pub cas: Vec<CaEnd>,
    /// SHA-256 (16 hex) of the bundles as adopt leaves them.
    pub digest: String,
    /// `ca`'s bundle (PEM): the CA data of the kubeconfigs adopt keeps.
    pub ca_bundle: Vec<u8>,
    pub record: Record,
    /// Each CA's certificates as the cluster's ConfigMap should hold them
    /// (`None`: it was not read).
    pub published: Option<BTreeMap<String, String>>,
}

/// Each bundle (node path) with the certificates (PEM) adopt put in it.
pub type Record = BTreeMap<String, Vec<String>>;

/// A CA's span without the backdate `renew_ca` gives it: right after a renewal all of it
/// is left, so the next adopt does not renew it again.
fn effective_span(from: i64, to: i64) -> i64 {
    (to - from - BACKDATE_SECS).max(1)
}

fn due_from(from: i64, to: i64) -> i64 {
    to - effective_span(from, to) * RENEW_LEFT.0 / RENEW_LEFT.1
}

const BACKDATE_SECS: i64 = crate::source::ca::BACKDATE.as_secs() as i64;

/// The renewals and bundles at `now`, from adopt's `record` and the cluster's
/// certificates (`published`; `None`: the API server out of reach).
pub fn plan(
    dir: &Path,
    cas: Vec<(Cert, String)>,
    now: SystemTime,
    record: &Record,
    adopted: bool,
    published: Option<&BTreeMap<String, String>>,
) -> Result<Trust, KubeadmError> {
    let now_s = unix_seconds(now);
    let mut trust = Trust::default();
    let mut bundles = Vec::new();
    let mut cluster = BTreeMap::new();
    for ((name, cert, bundle), (ca, text)) in CAS.into_iter().zip(cas) {
        let (der, to) = (&ca.der, ca.not_after);
        crate::x509::strict_certificate(der).map_err(|e| {
            KubeadmError::file(&host(dir, cert), FileProblem::NotAsGoReads(Box::new(e)))
        })?;
        let span = effective_span(ca.not_before, to);
        let map_key = format!("{name}.crt");
        let theirs = match published.and_then(|p| p.get(&map_key)) {
            Some(pem) => cluster_certs(&map_key, pem, &ca, now_s, span)?,
            None => Vec::new(),
        };
        let (current, is_taken) =
            current(dir, (name, cert, &ca), (text, &theirs), now, &mut trust)?;
        // The cluster's when taken (every node the same); else the recorded,
        // the cluster's and the one in place; then the current one. Unended.
        let mut certs: Vec<Vec<u8>> = Vec::new();
        let kept = match bundle.filter(|_| !is_taken) {
            Some(b) => recorded(dir, record, b, &ca)?,
            None => Vec::new(),
        };
        let mine = (!is_taken).then(|| ca.clone());
        for c in kept.into_iter().chain(theirs).chain(mine) {
            if c.not_after > now_s && c.der != current && !certs.contains(&c.der) {
                certs.push(c.der);
            }
        }
        certs.push(current);
        let pems: Vec<String> = certs.iter().map(|c| encode("CERTIFICATE", c)).collect();
        let text = pems.concat();
        cluster.insert(map_key, text.clone());
        let Some(bundle) = bundle else { continue };
        if name == "ca" {
            trust.ca_bundle = text.clone().into_bytes();
        }
        bundles.push(text.clone());
        trust.record.insert(bundle.to_owned(), pems);
        let what = format!(
            "{name}'s certificates side by side ({}), for the components that load trust only \
             at start",
            certs.len()
        );
        // One adopt did not write is refused.
        let not_adopts =
            (!adopted).then(|| KubeadmError::file(&host(dir, bundle), FileProblem::NotAdopts));
        let file = node::to_write(dir, bundle, 0o644, what, text.into_bytes(), not_adopts)?;
        trust.files.extend(file);
    }
    trust.digest = super::paths::digest(bundles.concat().as_bytes())[..16].to_owned();
    trust.published = published.map(|_| cluster);
    Ok(trust)
}

/// The CA `ca` (`name`, at `cert`) as adopt leaves it, and whether it is the cluster's
/// (`theirs`, [`cluster_certs`]): its [`CaEnd`] and, when it changes, its file (`text` as
/// read) are added to `trust`.
fn current(
    dir: &Path,
    (name, cert, ca): (&'static str, &'static str, &Cert),
    (text, theirs): (String, &[Cert]),
    now: SystemTime,
    trust: &mut Trust,
) -> Result<(Vec<u8>, bool), KubeadmError> {
    let (now_s, der, from, to) = (unix_seconds(now), &ca.der, ca.not_before, ca.not_after);
    // The cluster's CA certificate, unless due, is taken: never a second
    // renewal. Never one ending before the one in place (unless due): a
    // replayed older renewal would swap them, restarting the components.
    let due = now_s > due_from(from, to);
    let taken = (theirs.last()).filter(|c| {
        let (f, t) = (c.not_before, c.not_after);
        t > now_s && now_s <= due_from(f, t) && (t >= to || due)
    });
    let (current, ends, what) = match taken {
        Some(c) => {
            let what = "the cluster's CA certificate, which another node renewed";
            (c.der.clone(), c.not_after, what)
        }
        None if due => {
            let span = effective_span(from, to);
            let (at, key) = (host(dir, cert), host(dir, &cert.replace(".crt", ".key")));
            let new = crate::source::ca::renew_ca(&at, &key, now_s + span, now)
                .map_err(|e| KubeadmError::file(&at, e))?;
            (new, now_s + span, "the CA renewed with its own key")
        }
        None => (der.clone(), to, ""),
    };
    if current != *der {
        trust.files.push(FileWrite {
            path: cert.to_owned(),
            before: Some(text.into_bytes()),
            mode: 0o644,
            what: format!(
                "{what} (same subject, key and key identifier): ends {}, where the \
                 certificate in place ends {}",
                rfc3339(ends),
                rfc3339(to)
            ),
            bytes: encode("CERTIFICATE", &current).into_bytes(),
        });
    }
    trust.cas.push(CaEnd {
        name,
        path: cert,
        ends: to,
        renewed_to: (current != *der).then_some(ends),
        due_from: due_from(from, to),
        in_place: ca.clone(),
    });
    Ok((current, taken.is_some()))
}

/// The certificates published for a CA with their validity; refused unless
/// each is the CA's own as `renew_ca` makes it: `ca`'s subject and key, signed
/// by that key, read as Go reads it, every field but serial and validity the
/// one in place's (a server's certificate or name constraints made with the
/// key would break every component's trust), valid at `now`, ending no later
/// than a renewal made now.
fn cluster_certs(
    map_key: &str,
    pem: &str,
    ca: &Cert,
    now: i64,
    span: i64,
) -> Result<Vec<Cert>, KubeadmError> {
    let at = PathBuf::from(format!(
        "ConfigMap kube-system/certsync-kubeadm-cas, key {map_key}"
    ));
    let refuse = |why| KubeadmError::file(&at, FileProblem::NotTheCas(why));
    let in_place = Certificate::read(&ca.der).map_err(|e| KubeadmError::file(&at, e))?;
    fn fields<'a>(t: &'a TbsCertificate<'a>) -> impl PartialEq + 'a {
        let uids = (&t.issuer_uid, &t.subject_uid);
        let names = (&t.signature, &t.issuer, &t.subject, &t.subject_pki);
        (t.version, names, uids, t.extensions())
    }
    let all = node::certificates(&at, pem.as_bytes())?;
    if all.is_empty() {
        return Err(refuse("no certificate"));
    }
    all.into_iter()
        .map(|c| {
            let x = Certificate::read(&c).map_err(|e| KubeadmError::file(&at, e))?;
            if x.subject() != ca.subject {
                return Err(refuse("another subject"));
            }
            if x.spki() != ca.spki {
                return Err(refuse("another key"));
            }
            node::signed_by(&x, "it", ca, "the CA")
                .map_err(|_| refuse("not signed by the CA's key"))?;
            crate::x509::strict_certificate(&c)
                .map_err(|e| KubeadmError::file(&at, FileProblem::NotAsGoReads(Box::new(e))))?;
            // Other signature bytes over the same part (an ECDSA s flipped
            // needs no key) would rewrite the CA at every adopt.
            if x.signed_part().as_ref() == in_place.signed_part().as_ref() && c != ca.der {
                return Err(refuse("the certificate in place under another signature"));
            }
            if fields(x.signed_part()) != fields(in_place.signed_part()) {
                return Err(refuse("its extensions are not the certificate in place's"));
            }
            let (from, to) = x.validity();
            if from > now + BACKDATE_SECS {
                return Err(refuse("it is not valid yet"));
            }
            if to > now + span + BACKDATE_SECS {
                return Err(refuse("it ends later than a renewal made now would"));
            }
            Cert::parse(c).map_err(|e| KubeadmError::file(&at, e))
        })
        .collect()
}

/// What adopt recorded for `bundle` that is `ca` (subject and key) and that
/// Go reads, once each, with its end.
fn recorded(
    dir: &Path,
    record: &Record,
    bundle: &str,
    ca: &Cert,
) -> Result<Vec<Cert>, KubeadmError> {
    let mut certs: Vec<Cert> = Vec::new();
    for text in record.get(bundle).into_iter().flatten() {
        for c in node::certificates(&host(dir, STATE), text.as_bytes())? {
            let Ok(c) = Cert::parse(c) else {
                continue;
            };
            if (&c.subject, &c.spki) == (&ca.subject, &ca.spki)
                && crate::x509::strict_certificate(&c.der).is_ok()
                && !certs.iter().any(|d| d.der == c.der)
            {
                certs.push(c);
            }
        }
    }
    Ok(certs)
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct CaStatus {
    pub name: &'static str,
    pub path: &'static str,
    pub not_after: Option<String>,
    /// Unix time; 0 when unknown.
    pub not_after_seconds: i64,
    pub renewal_due: bool,
    /// The bundle the components load at start holds it (`None`: no bundle).
    pub in_bundle: Option<bool>,
    /// The end of the earliest earlier certificate kept in the bundle (0:
    /// none): by then whatever trusts only it must trust this one.
    pub previous_not_after_seconds: i64,
    pub previous_not_after: Option<String>,
    /// The ends of every earlier certificate kept beside it.
    #[serde(skip)]
    pub earlier_ends: Vec<i64>,
    pub problem: Option<String>,
}

/// Each CA at `now`, with warnings for a renewal due and for kubelet.conf,
/// whose CA data only a kubelet restart re-reads.
pub fn status(read: &Cas<'_>, now: i64, record: &Record) -> (Vec<CaStatus>, Vec<Warning>) {
    let mut cas = Vec::new();
    let mut warnings = Vec::new();
    let dir = read.dir;
    for ((name, cert, bundle), ca) in CAS.into_iter().zip(&read.read) {
        let mut c = CaStatus {
            name,
            path: cert,
            ..CaStatus::default()
        };
        let ca = match ca {
            Ok((ca, _)) => ca,
            Err(e) => {
                c.problem = Some(e.to_string());
                cas.push(c);
                continue;
            }
        };
        let (from, to) = (ca.not_before, ca.not_after);
        let ends = rfc3339(to);
        c.not_after = Some(ends.clone());
        c.not_after_seconds = to;
        c.renewal_due = now > due_from(from, to);
        if to <= now {
            c.problem = Some(format!("ended {ends}"));
        } else if c.renewal_due {
            warnings.push(Warning::new(
                WarningKind::CaRenewalDue,
                format!(
                    "the CA {cert} ends {ends}: `certsync kubeadm adopt` renews it with its own \
                     key (etcd, the API server and the controller-manager restart once on the new \
                     trust)"
                ),
            ));
        }
        if let Some(b) = bundle {
            bundle_part(&mut c, dir, b, ca, record, now, &mut warnings);
        }
        if name == "ca" {
            let fix = format!(
                "run `certsync kubeadm adopt`, which puts {CA_BUNDLE}'s certificates in its \
                 certificate-authority-data (the kubelet reads it at its next start; the CA now \
                 in place ends {ends}); on nodes certsync does not adopt (workers), put them \
                 there by hand and restart the kubelet"
            );
            match kubelet_trust(dir, &ca.der, now, &fix) {
                Some((true, w)) => c.problem = Some(w),
                Some((false, w)) => warnings.push(Warning::new(WarningKind::KubeletConf, w)),
                None => {}
            }
        }
        cas.push(c);
    }
    (cas, warnings)
}

/// The bundle `b` of `ca`: whether it holds it, the earlier certificates
/// recorded, and what is wrong, such as holding one neither in place nor
/// recorded (certsync's container could have written it: another key
/// trusted by etcd, the API server and the controller-manager).
fn bundle_part(
    c: &mut CaStatus,
    dir: &Path,
    b: &str,
    ca: &Cert,
    record: &Record,
    now: i64,
    warnings: &mut Vec<Warning>,
) {
    let der = &ca.der;
    let kept = recorded(dir, record, b, ca).unwrap_or_default();
    let held = node::read_optional(dir, b)
        .and_then(|t| t.map_or(Ok(Vec::new()), |t| node::certificates(&host(dir, b), &t)))
        .map_err(|e| e.to_string());
    let has = held.as_ref().is_ok_and(|h| h.iter().any(|h| h == der));
    c.in_bundle = Some(has);
    let earlier = kept.iter().filter(|k| k.der != *der);
    c.earlier_ends = earlier.map(|k| k.not_after).collect();
    let previous = c.earlier_ends.iter().copied().min().unwrap_or(0);
    c.previous_not_after_seconds = previous;
    c.previous_not_after = (previous > 0).then(|| rfc3339(previous));
    if previous > 0 && previous <= now {
        warnings.push(Warning::new(
            WarningKind::EarlierCaEnded,
            format!(
                "the CA {}'s earlier certificate ended {}: whatever off this node trusted only \
                 it (kubelets, cluster-info, copied kubeconfigs) stopped then; `certsync \
                 kubeadm adopt` leaves it out of {b}",
                c.path,
                rfc3339(previous)
            ),
        ));
    }
    let stranger = |h: &&Vec<u8>| *h != der && !kept.iter().any(|k| k.der == **h);
    let run = "run `certsync kubeadm adopt`, which writes it from the CA certificates";
    let loads = "which etcd, the API server or the controller-manager load at start";
    c.problem = match held.map(|h| h.iter().filter(stranger).count()) {
        Err(e) => Some(e),
        Ok(0) if has => c.problem.take(),
        Ok(0) => Some(format!("{b}, {loads}, does not hold it: {run}")),
        Ok(n) => Some(format!(
            "{b}, {loads}, holds {n} certificate(s) adopt did not write: {run}"
        )),
    };
}

/// A kubeconfig's text and the CA certificates (DER) it embeds.
type Embedded = (String, Vec<Vec<u8>>);

/// kubelet.conf and the CA certificates it embeds; `None` when there is
/// none or it names its CA by file.
pub(super) fn kubelet_conf(dir: &Path) -> Result<Option<Embedded>, KubeadmError> {
    let at = host(dir, KUBELET);
    let Some(bytes) = node::read_optional(dir, KUBELET)? else {
        return Ok(None);
    };
    let text = node::text(dir, KUBELET, Some(bytes))?;
    let held = embedded(&at, &text, crate::writer::CaCluster::Current)?;
    Ok(held.map(|held| (text, held)))
}

/// The CA certificates (DER) `cluster` of `text`, the kubeconfig at `at`, embeds; `None`
/// when it has no CA data.
pub(super) fn embedded(
    at: &Path,
    text: &str,
    cluster: crate::writer::CaCluster,
) -> Result<Option<Vec<Vec<u8>>>, KubeadmError> {
    let data = crate::writer::ca_data(text, cluster).map_err(|e| KubeadmError::file(at, e))?;
    data.map(|data| node::certificates(at, &data)).transpose()
}

/// `text`, a kubeconfig whose `cluster` trusts `held`, with `bundle` (PEM) as that cluster's
/// CA data; `None` when it already trusts each of the bundle's certificates.
pub(super) fn trusting(
    at: &Path,
    (text, held): (&str, &[Vec<u8>]),
    cluster: crate::writer::CaCluster,
    bundle: &[u8],
) -> Result<Option<String>, KubeadmError> {
    let certs = node::certificates(Path::new(CA_BUNDLE), bundle)?;
    if certs.iter().all(|c| held.contains(c)) {
        return Ok(None);
    }
    crate::writer::with_ca_data(text, cluster, bundle).map_err(|e| KubeadmError::file(at, e))
}

/// [`stale_trust`] of [`kubelet_conf`] and the CA `der`; an unreadable one
/// is a problem.
pub(super) fn kubelet_trust(dir: &Path, der: &[u8], now: i64, fix: &str) -> Option<(bool, String)> {
    let fails = "the kubelet cannot verify the API server";
    match kubelet_conf(dir) {
        Ok(Some((_, held))) => stale_trust(KUBELET, &held, der, now, fails, fix),
        Ok(None) => None,
        Err(e) => Some((
            true,
            format!("{e}: what the kubelet trusts cannot be judged"),
        )),
    }
}

/// When `trusted` (what `who` trusts) lacks the CA `der`: a problem (`true`,
/// saying `fails`) once all have ended (unreadable: ended), else a warning.
pub(super) fn stale_trust(
    who: &str,
    trusted: &[Vec<u8>],
    der: &[u8],
    now: i64,
    fails: &str,
    fix: &str,
) -> Option<(bool, String)> {
    if trusted.iter().any(|c| c == der) {
        return None;
    }
    let ends = trusted
        .iter()
        .filter_map(|c| Certificate::read(c).ok())
        .map(|c| c.validity().1)
        .max()
        .unwrap_or(0);
    let at = rfc3339(ends);
    Some(if ends <= now {
        let why = format!("{who} trusts only CA certificates that ended {at}: {fails}; {fix}");
        (true, why)
    } else {
        let why = format!("{who} trusts only CA certificates ending {at}: before then, {fix}");
        (false, why)
    })
}
