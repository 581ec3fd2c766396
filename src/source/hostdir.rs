//! Host-directory source: files (kubeadm's `apiserver.crt` and `.key`) or
//! one combined PEM (kubelet's), read again once the whole directory has
//! been quiet for the debounce window (a certificate written seconds before
//! its key must not be read alone), and at every resync.
//!
//! Invariants: only the configured names are read, each walked to beneath
//! a handle on the source directory ([`Start::Volume`]: nothing leads
//! outside it, no loop) and checked on the descriptor walked to
//! ([`Source::read`]), never re-opened by name; no file larger than
//! the bundle limit is read into memory.

use std::os::fd::AsFd as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustls_pki_types::pem::SectionKind;
use tokio::sync::watch;

use super::error::Update;
pub use super::error::hostdir::HostDirError;
use crate::beneath::{self, Entry, Links, PathError, ReadOnly, Start, Trust};
use crate::bundle::{Bundle, CERT_FILE, Item, KEY_FILE, Layout};
use crate::dirwatch::{self, DirWatch};
use crate::validate::MAX_BUNDLE_SIZE;

/// What to read from one directory.
#[derive(Debug, Clone)]
pub struct HostDir {
    pub dir: PathBuf,
    pub layout: Layout,
    pub items: std::sync::Arc<[Item]>,
}

impl HostDir {
    /// Reads the directory once into a bundle.
    pub fn read(&self) -> Result<Bundle, HostDirError> {
        let root = Source::open(&self.dir)?;
        let mut bundle = Bundle::default();
        if let Layout::Combined(name) = &self.layout {
            let path = self.dir.join(name);
            let pem = root
                .read(Path::new(name), &path, false)?
                .ok_or(HostDirError::Missing { path: path.clone() })?;
            let (certs, key) = split_combined(&path, &pem)?;
            let origin = path.display();
            bundle.insert(CERT_FILE, certs, format!("{origin} (certificates)"))?;
            bundle.insert(KEY_FILE, key, format!("{origin} (private key)"))?;
        }
        let all = self.layout == Layout::All;
        let mut items = if all { Vec::new() } else { self.items.to_vec() };
        if all {
            // Every entry but hidden ones (a Secret volume's `..data` and
            // revision directories), in name order; subdirectories skipped.
            let listing = root.held.dir().map_err(HostDirError::Dir)?;
            let list_err = |source| HostDirError::List {
                path: self.dir.clone(),
                source,
            };
            for e in listing.entries().map_err(list_err)? {
                let name = e.map_err(list_err)?.file_name();
                let name = name.to_string_lossy();
                if !name.starts_with('.') {
                    items.push(Item::new(&name, &name, false));
                }
            }
            items.sort_by(|a, b| a.source.cmp(&b.source));
        }
        for item in items {
            let path = self.dir.join(&item.source);
            match root.read(Path::new(&item.source), &path, all)? {
                Some(bytes) => bundle.insert(&item.target, bytes, path.display().to_string())?,
                None if item.required => return Err(HostDirError::Missing { path }),
                None => {}
            }
        }
        Ok(bundle)
    }

    /// Watches the source directory if it exists (`false`), else its
    /// nearest existing ancestor for the next missing component (`true`:
    /// still waiting). `armed`: the ancestor already subscribed to (each
    /// subscription lives as long as the process: added only on change).
    fn arm(
        &self,
        watcher: &DirWatch,
        events: &dirwatch::Events,
        armed: &mut Option<PathBuf>,
    ) -> bool {
        if self.dir.is_dir() && watcher.rewatch(&self.dir).is_ok() {
            tracing::info!(source_dir = %self.dir.display(), "source directory appeared; watching it");
            return false;
        }
        let mut child = self.dir.as_path();
        while let Some(parent) = child.parent() {
            if parent.is_dir() {
                let name = child
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if armed.as_deref() == Some(parent) {
                    let _ = watcher.rewatch(parent);
                    break;
                }
                *armed = Some(parent.to_owned());
                if let Err(e) = watcher.subscribe(events, parent, Some(&[&name])) {
                    tracing::debug!(source_dir = %self.dir.display(), watching = %parent.display(), error = %e, "cannot watch for the source directory; relying on resync");
                }
                break;
            }
            child = parent;
        }
        true
    }

