//! What revert hands back in place of kubeadm's kubeconfigs and pairs
//! that certsync kept in step: kubeadm's copy from the backup, or the
//! current one when it lasts longer (certsync renewed it with a longer
//! lifetime, or kubeadm renewed it since) and is sound: the node's CA
//! issued it, its key is the certificate's, it names what kubeadm's
//! named, and a kubeconfig says everything else kubeadm's said. Each
//! judgement is shown with both copies' notAfter (dry run and real run
//! alike): an operator sees which copy comes back and why.

use std::path::Path;

use x509_parser::time::ASN1Time;

use super::apply::State;
use super::plan::{self, backup_path};
use super::{KubeadmError, host, node};

/// A file to put back: node path, bytes, mode.
pub(super) type Restore = (String, Vec<u8>, u32);

pub(super) struct Handback {
    /// The kubeconfig, or the pair's `.crt` (the `.key` goes with it).
    pub node_path: String,
    /// The backup and the files to restore from it (node path, bytes,
    /// mode); `None` to keep the current files.
    pub restore: Option<(String, Vec<Restore>)>,
    /// The notAfter of the copy revert leaves.
    pub not_after: ASN1Time,
    /// Which copy revert leaves and why, both copies' notAfter shown.
    pub judgement: String,
}

/// The current copy as revert judged it: its notAfter if sound, else why
/// not (with its notAfter when it could be read).
type Current = Result<ASN1Time, (Option<ASN1Time>, String)>;

/// kubeadm's kubeconfigs and pairs as revert would leave them.
pub(super) fn handbacks(dir: &Path, state: &State) -> Result<Vec<Handback>, KubeadmError> {
    let mut all = Vec::new();
    for (k, backup) in &state.kubeconfigs {
        let path = backup_path(dir, backup, k);
        let saved = std::fs::read(&path)
            .map_err(|e| KubeadmError::Revert(format!("backup of {k}: {e}")))?;
        let text =
            String::from_utf8(saved.clone()).map_err(|_| KubeadmError::file(&path, "not UTF-8"))?;
        let theirs =
            node::kubeconfig_not_after(dir, &text).map_err(|e| KubeadmError::file(&path, e))?;
        let theirs_cert = crate::writer::kubeconfig_certificate(&path)
            .ok()
            .map(|(c, _)| c);
        let current = current_kubeconfig(dir, k, &text, theirs_cert.as_deref())?;
        all.push(choose(
            k,
            k,
            current,
            theirs,
            backup,
            vec![(k.clone(), saved, 0o600)],
        ));
    }
    for (p, backup) in &state.pairs {
        let (crt, key) = (format!("{p}.crt"), format!("{p}.key"));
        let read = |f: &str| {
            std::fs::read(backup_path(dir, backup, f))
                .map_err(|e| KubeadmError::Revert(format!("backup of {f}: {e}")))
        };
        let (saved_crt, saved_key) = (read(&crt)?, read(&key)?);
        let theirs = node::not_after(&saved_crt)
            .map_err(|e| KubeadmError::file(&backup_path(dir, backup, &crt), e))?;
        let ca = plan::pair_ca(dir, p)
            .ok_or_else(|| KubeadmError::Revert(format!("{p}: not a pair adopt keeps")))?;
        let current = match (
            node::read_optional(dir, &crt)?,
            node::read_optional(dir, &key)?,
        ) {
            (Some(c), Some(k)) => judged(node::not_after(&c), || {
                node::sound_pair(dir, &c, &k, &ca)?;
                identity(&c, &saved_crt)
            }),
            (Some(c), None) => Err((node::not_after(&c).ok(), "its key is missing".into())),
            (None, _) => Err((None, "missing".into())),
        };
        let files = vec![(key, saved_key, 0o600), (crt.clone(), saved_crt, 0o644)];
        let shown = format!("{crt} and .key");
        all.push(choose(&shown, &crt, current, theirs, backup, files));
    }
    Ok(all)
}

/// The kubeconfig at `k` as it is now, judged against kubeadm's `saved`
/// text (whose client certificate is `theirs_cert`).
fn current_kubeconfig(
    dir: &Path,
    k: &str,
    saved: &str,
    theirs_cert: Option<&[u8]>,
) -> Result<Current, KubeadmError> {
    let Some(bytes) = node::read_optional(dir, k)? else {
        return Ok(Err((None, "missing".into())));
    };
    let Ok(text) = String::from_utf8(bytes) else {
        return Ok(Err((None, "not UTF-8".into())));
    };
    Ok(judged(node::kubeconfig_not_after(dir, &text), || {
        let (cert, key) = crate::writer::kubeconfig_certificate(&host(dir, k))
            .map_err(|e| format!("no client pair to judge ({e})"))?;
        let key = key.ok_or("no embedded client key")?;
        node::sound_pair(dir, &cert, &key, "/etc/kubernetes/pki/ca.crt")?;
        identity(&cert, theirs_cert.unwrap_or_default())?;
        if !node::same_but_pairs(&text, saved) {
            return Err(
                "it differs from kubeadm's in more than its client pair (server, CA, \
                        user or plugin)"
                    .into(),
            );
        }
        Ok(())
    }))
}

/// A current copy whose notAfter is `until`, sound if `check` passes.
fn judged(until: Result<ASN1Time, String>, check: impl FnOnce() -> Result<(), String>) -> Current {
    let until = until.map_err(|e| (None, e))?;
    check().map(|()| until).map_err(|why| (Some(until), why))
}

/// A copy kept in place of kubeadm's names what kubeadm's named.
fn identity(cert: &[u8], kubeadms: &[u8]) -> Result<(), String> {
    if node::same_identity(cert, kubeadms) {
        Ok(())
    } else {
        Err("other subject or names than kubeadm's".into())
    }
}

/// The current file when it is sound and outlasts kubeadm's in the
/// backup, else the backup's `files`; `shown` names the file in the
/// judgement.
fn choose(
    shown: &str,
    node_path: &str,
    current: Current,
    theirs: ASN1Time,
    backup: &str,
    files: Vec<Restore>,
) -> Handback {
    let kubeadms = format!("kubeadm's backup (until {})", until(theirs));
    // The current copy's notAfter when it is the one kept.
    let (kept, judgement) = match current {
        Ok(now) if now > theirs => (
            Some(now),
            format!(
                "{shown}: keeping certsync's (until {}) over {kubeadms}: it lasts longer",
                until(now)
            ),
        ),
        Ok(now) => (
            None,
            format!(
                "{shown}: keeping {kubeadms} over certsync's (until {}): {}",
                until(now),
                if now < theirs {
                    "it lasts longer"
                } else {
                    "certsync's lasts no longer"
                }
            ),
        ),
        Err((now, why)) => (
            None,
            format!(
                "{shown}: keeping {kubeadms}, not certsync's{}: {why}",
                now.map(|t| format!(" (until {})", until(t)))
                    .unwrap_or_default()
            ),
        ),
    };
    Handback {
        node_path: node_path.to_owned(),
        not_after: kept.unwrap_or(theirs),
        restore: kept.is_none().then(|| (backup.to_owned(), files)),
        judgement,
    }
}

/// A notAfter as revert shows it: `2027-11-25 12:00Z`.
pub(super) fn until(t: ASN1Time) -> String {
    let t = t.to_datetime();
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute()
    )
}
