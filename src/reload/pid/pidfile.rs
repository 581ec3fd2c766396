//! A pidfile as proof of the consumer: written by whoever can write it
//! (usually the consumer's own unprivileged user) while certsync signals as
//! root, so the file alone proves nothing. The process it names must run as
//! the pidfile's owner, have the `--reload-process` name if one is given,
//! be neither certsync nor one of its ancestors, and have started before
//! the file was last written; the file is opened without following a
//! symlink and judged on the opened descriptor.

use std::path::Path;

use super::{Chosen, PidError, Target, open_pid, own_lineage, read, read_link};
use crate::beneath::{self, Links, PathError};

/// Why a pidfile is not proof that the process it names is the consumer;
/// each with its [`Refusal`] label.
#[derive(Debug, thiserror::Error)]
pub enum NotProof {
    #[error(
        "is a symbolic link, which is never followed (whoever can write its directory chooses \
         where it points)"
    )]
    Symlink,
    #[error("is {kind}, not a regular file")]
    NotRegular { kind: &'static str },
    /// A hard link says nothing of who made it: with
    /// fs.protected_hardlinks=0 the consumer may link a root-owned pidfile
    /// naming a root process into its own directory.
    #[error(
        "is a hard link (links {links}) to a file that has another name; whoever can write its \
         directory may have linked another user's pidfile there; a pidfile must have one link"
    )]
    HardLink { links: u64 },
    #[error("larger than the {limit}-byte limit")]
    TooLarge { limit: u64 },
    #[error("names certsync itself")]
    Certsync,
    #[error("names process {pid}, which started certsync")]
    Ancestor { pid: i32 },
    /// `comm` escaped.
    #[error(
        "owned by uid {owner}, names process {pid} ({comm}), which runs as uid {euid} (real \
         {ruid}, saved {suid}): a pidfile names only a process of its owner's (a root-owned one, \
         a root process)"
    )]
    OtherUser {
        owner: u32,
        pid: i32,
        comm: String,
        euid: u32,
        ruid: u32,
        suid: u32,
    },
    #[error("names process {pid} ({comm}), which is not named {name:?} (--reload-process)")]
    NotNamed {
        pid: i32,
        comm: String,
        name: String,
    },
    #[error(
        "names process {pid} ({comm}), which started {after:.0} s after the pidfile was last \
         written: the PID was reused and the pidfile is stale"
    )]
    Younger { pid: i32, comm: String, after: f64 },
    #[error("names process {pid}, whose start cannot be told ({problem}): it may be a reused PID")]
    StartUnknown { pid: i32, problem: String },
}

impl NotProof {
    /// The `reason` label of `certsync_reload_refusals_total`.
    pub fn reason(&self) -> Refusal {
        match self {
            Self::Symlink
            | Self::NotRegular { .. }
            | Self::HardLink { .. }
            | Self::TooLarge { .. } => Refusal::Pidfile,
            Self::OtherUser { .. } => Refusal::User,
            Self::NotNamed { .. } => Refusal::Name,
            Self::Certsync
            | Self::Ancestor { .. }
            | Self::Younger { .. }
            | Self::StartUnknown { .. } => Refusal::Pid,
        }
    }
}

/// Why a pidfile was not trusted (the `reason` label of
/// `certsync_reload_refusals_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A symlink, not a regular file, or larger than the cap.
    Pidfile,
    /// The named process does not run as the pidfile's owner.
    User,
    /// The named process does not have the `--reload-process` name.
    Name,
    /// certsync, one of its ancestors, or a process younger than the file.
    Pid,
}

impl Refusal {
    pub fn label(self) -> &'static str {
        match self {
            Self::Pidfile => "pidfile",
            Self::User => "user",
            Self::Name => "name",
            Self::Pid => "pid",
        }
    }
}

/// How much later than its pidfile's last write a process may seem to
/// have started before its PID counts as reused: the kernel's boot time is
/// known to the second only.
const START_TOLERANCE_SECS: f64 = 1.0;

