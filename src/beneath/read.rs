//! Reading a file certsync is handed by its path: walked as [`walk`] walks
//! (no judge: the kernel already limits what certsync's user may read;
//! callers that must judge the way walk themselves), opened for reading
//! through the descriptor walked to ([`Walked::open_read`]: a regular file
//! only, never blocking on a FIFO, never a device opened), at most a limit
//! read so `/dev/zero` or a runaway log cannot grow memory.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use super::walk::{Links, PathError, Start, Walked, walk};

/// `path` as given (from `/`, or from the working directory), symlinks as
/// `links` says, opened for reading if it is a regular file.
pub fn open_file(path: &Path, links: Links) -> Result<File, PathError> {
    walk(Start::Path, path, links, &mut |_| Ok(()))?.open_read()
}

/// [`open_file`], symlinks followed, and at most `limit` bytes read.
pub fn read_file(path: &Path, limit: u64) -> Result<Vec<u8>, PathError> {
    read_capped(open_file(path, Links::Follow)?, path, limit)
}

/// All of an opened file, refusing more than `limit` bytes
/// ([`PathError::TooLarge`]); `path` names it in errors.
pub fn read_capped(mut file: impl Read, path: &Path, limit: u64) -> Result<Vec<u8>, PathError> {
    let mut bytes = Vec::new();
    (&mut file)
        .take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| PathError::io(path, e))?;
    if bytes.len() as u64 > limit {
        return Err(PathError::TooLarge {
            path: path.to_owned(),
            limit,
        });
    }
    Ok(bytes)
}

impl Walked {
    /// [`Walked::open_read`] and [`read_capped`]: the file walked to, at
    /// most `limit` bytes.
    pub fn read(&self, limit: u64) -> Result<Vec<u8>, PathError> {
        read_capped(self.open_read()?, &self.shown, limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each refusal of a by-path read, by the input that fails exactly
    /// that check: a FIFO (no writer: an open that blocked would hang the
    /// test), a device, a directory, one byte over the limit, a symlink
    /// where the last name is not followed, and a missing file.
    #[test]
    fn fifos_devices_directories_links_and_large_files_are_refused_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        for (path, what) in [
            (fifo.as_path(), "a FIFO"),
            (Path::new("/dev/zero"), "a device"),
            (d.path(), "a directory"),
        ] {
            let e = read_file(path, 10);
            assert!(
                matches!(&e, Err(PathError::NotRegular { what: w, .. }) if *w == what),
                "{e:?}"
            );
        }
        let big = d.path().join("big");
        std::fs::write(&big, [b'x'; 11]).unwrap();
        let e = read_file(&big, 10);
        assert!(
            matches!(e, Err(PathError::TooLarge { limit: 10, .. })),
            "{e:?}"
        );
        // Said without its path for a caller that names it.
        assert_eq!(e.unwrap_err().problem(), "larger than the 10-byte limit");
        std::fs::write(&big, [b'x'; 10]).unwrap();
        assert_eq!(read_file(&big, 10).unwrap().len(), 10);

        let link = d.path().join("link");
        std::os::unix::fs::symlink(&big, &link).unwrap();
        assert_eq!(read_file(&link, 10).unwrap().len(), 10, "followed");
        let e = open_file(&link, Links::RefuseLast);
        assert!(
            matches!(&e, Err(PathError::Link { path }) if *path == link),
            "{e:?}"
        );
        // A link on the way is followed where only the last is refused.
        std::os::unix::fs::symlink(d.path(), d.path().join("dir")).unwrap();
        assert!(open_file(&d.path().join("dir/big"), Links::RefuseLast).is_ok());

        assert!(
            read_file(&d.path().join("none"), 10)
                .unwrap_err()
                .is_not_found()
        );
    }
}
