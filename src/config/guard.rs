//! Who may change the paths a configuration names: a `dir:` source and
//! the directories above it, every target, a `ca:` mapping's CA files and
//! template, a `csr:` mapping's `ca=file:` and bootstrap kubeconfig, the
//! pidfile's directory. Judged at start, each refusal naming the path and
//! what whoever could change it could do ([`ConfigError`]).

use super::error::ConfigError;
use super::mapping::{Mapping, Source};
use crate::beneath::PathError;
use crate::beneath::{self, Entry, Links, Owners, ReadOnly, Start, Trust};

use std::path::Path;

/// The directories above a pidfile's own (which may be the consumer's):
/// else the consumer's user may swap its directory for a link to a
/// root-owned one whose root-owned pidfile names a root process, which the
/// pidfile's owner check then accepts.
pub(super) fn pidfile_dir_guarded(pidfile: &Path) -> Result<(), ConfigError> {
    let Some(dir) = pidfile.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Ok(());
    };
    above_guarded(dir).map_err(|source| ConfigError::Changeable {
        what: "--reload-pidfile",
        path: pidfile.to_owned(),
        source,
        risk: ", who could replace the pidfile's directory and have root signal another \
               process; keep it in a directory under root's",
    })
}

/// Every mapping judged by each guard in turn, a refusal said of its mapping.
pub(super) fn paths_guarded(mappings: &[Mapping]) -> Result<(), ConfigError> {
    for guarded in [
        target_guarded,
        source_guarded,
        ca_paths_guarded,
        csr_paths_guarded,
    ] {
        for m in mappings {
            guarded(m).map_err(|problem| ConfigError::of_mapping(&m.name, problem))?;
        }
    }
    Ok(())
}

/// A `dir:` source may be its user's own, not the directories above it:
/// whoever may rename its entry could put a link to a root-only directory
/// there, and certsync, reading the source by path, would publish it.
fn source_guarded(m: &Mapping) -> Result<(), ConfigError> {
    let Source::Dir(dir) = &m.source else {
        return Ok(());
    };
    above_guarded(dir).map_err(|source| ConfigError::Changeable {
        what: "source",
        path: dir.clone(),
        source,
        risk: ", who could replace the source directory with a link to another and have \
               certsync publish what is there; keep it in a directory under root's",
    })?;
    // The source itself: one writer, its owner (or root); with several, a
    // file one of them linked in (root's key) would pass as the owner's.
    // Not there yet: judged by every read once it appears.
    let writers = Trust {
        owners: Owners::Anyone,
        read_only: ReadOnly::Writable,
        ..Trust::STRICT
    };
    if let Ok(walked) = beneath::walk(Start::Path, dir, Links::Follow, &mut |_| Ok(()))
        && walked.st.st_mode & nix::libc::S_IFMT == nix::libc::S_IFDIR
        && let Ok(entry) = Entry::held(dir, std::os::fd::AsFd::as_fd(&walked.fd))
        && writers.judge(&entry).is_err()
    {
        return Err(ConfigError::Changeable {
            what: "source",
            path: dir.clone(),
            source: PathError::FileChangeable {
                uid: entry.uid,
                mode: entry.mode,
            },
            risk: " (group or others may write it), any of whom could link in a file the others \
                   could not read and have certsync publish it; make it writable by its owner only",
        });
    }
    Ok(())
}

/// Every directory above `dir`, as written and where its symlinks lead,
/// can be changed by root (or certsync's user) only; `dir` itself may be
/// its writer's. No exception for a volume's root (as for targets): whoever
/// may write a mount point's directory may rename what is in it. A shared
/// volume is named as the source itself: a mount point cannot be renamed.
fn above_guarded(dir: &Path) -> Result<(), PathError> {
    let real = std::fs::canonicalize(dir).ok();
    // A link that leads nowhere yet cannot be judged: whoever makes its
    // name later chooses what certsync reads. Fail closed.
    if real.is_none()
        && dir
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
    {
        return Err(PathError::Dangling);
    }
    [Some(dir), real.as_deref()]
        .into_iter()
        .flatten()
        .filter_map(Path::parent)
        .filter(|p| !p.as_os_str().is_empty())
        .try_for_each(crate::files::only_root_may_change)
}

/// No target writable by another user; above every other target, no
/// directory another user could re-create it through (a /tmp cleaner
/// removes it, anyone makes it again, the consumer reads their pair and
/// certsync writes where they chose).
/// A volume's root (an emptyDir) is accepted above a target, never as it;
/// `ca:` targets are held to the stricter rule below.
fn target_guarded(m: &Mapping) -> Result<(), ConfigError> {
    crate::files::no_other_user_may_write(&m.target).map_err(ConfigError::TargetWritable)?;
    if matches!(m.source, Source::Ca(_)) {
        return Ok(());
    }
    crate::files::no_other_user_may_recreate(&m.target).map_err(|source| ConfigError::Changeable {
        what: "target",
        path: m.target.clone(),
        source,
        risk: ", who could re-create it and have the consumer read their own pair there; \
                   give a target whose directories are owned by root (or certsync's user) and \
                   writable by their owner only, or a subdirectory of a volume's root",
    })
}

/// A `ca:` mapping's paths can be changed by root only: its target (else
/// another user, sticky directory or not, re-creates it or swaps a link in
/// and receives the keys the CA issues; `..` in it is refused as written),
/// its template (whoever edits it chooses the identity) and, unless
/// `allow-loose-ca-key`, the CA's files.
fn ca_paths_guarded(m: &Mapping) -> Result<(), ConfigError> {
    let Source::Ca(spec) = &m.source else {
        return Ok(());
    };
    let mut paths = vec![("target", m.target.as_path())];
    paths.extend(spec.template.as_deref().map(|t| ("template", t)));
    if !spec.allow_loose_ca_key {
        paths.push(("CA key", spec.ca_key.as_path()));
        paths.push(("CA certificate", spec.ca_cert.as_path()));
    }
    for (what, path) in paths {
        crate::files::only_root_may_change(path).map_err(|source| ConfigError::Changeable {
            what,
            path: path.to_owned(),
            source,
            risk: ", who could redirect or choose what the CA signs; make it and its \
                   directories owned by root and writable by their owner only",
        })?;
    }
    Ok(())
}

/// A `csr:` mapping's `ca=file:` (the consumer's trust anchor) and
/// `bootstrap-kubeconfig=` (where its requests go, with what credentials)
/// steer root certsync: judged at start by the readers every later read
/// uses, one not there yet by the directories it will appear in, so a
/// user's CA is never published and `run --once` exits 64 at once.
fn csr_paths_guarded(m: &Mapping) -> Result<(), ConfigError> {
    let Source::Csr(spec) = &m.source else {
        return Ok(());
    };
    // Refused by the reader every later read uses.
    let steering = |what, path: &Path, source| ConfigError::Changeable {
        what,
        path: path.to_owned(),
        source,
        risk: "",
    };
    if let Some(crate::source::csr::CaSource::File(path)) = &spec.ca {
        crate::files::steering_or_absent(path, crate::validate::MAX_BUNDLE_SIZE as u64)
            .map_err(|e| steering("ca=file:", path, e))?;
    }
    if let Some(path) = &spec.bootstrap {
        if path.exists() {
            crate::source::client::check_kubeconfig(path)
                .map_err(ConfigError::BootstrapKubeconfig)?;
        } else {
            crate::files::steering_or_absent(path, 0)
                .map_err(|e| steering("bootstrap-kubeconfig=", path, e))?;
        }
    }
    Ok(())
}
