//! The target directory: revision directories, the atomic `..data` flip,
//! history, pruning and drift repair (kubelet's `atomic_writer.go` layout,
//! plus fsync, history and a drift check).
//!
//! ```text
//! <target>/..data -> ..rev-000042-3f9a1c2e        the one atomic switch
//! <target>/..rev-000042-3f9a1c2e/tls.crt tls.key  live, complete, fsynced
//! <target>/..history/000041-77b0d1aa/...          earlier revisions
//! <target>/tls.crt -> ..data/tls.crt              visible files
//! ```
//!
//! Invariants:
//! - Every access inside the target goes through its directory handle one
//!   name at a time, never following a symlink. A name certsync owns
//!   (`..data`, `..rev-*`, `..history` and all in it, `..owner`, `..pin`,
//!   `..tmp*`) that is a symlink, FIFO, device, the wrong kind or not
//!   certsync's own ([`own`](layout::own)) is removed and made anew, never
//!   followed or obeyed; a file is read only if `fstat` says regular, size
//!   capped.
//! - `..data` only ever names a complete revision: files created with their
//!   final mode (never by umask), written, fsynced, the directory fsynced,
//!   then `..data` replaced by `rename(2)` of a fresh symlink and the parent
//!   fsynced.
//! - A revision's name carries the first 8 hex digits of its content hash:
//!   an edited revision is detected across restarts.
//! - After a flip the previous live *files* are moved into `..history/`:
//!   an inotify watch on them gets `IN_MOVE_SELF`, which makes
//!   kube-apiserver & co. re-read their certificates.
//! - Every change holds a flock on `..lock`; a daemon holds `..owner` for
//!   its lifetime, so a second daemon is refused (`lock.rs`: why files, not
//!   the directory).
//! - At most `keep` revisions stay; `certsync rollback` never prunes.
//! - The target must be the directory opened at start (device and inode):
//!   one renamed away and made again by a user (in a volume's root every
//!   container of the pod writes) is refused until restart. Only a target
//!   that is gone is made again, beneath its [`Anchor`](anchor::Anchor),
//!   never by a path `mkdir`.

use std::path::PathBuf;

use crate::bundle::Bundle;

mod anchor;
#[cfg(test)]
mod copy_tests;
mod drift;
mod error;
mod history;
mod kubeconfig;
mod layout;
mod lock;
mod pair;
#[cfg(test)]
mod planted_tests;
mod publish;
mod revision;
mod rollback;
mod target;
#[cfg(test)]
mod tests;

pub use drift::Live;
pub use error::WriterError;
pub use history::RevisionInfo;
pub use kubeconfig::{
    CaCluster, base64_data, ca_data, check_kubeconfig, embedded_pair, update_kubeconfig,
    update_kubeconfig_ca, with_ca_data, written_once,
};
use layout::PIN;
pub use layout::{DATA, LOCK_FILES, NotOwn, RevisionProblem};
pub use lock::{Claim, stop_waiting};
pub use pair::{CopyUpdate, check_pair, update_pair};
pub use publish::Outcome;
use revision::remove_any;
pub use revision::{replace_beneath, replace_file};
pub use rollback::RolledBack;
use rollback::read_pin;
pub use target::{Writer, WriterOptions};

impl Writer {
    /// Opens (creating if needed) `target` and, under the lock, cleans up
    /// what a crash may have left.
    pub fn open(target: impl Into<PathBuf>, opts: WriterOptions) -> Result<Self, WriterError> {
        let keep = opts.keep.max(1);
        let (w, root) = Self::start(target.into(), WriterOptions { keep, ..opts }, true)?;
        let _lock = w.lock(&root)?;
        w.tidy(&root, w.own_history(&root)?)?;
        Ok(w)
    }

    /// Publishes `bundle`: nothing when the live revision already holds it
    /// intact (missing links restored), otherwise a new revision and a flip,
    /// calling `flipped` as soon as the new revision is live and durable,
    /// before the previous one is retired: a reload need not wait for the
    /// bookkeeping.
    ///
    /// After `certsync rollback` a pin records the chosen content and the
    /// content it replaced. While the source still offers the replaced
    /// content, the pinned content is kept (and repaired); any other content
    /// releases the pin and is published.
    pub fn publish_then(
        &self,
        bundle: &Bundle,
        flipped: impl FnOnce(),
    ) -> Result<Outcome, WriterError> {
        let root = self.root(true)?;
        self.only_ours(&root)?;
        self.hold_claim(&root)?;
        let _lock = self.lock(&root)?;
        let pin = match read_pin(&root) {
            Err(WriterError::Pin(problem)) => {
                tracing::warn!(target_dir = %self.target.display(), %problem, "removed a ..pin certsync did not write; not obeyed");
                remove_any(&root, PIN, &self.path(PIN))?;
                None
            }
            pin => pin?,
        };
        if let Some((pinned, replaced)) = pin {
            let hash = bundle.hash().to_string();
            // An issuing source offers a new pair every time: none of them
            // is the operator's "source changed", so the pin holds.
            if hash == replaced || (self.opts.issuing && hash != pinned) {
                return self.keep_pinned(&root, &pinned);
            }
            if hash != pinned {
                remove_any(&root, PIN, &self.path(PIN))?;
            }
        }
        self.publish_locked(&root, bundle, flipped)
    }
}
