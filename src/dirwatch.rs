//! One `notify` watcher for the whole process, routing events by
//! directory: an inotify instance per mapping would run out
//! (`fs.inotify.max_user_instances`, 128 per user by default). Each
//! subscriber is only told "something changed here" (bursts coalesce) and
//! decides how long to wait for quiet. Access events are dropped: certsync's
//! own reads of a target would otherwise wake its drift check forever.
//! When inotify is exhausted (no instance or no watch left), the affected
//! directories are polled every [`POLL_INTERVAL`] instead, with one warning
//! naming the sysctl, and [`DirWatch::polling`] says so (a metric).

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use notify::{EventKind, PollWatcher, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::Notify;

#[derive(Debug, thiserror::Error)]
pub enum DirWatchError {
    #[error("cannot start the file watcher: {0}")]
    Start(#[source] notify::Error),
    #[error("cannot watch {path}: {source}")]
    Watch {
        path: PathBuf,
        #[source]
        source: notify::Error,
    },
}

/// A subscriber's wake-up: changes before [`Events::changed`] is awaited
/// wake it once. A `Notify`, not a channel (512 bytes, one per mapping).
#[derive(Debug, Clone, Default)]
pub struct Events(Arc<Notify>);

impl Events {
    pub async fn changed(&self) {
        self.0.notified().await;
    }

    pub fn wake(&self) {
        self.0.notify_one();
    }
}

/// A subscriber: its wake-up and, optionally, the only entry names it
/// cares about (an event on the directory itself always counts).
struct Route {
    tx: Events,
    names: Option<Vec<OsString>>,
}

impl Route {
    fn wants(&self, dir: &Path, path: &Path) -> bool {
        match &self.names {
            None => true,
            Some(names) => {
                path == dir
                    || path
                        .file_name()
                        .is_some_and(|n| names.iter().any(|x| x == n))
            }
        }
    }
}

/// Routes by absolute directory path: notify reports absolute paths even
/// for a directory watched by a relative one.
type Routes = HashMap<PathBuf, Vec<Route>>;

fn key(dir: &Path) -> PathBuf {
    std::path::absolute(dir).unwrap_or_else(|_| dir.to_owned())
}

/// How often directories are scanned when inotify is exhausted.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);

/// The kernel's watchers: inotify while it lasts, a poller for the rest.
struct Backends {
    inotify: Option<RecommendedWatcher>,
    poll: Option<PollWatcher>,
    /// Paths given to the poller: it follows a path by name (through
    /// deletion and re-creation), so each is added once.
    polled: std::collections::HashSet<PathBuf>,
}

/// The shared watcher. Cheap to clone.
#[derive(Clone)]
pub struct DirWatch {
    routes: Arc<Mutex<Routes>>,
    backends: Arc<Mutex<Backends>>,
    polling: Arc<AtomicBool>,
}

/// Whether `e` means "inotify is exhausted", not "this path cannot be
/// watched".
fn exhausted(e: &notify::Error) -> bool {
    match &e.kind {
        notify::ErrorKind::MaxFilesWatch => true,
        notify::ErrorKind::Io(io) => {
            matches!(
                io.raw_os_error(),
                Some(nix::libc::EMFILE | nix::libc::ENOSPC)
            )
        }
        _ => false,
    }
}

impl DirWatch {
    pub fn new() -> Result<Self, DirWatchError> {
        let routes: Arc<Mutex<Routes>> = Arc::default();
        let inotify = match notify::recommended_watcher(handler(Arc::clone(&routes))) {
            Ok(w) => Some(w),
            Err(e) if exhausted(&e) => {
                tracing::warn!(error = %e, poll_interval = ?POLL_INTERVAL, "no inotify instance left for this user: raise the sysctl fs.inotify.max_user_instances (default 128, shared by every process of this UID); polling the watched directories instead");
                None
            }
            Err(e) => return Err(DirWatchError::Start(e)),
        };
        Ok(Self {
            routes,
            polling: Arc::new(AtomicBool::new(inotify.is_none())),
            backends: Arc::new(Mutex::new(Backends {
                inotify,
                poll: None,
                polled: Default::default(),
            })),
        })
    }

    /// Whether some directory is polled because inotify is exhausted.
    pub fn polling(&self) -> bool {
        self.polling.load(Ordering::Relaxed)
    }
}

/// The event callback shared by both backends: routes each change to the
/// subscribers of its directory.
fn handler(r: Arc<Mutex<Routes>>) -> impl Fn(notify::Result<notify::Event>) + Send + 'static {
    move |res: notify::Result<notify::Event>| {
        let routes = crate::lock(&r);
        match res {
            Ok(ev) if matches!(ev.kind, EventKind::Access(_)) => {}
            Ok(ev) if !ev.need_rescan() => {
                for p in &ev.paths {
                    for key in [Some(p.as_path()), p.parent()].into_iter().flatten() {
                        for route in routes.get(key).into_iter().flatten() {
                            if route.wants(key, p) {
                                route.tx.wake();
                            }
                        }
                    }
                }
            }
            // A rescan request or a watcher error (e.g. queue overflow):
            // events may be lost, so everyone looks again.
            _ => routes.values().flatten().for_each(|route| route.tx.wake()),
        }
    }
}

impl DirWatch {
    /// Subscribes `rx` to changes of the entries directly in `dir` (with
    /// `names`, of those entries only: a rotated file shares its directory
    /// with others); one receiver may cover files in several directories
    /// (the paths of `KUBECONFIG`). `rx` is subscribed even when the watch
    /// cannot be added yet: the caller retries with [`DirWatch::rewatch`].
    pub fn subscribe(
        &self,
        rx: &Events,
        dir: &Path,
        names: Option<&[&str]>,
    ) -> Result<(), DirWatchError> {
        let names = names.map(|n| n.iter().map(OsString::from).collect());
        self.add_route(dir, rx, names);
        self.rewatch(dir).map(drop)
    }

    /// One receiver for changes in any of `dirs`, none of them watched
    /// yet: the caller arms each with [`DirWatch::rearm`].
    pub fn route(&self, dirs: &[impl AsRef<Path>]) -> Events {
        let rx = Events::default();
        for dir in dirs {
            self.add_route(dir.as_ref(), &rx, None);
        }
        rx
    }

    fn add_route(&self, dir: &Path, rx: &Events, names: Option<Vec<OsString>>) {
        crate::lock(&self.routes)
            .entry(key(dir))
            // Most directories have one subscriber (a Vec would start at
            // four, for every target of every mapping).
            .or_insert_with(|| Vec::with_capacity(1))
            .push(Route {
                tx: rx.clone(),
                names,
            });
    }

    /// [`DirWatch::rewatch`], skipped while `dir` is still the directory
    /// `armed` says inotify watches: adding a watch blocks on a round trip
    /// to notify's thread, and a sync task re-arms after every wake-up.
    pub fn rearm(&self, dir: &Path, armed: &mut Option<Identity>) -> Result<(), DirWatchError> {
        let now = Identity::of(dir).map_err(|e| DirWatchError::Watch {
            path: dir.to_owned(),
            source: notify::Error::io(e),
        });
        if now.as_ref().is_ok_and(|n| n.is_some() && *n == *armed) {
            return Ok(());
        }
        // Taken before the watch is added: a directory replaced in
        // between reads as changed next time, never as watched.
        let now = now?;
        *armed = None;
        if self.rewatch(dir)? {
            *armed = now;
        }
        Ok(())
    }

    /// (Re-)adds the watch on `dir`; needed after the directory was
    /// removed and created again, which drops the kernel's watch. A
    /// symlink to a directory is followed (`<target>/..data` watches the
    /// live revision, so a chmod there is seen). True when inotify holds
    /// it (not the poller).
    pub fn rewatch(&self, dir: &Path) -> Result<bool, DirWatchError> {
        let err = |source| DirWatchError::Watch {
            path: dir.to_owned(),
            source,
        };
        let dir = &key(dir);
        let mut b = crate::lock(&self.backends);
        if let Some(inotify) = b.inotify.as_mut() {
            match inotify.watch(dir, RecursiveMode::NonRecursive) {
                Err(e) if exhausted(&e) => {
                    if !self.polling.swap(true, Ordering::Relaxed) {
                        tracing::warn!(dir = %dir.display(), error = %e, poll_interval = ?POLL_INTERVAL, "no inotify watch left for this user: raise the sysctl fs.inotify.max_user_watches; polling this directory instead");
                    }
                }
                other => return other.map(|()| true).map_err(err),
            }
        }
        if b.poll.is_none() {
            // Contents, not only mtimes (which the poller compares to the
            // second): a rotation within the same second must be seen. The
            // files are certificates: hashing them every few seconds is cheap.
            let config = notify::Config::default()
                .with_poll_interval(POLL_INTERVAL)
                .with_compare_contents(true);
            b.poll =
                Some(PollWatcher::new(handler(Arc::clone(&self.routes)), config).map_err(err)?);
        }
        if b.polled.contains(dir) {
            return Ok(false);
        }
        if let Some(poll) = b.poll.as_mut() {
            poll.watch(dir, RecursiveMode::NonRecursive).map_err(err)?;
        }
        // The poller drops a path that does not exist yet (a target's
        // `..data` before the first flip): added again on the next re-arm.
        if dir.exists() {
            b.polled.insert(dir.clone());
        }
        Ok(false)
    }
}

/// Which directory a path names, as an inotify watch (on an inode) sees
/// it; the birth time tells a reused inode number apart, and without one
/// nothing is taken as unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    dev: u64,
    ino: u64,
    born: std::time::SystemTime,
}

