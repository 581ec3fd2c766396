//! Find the main container's process and send it a signal.
//!
//! The process is looked up afresh for every reload (a restarted main
//! container has a new PID): by name or command-line pattern through `/proc`
//! (the pod shares its PID namespace, `shareProcessNamespace: true`), or by a
//! pidfile that is re-read each time ([`pidfile`]: the file alone is never
//! proof).
//!
//! Invariants: certsync never signals itself, one of its ancestors (the
//! shell or init that started it), PID 1 or the pod's `pause` process. When
//! several processes match (nginx master and workers), only the top-most
//! matching ancestor of each matching tree is signalled.

use nix::errno::Errno;
use nix::sys::signal::Signal;
use rustix::process::pidfd_send_signal;

mod pidfile;
mod procs;
use pidfile::pidfile_target;
pub use procs::{Chosen, Proc, Target, processes, select};
use procs::{open_pid, read_link};

use crate::reload::error::ReloadError;

/// Finds the target now and sends `signal`. Returns the PIDs signalled.
pub fn signal(target: &Target, signal: Signal) -> Result<Vec<i32>, ReloadError> {
    send(&find(target)?, signal)
}

/// The processes `target` names now, checked ([`select`], [`pidfile_target`]).
pub fn find(target: &Target) -> Result<Vec<Chosen>, ReloadError> {
    let me = std::process::id() as i32;
    let chosen: Vec<Chosen> = match target {
        Target::Pidfile { path, name } => vec![pidfile_target(path, name.as_deref(), me)?],
        _ => {
            let mut chosen = Vec::new();
            for p in select(target, &processes()?, me)? {
                // Opened after the selection: the process must still be
                // the one selected (same start time), else it is skipped.
                let Some(fd) = open_pid(p.pid)? else { continue };
                if read_link(p.pid).is_some_and(|now| now.start == p.link.start) {
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
        return Err(ReloadError::NoMatch {
            what: target.to_string(),
        });
    }
    Ok(chosen)
}

/// Sends `signal` through each pidfd of `chosen`. Returns their PIDs.
pub fn send(chosen: &[Chosen], signal: Signal) -> Result<Vec<i32>, ReloadError> {
    for Chosen { pid, comm, fd } in chosen {
        let sending = format!("sending {signal} to pid {pid} ({comm})");
        let Some(sig) = rustix::process::Signal::from_named_raw(signal as i32) else {
            return Err(ReloadError::Unsent(format!("{sending}: {}", Errno::EINVAL)));
        };
        pidfd_send_signal(fd, sig).map_err(|e| {
            ReloadError::Unsent(match e {
                rustix::io::Errno::PERM => format!(
                    "permission denied {sending}: certsync runs as another user without \
                     CAP_KILL; run it as the main container's user or add the KILL capability"
                ),
                rustix::io::Errno::SRCH => format!(
                    "pid {pid} ({comm}) exited after it was checked; {signal} was not sent \
                     (its number may now be another process's)"
                ),
                e => format!("{sending}: {}", Errno::from_raw(e.raw_os_error())),
            })
        })?;
    }
    Ok(chosen.iter().map(|c| c.pid).collect())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use regex::Regex;

    use super::procs::{Link, own_lineage};
    use super::*;

    fn p(pid: i32, ppid: i32, comm: &str, cmdline: &[&str]) -> Proc {
        Proc {
            pid,
            comm: comm.into(),
            link: Link {
                parent: ppid,
                start: 0,
            },
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
            .expect("lineage")
            .iter()
            .map(|p| p.pid)
            .collect();
        assert_eq!(
            roots,
            vec![10, 21],
            "workers are not signalled; separate trees are"
        );

        let re = Target::Cmdline(Regex::new("master process").unwrap());
        assert_eq!(select(&re, &procs, 7).expect("lineage")[0].pid, 10);
        // certsync's own command line mentions nginx: it is still never chosen.
        let own = Target::Cmdline(Regex::new("reload-process").unwrap());
        assert!(select(&own, &procs, 7).expect("lineage").is_empty());
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
            select(&re, &wrapped, 31).expect("lineage").is_empty(),
            "the wrapper shell matched"
        );
        assert!(
            select(&Target::Cmdline(Regex::new("^/pause").unwrap()), &procs, 7)
                .expect("lineage")
                .is_empty()
        );
        assert!(
            select(&Target::Name("pause".into()), &procs, 7)
                .expect("lineage")
                .is_empty()
        );
    }

    /// An ancestor of certsync whose parent cannot be read ends the choice:
    /// the processes above it are certsync's ancestors too, and a name or
    /// a pidfile must not select them.
    #[test]
    fn an_ancestor_that_cannot_be_read_refuses_every_candidate() {
        // certsync (31) under a hidden process 30, under a shell whose
        // command line matches.
        let procs = vec![
            p(1, 0, "init", &["/sbin/init"]),
            p(29, 1, "sh", &["sh", "-c", "runner --reload-cmdline nginx"]),
            p(31, 30, "certsync", &["certsync", "run"]),
        ];
        let re = Target::Cmdline(Regex::new("reload-cmdline").unwrap());
        assert!(matches!(
            select(&re, &procs, 31),
            Err(ReloadError::Lineage { pid: 30 })
        ));
        // With 30 seen, 29 is known as an ancestor and never chosen.
        let mut seen = procs.clone();
        seen.push(p(30, 29, "runner", &["runner"]));
        assert!(select(&re, &seen, 31).expect("lineage").is_empty());
        // The pidfile check's walk, by /proc: the same refusal.
        let link = |parent| Link { parent, start: 0 };
        let parents = HashMap::from([(31, link(30)), (30, link(29))]);
        assert!(matches!(
            own_lineage(31, |pid| parents.get(&pid).copied()),
            Err(ReloadError::Lineage { pid: 29 })
        ));
        let me = std::process::id() as i32;
        let mine = own_lineage(me, read_link).expect("this test's own ancestors");
        assert!(mine.contains(&me) && mine.len() > 1, "{mine:?}");
    }

    /// Parent links that loop never describe a live process tree: they
    /// were read across an exit and a reused PID, and a walk that ends
    /// there without an error has left out whatever is above the loop.
    /// (certsync starts no process, so a loop through its own child is
    /// not reachable today; a reused ancestor PID whose new parent is
    /// outside the set continues the walk through a stranger instead.
    /// Both are caught by one rule: a parent never started after its
    /// child.)
    #[test]
    fn attack_a_loop_in_the_parent_links_is_refused() {
        // certsync 31 under 30; 30's number now another process's,
        // whose parent reads as 31.
        let link = |parent, start| Link { parent, start };
        let parents = HashMap::from([(31, link(30, 5)), (30, link(31, 9)), (29, link(1, 1))]);
        assert!(matches!(
            own_lineage(31, |pid| parents.get(&pid).copied()),
            Err(ReloadError::Lineage { .. })
        ));
        // The same start times (a loop the clock cannot tell): the loop.
        let parents = HashMap::from([(31, link(30, 5)), (30, link(31, 5))]);
        assert!(matches!(
            own_lineage(31, |pid| parents.get(&pid).copied()),
            Err(ReloadError::Lineage { .. })
        ));
        // A reused number whose new process's parent leads on to a stranger:
        // it started after certsync, its child.
        let parents = HashMap::from([(31, link(30, 5)), (30, link(7, 9)), (7, link(1, 1))]);
        assert!(matches!(
            own_lineage(31, |pid| parents.get(&pid).copied()),
            Err(ReloadError::Lineage { pid: 31 })
        ));
        // The same through the scan: a shell 29 above the real 30 matches
        // and would be chosen.
        let procs = vec![
            p(1, 0, "init", &["/sbin/init"]),
            p(29, 1, "sh", &["sh", "-c", "runner --reload-cmdline nginx"]),
            p(30, 31, "hook", &["hook"]),
            p(31, 30, "certsync", &["certsync", "run"]),
        ];
        let re = Target::Cmdline(Regex::new("reload-cmdline").unwrap());
        assert!(matches!(
            select(&re, &procs, 31),
            Err(ReloadError::Lineage { .. })
        ));
    }

    #[test]
    fn names_match_comm_exe_or_argv0_and_comm_is_truncated() {
        let long = Proc {
            pid: 5,
            comm: "kube-controller".into(), // the kernel's 15 bytes
            link: Link {
                parent: 1,
                start: 0,
            },
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
            matches!(e, ReloadError::Refused { reason: "name", .. }),
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
