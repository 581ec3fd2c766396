//! Find the main container's process and send it a signal.
//!
//! The process is looked up afresh for every reload (a restarted main
//! container has a new PID): by name or command-line pattern through `/proc`
//! (the pod shares its PID namespace, `shareProcessNamespace: true`), or by a
//! pidfile that is re-read each time.
//!
//! Invariants: certsync never signals itself or the pod's `pause` process;
//! when several processes match (nginx master and workers), only the
//! top-most matching ancestor of each matching tree is signalled.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use regex::Regex;

#[derive(Debug, thiserror::Error)]
pub enum PidError {
    #[error("no process matches {what} (certsync itself and pause are never candidates)")]
    NoMatch { what: String },
    #[error("pidfile {path}: {problem}")]
    Pidfile { path: PathBuf, problem: String },
    #[error(
        "permission denied sending {signal} to pid {pid} ({comm}): certsync runs as another user \
         without CAP_KILL; run it as the main container's user or add the KILL capability"
    )]
    Permission {
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

/// How the main process is found.
#[derive(Debug, Clone)]
pub enum Target {
    /// Exact process name (`comm`, or the executable's or argv[0]'s base name).
    Name(String),
    /// A regular expression matched against the space-joined command line.
    Cmdline(Regex),
    /// A file holding the PID, re-read for every reload.
    Pidfile(PathBuf),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Name(n) => write!(f, "process name {n:?}"),
            Self::Cmdline(r) => write!(f, "command line /{r}/"),
            Self::Pidfile(p) => write!(f, "pidfile {}", p.display()),
        }
    }
}

/// One process as seen in `/proc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    pub pid: i32,
    pub ppid: i32,
    pub comm: String,
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
            Target::Pidfile(_) => false,
        }
    }
}

/// Every process visible in `/proc`, skipping those that vanish mid-read.
pub fn processes() -> Result<Vec<Proc>, PidError> {
    let all = procfs::process::all_processes().map_err(|e| PidError::Proc(e.to_string()))?;
    Ok(all
        .filter_map(Result::ok)
        .filter_map(|p| {
            let stat = p.stat().ok()?;
            let exe = p
                .exe()
                .ok()
                .and_then(|e| e.file_name().map(|n| n.to_string_lossy().into_owned()));
            Some(Proc {
                pid: stat.pid,
                ppid: stat.ppid,
                comm: stat.comm,
                exe,
                cmdline: p.cmdline().unwrap_or_default(),
            })
        })
        .collect())
}

/// The processes to signal for `target` among `procs`: matches that are
/// neither `me` nor `pause`, and whose ancestors do not match too.
pub fn select(target: &Target, procs: &[Proc], me: i32) -> Vec<Proc> {
    let eligible = |p: &Proc| p.pid != me && p.comm != "pause";
    let matching: HashSet<i32> = procs
        .iter()
        .filter(|p| eligible(p) && p.matches(target))
        .map(|p| p.pid)
        .collect();
    let parent: HashMap<i32, i32> = procs.iter().map(|p| (p.pid, p.ppid)).collect();
    let has_matching_ancestor = |mut pid: i32| {
        let mut seen = HashSet::new();
        while let Some(&pp) = parent.get(&pid) {
            if pp == 0 || !seen.insert(pp) {
                return false;
            }
            if matching.contains(&pp) {
                return true;
            }
            pid = pp;
        }
        false
    };
    let mut roots: Vec<Proc> = procs
        .iter()
        .filter(|p| matching.contains(&p.pid) && !has_matching_ancestor(p.pid))
        .cloned()
        .collect();
    roots.sort_by_key(|p| p.pid);
    roots
}

/// Finds the target now and sends `signal`. Returns the PIDs signalled.
pub fn signal(target: &Target, signal: Signal) -> Result<Vec<i32>, PidError> {
    let me = std::process::id() as i32;
    let chosen = match target {
        Target::Pidfile(path) => {
            let pid = read_pidfile(path)?;
            if pid == me {
                return Err(PidError::Pidfile {
                    path: path.clone(),
                    problem: "names certsync itself".into(),
                });
            }
            let comm = procfs::process::Process::new(pid)
                .and_then(|p| p.stat())
                .map(|s| s.comm)
                .map_err(|_| PidError::Pidfile {
                    path: path.clone(),
                    problem: format!("process {pid} does not exist"),
                })?;
            vec![(pid, comm)]
        }
        _ => select(target, &processes()?, me)
            .into_iter()
            .map(|p| (p.pid, p.comm))
            .collect(),
    };
    if chosen.is_empty() {
        return Err(PidError::NoMatch {
            what: target.to_string(),
        });
    }
    for (pid, comm) in &chosen {
        kill(Pid::from_raw(*pid), signal).map_err(|errno| match errno {
            Errno::EPERM => PidError::Permission {
                pid: *pid,
                comm: comm.clone(),
                signal,
            },
            errno => PidError::Signal {
                pid: *pid,
                comm: comm.clone(),
                signal,
                errno,
            },
        })?;
    }
    Ok(chosen.into_iter().map(|(pid, _)| pid).collect())
}

fn read_pidfile(path: &Path) -> Result<i32, PidError> {
    let err = |problem: String| PidError::Pidfile {
        path: path.to_owned(),
        problem,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    match text.trim().parse::<i32>() {
        Ok(pid) if pid > 1 => Ok(pid),
        _ => Err(err(format!("{:?} is not a process id", text.trim()))),
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
        assert!(select(&Target::Name("pause".into()), &procs, 7).is_empty());
    }

    #[test]
    fn names_match_comm_exe_or_argv0_and_comm_is_truncated() {
        let long = Proc {
            pid: 5,
            ppid: 1,
            comm: "kube-controller".into(), // the kernel's 15 bytes
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
        let e = signal(&Target::Pidfile(f.clone()), Signal::SIGHUP)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with(&format!("pidfile {}:", f.display())), "{e}");
        std::fs::write(&f, "garbage\n").unwrap();
        let e = signal(&Target::Pidfile(f.clone()), Signal::SIGHUP)
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"garbage\" is not a process id"), "{e}");
        std::fs::write(&f, format!("{}\n", std::process::id())).unwrap();
        let e = signal(&Target::Pidfile(f), Signal::SIGHUP)
            .unwrap_err()
            .to_string();
        assert!(e.contains("names certsync itself"), "{e}");
        let e = signal(&Target::Name("no-such-process-xyz".into()), Signal::SIGHUP)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no process matches process name \"no-such-process-xyz\""),
            "{e}"
        );
    }
}