impl Identity {
    /// Follows symlinks, as inotify does (`<target>/..data`).
    fn of(dir: &Path) -> std::io::Result<Option<Self>> {
        use std::os::unix::fs::MetadataExt as _;
        let m = std::fs::metadata(dir)?;
        Ok(m.created().ok().map(|born| Self {
            dev: m.dev(),
            ino: m.ino(),
            born,
        }))
    }
}

/// Waits until `rx` has been silent for `window` (the "quiet" rule that lets
/// a non-atomic writer finish), but no longer than `max` in all: a source
/// that never stops changing is read anyway.
pub async fn quiet(rx: &Events, window: Duration, max: Duration) {
    let give_up = tokio::time::sleep(max);
    tokio::pin!(give_up);
    loop {
        tokio::select! {
            () = &mut give_up => return,
            r = tokio::time::timeout(window, rx.changed()) => match r {
                Ok(()) => continue,
                Err(_) => return,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use std::time::Duration;

    #[tokio::test]
    async fn routes_changes_and_ignores_reads() {
        let dir = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let w = DirWatch::new().unwrap();
        let (rx, other_rx) = (Events::default(), Events::default());
        w.subscribe(&rx, dir.path(), None).unwrap();
        w.subscribe(&other_rx, other.path(), None).unwrap();

        std::fs::write(dir.path().join("f"), b"x").unwrap();
        tokio::time::timeout(Duration::from_secs(5), rx.changed())
            .await
            .expect("a write is routed");
        quiet(&rx, Duration::from_millis(200), Duration::from_secs(5)).await;
        assert!(
            other_rx.changed().now_or_never().is_none(),
            "another directory is not woken"
        );

        // A name filter: other entries of the directory do not wake it.
        let named = Events::default();
        w.subscribe(&named, other.path(), Some(&["kubeconfig", "..data"]))
            .unwrap();
        std::fs::write(other.path().join("app.log"), b"noise").unwrap();
        let woke = tokio::time::timeout(Duration::from_millis(300), named.changed()).await;
        assert!(
            woke.is_err(),
            "an unrelated file woke a name-filtered subscriber"
        );
        std::fs::write(other.path().join("kubeconfig"), b"new").unwrap();
        tokio::time::timeout(Duration::from_secs(5), named.changed())
            .await
            .expect("the named file wakes it");
        let _ = other_rx.changed().now_or_never();

        // Reading the directory and its file is not a change.
        let _ = std::fs::read_dir(dir.path()).unwrap().count();
        let _ = std::fs::read(dir.path().join("f")).unwrap();
        let woke = tokio::time::timeout(Duration::from_millis(300), rx.changed()).await;
        assert!(woke.is_err(), "reads must not wake subscribers");
    }

    /// `rearm` watches a directory that appeared or was replaced (behind
    /// the same name or a re-pointed symlink, as `..data` is at every
    /// flip), and adds nothing while the directory is the one recorded.
    #[tokio::test]
    async fn rearm_follows_replaced_directories_and_skips_unchanged_ones() {
        let base = tempfile::tempdir().unwrap();
        let (a, b, link) = (
            base.path().join("a"),
            base.path().join("b"),
            base.path().join("link"),
        );
        let w = DirWatch::new().unwrap();
        let rx = w.route(&[&link]);
        let mut armed = None;
        let woken = |what: &'static str| {
            let rx = rx.clone();
            async move {
                tokio::time::timeout(Duration::from_secs(5), rx.changed())
                    .await
                    .unwrap_or_else(|_| panic!("{what} was not seen"));
                quiet(&rx, Duration::from_millis(200), Duration::from_secs(5)).await;
            }
        };

        let e = w.rearm(&link, &mut armed).unwrap_err().to_string();
        assert!(e.contains("link"), "a missing directory is named: {e}");
        assert_eq!(armed, None);

        std::fs::create_dir(&a).unwrap();
        std::os::unix::fs::symlink(&a, &link).unwrap();
        w.rearm(&link, &mut armed).unwrap();
        assert!(armed.is_some());
        std::fs::write(a.join("f"), b"1").unwrap();
        woken("a write in the first directory").await;

        // The link re-pointed to another directory: that one is watched.
        std::fs::create_dir(&b).unwrap();
        let tmp = base.path().join("tmp");
        std::os::unix::fs::symlink(&b, &tmp).unwrap();
        std::fs::rename(&tmp, &link).unwrap();
        let _ = rx.changed().now_or_never();
        let before = armed;
        w.rearm(&link, &mut armed).unwrap();
        assert_ne!(armed, before);
        std::fs::write(b.join("f"), b"2").unwrap();
        woken("a write in the re-pointed directory").await;

        // Removed and made again under the same name: a new inode (or the
        // same number with a new birth time), watched again.
        std::fs::remove_dir_all(&b).unwrap();
        std::fs::create_dir(&b).unwrap();
        let _ = rx.changed().now_or_never();
        w.rearm(&link, &mut armed).unwrap();
        std::fs::write(b.join("f"), b"3").unwrap();
        woken("a write in the re-created directory").await;

        // A directory recorded as watched is left alone: this one never
        // was, so no write in it is seen.
        let c = base.path().join("c");
        std::fs::create_dir(&c).unwrap();
        let rc = w.route(&[&c]);
        let mut recorded = Identity::of(&c).unwrap();
        assert!(recorded.is_some(), "this file system keeps birth times");
        w.rearm(&c, &mut recorded).unwrap();
        std::fs::write(c.join("f"), b"4").unwrap();
        let woke = tokio::time::timeout(Duration::from_millis(300), rc.changed()).await;
        assert!(woke.is_err(), "rearm added a watch it had recorded");
    }

    #[tokio::test(start_paused = true)]
    async fn quiet_waits_for_a_silent_window() {
        let rx = Events::default();
        let tx = rx.clone();
        let start = tokio::time::Instant::now();
        tokio::spawn(async move {
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_millis(600)).await;
                tx.wake();
            }
        });
        quiet(&rx, Duration::from_secs(1), Duration::from_secs(60)).await;
        // Last poke at 3.0 s; quiet from then on for 1 s.
        assert_eq!(start.elapsed(), Duration::from_millis(4000));
    }

    /// A directory that never goes quiet is read anyway after the limit.
    #[tokio::test(start_paused = true)]
    async fn quiet_gives_up_after_its_limit() {
        let rx = Events::default();
        let tx = rx.clone();
        let start = tokio::time::Instant::now();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                tx.wake();
            }
        });
        quiet(&rx, Duration::from_secs(1), Duration::from_secs(5)).await;
        assert_eq!(start.elapsed(), Duration::from_secs(5));
    }
}