    /// Publishes the directory now, once quiet after a change, and at resync.
    pub async fn run(
        self,
        watcher: DirWatch,
        debounce: Duration,
        resync: Duration,
        tx: watch::Sender<Option<Update>>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        // Only the mapping's own files (and `..data`) restart the quiet
        // window: a log written beside them must not postpone the read.
        let mut names: Vec<&str> = self.items.iter().map(|i| i.source.as_str()).collect();
        if let Layout::Combined(name) = &self.layout {
            names.push(name);
        }
        names.push("..data");
        // files=all: any entry may be one to publish.
        let only = (self.layout != Layout::All).then_some(names.as_slice());
        let events = dirwatch::Events::default();
        let watched = watcher.subscribe(&events, &self.dir, only);
        // A missing directory is waited for through its nearest ancestor.
        let mut waiting = false;
        let mut ancestor = None;
        if let Err(e) = watched {
            if self.dir.exists() {
                tracing::warn!(source_dir = %self.dir.display(), error = %e, "cannot watch the source directory; relying on resync");
            } else {
                waiting = self.arm(&watcher, &events, &mut ancestor);
            }
        }
        let mut tick = crate::shutdown::resync_interval(resync).await;
        loop {
            let me = self.clone();
            match crate::blocking(move || me.read()).await {
                Ok(r) => super::error::publish(&tx, r.map_err(super::error::SourceError::from)),
                // Not published; the next event or resync reads again.
                Err(e) => {
                    tracing::error!(source_dir = %self.dir.display(), error = %e, "source read task failed")
                }
            }
            tokio::select! {
                () = crate::shutdown::stopped(&mut shutdown) => return,
                () = events.changed() => {
                    // A directory that just appeared is watched first.
                    if waiting {
                        waiting = self.arm(&watcher, &events, &mut ancestor);
                    }
                    dirwatch::quiet(&events, debounce, debounce.saturating_mul(5)).await
                }
                _ = tick.tick() => {
                    // It may have been replaced (dropping the watch) or removed.
                    if waiting || !self.dir.exists() {
                        waiting = self.arm(&watcher, &events, &mut ancestor);
                    } else if let Err(e) = watcher.rewatch(&self.dir) {
                        tracing::debug!(source_dir = %self.dir.display(), error = %e, "cannot watch the source directory");
                    }
                }
            }
        }
    }
}

/// The source directory, held: every name is walked beneath it
/// ([`Start::Volume`]: an absolute link naming it, as kubelet's `current`
/// link does, leads back into it).
struct Source<'a> {
    held: beneath::Walked,
    path: &'a Path,
}

impl<'a> Source<'a> {
    fn open(path: &'a Path) -> Result<Self, HostDirError> {
        let held =
            beneath::walk(Start::Path, path, Links::Follow, &mut |_| Ok(())).map_err(|e| {
                if e.is_not_found() {
                    HostDirError::NotYet { path: path.into() }
                } else {
                    HostDirError::Dir(e)
                }
            })?;
        if !held.is_dir() {
            return Err(HostDirError::Dir(PathError::NotDir { path: path.into() }));
        }
        Ok(Self { held, path })
    }

