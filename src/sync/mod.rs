//! The per-target loop: take the newest update from the source, validate it,
//! publish it through the writer, and keep the target repaired.
//!
//! One task owns each target directory; nothing else writes there. The last
//! good bundle (from this run, or found intact on disk at start) is what
//! drift repair restores; a rejected or unreadable update never replaces it.
//! Errors are logged once per distinct problem (then at debug level on each
//! retry) so a broken source does not flood the log.

mod error;
mod once;
mod pin;
mod publish;
mod run;
mod sources;
mod syncer;
mod task;

pub use error::SyncError;
pub use once::once;
pub use run::{SHUTDOWN_GRACE, log_plan, run};
