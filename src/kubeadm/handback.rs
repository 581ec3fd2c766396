//! What revert hands back in place of kubeadm's kubeconfigs and pairs
//! that certsync kept in step: kubeadm's copy from the backup, or the
//! current one when it lasts longer (certsync renewed it with a longer
//! lifetime, or kubeadm renewed it since) and is sound: the node's CA
//! issued it, its key is the certificate's, it names what kubeadm's
//! named, and a kubeconfig says everything else kubeadm's said. Each
//! judgement is shown with both copies' notAfter (dry run and real run
//! alike): an operator sees which copy comes back and why.
//!
//! Each current file is read once, beneath its directory's handle and
//! never through a link, and judged on those bytes; what revert keeps is
//! those bytes written anew with kubeadm's modes, never the entry it read
//! (the ninth review, F1 and F2: a file renamed in after the judgement, a
//! symlink, or a key made 0666 by certsync's container survived revert).

use std::path::Path;

use x509_parser::time::ASN1Time;

use super::apply::State;
use super::plan::{self, backup_path};
use super::{KubeadmError, host, kept, moves, node};

/// A file to put back: node path, bytes, mode.
pub(super) type Restore = (String, Vec<u8>, u32);

/// kubeadm's modes: its keys and kubeconfigs are root's 0600, its
/// certificates 0644. What revert writes has these, whatever the file it
/// judged had (the ninth review, F2: a key certsync's container made 0666
/// was kept so).
const PRIVATE: u32 = 0o600;
const PUBLIC: u32 = 0o644;

pub(super) struct Handback {
    /// The kubeconfig, or the pair's `.crt` (the `.key` goes with it).
    pub node_path: String,
    /// What revert writes (node path, bytes, mode): the current copy's
    /// bytes as judged, or kubeadm's from the backup.
    pub files: Vec<Restore>,
    /// The backup the files come from; `None`: the current copy's bytes.
    pub backup: Option<String>,
    /// The notAfter of the copy revert leaves.
    pub not_after: ASN1Time,
    /// Which copy revert leaves and why, both copies' notAfter shown.
    pub judgement: String,
}

/// The current copy as revert judged it: its notAfter if sound, else why
/// not (with its notAfter when it could be read).
type Current = Result<ASN1Time, (Option<ASN1Time>, String)>;

/// kubeadm's kubeconfigs and pairs as revert would leave them, each
/// current file read once (see [`read_current`]) and judged on those bytes.
pub(super) fn handbacks(dir: &Path, state: &State) -> Result<Vec<Handback>, KubeadmError> {
    let mut all = Vec::new();
    // certsync's configuration as adopt wrote it (mounted read-only into
    // its pod), or the copy in the backup: each mapping's lifetime.
    let config = read_current(dir, plan::CONFIG).ok().flatten().or_else(|| {
        let b = state.backups.last()?;
        read_current(dir, &format!("{b}/certsync.yaml"))
            .ok()
            .flatten()
    });
    for (k, backup) in &state.kubeconfigs {
        let path = backup_path(dir, backup, k);
        let saved = std::fs::read(&path)
            .map_err(|e| KubeadmError::Revert(format!("backup of {k}: {e}")))?;
        let text =
            String::from_utf8(saved.clone()).map_err(|_| KubeadmError::file(&path, "not UTF-8"))?;
        let theirs =
            node::kubeconfig_not_after(dir, &text).map_err(|e| KubeadmError::file(&path, e))?;
        let theirs_cert = crate::writer::embedded_pair(&text).ok().map(|(c, _)| c);
        let (current, ours) = match read_current(dir, k) {
            Ok(Some(bytes)) => (
                current_kubeconfig(
                    dir,
                    &bytes,
                    &text,
                    theirs_cert.as_deref(),
                    kept::lifetime(config.as_deref(), "update-kubeconfig", k),
                ),
                vec![(k.clone(), bytes, PRIVATE)],
            ),
            Ok(None) => (Err((None, "missing".into())), Vec::new()),
            Err(why) => (Err((None, why)), Vec::new()),
        };
        let theirs_files = vec![(k.clone(), saved, PRIVATE)];
        all.push(choose(k, k, current, theirs, backup, ours, theirs_files));
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
        let (current, ours) = match (read_current(dir, &crt), read_current(dir, &key)) {
            (Ok(Some(c)), Ok(Some(k))) => (
                judged(node::not_after(&c), || {
                    node::sound_pair(dir, &c, &k, &ca)?;
                    identity(&c, &saved_crt)?;
                    kept::shape(
                        &c,
                        &saved_crt,
                        kept::lifetime(config.as_deref(), "update-pair", p),
                    )
                }),
                vec![(key.clone(), k, PRIVATE), (crt.clone(), c, PUBLIC)],
            ),
            (Err(why), _) | (Ok(Some(_)), Err(why)) => (Err((None, why)), Vec::new()),
            (Ok(Some(c)), Ok(None)) => (
                Err((node::not_after(&c).ok(), "its key is missing".into())),
                Vec::new(),
            ),
            (Ok(None), _) => (Err((None, "missing".into())), Vec::new()),
        };
        let theirs_files = vec![(key, saved_key, PRIVATE), (crt.clone(), saved_crt, PUBLIC)];
        let shown = format!("{crt} and .key");
        all.push(choose(
            &shown,
            &crt,
            current,
            theirs,
            backup,
            ours,
            theirs_files,
        ));
    }
    Ok(all)
}

