//! Find the main container's process and send it a signal.
//!
//! The process is looked up afresh for every reload (a restarted main
//! container has a new PID): by name or command-line pattern through `/proc`
//! (the pod shares its PID namespace, `shareProcessNamespace: true`), or by a
//! pidfile that is re-read each time.
//!
//! Invariants: certsync never signals itself, one of its ancestors (the
//! shell or init that started it), PID 1 or the pod's `pause` process; a
//! pidfile's PID is refused when that process started after the pidfile
//! was last written (the PID was reused by something else).
//!
//! A pidfile is written by whoever can write it, usually the consumer's own
//! unprivileged user, and certsync signals as root: the file alone is never
//! proof. It names the consumer only when the process it names runs as the
//! pidfile's owner (real, effective and saved uid; a root-owned pidfile:
//! a root process), and, with `--reload-process` too, has that name. The
//! file is opened without following a symlink, checked as a regular file
//! on the opened descriptor, its owner taken from that descriptor, and read
//! with a size cap. Anything else is a [`PidError::Refused`]. When several
//! processes match (nginx master and workers), only the top-most matching
//! ancestor of each matching tree is signalled.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use std::os::fd::OwnedFd;

use nix::errno::Errno;
use nix::sys::signal::Signal;
use regex::Regex;
use rustix::process::{Pid, PidfdFlags, pidfd_open, pidfd_send_signal};

#[derive(Debug, thiserror::Error)]
pub enum PidError {
    #[error(
        "no process matches {what} (certsync itself, its ancestors, PID 1 and pause are never \
         candidates)"
    )]
    NoMatch { what: String },
    #[error("pidfile {path}: {problem}")]
    Pidfile { path: PathBuf, problem: String },
    /// The pidfile is not proof that the process it names is the consumer.
    #[error("pidfile {path}: {problem}; refusing to signal it")]
    Refused {
        path: PathBuf,
        reason: Refusal,
        problem: String,
    },
    #[error(
        "permission denied sending {signal} to pid {pid} ({comm}): certsync runs as another user \
         without CAP_KILL; run it as the main container's user or add the KILL capability"
    )]
    Permission {
        pid: i32,
        comm: String,
        signal: Signal,
    },
    #[error(
        "pid {pid} ({comm}) exited after it was checked; {signal} was not sent (its number may \
         now be another process's)"
    )]
    Exited {
        pid: i32,
        comm: String,
        signal: Signal,
    },
    #[error("sending {signal} to pid {pid} ({comm}): {errno}")]
    Signal {
        pid: i32,
        comm: String,
        signal: Signal,
        errno: Errno,
    },
    #[error("cannot read /proc: {0}")]
    Proc(String),
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

/// How the main process is found.
#[derive(Debug, Clone)]
pub enum Target {
    /// Exact process name (`comm`, or the executable's or argv[0]'s base name).
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
    pub ppid: i32,
    pub comm: String,
    /// When it started, in clock ticks after boot: with the PID, which
    /// process this is.
    start: u64,
    exe: Option<String>,
    cmdline: Vec<String>,
}

impl Proc {
    fn matches(&self, target: &Target) -> bool {
        let base = |s: &str| {
            Path::new(s)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        };
        match target {
            // The kernel keeps only 15 bytes of comm.
            Target::Name(n) => {
                self.comm == n.chars().take(15).collect::<String>()
                    || self.exe.as_deref() == Some(n.as_str())
                    || self.cmdline.first().and_then(|a| base(a)).as_deref() == Some(n.as_str())
            }
            Target::Cmdline(re) => re.is_match(&self.cmdline.join(" ")),
            Target::Pidfile { .. } => false,
        }
    }
}

/// Every process visible in `/proc`, skipping those that vanish mid-read.
pub fn processes() -> Result<Vec<Proc>, PidError> {
    let all = procfs::process::all_processes().map_err(|e| PidError::Proc(e.to_string()))?;
    Ok(all
        .filter_map(Result::ok)
        .filter_map(|p| read(&p))
        .collect())
}

