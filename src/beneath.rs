//! Opening what certsync does not own, and the one rule of who may change
//! it. Every path root certsync reads, walks or removes in a place others
//! share goes through here:
//!
//! - [`walk()`] resolves a path one name at a time beneath the directory
//!   handle opened before it (`O_PATH | O_NOFOLLOW`), the way `openat2`'s
//!   `RESOLVE_NO_SYMLINKS` / `RESOLVE_BENEATH` would, reading each symlink
//!   from its own descriptor and following it by hand (or refusing it,
//!   [`Links::Refuse`]). Every directory a name is looked up in and every
//!   symlink followed is handed to the caller's judge *before* the next
//!   name is looked up, on what was opened (`fstat`), never on a name:
//!   nothing judged is looked up by its path again, so a directory swapped
//!   for a link between the check and the open is never what is read.
//! - [`Trust`] is the ownership and mode rule: owned by root or certsync's
//!   user and written by no one else, with each caller's exceptions (a
//!   root sticky directory, a read-only mount, a volume's root, a loose CA
//!   directory) as explicit fields.
//! - [`Walked::open_read`] upgrades the `O_PATH` descriptor to a reading
//!   one through `/proc/self/fd/N` (the very inode judged, no lookup of a
//!   name) if it is a regular file, never blocking on a FIFO; [`read_capped`]
//!   reads at most a limit ([`open_file`] and [`read_file`] for a path as
//!   given).
//! - [`upward`] and [`holder`] look above a file or directory held, by `..`
//!   from descriptors and where the kernel says an open file is.

mod read;
mod trust;
mod up;
mod walk;
pub use read::{open_file, read_capped, read_file};
#[cfg(test)]
pub(crate) use tests::BETWEEN_CHECK_AND_OPEN;
pub use trust::{Faults, Owners, ReadOnly, Trust};
pub use up::{directory_and_ancestors, holder, identity, upward};
pub use walk::{Entry, Links, MAX_DEPTH, PathError, Start, Walked, fd_path, not_regular, walk};

#[cfg(test)]
mod tests;
