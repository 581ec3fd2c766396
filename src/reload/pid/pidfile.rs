//! A pidfile as proof of the consumer: written by whoever can write it
//! (usually the consumer's own unprivileged user) while certsync signals as
//! root, so the file alone proves nothing. The process it names must run as
//! the pidfile's owner, have the `--reload-process` name if one is given,
//! be neither certsync nor one of its ancestors, and have started before
//! the file was last written; the file is opened without following a
//! symlink and judged on the opened descriptor.

use std::path::Path;

use super::{Chosen, Target, open_pid, own_lineage, read, read_link};
use crate::beneath::{self, Links, PathError};
use crate::reload::error::ReloadError;

/// How much later than its pidfile's last write a process may seem to
/// have started before its PID counts as reused: the kernel's boot time is
/// known to the second only.
const START_TOLERANCE_SECS: f64 = 1.0;

/// The process a pidfile names, checked: the pidfile is a regular file
/// (not followed if a symlink) with one link, a PID (not 1), not certsync or one of its
/// ancestors, alive, running as the pidfile's owner, named `name` if given,
/// and started before the pidfile was last written.
pub(super) fn pidfile_target(
    path: &Path,
    name: Option<&str>,
    me: i32,
) -> Result<Chosen, ReloadError> {
    use std::os::unix::fs::MetadataExt;
    let pidfile = Pidfile { path };
    let file = pidfile.open()?;
    // Type, owner and time from the opened descriptor, not the path.
    let meta = file.metadata().map_err(|e| pidfile.io(e))?;
    pidfile.one_name(&meta)?;
    let owner = meta.uid();
    let written = meta.modified().map_err(|e| pidfile.io(e))?;
    let pid = pidfile.pid(file)?;
    // Held before anything about the process is checked: the checks below
    // read /proc for the PID, so if the process exits and its number is
    // reused meanwhile, they judge the newcomer but the signal goes to
    // the exited process and fails.
    let fd = open_pid(pid)?.ok_or_else(|| pidfile.gone(pid))?;
    pidfile.not_mine(pid, me)?;
    let process = procfs::process::Process::new(pid).map_err(|_| pidfile.gone(pid))?;
    let (stat, status) = process
        .stat()
        .and_then(|stat| Ok((stat, process.status()?)))
        .map_err(|_| pidfile.gone(pid))?;
    pidfile.runs_as_owner(pid, &stat.comm, &status, owner)?;
    if let Some(name) = name {
        pidfile.named(&process, &stat.comm, name)?;
    }
    pidfile.started_before(pid, &stat, written)?;
    Ok(Chosen {
        pid,
        comm: stat.comm,
        fd,
    })
}

/// A pidfile being checked, and its errors.
struct Pidfile<'a> {
    path: &'a Path,
}

impl Pidfile<'_> {
    fn io(&self, source: std::io::Error) -> ReloadError {
        ReloadError::PidfileIo {
            path: self.path.to_owned(),
            source,
        }
    }

    fn unread(&self, source: PathError) -> ReloadError {
        ReloadError::PidfileRead {
            path: self.path.to_owned(),
            source,
        }
    }

    fn refused(&self, problem: ReloadError) -> ReloadError {
        ReloadError::Refused {
            path: self.path.to_owned(),
            problem: Box::new(problem),
        }
    }

    fn gone(&self, pid: i32) -> ReloadError {
        ReloadError::PidGone {
            path: self.path.to_owned(),
            pid,
        }
    }

    /// Opened for reading if a regular file, the last name not followed
    /// ([`beneath::open_file`], [`Links::RefuseLast`]): whoever writes the
    /// pidfile's directory could link root's pidfile in.
    fn open(&self) -> Result<std::fs::File, ReloadError> {
        beneath::open_file(self.path, Links::RefuseLast).map_err(|e| match e {
            PathError::Link { .. } => self.refused(ReloadError::PidfileSymlink),
            PathError::NotRegular { what, .. } => {
                self.refused(ReloadError::PidfileNotRegular { kind: what })
            }
            e => self.unread(e),
        })
    }

    /// A regular file ([`Self::open`]) with one name.
    fn one_name(&self, meta: &std::fs::Metadata) -> Result<(), ReloadError> {
        use std::os::unix::fs::MetadataExt;
        // A pidfile is written by its process, one name; the owner check
        // would pass a root-owned one linked in ([`ReloadError::PidfileHardLink`]).
        if meta.nlink() > 1 {
            return Err(self.refused(ReloadError::PidfileHardLink {
                links: meta.nlink(),
            }));
        }
        Ok(())
    }

    /// The PID it holds (read with a size cap), other than 0 and 1.
    fn pid(&self, file: std::fs::File) -> Result<i32, ReloadError> {
        let bytes = beneath::read_capped(file, self.path, 64).map_err(|e| match e {
            PathError::TooLarge { limit, .. } => {
                self.refused(ReloadError::PidfileTooLarge { limit })
            }
            e => self.unread(e),
        })?;
        let text = String::from_utf8_lossy(&bytes);
        match text.trim().parse::<i32>() {
            Ok(pid) if pid > 1 => Ok(pid),
            _ => Err(ReloadError::NotAPid {
                path: self.path.to_owned(),
                text: text.trim().to_owned(),
            }),
        }
    }

    /// Neither certsync (`me`) nor one of its ancestors.
    fn not_mine(&self, pid: i32, me: i32) -> Result<(), ReloadError> {
        if pid == me {
            return Err(self.refused(ReloadError::NamesCertsync));
        }
        if own_lineage(me, read_link)?.contains(&pid) {
            return Err(self.refused(ReloadError::NamesAncestor { pid }));
        }
        Ok(())
    }

    /// Runs as the pidfile's owner: real, effective and saved (a process
    /// that can switch back to root, or to anyone, is not the owner's).
    fn runs_as_owner(
        &self,
        pid: i32,
        comm: &str,
        status: &procfs::process::Status,
        owner: u32,
    ) -> Result<(), ReloadError> {
        let uids = [status.ruid, status.euid, status.suid];
        if uids.iter().all(|&u| u == owner) {
            return Ok(());
        }
        Err(self.refused(ReloadError::OtherUser {
            owner,
            pid,
            comm: crate::escape(comm).into_owned(),
            euid: status.euid,
            ruid: status.ruid,
            suid: status.suid,
        }))
    }

    /// Has the `--reload-process` name.
    fn named(
        &self,
        process: &procfs::process::Process,
        comm: &str,
        name: &str,
    ) -> Result<(), ReloadError> {
        let pid = process.pid;
        let named = read(process).is_some_and(|p| p.matches(&Target::Name(name.to_owned())));
        if named {
            return Ok(());
        }
        Err(self.refused(ReloadError::NotNamed {
            pid,
            comm: crate::escape(comm).into_owned(),
            name: name.to_owned(),
        }))
    }

    /// Started before the pidfile was last `written`: else the PID was
    /// reused.
    fn started_before(
        &self,
        pid: i32,
        stat: &procfs::process::Stat,
        written: std::time::SystemTime,
    ) -> Result<(), ReloadError> {
        let comm = || crate::escape(&stat.comm).into_owned();
        let started = procfs::boot_time_secs()
            .map(|boot| boot as f64 + stat.starttime as f64 / procfs::ticks_per_second() as f64)
            .map_err(|source| self.refused(ReloadError::StartUnknown { pid, source }))?;
        let written = written
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        if started > written + START_TOLERANCE_SECS {
            return Err(self.refused(ReloadError::Younger {
                pid,
                comm: comm(),
                after: started - written,
            }));
        }
        Ok(())
    }
}