    /// Reads `name` (shown as `path`) beneath the directory (`None`: absent,
    /// or a directory and `skip_dirs`); only a regular file, judged on the
    /// descriptor walked to and held to [`Writers`].
    fn read(
        &self,
        name: &Path,
        path: &Path,
        skip_dirs: bool,
    ) -> Result<Option<Vec<u8>>, HostDirError> {
        let mut writers = Writers::default();
        let start = Start::Volume(self.held.fd.as_fd(), self.path);
        let walked = match beneath::walk(start, name, Links::Follow, &mut |e| {
            writers.note(e);
            Ok(())
        }) {
            Ok(w) => w,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e @ PathError::Escapes { .. }) => {
                return Err(HostDirError::Escapes {
                    path: path.into(),
                    source: e,
                });
            }
            Err(e) => return Err(HostDirError::Read(e)),
        };
        if skip_dirs && walked.is_dir() {
            return Ok(None);
        }
        let file = walked.open_read().map_err(HostDirError::Read)?;
        writers.may_read(&walked.st, path)?;
        let bytes = beneath::read_capped(file, path, MAX_BUNDLE_SIZE as u64);
        bytes.map(Some).map_err(HostDirError::Read)
    }
}

/// Who may change the directories on a file's way: certsync publishes only
/// what they could read themselves (with `fs.protected_hardlinks=0` a user
/// may hard-link root's key into their directory; no link count tells who
/// did). Not read as the owner: `setfsuid` keeps root's groups.
#[derive(Default)]
struct Writers {
    /// Owners of directories on the way other than root and certsync's user.
    users: Vec<u32>,
    /// A directory on the way that group or others may write, if any.
    open: Option<u32>,
}

impl Writers {
    fn note(&mut self, entry: &Entry) {
        if entry.link {
            return;
        }
        // Noted, not refused; a read-only mount still has its owner noted.
        let faults = Trust {
            read_only: ReadOnly::Writable,
            ..Trust::STRICT
        }
        .faults(entry);
        if faults.group_writable || faults.others_writable {
            self.open.get_or_insert(entry.uid);
        }
        if faults.owner && !self.users.contains(&entry.uid) {
            self.users.push(entry.uid);
        }
    }

    /// Refuses `st` unless all may read it or every writer of its way owns it.
    fn may_read(&self, st: &nix::sys::stat::FileStat, path: &Path) -> Result<(), HostDirError> {
        if st.st_mode & 0o004 != 0 {
            return Ok(());
        }
        let writers = if self.open.is_some() {
            Some("whose directories group or others may write (several users)".to_owned())
        } else {
            self.users
                .iter()
                .find(|&&u| u != st.st_uid)
                .map(|u| format!("that uid {u} may change"))
        };
        match writers {
            None => Ok(()),
            Some(writers) => Err(HostDirError::Unreadable {
                path: path.into(),
                owner: st.st_uid,
                mode: st.st_mode & 0o7777,
                writers,
            }),
        }
    }
}