fn read(p: &procfs::process::Process) -> Option<Proc> {
    let stat = p.stat().ok()?;
    let exe = p
        .exe()
        .ok()
        .and_then(|e| e.file_name().map(|n| n.to_string_lossy().into_owned()));
    Some(Proc {
        pid: stat.pid,
        ppid: stat.ppid,
        comm: stat.comm,
        start: stat.starttime,
        exe,
        cmdline: p.cmdline().unwrap_or_default(),
    })
}

/// `me` and its ancestors, each parent read from `/proc`: what a pidfile
/// naming one of them is refused for, without reading every process (a
/// reload's cost grew with the host's process count).
fn own_lineage(me: i32) -> HashSet<i32> {
    let mut seen = HashSet::from([me]);
    let mut cur = me;
    while let Some(parent) = procfs::process::Process::new(cur)
        .and_then(|p| p.stat())
        .ok()
        .map(|s| s.ppid)
        .filter(|&pp| pp != 0 && seen.insert(pp))
    {
        cur = parent;
    }
    seen
}

/// The ancestors of `pid` by the parent links in `parent`, nearest first,
/// up to PID 0 or to where the links loop back.
fn ancestors(pid: i32, parent: &HashMap<i32, i32>) -> impl Iterator<Item = i32> + '_ {
    let mut seen = HashSet::new();
    let mut cur = pid;
    std::iter::from_fn(move || {
        let &pp = parent.get(&cur)?;
        if pp == 0 || !seen.insert(pp) {
            return None;
        }
        cur = pp;
        Some(pp)
    })
}

/// `pid` and its ancestors, by the parent links in `parent`.
fn lineage(pid: i32, parent: &HashMap<i32, i32>) -> HashSet<i32> {
    std::iter::once(pid).chain(ancestors(pid, parent)).collect()
}

/// The processes to signal for `target` among `procs`: matches that are
/// not `me`, one of my ancestors, PID 1 or `pause`, and whose ancestors do
/// not match too.
pub fn select(target: &Target, procs: &[Proc], me: i32) -> Vec<Proc> {
    let parent: HashMap<i32, i32> = procs.iter().map(|p| (p.pid, p.ppid)).collect();
    let mine = lineage(me, &parent);
    let eligible = |p: &Proc| !mine.contains(&p.pid) && p.pid != 1 && p.comm != "pause";
    let matching: HashSet<i32> = procs
        .iter()
        .filter(|p| eligible(p) && p.matches(target))
        .map(|p| p.pid)
        .collect();
    let has_matching_ancestor = |pid: i32| ancestors(pid, &parent).any(|pp| matching.contains(&pp));
    let mut roots: Vec<Proc> = procs
        .iter()
        .filter(|p| matching.contains(&p.pid) && !has_matching_ancestor(p.pid))
        .cloned()
        .collect();
    roots.sort_by_key(|p| p.pid);
    roots
}

/// A process chosen to be signalled, held by a pidfd opened before the
/// checks that chose it were made: if it exits, the signal fails instead of
/// reaching whatever process is given its number next.
#[derive(Debug)]
pub struct Chosen {
    pub pid: i32,
    pub comm: String,
    fd: OwnedFd,
}

/// A pidfd for `pid`, or `None` when no such process exists.
fn open_pid(pid: i32) -> Result<Option<OwnedFd>, PidError> {
    let Some(raw) = Pid::from_raw(pid) else {
        return Ok(None);
    };
    match pidfd_open(raw, PidfdFlags::empty()) {
        Ok(fd) => Ok(Some(fd)),
        Err(rustix::io::Errno::SRCH) => Ok(None),
        Err(e) => Err(PidError::Proc(format!("pidfd_open({pid}): {e}"))),
    }
}

/// Finds the target now and sends `signal`. Returns the PIDs signalled.
pub fn signal(target: &Target, signal: Signal) -> Result<Vec<i32>, PidError> {
    send(&find(target)?, signal)
}

