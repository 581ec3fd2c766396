//! A pidfile as proof of the consumer: written by whoever can write it
//! (usually the consumer's own unprivileged user) while certsync signals as
//! root, so the file alone proves nothing.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::procs::{Chosen, Target, open_pid, own_lineage, read, read_link};
use crate::beneath::{self, Links, PathError};
use crate::reload::error::ReloadError;

/// How much later than its pidfile's last write a process may seem to
/// have started before its PID counts as reused: the kernel's boot time is
/// known to the second only.
const START_TOLERANCE_SECS: f64 = 1.0;

/// The process a pidfile names, checked: the pidfile is a regular file
/// (not followed if a symlink) with one link, a PID (not 1), not certsync
/// or one of its ancestors, alive, running as the pidfile's owner, named
/// `name` if given, and started before the pidfile was last written.
pub(super) fn pidfile_target(
    path: &Path,
    name: Option<&str>,
    me: i32,
) -> Result<Chosen, ReloadError> {
    let refused = |reason, problem| refused(path, reason, problem);
    let gone = |pid| unread(path, format!("process {pid} does not exist"));
    let (pid, owner, written) = read_pidfile(path)?;
    // Held before anything about the process is checked: the checks below
    // read /proc for the PID, so if the process exits and its number is
    // reused meanwhile, they judge the newcomer but the signal goes to
    // the exited process and fails.
    let fd = open_pid(pid)?.ok_or_else(|| gone(pid))?;
    if pid == me {
        return Err(refused("pid", "names certsync itself".into()));
    }
    if own_lineage(me, read_link)?.contains(&pid) {
        return Err(refused(
            "pid",
            format!("names process {pid}, which started certsync"),
        ));
    }
    let process = procfs::process::Process::new(pid).map_err(|_| gone(pid))?;
    let status = process.status().map_err(|_| gone(pid))?;
    let proc = read(&process).ok_or_else(|| gone(pid))?;
    let comm = || crate::escape(&proc.comm).into_owned();
    // Real, effective and saved uid: a process that can switch back to
    // root, or to anyone, is not the owner's.
    if [status.ruid, status.euid, status.suid] != [owner; 3] {
        let (comm, euid, ruid, suid) = (comm(), status.euid, status.ruid, status.suid);
        return Err(refused(
            "user",
            format!(
                "owned by uid {owner}, names process {pid} ({comm}), which runs as uid {euid} \
                 (real {ruid}, saved {suid}): a pidfile names only a process of its owner's (a \
                 root-owned one, a root process)"
            ),
        ));
    }
    if let Some(name) = name
        && !proc.matches(&Target::Name(name.to_owned()))
    {
        let comm = comm();
        return Err(refused(
            "name",
            format!("names process {pid} ({comm}), which is not named {name:?} (--reload-process)"),
        ));
    }
    // Started after the pidfile was last written: the PID was reused.
    let started = procfs::boot_time_secs()
        .map(|boot| boot as f64 + proc.link.start as f64 / procfs::ticks_per_second() as f64)
        .map_err(|e| {
            let problem = format!(
                "names process {pid}, whose start cannot be told ({e}): it may be a reused PID"
            );
            refused("pid", problem)
        })?;
    if started > written + START_TOLERANCE_SECS {
        let (comm, after) = (comm(), started - written);
        return Err(refused(
            "pid",
            format!(
                "names process {pid} ({comm}), which started {after:.0} s after the pidfile was \
                 last written: the PID was reused and the pidfile is stale"
            ),
        ));
    }
    Ok(Chosen {
        pid,
        comm: proc.comm,
        fd,
    })
}

fn refused(path: &Path, reason: &'static str, problem: String) -> ReloadError {
    let path = path.to_owned();
    ReloadError::Refused {
        path,
        reason,
        problem,
    }
}

fn unread(path: &Path, problem: String) -> ReloadError {
    let path = path.to_owned();
    ReloadError::Pidfile { path, problem }
}

/// The PID in the pidfile, its owner and when it was last written (Unix
/// seconds), from the descriptor opened, not the path.
fn read_pidfile(path: &Path) -> Result<(i32, u32, f64), ReloadError> {
    let io = |e: std::io::Error| unread(path, e.to_string());
    // The last name is not followed: whoever writes the pidfile's
    // directory could link root's pidfile in.
    let file = beneath::open_file(path, Links::RefuseLast).map_err(|e| match e {
        PathError::Link { .. } => refused(
            path,
            "pidfile",
            "is a symbolic link, which is never followed (whoever can write its directory \
             chooses where it points)"
                .into(),
        ),
        PathError::NotRegular { what, .. } => {
            refused(path, "pidfile", format!("is {what}, not a regular file"))
        }
        e => unread(path, e.problem()),
    })?;
    let meta = file.metadata().map_err(io)?;
    // A pidfile is written by its process, one name; the owner check
    // would pass a root-owned one linked in. A hard link says nothing of
    // who made it: with fs.protected_hardlinks=0 the consumer may link a
    // root-owned pidfile naming a root process into its own directory.
    if meta.nlink() > 1 {
        let problem = format!(
            "is a hard link (links {}) to a file that has another name; whoever can write its \
             directory may have linked another user's pidfile there; a pidfile must have one \
             link",
            meta.nlink()
        );
        return Err(refused(path, "pidfile", problem));
    }
    let written = meta.modified().map_err(io)?;
    let bytes = beneath::read_capped(file, path, 64).map_err(|e| match e {
        PathError::TooLarge { limit, .. } => refused(
            path,
            "pidfile",
            format!("larger than the {limit}-byte limit"),
        ),
        e => unread(path, e.problem()),
    })?;
    let text = String::from_utf8_lossy(&bytes);
    let pid = match text.trim().parse::<i32>() {
        Ok(pid) if pid > 1 => pid,
        _ => {
            return Err(unread(
                path,
                format!("{:?} is not a process id", text.trim()),
            ));
        }
    };
    let written = written.duration_since(std::time::UNIX_EPOCH);
    Ok((pid, meta.uid(), written.map_or(0.0, |d| d.as_secs_f64())))
}
