//! What revert writes in place of kubeadm's pairs and kubeconfigs: kubeadm's own bytes
//! from adopt's first backup of them, or, for a certificate ending within
//! [`REVERT_MARGIN_SECS`], that certificate issued again from the CA (kubeadm's
//! TBSCertificate with a new serial and validity, kubeadm's key).
//!
//! Never a byte certsync's container could have written: the backups are in a directory
//! its pod mounts read-only, and only kubeadm's certificate from there is ever re-signed.
//! Re-signing a file from its live place would make revert, as root with the CA key, a
//! signing oracle for a compromised container. A file the backup lacks is refused.

use std::path::Path;

use base64::Engine as _;
use rustls_pki_types::pem::SectionKind;

use super::admin::CA;
use super::error::{FileProblem, KubeadmError, Refusal, RevertError};
use super::paths::host;
use super::plan;
use super::record::{State, read_backup, read_backup_text};
use crate::validate::rfc3339;
use crate::writer::WriterError;

/// revert issues again, rather than hands back, a kubeadm certificate ending this soon.
pub const REVERT_MARGIN_SECS: i64 = crate::source::ca::TEMPLATE_MARGIN.as_secs() as i64;

/// kubeadm's certificate's notAfter, and that of the one issued again (Unix seconds).
type Ends = (i64, i64);

/// A file revert writes: kubeadm's, from its `backup`.
#[derive(Default)]
pub(super) struct Handback {
    pub node_path: String,
    pub bytes: Vec<u8>,
    pub backup: Option<String>,
    pub reissued: Option<Ends>,
    /// A kubeconfig whose CA data gets `pki/ca.crt` beside kubeadm's.
    pub ca_added: bool,
}

/// What revert writes for each pair and kubeconfig adopt's record names, computed before
/// revert changes anything, and pki/ca.crt as read (none: unreadable, no kubeconfig needing
/// it), which revert never writes; refused when the node has one the record lacks.
pub(super) fn handbacks(
    dir: &Path,
    state: &State,
) -> Result<(Vec<Handback>, Option<super::node::Cert>), KubeadmError> {
    let missing = plan::unrecorded(dir, state);
    if !missing.is_empty() {
        return Err(RevertError::Planted(Box::new(Refusal::Unrecorded { missing })).into());
    }
    let deadline = crate::validate::unix_seconds(std::time::SystemTime::now()) + REVERT_MARGIN_SECS;
    // A CA renewed since goes into each kubeconfig's CA data; from pki/ca.crt, which
    // certsync's container cannot write, read once.
    let mut all = Vec::new();
    let ca = match super::trust::read_ca(dir, CA) {
        Ok(ca) => {
            for (k, backup) in &state.kubeconfigs {
                all.push(kubeconfig(dir, k, backup, &ca, deadline)?);
            }
            Some(ca.0)
        }
        Err(_) if state.kubeconfigs.is_empty() => None,
        Err(e) => return Err(e),
    };
    for (prefix, backup) in &state.pairs {
        let (crt, key) = (format!("{prefix}.crt"), format!("{prefix}.key"));
        let (at, kubeadms) = read_backup(dir, backup, &crt)?;
        let (_, kubeadms_key) = read_backup(dir, backup, &key)?;
        let der = crate::pem::exactly_one(&kubeadms, SectionKind::Certificate)
            .map_err(|e| KubeadmError::file(&at, e))?;
        let prefix = prefix.clone();
        let ca = plan::pair_ca(&prefix).ok_or(RevertError::NotAPair { prefix })?;
        let (new, reissued) = renewed(dir, &at, &der, &ca, deadline)?.unzip();
        let handback = |node_path, bytes, reissued| Handback {
            node_path,
            bytes,
            backup: Some(backup.clone()),
            reissued,
            ca_added: false,
        };
        all.push(handback(key, kubeadms_key, None));
        let bytes = new.map_or(kubeadms, String::into_bytes);
        all.push(handback(crt, bytes, reissued));
    }
    Ok((all, ca))
}

fn kubeconfig(
    dir: &Path,
    node_path: &str,
    backup: &str,
    (ca, renewal): &(super::node::Cert, String),
    deadline: i64,
) -> Result<Handback, KubeadmError> {
    let (at, text) = read_backup_text(dir, backup, node_path)?;
    let data = client_certificate_data(&at, &text)?;
    let field = "client-certificate-data";
    let pem = super::node::base64_field(&at, field, data)?;
    let der = crate::pem::exactly_one(&pem, SectionKind::Certificate)
        .map_err(|e| KubeadmError::file(&at, FileProblem::Pem(e).of(field)))?;
    let (new, reissued) = renewed(dir, &at, &der, CA, deadline)?.unzip();
    let b64 = base64::engine::general_purpose::STANDARD;
    let text = match new {
        Some(pem) => with_client_certificate(&at, &text, data, &b64.encode(pem))?,
        None => text,
    };
    let both = ca_data_with(&at, &text, (renewal.as_bytes(), &ca.der))?;
    Ok(Handback {
        node_path: node_path.to_owned(),
        backup: Some(backup.to_owned()),
        reissued,
        ca_added: both.is_some(),
        bytes: both.unwrap_or(text).into_bytes(),
    })
}