/// The processes `target` names now, checked (see [`select`] and, for a
/// pidfile, the checks of [`pidfile_target`]).
pub fn find(target: &Target) -> Result<Vec<Chosen>, PidError> {
    let me = std::process::id() as i32;
    let chosen: Vec<Chosen> = match target {
        Target::Pidfile { path, name } => vec![pidfile_target(path, name.as_deref(), me)?],
        _ => {
            let mut chosen = Vec::new();
            for p in select(target, &processes()?, me) {
                // Opened after the selection: the process must still be
                // the one selected (same start time), else it is skipped.
                let Some(fd) = open_pid(p.pid)? else { continue };
                let same = procfs::process::Process::new(p.pid)
                    .and_then(|now| now.stat())
                    .is_ok_and(|now| now.starttime == p.start);
                if same {
                    chosen.push(Chosen {
                        pid: p.pid,
                        comm: p.comm,
                        fd,
                    });
                }
            }
            chosen
        }
    };
    if chosen.is_empty() {
        return Err(PidError::NoMatch {
            what: target.to_string(),
        });
    }
    Ok(chosen)
}

/// Sends `signal` through each pidfd of `chosen`. Returns their PIDs.
pub fn send(chosen: &[Chosen], signal: Signal) -> Result<Vec<i32>, PidError> {
    for Chosen { pid, comm, fd } in chosen {
        let (pid, comm) = (*pid, comm.clone());
        let Some(sig) = rustix::process::Signal::from_named_raw(signal as i32) else {
            return Err(PidError::Signal {
                pid,
                comm,
                signal,
                errno: Errno::EINVAL,
            });
        };
        pidfd_send_signal(fd, sig).map_err(|e| match e {
            rustix::io::Errno::PERM => PidError::Permission { pid, comm, signal },
            rustix::io::Errno::SRCH => PidError::Exited { pid, comm, signal },
            e => PidError::Signal {
                pid,
                comm,
                signal,
                errno: Errno::from_raw(e.raw_os_error()),
            },
        })?;
    }
    Ok(chosen.iter().map(|c| c.pid).collect())
}

/// How much later than its pidfile's last write a process may seem to
/// have started before its PID counts as reused: the kernel's boot time is
/// known to the second only.
const START_TOLERANCE_SECS: f64 = 1.0;