/// The file at `node_path` as it is now, read once: its directory reached
/// from `dir` one name at a time and the file opened beneath that handle,
/// neither followed if a symlink, a regular file within the size limit.
/// `None` when it is missing; `Err` says, starting with the path, why it
/// is not a file revert may keep (the ninth review, F2: a symlink into
/// certsync's own target was kept, then dangled once revert moved the
/// target away).
fn read_current(dir: &Path, node_path: &str) -> Result<Option<Vec<u8>>, String> {
    let (parent, name) = node_path
        .rsplit_once('/')
        .ok_or_else(|| format!("{node_path}: not a file path"))?;
    let d = match moves::open_beneath(dir, parent) {
        Ok(d) => d,
        Err(moves::Blocked::Absent) => return Ok(None),
        Err(b) => return Err(b.to_string()),
    };
    match crate::writer::read_beneath(&d, name, &host(dir, node_path)) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(format!("{node_path} {}", e.problem())),
    }
}

/// Writes `bytes` as `node_path` anew with `mode`: a new file (`..tmp-NAME`,
/// `O_EXCL|O_NOFOLLOW`, fsynced) renamed over the name beneath its
/// directory's handle, reached as [`read_current`] reaches it. Whatever
/// was at the name (a file written after revert read it, a link, another
/// mode) is gone.
pub(super) fn write(
    dir: &Path,
    node_path: &str,
    mode: u32,
    bytes: &[u8],
) -> Result<(), KubeadmError> {
    let (parent, name) = node_path
        .rsplit_once('/')
        .ok_or_else(|| KubeadmError::Revert(format!("{node_path}: not a file path")))?;
    let d = moves::open_beneath(dir, parent)
        .map_err(|b| KubeadmError::Revert(format!("{node_path}: {b}")))?;
    Ok(crate::writer::replace_beneath(
        &d,
        name,
        mode,
        bytes,
        &host(dir, parent),
    )?)
}

/// The kubeconfig read as `bytes`, judged against kubeadm's `saved` text
/// (whose client certificate is `theirs_cert`).
fn current_kubeconfig(
    dir: &Path,
    bytes: &[u8],
    saved: &str,
    theirs_cert: Option<&[u8]>,
    lifetime: i64,
) -> Current {
    let text = std::str::from_utf8(bytes).map_err(|_| (None, "not UTF-8".to_owned()))?;
    let (cert, key) = crate::writer::embedded_pair(text)
        .map_err(|e| (None, format!("no client pair to judge ({e})")))?;
    judged(node::not_after(&cert), || {
        let key = key.ok_or("no embedded client key")?;
        node::sound_pair(dir, &cert, &key, "/etc/kubernetes/pki/ca.crt")?;
        identity(&cert, theirs_cert.unwrap_or_default())?;
        if !node::same_but_pairs(text, saved) {
            return Err(
                "it differs from kubeadm's in more than its client pair (server, CA, \
                        user or plugin)"
                    .into(),
            );
        }
        kept::shape(&cert, theirs_cert.unwrap_or_default(), lifetime)
    })
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

/// The current files (`ours`, as read) when they are sound and outlast
/// kubeadm's in the backup, else the backup's `theirs`; `shown` names the
/// file in the judgement.
fn choose(
    shown: &str,
    node_path: &str,
    current: Current,
    theirs: ASN1Time,
    backup: &str,
    ours: Vec<Restore>,
    theirs_files: Vec<Restore>,
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
    let (files, backup) = match kept {
        Some(_) => (ours, None),
        None => (theirs_files, Some(backup.to_owned())),
    };
    Handback {
        node_path: node_path.to_owned(),
        not_after: kept.unwrap_or(theirs),
        files,
        backup,
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