/// The process a pidfile names, checked: the pidfile is a regular file
/// (not followed if a symlink) with one link, a PID (not 1), not certsync or one of its
/// ancestors, alive, running as the pidfile's owner, named `name` if given,
/// and started before the pidfile was last written.
pub(super) fn pidfile_target(path: &Path, name: Option<&str>, me: i32) -> Result<Chosen, PidError> {
    use std::os::unix::fs::MetadataExt;
    let pidfile = Pidfile { path };
    let file = pidfile.open()?;
    // Type, owner and time from the opened descriptor, not the path.
    let meta = file
        .metadata()
        .map_err(|e| pidfile.problem(e.to_string()))?;
    pidfile.one_name(&meta)?;
    let owner = meta.uid();
    let written = meta
        .modified()
        .map_err(|e| pidfile.problem(e.to_string()))?;
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
    fn problem(&self, problem: String) -> PidError {
        PidError::Pidfile {
            path: self.path.to_owned(),
            problem,
        }
    }

    fn refused(&self, problem: NotProof) -> PidError {
        PidError::Refused {
            path: self.path.to_owned(),
            problem,
        }
    }

    fn gone(&self, pid: i32) -> PidError {
        self.problem(format!("process {pid} does not exist"))
    }

    /// Opened for reading if a regular file, the last name not followed
    /// ([`beneath::open_file`], [`Links::RefuseLast`]): whoever writes the
    /// pidfile's directory could link root's pidfile in.
    fn open(&self) -> Result<std::fs::File, PidError> {
        beneath::open_file(self.path, Links::RefuseLast).map_err(|e| match e {
            PathError::Link { .. } => self.refused(NotProof::Symlink),
            PathError::NotRegular { what, .. } => self.refused(NotProof::NotRegular { kind: what }),
            e => self.problem(e.problem()),
        })
    }

    /// A regular file ([`Self::open`]) with one name.
    fn one_name(&self, meta: &std::fs::Metadata) -> Result<(), PidError> {
        use std::os::unix::fs::MetadataExt;
        // A pidfile is written by its process, one name; the owner check
        // would pass a root-owned one linked in ([`NotProof::HardLink`]).
        if meta.nlink() > 1 {
            return Err(self.refused(NotProof::HardLink {
                links: meta.nlink(),
            }));
        }
        Ok(())
    }

    /// The PID it holds (read with a size cap), other than 0 and 1.
    fn pid(&self, file: std::fs::File) -> Result<i32, PidError> {
        let bytes = beneath::read_capped(file, self.path, 64).map_err(|e| match e {
            PathError::TooLarge { limit, .. } => self.refused(NotProof::TooLarge { limit }),
            e => self.problem(e.problem()),
        })?;
        let text = String::from_utf8_lossy(&bytes);
        match text.trim().parse::<i32>() {
            Ok(pid) if pid > 1 => Ok(pid),
            _ => Err(self.problem(format!("{:?} is not a process id", text.trim()))),
        }
    }

    /// Neither certsync (`me`) nor one of its ancestors.
    fn not_mine(&self, pid: i32, me: i32) -> Result<(), PidError> {
        if pid == me {
            return Err(self.refused(NotProof::Certsync));
        }
        if own_lineage(me, read_link)?.contains(&pid) {
            return Err(self.refused(NotProof::Ancestor { pid }));
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
    ) -> Result<(), PidError> {
        let uids = [status.ruid, status.euid, status.suid];
        if uids.iter().all(|&u| u == owner) {
            return Ok(());
        }
        Err(self.refused(NotProof::OtherUser {
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
    ) -> Result<(), PidError> {
        let pid = process.pid;
        let named = read(process).is_some_and(|p| p.matches(&Target::Name(name.to_owned())));
        if named {
            return Ok(());
        }
        Err(self.refused(NotProof::NotNamed {
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
    ) -> Result<(), PidError> {
        let comm = || crate::escape(&stat.comm).into_owned();
        let started = procfs::boot_time_secs()
            .map(|boot| boot as f64 + stat.starttime as f64 / procfs::ticks_per_second() as f64)
            .map_err(|e| {
                self.refused(NotProof::StartUnknown {
                    pid,
                    problem: e.to_string(),
                })
            })?;
        let written = written
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        if started > written + START_TOLERANCE_SECS {
            return Err(self.refused(NotProof::Younger {
                pid,
                comm: comm(),
                after: started - written,
            }));
        }
        Ok(())
    }
}