/// The process a pidfile names, checked: the pidfile is a regular file
/// (not followed if a symlink) with one link, a PID (not 1), not certsync or one of its
/// ancestors, alive, running as the pidfile's owner, named `name` if given,
/// and started before the pidfile was last written.
fn pidfile_target(path: &Path, name: Option<&str>, me: i32) -> Result<Chosen, PidError> {
    use std::os::unix::fs::MetadataExt;
    let pidfile = Pidfile { path };
    let file = pidfile.open()?;
    // Type, owner and time from the opened descriptor, not the path.
    let meta = file
        .metadata()
        .map_err(|e| pidfile.problem(e.to_string()))?;
    pidfile.one_regular_file(&meta)?;
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

    fn refused(&self, reason: Refusal, problem: String) -> PidError {
        PidError::Refused {
            path: self.path.to_owned(),
            reason,
            problem,
        }
    }

    fn gone(&self, pid: i32) -> PidError {
        self.problem(format!("process {pid} does not exist"))
    }

    /// Opened for reading without following a symlink.
    fn open(&self) -> Result<std::fs::File, PidError> {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(
                (nix::fcntl::OFlag::O_NOFOLLOW
                    | nix::fcntl::OFlag::O_NONBLOCK
                    | nix::fcntl::OFlag::O_CLOEXEC
                    | nix::fcntl::OFlag::O_NOCTTY)
                    .bits(),
            )
            .open(self.path)
            .map_err(|e| match e.raw_os_error() {
                Some(code) if code == Errno::ELOOP as i32 => self.refused(
                    Refusal::Pidfile,
                    "is a symbolic link, which is never followed (whoever can write its directory \
                     chooses where it points)"
                        .into(),
                ),
                _ => self.problem(e.to_string()),
            })
    }

    /// A regular file with one name.
    fn one_regular_file(&self, meta: &std::fs::Metadata) -> Result<(), PidError> {
        use std::os::unix::fs::MetadataExt;
        if !meta.file_type().is_file() {
            return Err(self.refused(
                Refusal::Pidfile,
                format!(
                    "is {}, not a regular file",
                    crate::files::kind_of(meta.file_type())
                ),
            ));
        }
        // A hard link says nothing of who made it: with
        // fs.protected_hardlinks=0 the consumer may link a root-owned pidfile
        // naming a root process into its own directory, and the owner check
        // would pass. A pidfile is written by its process, one name.
        if meta.nlink() > 1 {
            return Err(self.refused(
                Refusal::Pidfile,
                format!(
                    "is a hard link (links {}) to a file that has another name; whoever can \
                     write its directory may have linked another user's pidfile there; a pidfile \
                     must have one link",
                    meta.nlink()
                ),
            ));
        }
        Ok(())
    }

    /// The PID it holds (read with a size cap), other than 0 and 1.
    fn pid(&self, file: std::fs::File) -> Result<i32, PidError> {
        let bytes = crate::files::read_capped(file, self.path, 64).map_err(|e| match e {
            crate::files::FileError::TooLarge { .. } => self.refused(Refusal::Pidfile, e.problem()),
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
            return Err(self.refused(Refusal::Pid, "names certsync itself".into()));
        }
        if own_lineage(me).contains(&pid) {
            return Err(self.refused(
                Refusal::Pid,
                format!("names process {pid}, which started certsync"),
            ));
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
        Err(self.refused(
            Refusal::User,
            format!(
                "owned by uid {owner}, names process {pid} ({}), which runs as uid {} (real {}, \
                 saved {}): a pidfile names only a process of its owner's (a root-owned one, a \
                 root process)",
                crate::escape(comm),
                status.euid,
                status.ruid,
                status.suid
            ),
        ))
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
        Err(self.refused(
            Refusal::Name,
            format!(
                "names process {pid} ({}), which is not named {name:?} (--reload-process)",
                crate::escape(comm)
            ),
        ))
    }

    /// Started before the pidfile was last `written`: else the PID was
    /// reused.
    fn started_before(
        &self,
        pid: i32,
        stat: &procfs::process::Stat,
        written: std::time::SystemTime,
    ) -> Result<(), PidError> {
        let started = procfs::boot_time_secs()
            .map(|boot| boot as f64 + stat.starttime as f64 / procfs::ticks_per_second() as f64);
        let written = written
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        if let Ok(started) = started
            && started > written + START_TOLERANCE_SECS
        {
            return Err(self.refused(
                Refusal::Pid,
                format!(
                    "names process {pid} ({}), which started {:.0} s after the pidfile was last \
                     written: the PID was reused and the pidfile is stale",
                    crate::escape(&stat.comm),
                    started - written
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: i32, ppid: i32, comm: &str, cmdline: &[&str]) -> Proc {
        Proc {
            pid,
            ppid,
            comm: comm.into(),
            start: 0,
            exe: Some(comm.into()),
            cmdline: cmdline.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn selects_top_most_matches_never_self_or_pause() {
        let procs = vec![
            p(1, 0, "pause", &["/pause"]),
            p(
                7,
                1,
                "certsync",
                &["/certsync", "run", "--reload-process", "nginx"],
            ),
            p(
                10,
                1,
                "nginx",
                &["nginx: master process nginx -g daemon off;"],
            ),
            p(11, 10, "nginx", &["nginx: worker process"]),
            p(12, 10, "nginx", &["nginx: worker process"]),
            p(20, 1, "sh", &["/bin/sh", "-c", "nginx -t"]),
            p(21, 20, "nginx", &["nginx", "-t"]),
        ];
        let roots: Vec<i32> = select(&Target::Name("nginx".into()), &procs, 7)
            .iter()
            .map(|p| p.pid)
            .collect();
        assert_eq!(
            roots,
            vec![10, 21],
            "workers are not signalled; separate trees are"
        );

        let re = Target::Cmdline(Regex::new("master process").unwrap());
        assert_eq!(select(&re, &procs, 7)[0].pid, 10);
        // certsync's own command line mentions nginx: it is still never chosen.
        let own = Target::Cmdline(Regex::new("reload-process").unwrap());
        assert!(select(&own, &procs, 7).is_empty());
        // certsync started by a wrapper shell whose command line matches:
        // the wrapper (an ancestor) is never signalled.
        let mut wrapped = procs.clone();
        wrapped.push(p(
            30,
            1,
            "sh",
            &["sh", "-c", "certsync run --reload-cmdline nginx"],
        ));
        wrapped.push(p(31, 30, "certsync", &["certsync", "run"]));
        let re = Target::Cmdline(Regex::new("reload-cmdline").unwrap());
        assert!(
            select(&re, &wrapped, 31).is_empty(),
            "the wrapper shell matched"
        );
        assert!(select(&Target::Cmdline(Regex::new("^/pause").unwrap()), &procs, 7).is_empty());
        assert!(select(&Target::Name("pause".into()), &procs, 7).is_empty());
    }

    #[test]
    fn names_match_comm_exe_or_argv0_and_comm_is_truncated() {
        let long = Proc {
            pid: 5,
            ppid: 1,
            comm: "kube-controller".into(), // the kernel's 15 bytes
            start: 0,
            exe: Some("kube-controller-manager".into()),
            cmdline: vec!["/usr/bin/kube-controller-manager".into()],
        };
        assert!(long.matches(&Target::Name("kube-controller-manager".into())));
        let renamed = Proc {
            exe: None,
            comm: "x".into(),
            ..long.clone()
        };
        assert!(
            renamed.matches(&Target::Name("kube-controller-manager".into())),
            "argv[0] base name"
        );
        assert!(!long.matches(&Target::Name("kube".into())));
    }

    #[test]
    fn pidfile_errors_are_clear() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("app.pid");
        let pidfile = Target::Pidfile {
            path: f.clone(),
            name: None,
        };
        let err = || signal(&pidfile, Signal::SIGHUP).unwrap_err().to_string();
        let e = err();
        assert!(e.starts_with(&format!("pidfile {}:", f.display())), "{e}");
        std::fs::write(&f, "garbage\n").unwrap();
        let e = err();
        assert!(e.contains("\"garbage\" is not a process id"), "{e}");
        std::fs::write(&f, format!("{}\n", std::process::id())).unwrap();
        let e = err();
        assert!(e.contains("names certsync itself"), "{e}");
        // This test's parent (cargo's harness or a shell) started us.
        let parent = nix::unistd::getppid().as_raw();
        if parent > 1 {
            std::fs::write(&f, format!("{parent}\n")).unwrap();
            let e = signal(
                &Target::Pidfile {
                    path: f.clone(),
                    name: None,
                },
                Signal::SIGHUP,
            )
            .unwrap_err()
            .to_string();
            assert!(e.contains("which started certsync"), "{e}");
            // And the process that started that one: every ancestor is
            // walked, not the parent alone.
            let grandparent = procfs::process::Process::new(parent)
                .and_then(|p| p.stat())
                .map_or(0, |s| s.ppid);
            if grandparent > 1 {
                std::fs::write(&f, format!("{grandparent}\n")).unwrap();
                let e = err();
                assert!(e.contains("which started certsync"), "{e}");
            }
        }
        // A PID whose process started after the pidfile was written.
        std::fs::write(&f, "1\n").unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        std::fs::write(&f, format!("{}\n", child.id())).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&f)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let e = err();
        let _ = child.kill();
        let _ = child.wait();
        assert!(e.contains("PID was reused") && e.contains("stale"), "{e}");
        // --reload-process too: a process of the right user but another name.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        std::fs::write(&f, format!("{}\n", child.id())).unwrap();
        let named = |name: &str| Target::Pidfile {
            path: f.clone(),
            name: Some(name.into()),
        };
        let e = signal(&named("nginx"), Signal::SIGCONT).unwrap_err();
        let sent = signal(&named("sleep"), Signal::SIGCONT);
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            matches!(
                e,
                PidError::Refused {
                    reason: Refusal::Name,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("not named \"nginx\""), "{e}");
        assert_eq!(sent.unwrap(), vec![child.id() as i32]);
        let e = signal(&Target::Name("no-such-process-xyz".into()), Signal::SIGHUP)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no process matches process name \"no-such-process-xyz\""),
            "{e}"
        );
    }
}
