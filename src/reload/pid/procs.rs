//! The processes `/proc` shows, the ones a target selects, and a pidfd held on each chosen.

use std::collections::{HashMap, HashSet};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use regex::Regex;
use rustix::process::{Pid, PidfdFlags, pidfd_open};

use crate::reload::error::ReloadError;

/// How the main process is found.
#[derive(Debug, Clone)]
pub enum Target {
    /// Exact process name (`comm`, or the executable's or `argv[0]`'s base name).
    Name(String),
    /// A regular expression matched against the space-joined command line.
    Cmdline(Regex),
    /// A file holding the PID, re-read for every reload; with a name
    /// (`--reload-process` too), the process must also have that name.
    Pidfile { path: PathBuf, name: Option<String> },
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Name(n) => write!(f, "process name {n:?}"),
            Self::Cmdline(r) => write!(f, "command line /{r}/"),
            Self::Pidfile { path, name: None } => write!(f, "pidfile {}", path.display()),
            Self::Pidfile {
                path,
                name: Some(n),
            } => write!(f, "pidfile {} (process name {n:?})", path.display()),
        }
    }
}

/// One process as seen in `/proc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    pub pid: i32,
    pub comm: String,
    /// Its parent, and when it started (with the PID, which process this is).
    pub(super) link: Link,
    pub(super) exe: Option<String>,
    pub(super) cmdline: Vec<String>,
}

impl Proc {
    pub(super) fn matches(&self, target: &Target) -> bool {
        match target {
            // The kernel keeps only 15 bytes of comm.
            Target::Name(n) => {
                let argv0 = self.cmdline.first().and_then(|a| base_name(a.as_ref()));
                self.comm == n.chars().take(15).collect::<String>()
                    || self.exe.as_deref() == Some(n.as_str())
                    || argv0.as_deref() == Some(n.as_str())
            }
            Target::Cmdline(re) => re.is_match(&self.cmdline.join(" ")),
            Target::Pidfile { .. } => false,
        }
    }
}

/// The last component of `path`, as text.
fn base_name(path: &Path) -> Option<String> {
    Some(path.file_name()?.to_string_lossy().into_owned())
}

/// Every process visible in `/proc`, skipping those that vanish mid-read.
pub fn processes() -> Result<Vec<Proc>, ReloadError> {
    let all = procfs::process::all_processes().map_err(ReloadError::Proc)?;
    Ok(all.filter_map(|p| read(&p.ok()?)).collect())
}

pub(super) fn read(p: &procfs::process::Process) -> Option<Proc> {
    let stat = p.stat().ok()?;
    let exe = p.exe().ok().as_deref().and_then(base_name);
    Some(Proc {
        pid: stat.pid,
        comm: stat.comm,
        link: Link {
            parent: stat.ppid,
            start: stat.starttime,
        },
        exe,
        cmdline: p.cmdline().unwrap_or_default(),
    })
}

/// `me` and its ancestors, each process's parent and start time given by
/// `links` (`/proc`, or a scan of it). Refused (`Err`, the process the
/// walk stopped at) when a parent cannot be read, or when the links are
/// not a live tree (a parent started after its child, or a loop): they
/// were then read across an exit and a reused PID. Stopping the walk there
/// would leave every process above it (a shim, containerd, kubelet) one a
/// pidfile or a name could select.
pub(super) fn own_lineage(
    me: i32,
    links: impl Fn(i32) -> Option<Link>,
) -> Result<HashSet<i32>, ReloadError> {
    let mut seen = HashSet::from([me]);
    let mut cur = me;
    let mut link = links(me).ok_or(ReloadError::Lineage { pid: me })?;
    while link.parent != 0 {
        let parent = link.parent;
        let up = links(parent).ok_or(ReloadError::Lineage { pid: parent })?;
        if up.start > link.start || !seen.insert(parent) {
            return Err(ReloadError::Lineage { pid: cur });
        }
        (cur, link) = (parent, up);
    }
    Ok(seen)
}

/// A process's parent (0: none this PID namespace shows) and start time,
/// in clock ticks after boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Link {
    pub(super) parent: i32,
    pub(super) start: u64,
}

/// A process's [`Link`], read from `/proc`.
pub(super) fn read_link(pid: i32) -> Option<Link> {
    procfs::process::Process::new(pid)
        .and_then(|p| p.stat())
        .ok()
        .map(|s| Link {
            parent: s.ppid,
            start: s.starttime,
        })
}

/// The ancestors of `pid` by the parent links in `links`, nearest first,
/// up to PID 0 or to where the links loop back.
pub(super) fn ancestors(pid: i32, links: &HashMap<i32, Link>) -> impl Iterator<Item = i32> + '_ {
    let mut seen = HashSet::new();
    let mut cur = pid;
    std::iter::from_fn(move || {
        let pp = links.get(&cur)?.parent;
        if pp == 0 || !seen.insert(pp) {
            return None;
        }
        cur = pp;
        Some(pp)
    })
}

/// The processes to signal for `target` among `procs`: matches that are
/// not `me`, one of my ancestors, PID 1 or `pause`, and whose ancestors do
/// not match too.
pub fn select(target: &Target, procs: &[Proc], me: i32) -> Result<Vec<Proc>, ReloadError> {
    let links: HashMap<i32, Link> = procs.iter().map(|p| (p.pid, p.link)).collect();
    let mine = own_lineage(me, |pid| links.get(&pid).copied())?;
    let eligible = |p: &Proc| !mine.contains(&p.pid) && p.pid != 1 && p.comm != "pause";
    let matching: HashSet<i32> = procs
        .iter()
        .filter(|p| eligible(p) && p.matches(target))
        .map(|p| p.pid)
        .collect();
    let has_matching_ancestor = |pid: i32| ancestors(pid, &links).any(|pp| matching.contains(&pp));
    let mut roots: Vec<Proc> = procs
        .iter()
        .filter(|p| matching.contains(&p.pid) && !has_matching_ancestor(p.pid))
        .cloned()
        .collect();
    roots.sort_by_key(|p| p.pid);
    Ok(roots)
}

/// A process chosen to be signalled, held by a pidfd opened before the
/// checks that chose it were made: if it exits, the signal fails instead of
/// reaching whatever process is given its number next.
#[derive(Debug)]
pub struct Chosen {
    pub pid: i32,
    pub comm: String,
    pub(super) fd: OwnedFd,
}

/// A pidfd for `pid`, or `None` when no such process exists.
pub(super) fn open_pid(pid: i32) -> Result<Option<OwnedFd>, ReloadError> {
    let Some(raw) = Pid::from_raw(pid) else {
        return Ok(None);
    };
    match pidfd_open(raw, PidfdFlags::empty()) {
        Ok(fd) => Ok(Some(fd)),
        Err(rustix::io::Errno::SRCH) => Ok(None),
        Err(errno) => Err(ReloadError::PidfdOpen { pid, errno }),
    }
}