/// Splits a combined PEM into (certificate blocks, private-key blocks),
/// each block's text as it was (other kinds go with the certificates, for
/// validation to judge). What the reader cannot read (an encrypted key)
/// fails the read: part of the file would publish less than it holds.
fn split_combined(path: &Path, pem: &[u8]) -> Result<(Vec<u8>, Vec<u8>), HostDirError> {
    let blocks = crate::pem::blocks(pem).map_err(|problem| HostDirError::Combined {
        path: path.into(),
        problem,
    })?;
    let (mut certs, mut key) = (Vec::new(), Vec::new());
    for block in blocks {
        let to = match block.kind {
            SectionKind::PrivateKey | SectionKind::RsaPrivateKey | SectionKind::EcPrivateKey => {
                &mut key
            }
            _ => &mut certs,
        };
        to.extend_from_slice(block.text);
    }
    Ok((certs, key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::CA_FILE;
    use std::fs;
    use std::os::unix::fs::symlink;

    fn pair_dir(cert: &str, key: &str) -> HostDir {
        HostDir {
            dir: PathBuf::new(),
            layout: Layout::Files,
            items: vec![
                Item {
                    source: cert.into(),
                    target: CERT_FILE.into(),
                    required: true,
                },
                Item {
                    source: key.into(),
                    target: KEY_FILE.into(),
                    required: true,
                },
                Item {
                    source: "ca.crt".into(),
                    target: CA_FILE.into(),
                    required: false,
                },
            ]
            .into(),
        }
    }

    #[test]
    fn reads_pairs_with_configured_names() {
        let d = tempfile::tempdir().unwrap();
        fs::write(d.path().join("apiserver.crt"), b"C").unwrap();
        fs::write(d.path().join("apiserver.key"), b"K").unwrap();
        let src = HostDir {
            dir: d.path().into(),
            ..pair_dir("apiserver.crt", "apiserver.key")
        };
        let b = src.read().unwrap();
        assert_eq!(b.get(CERT_FILE), Some(&b"C"[..]));
        assert_eq!(b.get(KEY_FILE), Some(&b"K"[..]));
        assert_eq!(b.get(CA_FILE), None, "ca.crt is optional");
        assert!(b.origin(CERT_FILE).ends_with("apiserver.crt"));

        fs::remove_file(d.path().join("apiserver.key")).unwrap();
        let e = src.read().unwrap_err().to_string();
        assert!(e.contains("apiserver.key: required file is missing"), "{e}");
    }

    #[test]
    fn combined_pem_through_a_symlink() {
        let d = tempfile::tempdir().unwrap();
        let pem = "junk\n-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n\
                   -----BEGIN EC PRIVATE KEY-----\nBBBB\n-----END EC PRIVATE KEY-----\n\
                   -----BEGIN CERTIFICATE-----\nCCCC\n-----END CERTIFICATE-----\n";
        fs::write(d.path().join("kubelet-server-2026.pem"), pem).unwrap();
        symlink(
            d.path().join("kubelet-server-2026.pem"),
            d.path().join("current.pem"),
        )
        .unwrap();
        let src = HostDir {
            dir: d.path().into(),
            layout: Layout::Combined("current.pem".into()),
            items: [Item {
                source: "ca.crt".into(),
                target: CA_FILE.into(),
                required: false,
            }]
            .into(),
        };
        let b = src.read().unwrap();
        assert_eq!(
            b.get(CERT_FILE).unwrap(),
            b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n-----BEGIN CERTIFICATE-----\nCCCC\n-----END CERTIFICATE-----\n"
        );
        assert_eq!(
            b.get(KEY_FILE).unwrap(),
            b"-----BEGIN EC PRIVATE KEY-----\nBBBB\n-----END EC PRIVATE KEY-----\n"
        );
        assert!(b.origin(KEY_FILE).contains("current.pem (private key)"));
    }

    /// What the one PEM reader would step over unread (an encrypted key has
    /// a label it does not know) fails the read instead of being dropped.
    #[test]
    fn combined_pem_with_a_block_it_cannot_read_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let cert = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let src = HostDir {
            dir: d.path().into(),
            layout: Layout::Combined("current.pem".into()),
            items: [].into(),
        };
        for (pem, want) in [
            (
                format!(
                    "{cert}-----BEGIN ENCRYPTED PRIVATE KEY-----\nBBBB\n-----END ENCRYPTED PRIVATE KEY-----\n"
                ),
                "a block certsync does not read",
            ),
            (
                format!("{cert}-----BEGIN EC PRIVATE KEY-----\nBBBB\n"),
                "a block has no END line",
            ),
        ] {
            fs::write(d.path().join("current.pem"), pem).unwrap();
            let e = src.read().unwrap_err().to_string();
            assert!(e.contains("current.pem: not a combined PEM"), "{e}");
            assert!(e.contains(want), "{e}");
        }
    }

    /// Links that stay inside keep working whatever their spelling: a
    /// kubelet Secret volume (`..data` -> a dated directory, relative
    /// links through it) and kubelet's absolute `current` link; links that
    /// leave by `..` or by an absolute path elsewhere are refused.
    #[test]
    fn links_inside_work_and_links_out_are_refused_beneath_the_handle() {
        let d = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("tls.key"), b"OUT").unwrap();
        let vol = d.path().join("vol");
        fs::create_dir_all(vol.join("..2026_11_24_19_00_00.1")).unwrap();
        fs::write(vol.join("..2026_11_24_19_00_00.1/tls.crt"), b"C").unwrap();
        fs::write(vol.join("..2026_11_24_19_00_00.1/kubelet-2026.pem"), b"K").unwrap();
        symlink("..2026_11_24_19_00_00.1", vol.join("..data")).unwrap();
        symlink("..data/tls.crt", vol.join("tls.crt")).unwrap();
        // Absolute, by the directory's own name, through ..data.
        symlink(vol.join("..data/kubelet-2026.pem"), vol.join("tls.key")).unwrap();
        let src = HostDir {
            dir: vol.clone(),
            ..pair_dir("tls.crt", "tls.key")
        };
        let b = src.read().unwrap();
        assert_eq!(b.get(CERT_FILE), Some(&b"C"[..]));
        assert_eq!(b.get(KEY_FILE), Some(&b"K"[..]));

        // The same directory named through a symlink: absolute links by
        // its real name still count as inside.
        symlink(&vol, d.path().join("alias")).unwrap();
        let b = HostDir {
            dir: d.path().join("alias"),
            ..pair_dir("tls.crt", "tls.key")
        }
        .read()
        .unwrap();
        assert_eq!(b.get(KEY_FILE), Some(&b"K"[..]));

        for link in [
            PathBuf::from("../../")
                .join(outside.path().strip_prefix("/").unwrap())
                .join("tls.key"),
            outside.path().join("tls.key"),
            vol.join("..data/../../vol/../..")
                .join(outside.path().strip_prefix("/").unwrap())
                .join("tls.key"),
        ] {
            fs::remove_file(vol.join("tls.key")).unwrap();
            symlink(&link, vol.join("tls.key")).unwrap();
            let e = src.read().unwrap_err().to_string();
            assert!(e.contains("outside the source directory"), "{link:?}: {e}");
        }
        // A dangling link is a missing file, not an error of another kind.
        fs::remove_file(vol.join("tls.key")).unwrap();
        symlink("..data/none", vol.join("tls.key")).unwrap();
        let e = src.read().unwrap_err().to_string();
        assert!(e.contains("tls.key: required file is missing"), "{e}");
    }

    #[test]
    fn hostile_names_and_links_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret"), b"S").unwrap();
        symlink(outside.path().join("secret"), d.path().join("tls.crt")).unwrap();
        fs::write(d.path().join("tls.key"), b"K").unwrap();
        let src = HostDir {
            dir: d.path().into(),
            ..pair_dir("tls.crt", "tls.key")
        };
        let e = src.read().unwrap_err().to_string();
        assert!(e.contains("outside the source directory"), "{e}");

        fs::remove_file(d.path().join("tls.crt")).unwrap();
        symlink("loop-b", d.path().join("tls.crt")).unwrap();
        symlink("tls.crt", d.path().join("loop-b")).unwrap();
        let e = src.read().unwrap_err().to_string();
        assert!(e.contains("symlink loop"), "{e}");

        fs::remove_file(d.path().join("tls.crt")).unwrap();
        fs::create_dir(d.path().join("tls.crt")).unwrap();
        let e = src.read().unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");

        fs::remove_dir(d.path().join("tls.crt")).unwrap();
        fs::write(d.path().join("tls.crt"), vec![b'a'; MAX_BUNDLE_SIZE + 1]).unwrap();
        let e = src.read().unwrap_err().to_string();
        assert!(e.contains("larger than"), "{e}");

        let e = HostDir {
            dir: d.path().join("nope"),
            ..pair_dir("tls.crt", "tls.key")
        }
        .read()
        .unwrap_err()
        .to_string();
        assert!(e.contains("source directory") && e.contains("nope"), "{e}");
    }
}