/// kubeadm's certificate `der` issued again by `ca` (PEM) when it ends by `deadline`, with
/// both ends; the new one must outlast it. `None`: kubeadm's lasts.
fn renewed(
    dir: &Path,
    at: &Path,
    der: &[u8],
    ca: &str,
    deadline: i64,
) -> Result<Option<(String, Ends)>, KubeadmError> {
    let not_after = |der: &[u8]| {
        (crate::x509::Certificate::read(der).map(|c| c.validity().1))
            .map_err(|e| KubeadmError::file(at, e))
    };
    let kubeadms = not_after(der)?;
    if kubeadms > deadline {
        return Ok(None);
    }
    let (ca_crt, ca_key) = (host(dir, ca), host(dir, &ca.replace(".crt", ".key")));
    let now = std::time::SystemTime::now();
    let new = crate::source::ca::reissue(at, der, &ca_crt, &ca_key, now).map_err(|source| {
        RevertError::Reissue {
            at: at.to_owned(),
            ends: rfc3339(kubeadms),
            ca: ca.to_owned(),
            source: Box::new(source),
        }
    })?;
    let ends = not_after(&new)?;
    if ends <= deadline {
        return Err(RevertError::CaEnds {
            ca: ca.to_owned(),
            ends: rfc3339(ends),
            at: at.to_owned(),
            kubeadms: rfc3339(kubeadms),
        }
        .into());
    }
    let pem = crate::pem::encode("CERTIFICATE", &new);
    Ok(Some((pem, (kubeadms, ends))))
}

/// The one user's `client-certificate-data` as it stands in `text`: what is replaced when
/// its certificate is issued again, every other byte kept.
pub(super) fn client_certificate_data<'a>(
    at: &Path,
    text: &'a str,
) -> Result<&'a str, KubeadmError> {
    let bad = |problem: FileProblem| KubeadmError::file(at, problem);
    let config = super::node::kubeconfig(at, text)?;
    let users = config.auth_infos.iter();
    let all: Vec<String> = users
        .filter_map(|u| u.auth_info.as_ref()?.client_certificate_data.clone())
        .collect();
    let [data] = all.as_slice() else {
        return Err(bad(FileProblem::ClientCerts(all.len())));
    };
    // Where it stands: once, or refused (which to replace would be a guess).
    crate::writer::written_once(text, data, "client-certificate-data").map_err(|e| bad(e.into()))
}

/// `text` with `data`, its one client certificate ([`client_certificate_data`]), replaced
/// where it stands by `new`, every other byte kept; parsed again, as writer's CA data edit
/// is, that value must be `new`: else the text replaced was not the value (a comment, a
/// value quoted with an escape), and kubeadm's expiring certificate would stay in place.
pub(super) fn with_client_certificate(
    at: &Path,
    text: &str,
    data: &str,
    new: &str,
) -> Result<String, KubeadmError> {
    let edited = text.replacen(data, new, 1);
    if client_certificate_data(at, &edited)? != new {
        let problem = WriterError::NotOnce("client-certificate-data");
        return Err(KubeadmError::file(at, problem));
    }
    Ok(edited)
}

/// `text` with `renewal` (one CA certificate, `renewal_der`) appended to its one cluster's
/// CA data; `None` when that data already holds it or there is none (the system's roots).
/// Data that is not PEM certificates only is refused: what it trusts cannot be judged.
pub(super) fn ca_data_with(
    at: &Path,
    text: &str,
    (renewal, renewal_der): (&[u8], &[u8]),
) -> Result<Option<String>, KubeadmError> {
    let bad = |problem: WriterError| KubeadmError::file(at, problem);
    let one = crate::writer::CaCluster::One;
    let Some(mut both) = crate::writer::ca_data(text, one).map_err(bad)? else {
        return Ok(None);
    };
    let held = crate::pem::certificates(&both).map_err(|e| {
        let field = "certificate-authority-data";
        KubeadmError::file(at, FileProblem::Pem(e).of(field))
    })?;
    if held.iter().any(|h| h == renewal_der) {
        return Ok(None);
    }
    if !both.ends_with(b"\n") {
        both.push(b'\n');
    }
    both.extend_from_slice(renewal);
    crate::writer::with_ca_data(text, one, &both).map_err(bad)
}

/// Writes `bytes` as `node_path` anew with kubeadm's mode for its file, renamed over the
/// name beneath its directory's handle, never through a link: whatever was at the name is
/// gone. kubeadm's mode for its file: what revert hands back has it, never the live file's
/// (certsync's container may have put another mode there). (Undo puts back what one adopt
/// run changed with the mode that run read, restoring the node as it found it.)
pub(super) fn write(dir: &Path, node_path: &str, bytes: &[u8]) -> Result<(), KubeadmError> {
    let node = || node_path.to_owned();
    let (parent, name) =
        (node_path.rsplit_once('/')).ok_or_else(|| RevertError::NotBelow { node_path: node() })?;
    let blocked = |problem| KubeadmError::file(Path::new(node_path), problem);
    let d = super::moves::open_beneath(dir, parent).map_err(blocked)?;
    let (crt, shown) = (node_path.ends_with(".crt"), host(dir, parent));
    let mode = if crt { 0o644 } else { 0o600 };
    crate::writer::replace_beneath(&d, name, mode, None, bytes, &shown)?;
    Ok(())
}
