//! The local-user attacker position (docs/security.md): an unprivileged
//! user of the node who owns a source directory, or can write a path
//! certsync reads, must not make root certsync read or publish anything
//! outside what that user could read anyway. Each test runs certsync as
//! root and the attacker as uid 65534 through `setpriv`; without root it
//! skips (and fails under CI, which runs as root).

mod support;

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::local_user::*;
use support::*;

/// The bytes of the root-only file the attacker wants published.
const SECRET: &[u8] = b"ROOT-ONLY-SECRET\n";

/// Two directories another user may change, in `d`: a sticky
/// world-writable one (a stand-in for /tmp) and one the attacker owns.
fn sticky_and_user(d: &Path) -> (PathBuf, PathBuf) {
    let sticky = d.join("sticky");
    fs::create_dir(&sticky).unwrap();
    fs::set_permissions(&sticky, fs::Permissions::from_mode(0o1777)).unwrap();
    let user = d.join("user");
    fs::create_dir(&user).unwrap();
    chown(&user, USER);
    (sticky, user)
}

/// Every file under `dir`, recursively, not following symlinks.
fn files_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let t = e.file_type().unwrap();
        if t.is_dir() {
            out.extend(files_under(&e.path()));
        } else if t.is_file() {
            out.push((e.path(), fs::read(e.path()).unwrap_or_default()));
        }
    }
    out
}

/// The owner of a `dir:` source swaps a
/// subdirectory the source's link goes through with a symlink to a
/// root-only directory (`renameat2(RENAME_EXCHANGE)`, in a loop) while
/// certsync re-reads the directory every few milliseconds. No revision may
/// ever hold the root-only file; the inside file is still published.
#[test]
fn a_source_owner_swapping_directories_never_gets_a_root_only_file() {
    let Some(d) = as_root() else {
        return;
    };
    // Root's: a directory only root may enter, holding the prize.
    let secret = d.path().join("secret");
    fs::create_dir(&secret).unwrap();
    fs::write(secret.join("data.txt"), SECRET).unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o700)).unwrap();
    // The user's: the source directory and everything in it. The swapped
    // pair sits one level down, where the source's inotify watch does not
    // see it (so certsync reads on every resync, not on a flood of events).
    let src = d.path().join("src");
    fs::create_dir_all(src.join("a/sub")).unwrap();
    fs::write(src.join("a/sub/data.txt"), b"inside\n").unwrap();
    symlink("a/sub/data.txt", src.join("data.txt")).unwrap();
    symlink(&secret, src.join("a/link")).unwrap();
    for p in ["", "a", "a/sub", "a/sub/data.txt", "data.txt", "a/link"] {
        chown(&src.join(p), USER);
    }
    let target = d.path().join("t");

    let swapper = Command::new("setpriv")
        .args(AS_USER)
        .arg(std::env::current_exe().unwrap())
        .args(["swap_sub_and_link", "--exact", "--ignored", "--nocapture"])
        .env("CERTSYNC_TEST_SWAP_DIR", src.join("a"))
        .env("CERTSYNC_TEST_SWAP_SECS", "6")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let sync = format!(
        "dir:{}={},files=data.txt,allow-non-pem",
        src.display(),
        target.display()
    );
    let cs = Certsync::start(
        &[
            "run",
            "--sync",
            &sync,
            "--debounce",
            "0s",
            "--resync",
            "5ms",
            "--keep-revisions",
            "1000",
        ],
        d.path(),
    );
    let start = Instant::now();
    let mut seen_inside = false;
    while start.elapsed() < Duration::from_secs(6) {
        for (path, bytes) in files_under(&target) {
            assert_ne!(
                bytes,
                SECRET,
                "{} holds the root-only file; log:\n{}",
                path.display(),
                cs.log()
            );
            seen_inside |= bytes == b"inside\n";
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = swapper.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&out.stdout);
    let swaps: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("swaps ")?.trim().parse().ok())
        .unwrap_or_else(|| panic!("the swapper did not report: {out}"));
    assert!(swaps > 1000, "the swap loop barely ran: {swaps} swaps");
    for (path, bytes) in files_under(&target) {
        assert_ne!(bytes, SECRET, "{} holds the root-only file", path.display());
    }
    assert!(seen_inside, "the file inside was never published");
    let log = cs.log();
    let _ = cs.terminate();
    eprintln!("{swaps} swaps; log:\n{log}");
    assert!(
        log.contains("outside the source directory"),
        "the escape was never reported:\n{log}"
    );
}

/// The attacker's half of the test above, run as uid 65534: exchanges
/// `sub` (a directory) and `link` (a symlink to root's directory) for
/// `CERTSYNC_TEST_SWAP_SECS` seconds and prints how many times.
#[test]
#[ignore = "run by a_source_owner_swapping_directories_never_gets_a_root_only_file"]
fn swap_sub_and_link() {
    let Some(dir) = std::env::var_os("CERTSYNC_TEST_SWAP_DIR") else {
        return;
    };
    let secs: u64 = std::env::var("CERTSYNC_TEST_SWAP_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let dir = fs::File::open(&dir).unwrap();
    let start = Instant::now();
    let mut swaps = 0u64;
    while start.elapsed() < Duration::from_secs(secs) {
        nix::fcntl::renameat2(
            &dir,
            "sub",
            &dir,
            "link",
            nix::fcntl::RenameFlags::RENAME_EXCHANGE,
        )
        .unwrap();
        swaps += 1;
    }
    println!("swaps {swaps}");
}

/// Runs certsync to completion as root, failing (not hanging) past
/// [`PATIENCE`]. Returns (exit code, stderr).
fn run_bounded(args: &[&str]) -> (i32, String) {
    let (code, _, err) = support::run_bounded(args, Path::new("."));
    (code, err)
}

/// A directory of the attacker's, holding a FIFO (no writer: opening it
/// for reading blocks forever) where certsync is told a file is.
fn user_fifo(d: &Path, name: &str) -> PathBuf {
    let dir = d.join("user");
    fs::create_dir_all(&dir).unwrap();
    chown(&dir, USER);
    let fifo = dir.join(name);
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    chown(&fifo, USER);
    fifo
}

/// The config file is read once, on the opened descriptor: a FIFO (or
/// `/dev/zero`) where it should be is refused at once, naming it, instead
/// of hanging certsync or filling its memory.
#[test]
fn a_config_file_that_is_not_a_regular_file_is_refused_not_waited_on() {
    let Some(d) = as_root() else {
        return;
    };
    let fifo = user_fifo(d.path(), "certsync.yaml");
    for path in [fifo.as_path(), Path::new("/dev/zero")] {
        let (code, err) = run_bounded(&["run", "--once", "--config", path.to_str().unwrap()]);
        assert_ne!(code, 0, "{err}");
        assert!(
            err.contains(&path.display().to_string()) && err.contains("not a regular file"),
            "{err}"
        );
    }
}

/// Files a kubeconfig names (CA, client certificate and key) are read by
/// certsync as any file it is handed: regular files only, on the opened
/// descriptor, with a size cap, never by kube's own unchecked read.
#[test]
fn files_a_kubeconfig_names_must_be_regular_files() {
    let Some(d) = as_root() else {
        return;
    };
    // The kubeconfig itself first.
    let fifo = user_fifo(d.path(), "kubeconfig");
    let target = d.path().join("t");
    let (code, err) = run_bounded(&[
        "run",
        "--once",
        "--kubeconfig",
        fifo.to_str().unwrap(),
        "--sync",
        &format!("secret:default/x={}", target.display()),
    ]);
    assert_ne!(code, 0, "{err}");
    assert!(
        err.contains(&fifo.display().to_string()) && err.contains("not a regular file"),
        "kubeconfig: {err}"
    );
    // tokenFile too: kube re-reads it as it rotates, so it stays a file,
    // but one that is not a regular file is refused at start.
    for field in [
        "certificate-authority",
        "client-certificate",
        "client-key",
        "tokenFile",
    ] {
        let fifo = user_fifo(d.path(), &format!("{field}.pem"));
        let (cluster_extra, user_extra) = if field == "certificate-authority" {
            (format!("\n    {field}: {}", fifo.display()), String::new())
        } else {
            (String::new(), format!("\n    {field}: {}", fifo.display()))
        };
        let kubeconfig = d.path().join(format!("{field}.kubeconfig"));
        fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1{cluster_extra}\n\
                 users:\n- name: u\n  user:\n    token: t{user_extra}\n\
                 contexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n"
            ),
        )
        .unwrap();
        let target = d.path().join("t");
        let (code, err) = run_bounded(&[
            "run",
            "--once",
            "--once-timeout",
            "5s",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--sync",
            &format!("secret:default/x={}", target.display()),
        ]);
        assert_ne!(code, 0, "{err}");
        assert!(
            err.contains(&fifo.display().to_string()) && err.contains("not a regular file"),
            "{field}: {err}"
        );
        fs::remove_file(&fifo).unwrap();
    }
}

/// A `ca:` target another user could re-create is refused at start,
/// naming it: under a directory that user owns, or under a sticky
/// world-writable one (/tmp: a cleaner removes an old entry, anyone makes
/// it again). Other mappings' targets are not held to this yet (a
/// sidecar's target inside a 0777 emptyDir would be refused). The directories here stand in for /tmp
/// and for a user's own directory (tests keep their files under
/// target/tmp, see .cargo/config.toml).
#[test]
fn a_ca_target_another_user_could_recreate_is_refused_at_start() {
    // Not under /tmp, which is itself such a directory.
    let Some(d) = as_root() else {
        return;
    };
    let (sticky, user) = sticky_and_user(d.path());
    let ca = format!("ca:{}=", d.path().join("ca").display());
    for (sync, target) in [
        (ca.clone(), sticky.join("root-made/t")),
        (ca.clone(), sticky.join("t")),
        (ca.clone(), user.join("t")),
        (ca.clone(), user.join("deeper/t")),
    ] {
        // Root made the directory on the way: still re-creatable by anyone
        // once removed.
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).unwrap();
        }
        let sync = format!("{sync}{},cn=x,usage=server-auth", target.display());
        assert_refused_at_start(&sync, &format!("target {}", target.display()), &target);
    }
    // The same mapping into a directory only root may change gets past
    // the target check: it fails on the CA certificate it lacks instead.
    let target = d.path().join("root-only/t");
    let sync = format!("{ca}{},cn=x,usage=server-auth", target.display());
    let (code, err) = run_bounded(&["run", "--once", "--sync", &sync]);
    assert_ne!(code, 0, "{err}");
    assert!(
        !err.contains("may be changed by another user") && err.contains("ca.crt"),
        "{err}"
    );
}

/// Runs `run --once --sync SYNC` and asserts it is refused at start (exit
/// 64) naming `what` (`target PATH`, `source PATH`) as a path another user
/// may change, and that nothing reached `target`.
fn assert_refused_at_start(sync: &str, what: &str, target: &Path) {
    let (code, err) = run_bounded(&["run", "--once", "--sync", sync]);
    assert_eq!(code, 64, "{sync}: {err}");
    assert!(
        err.contains(what) && err.contains("may be changed by another user"),
        "{sync}: {err}"
    );
    assert!(!target.join("tls.crt").exists(), "{sync}: nothing written");
}

/// Attack: every target, not only a `ca:` one. A root certsync that writes
/// a Secret's key under a host's shared temporary directory (sticky,
/// writable by all: /tmp, /var/tmp, /dev/shm) or under a directory a user
/// owns writes it where that user can re-create the target beforehand or
/// after a cleaner removed it, and the consumer then reads that user's
/// pair by path. Refused at start, naming the path. A volume's root that
/// every container of a pod may write (kubelet makes emptyDirs 0777, not
/// sticky) is a mount point and stays usable: the sidecar layout,
/// `/certs` an emptyDir and the target `/certs/web`.
#[test]
fn any_target_another_user_could_recreate_is_refused_at_start() {
    let Some(d) = as_root() else {
        return;
    };
    let (sticky, user) = sticky_and_user(d.path());
    let open = d.path().join("open");
    fs::create_dir(&open).unwrap();
    fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
    let source = format!("dir:{}/examples/certs=", env!("CARGO_MANIFEST_DIR"));
    for target in [
        sticky.join("t"),
        sticky.join("root-made/t"),
        user.join("t"),
        open.join("t"),
    ] {
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).unwrap();
        }
        let sync = format!("{source}{}", target.display());
        assert_refused_at_start(&sync, &format!("target {}", target.display()), &target);
    }
    // The control: a volume root writable by all (an emptyDir) is a
    // mount point; a target inside it is published.
    let volume = d.path().join("volume");
    if !mount_tmpfs(&volume, "0777") {
        return;
    }
    let target = volume.join("web");
    let sync = format!("{source}{}", target.display());
    let (code, err) = run_bounded(&["run", "--once", "--sync", &sync]);
    let _ = Command::new("umount").arg(&volume).status();
    assert_eq!(code, 0, "a target inside a writable volume root: {err}");
}

/// Attack: the consumer's user owns its pidfile's
/// directory, and that directory sits where the user may rename it (a
/// sticky /tmp, or a directory of theirs). Swapping it for a link to a
/// root-owned directory with a root-owned pidfile naming a root process
/// passed the owner check, and root's process got the signal. The
/// directories above the pidfile's own must be root's (or a volume's
/// root), checked at start, naming the path; the pidfile's directory
/// itself may be the consumer's.
#[test]
fn a_pidfile_whose_directory_its_user_may_replace_is_refused_at_start() {
    let Some(d) = as_root() else {
        return;
    };
    let (sticky, user) = sticky_and_user(d.path());
    let root_only = d.path().join("root-only");
    fs::create_dir(&root_only).unwrap();
    let target = d.path().join("t");
    let sync = format!(
        "dir:{}/examples/certs={}",
        env!("CARGO_MANIFEST_DIR"),
        target.display()
    );
    for dir in [sticky.join("app"), user.join("run"), root_only.join("app")] {
        fs::create_dir_all(&dir).unwrap();
        chown(&dir, USER);
        let pidfile = dir.join("app.pid");
        let (code, err) = run_bounded(&[
            "run",
            "--once",
            "--sync",
            &sync,
            "--reload-pidfile",
            pidfile.to_str().unwrap(),
        ]);
        if dir.starts_with(&root_only) {
            // The control: the consumer's own directory under root's.
            assert!(!err.contains("may be changed by another user"), "{err}");
            assert_eq!(code, 0, "{err}");
        } else {
            assert_eq!(code, 64, "{}: {err}", pidfile.display());
            assert!(
                err.contains("--reload-pidfile") && err.contains("may be changed by another user"),
                "{}: {err}",
                pidfile.display()
            );
        }
    }
}

/// Attack: the owner of a `dir:` source may rename its
/// own entry where it sits (in a sticky /tmp, or under a directory of
/// theirs) and put a link to a root-only directory in its place: certsync
/// finds the source again by its path, so the files beneath that
/// directory were published (a root key as `tls.key`, owned by the
/// consumer). The directories above a source (as written and where its
/// links lead) must be root's or a volume's root, checked at start; the
/// source itself may be its user's.
#[test]
fn a_source_its_owner_may_replace_is_refused_at_start() {
    let Some(d) = as_root() else {
        return;
    };
    let (sticky, user) = sticky_and_user(d.path());
    let root_only = d.path().join("root-only");
    fs::create_dir(&root_only).unwrap();
    let certs = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/certs");
    for (i, src) in [sticky.join("src"), user.join("src"), root_only.join("src")]
        .iter()
        .enumerate()
    {
        fs::create_dir_all(src).unwrap();
        for f in ["tls.crt", "tls.key"] {
            fs::copy(certs.join(f), src.join(f)).unwrap();
        }
        chown(src, USER);
        let target = d.path().join(format!("t{i}"));
        let sync = format!("dir:{}={}", src.display(), target.display());
        if src.starts_with(&root_only) {
            // The control: the user's own source under root's directory.
            let (code, err) = run_bounded(&["run", "--once", "--sync", &sync]);
            assert_eq!(code, 0, "{err}");
        } else {
            assert_refused_at_start(&sync, &format!("source {}", src.display()), &target);
        }
    }
}

/// Attack: a `dir:` source that is root's symlink into a user's directory
/// where nothing exists yet. Where it leads cannot be judged at start, and
/// once the user makes that name a link to a root-only directory, root's
/// key there was published to the user (the directories certsync's reader
/// opened beneath the source were root's). Refused at start: a source's
/// way is judged as written and where its links lead, and a link that
/// leads nowhere yet is no way that can be judged.
#[test]
fn attack_a_source_linked_to_a_name_a_user_may_make_later_is_refused() {
    let Some(d) = as_root() else {
        return;
    };
    let (_sticky, user) = sticky_and_user(d.path());
    let root_only = d.path().join("root-only");
    fs::create_dir(&root_only).unwrap();
    let src = root_only.join("src");
    std::os::unix::fs::symlink(user.join("certs"), &src).unwrap();
    let target = d.path().join("t");
    let sync = format!("dir:{}={}", src.display(), target.display());
    let (code, err) = run_bounded(&["run", "--once", "--sync", &sync]);
    assert_eq!(code, 64, "{err}");
    assert!(
        err.contains(&format!("source {}", src.display())) && err.contains("does not exist yet"),
        "{err}"
    );
    assert!(!target.join("tls.crt").exists(), "nothing written");
}

/// A target is 0755 (its consumer reads it), so any local user can open it
/// read-only and hold a flock on it. Writers must lock something only
/// certsync's user can open: with the user's flock held, `run --once` still
/// publishes, well before its timeout, instead of waiting on the user
/// forever.
#[test]
fn a_user_flocking_the_target_directory_does_not_stop_publishing() {
    if !tools::have(&["flock"]) {
        tools::skip("needs flock (util-linux) to hold a lock as the user");
        return;
    }
    let Some(d) = as_root() else {
        return;
    };
    let target = d.path().join("t");
    fs::create_dir(&target).unwrap();
    fs::set_permissions(&target, fs::Permissions::from_mode(0o755)).unwrap();
    // The user: flock(1) opens a directory read-only and holds LOCK_EX
    // while `sleep` runs (-o: the lock is flock's own, gone when it is).
    // In a process group of its own: flock runs `sleep` as its child, and
    // killing flock alone would leave that `sleep` holding the test's
    // output for a minute (nextest reports the test as leaky).
    let mut holder = Command::new("setpriv")
        .args(AS_USER)
        .args(["flock", "-o", "-x"])
        .arg(&target)
        .args(["sleep", "60"])
        .process_group(0)
        .spawn()
        .unwrap();
    wait_for("the user's flock on the target", || {
        let dir = fs::File::open(&target).unwrap();
        matches!(
            nix::fcntl::Flock::lock(dir, nix::fcntl::FlockArg::LockExclusiveNonblock),
            Err((_, nix::errno::Errno::EWOULDBLOCK))
        )
        .then_some(())
    });
    let sync = format!(
        "dir:{}/examples/certs={}",
        env!("CARGO_MANIFEST_DIR"),
        target.display()
    );
    let out = std::panic::catch_unwind(|| {
        run_bounded(&["run", "--once", "--once-timeout", "10s", "--sync", &sync])
    });
    let group = nix::unistd::Pid::from_raw(i32::try_from(holder.id()).expect("pid"));
    let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    let _ = holder.wait();
    let (code, err) = out.unwrap();
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        fs::read(target.join("tls.crt")).unwrap(),
        fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/certs/tls.crt")).unwrap()
    );
}

/// With `fs.protected_hardlinks=0` (the kernel's default) a user may
/// hard-link a root-only file into a source directory they own. The link is
/// made by root here (the same inode state, without changing the machine's
/// sysctl): a file with several links whose owner is not the source
/// directory's is refused, naming it; the user's own hard-linked file is
/// still published.
#[test]
fn a_root_only_file_hard_linked_into_a_users_source_is_refused() {
    let Some(d) = as_root() else {
        return;
    };
    let certs = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/certs");
    // Root's: a key only root may read, in a directory only root may enter.
    let secret = d.path().join("secret");
    fs::create_dir(&secret).unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o700)).unwrap();
    fs::copy(certs.join("tls.key"), secret.join("tls.key")).unwrap();
    fs::set_permissions(secret.join("tls.key"), fs::Permissions::from_mode(0o600)).unwrap();
    // The user's source directory: their certificate, root's key linked in.
    let src = d.path().join("src");
    fs::create_dir(&src).unwrap();
    fs::copy(certs.join("tls.crt"), src.join("tls.crt")).unwrap();
    fs::hard_link(secret.join("tls.key"), src.join("tls.key")).unwrap();
    chown(&src, USER);
    chown(&src.join("tls.crt"), USER);
    let target = d.path().join("t");
    let sync = format!("dir:{}={}", src.display(), target.display());
    let (code, err) = run_bounded(&["run", "--once", "--once-timeout", "5s", "--sync", &sync]);
    assert_ne!(code, 0, "{err}");
    assert!(
        err.contains(&src.join("tls.key").display().to_string()) && err.contains("could not read"),
        "{err}"
    );
    assert!(
        fs::symlink_metadata(target.join("tls.key")).is_err(),
        "root's key published"
    );
    // Root replaces its own file by rename
    // (kubeadm-style rotation, any write-then-rename tool): the user's
    // link is now the inode's only one. Still root's file in the user's
    // directory, which the user could not read: refused, whatever the
    // link count, also with files=all.
    fs::write(secret.join("tls.key.new"), b"rotated").unwrap();
    fs::rename(secret.join("tls.key.new"), secret.join("tls.key")).unwrap();
    for sync in [
        sync.clone(),
        format!(
            "dir:{}={},files=all,allow-non-pem",
            src.display(),
            target.display()
        ),
    ] {
        let (code, err) = run_bounded(&["run", "--once", "--once-timeout", "5s", "--sync", &sync]);
        assert_ne!(code, 0, "{sync}: {err}");
        assert!(
            err.contains(&src.join("tls.key").display().to_string())
                && err.contains("uid 0")
                && err.contains("could not read"),
            "{sync}: {err}"
        );
        assert!(
            fs::symlink_metadata(target.join("tls.key")).is_err(),
            "{sync}: root's key published with one link"
        );
    }
    // A root file everyone may read gives the user nothing: published.
    fs::set_permissions(src.join("tls.key"), fs::Permissions::from_mode(0o644)).unwrap();
    let (code, err) = run_bounded(&["run", "--once", "--once-timeout", "5s", "--sync", &sync]);
    assert_eq!(code, 0, "a root file others may read: {err}");
    fs::remove_dir_all(&target).unwrap();
    // The control: the user's own key, hard-linked by them (a backup).
    fs::remove_file(src.join("tls.key")).unwrap();
    fs::copy(certs.join("tls.key"), src.join("tls.key")).unwrap();
    chown(&src.join("tls.key"), USER);
    fs::hard_link(src.join("tls.key"), src.join("backup.key")).unwrap();
    let (code, err) = run_bounded(&["run", "--once", "--once-timeout", "5s", "--sync", &sync]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        fs::read(target.join("tls.key")).unwrap(),
        fs::read(certs.join("tls.key")).unwrap()
    );
}

/// The same link made one level down: the source directory is root's (so
/// a root-owned file matches its owner), but a link in it leads into a
/// subdirectory a user owns, where the user hard-linked root's key. Who
/// owns the source says nothing about who made a link below it: a file
/// with several links owned by certsync's own user is refused too.
#[test]
fn a_root_only_file_hard_linked_below_a_root_source_is_refused() {
    let Some(d) = as_root() else {
        return;
    };
    let certs = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/certs");
    let secret = d.path().join("secret");
    fs::create_dir(&secret).unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o700)).unwrap();
    fs::copy(certs.join("tls.key"), secret.join("tls.key")).unwrap();
    fs::set_permissions(secret.join("tls.key"), fs::Permissions::from_mode(0o600)).unwrap();
    // Root's source; the user's drop box inside it, which root's links use.
    let src = d.path().join("src");
    fs::create_dir_all(src.join("user")).unwrap();
    fs::copy(certs.join("tls.crt"), src.join("tls.crt")).unwrap();
    symlink("user/tls.key", src.join("tls.key")).unwrap();
    chown(&src.join("user"), USER);
    fs::hard_link(secret.join("tls.key"), src.join("user/tls.key")).unwrap();
    let target = d.path().join("t");
    let sync = format!("dir:{}={}", src.display(), target.display());
    let (code, err) = run_bounded(&["run", "--once", "--once-timeout", "5s", "--sync", &sync]);
    assert_ne!(code, 0, "{err}");
    assert!(
        err.contains(&src.join("tls.key").display().to_string()) && err.contains("could not read"),
        "{err}"
    );
    assert!(
        fs::symlink_metadata(target.join("tls.key")).is_err(),
        "root's key published"
    );
    // Root removes its own name; the link in the user's
    // subdirectory is the only one left. Still refused.
    fs::remove_file(secret.join("tls.key")).unwrap();
    let (code, err) = run_bounded(&["run", "--once", "--once-timeout", "5s", "--sync", &sync]);
    assert_ne!(code, 0, "one link left: {err}");
    assert!(err.contains("could not read"), "{err}");
    assert!(
        fs::symlink_metadata(target.join("tls.key")).is_err(),
        "root's key published with one link"
    );
    // The control: the user's own key in their subdirectory is published
    // (root linked through it on purpose).
    fs::remove_file(src.join("user/tls.key")).unwrap();
    fs::copy(certs.join("tls.key"), src.join("user/tls.key")).unwrap();
    chown(&src.join("user/tls.key"), USER);
    let (code, err) = run_bounded(&["run", "--once", "--once-timeout", "5s", "--sync", &sync]);
    assert_eq!(code, 0, "{err}");
}

/// A root-owned source other users may write (0777, 1777, 0770 with their
/// group): a root key hard-linked in has the directory's owner, and was
/// published. Such a source has more writers than one user, so no owner can
/// vouch for what is in it: refused at start (exit 64), naming it.
#[test]
fn a_source_others_may_write_is_refused_at_start() {
    let Some(d) = as_root() else {
        return;
    };
    let certs = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/certs");
    for (i, mode) in [0o777, 0o1777, 0o770].into_iter().enumerate() {
        let src = d.path().join(format!("src{i}"));
        fs::create_dir(&src).unwrap();
        for f in ["tls.crt", "tls.key"] {
            fs::copy(certs.join(f), src.join(f)).unwrap();
        }
        std::os::unix::fs::chown(&src, Some(0), Some(USER)).unwrap();
        fs::set_permissions(&src, fs::Permissions::from_mode(mode)).unwrap();
        let target = d.path().join(format!("t{i}"));
        let sync = format!("dir:{}={}", src.display(), target.display());
        assert_refused_at_start(&sync, &format!("source {}", src.display()), &target);
    }
}

/// The volume-root exception let a `dir:` source, or a pidfile's
/// directory, sit inside a mount point other users may write (an
/// emptyDir-style 0777 volume, an fsGroup-style root:group 2775 one).
/// Whoever writes the volume renames the source (or the pidfile's
/// directory) and puts a link to a root-only directory in its place. Both
/// are refused at start (exit 64), naming the path, mount point or not.
#[test]
fn a_source_or_pidfile_inside_a_writable_volume_root_is_refused_at_start() {
    let Some(d) = as_root() else {
        return;
    };
    let certs = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/certs");
    for (i, mode) in ["0777", "2775"].into_iter().enumerate() {
        let vol = d.path().join(format!("vol{i}"));
        if !mount_tmpfs(&vol, mode) {
            return;
        }
        std::os::unix::fs::chown(&vol, Some(0), Some(USER)).unwrap();
        let src = vol.join("src");
        fs::create_dir(&src).unwrap();
        for f in ["tls.crt", "tls.key"] {
            fs::copy(certs.join(f), src.join(f)).unwrap();
            chown(&src.join(f), USER);
        }
        chown(&src, USER);
        let app = vol.join("app");
        fs::create_dir(&app).unwrap();
        chown(&app, USER);
        let target = d.path().join(format!("t{i}"));
        let sync = format!("dir:{}={}", src.display(), target.display());
        let (code, err) = run_bounded(&["run", "--once", "--sync", &sync]);
        let pidfile = app.join("app.pid");
        let good = format!("dir:{}={}", certs.display(), target.display());
        let (pcode, perr) = run_bounded(&[
            "run",
            "--once",
            "--sync",
            &good,
            "--reload-pidfile",
            pidfile.to_str().unwrap(),
        ]);
        let _ = Command::new("umount").arg(&vol).status();
        assert_eq!(code, 64, "{mode}: {err}");
        assert!(
            err.contains(&format!("source {}", src.display()))
                && err.contains("may be changed by another user"),
            "{mode}: {err}"
        );
        assert!(!target.join("tls.key").exists(), "{mode}: published");
        assert_eq!(pcode, 64, "{mode}: {perr}");
        assert!(
            perr.contains("--reload-pidfile") && perr.contains("may be changed by another user"),
            "{mode}: {perr}"
        );
    }
}

/// The bearer token file was read by path on every reload, following symlinks
/// and hard links, its path never checked: the consumer put a link to a
/// root-only token in its own directory, and the next reload sent root's
/// token to the consumer's server. The token file is now held to the CA
/// files' rule at start (exit 64, naming it): owned by root (or
/// certsync's user), not writable by group or others, one link, and every
/// directory above it (as written and where a symlink leads) root's.
#[test]
fn a_bearer_token_file_another_user_may_change_is_refused_at_start() {
    let Some(d) = as_root() else {
        return;
    };
    let (_, user) = sticky_and_user(d.path());
    let root_only = d.path().join("root-only");
    fs::create_dir(&root_only).unwrap();
    fs::set_permissions(&root_only, fs::Permissions::from_mode(0o700)).unwrap();
    fs::write(root_only.join("token"), SECRET).unwrap();
    fs::set_permissions(root_only.join("token"), fs::Permissions::from_mode(0o600)).unwrap();
    let root_dir = d.path().join("root-dir");
    fs::create_dir(&root_dir).unwrap();
    // A symlink in the user's directory; a hard link in root's; a file of
    // the user's in root's directory; root's own file, mode 0666.
    symlink(root_only.join("token"), user.join("token")).unwrap();
    fs::hard_link(root_only.join("token"), root_dir.join("linked")).unwrap();
    fs::write(root_dir.join("users"), b"t").unwrap();
    chown(&root_dir.join("users"), USER);
    fs::write(root_dir.join("open"), b"t").unwrap();
    fs::set_permissions(root_dir.join("open"), fs::Permissions::from_mode(0o666)).unwrap();
    let target = d.path().join("t");
    let sync = format!(
        "dir:{}/examples/certs={}",
        env!("CARGO_MANIFEST_DIR"),
        target.display()
    );
    let run = |token: &Path| {
        run_bounded(&[
            "run",
            "--once",
            "--sync",
            &sync,
            "--reload-url",
            "http://127.0.0.1:1/-/reload",
            "--reload-bearer-token-file",
            token.to_str().unwrap(),
        ])
    };
    for (token, want) in [
        (user.join("token"), "may be changed by another user"),
        (root_dir.join("linked"), "links 2"),
        (root_dir.join("users"), "may be changed by another user"),
        (root_dir.join("open"), "may be changed by another user"),
    ] {
        let (code, err) = run(&token);
        assert_eq!(code, 64, "{}: {err}", token.display());
        assert!(
            err.contains(&token.display().to_string()) && err.contains(want),
            "{}: {err}",
            token.display()
        );
    }
    // The control: root's own token in root's directory, through a link
    // root made there (as a Secret volume's `..data` links).
    fs::write(root_dir.join("own"), b"t").unwrap();
    fs::set_permissions(root_dir.join("own"), fs::Permissions::from_mode(0o600)).unwrap();
    symlink("own", root_dir.join("via-link")).unwrap();
    let (code, err) = run(&root_dir.join("via-link"));
    assert_eq!(code, 0, "{err}");
}

/// A config file or kubeconfig another user may change was read as long
/// as the config had no `ca:` mapping. The user rewrote `--config` to map
/// a root-only directory to a target they read; or the user's kubeconfig
/// named a root-only `tokenFile` and the user's server, and certsync sent
/// the token. As root, `--config`, every kubeconfig and every file a
/// kubeconfig names must be root's (or certsync's user's), not writable
/// by group or others, in directories only root may change: refused at
/// start, naming the path.
#[test]
fn a_config_or_kubeconfig_another_user_may_change_is_refused_at_start() {
    let Some(d) = as_root() else {
        return;
    };
    let (_, user) = sticky_and_user(d.path());
    let target = d.path().join("t");
    let certs = format!("{}/examples/certs", env!("CARGO_MANIFEST_DIR"));
    // The user's config file, in the user's directory and in root's.
    let root_dir = d.path().join("root-dir");
    fs::create_dir(&root_dir).unwrap();
    for dir in [&user, &root_dir] {
        let config = dir.join("certsync.yaml");
        fs::write(
            &config,
            format!(
                "mappings:\n  - source: dir:{certs}\n    target: {}\n",
                target.display()
            ),
        )
        .unwrap();
        chown(&config, USER);
        let (code, err) = run_bounded(&["run", "--once", "--config", config.to_str().unwrap()]);
        assert_ne!(code, 0, "{}: {err}", config.display());
        assert!(
            err.contains(&config.display().to_string())
                && err.contains("may be changed by another user"),
            "{}: {err}",
            config.display()
        );
        assert!(!target.join("tls.crt").exists(), "published");
    }
    // The control: the documented sidecar layout, the config in a
    // ConfigMap volume (kubelet: root's files behind `..data` links, the
    // volume's root 0777 on a read-only mount) is read.
    let vol = d.path().join("configmap");
    if !mount_tmpfs(&vol, "0777") {
        return;
    }
    let data = vol.join("..2026_11_24_23_00_00.1");
    fs::create_dir(&data).unwrap();
    fs::write(
        data.join("certsync.yaml"),
        format!(
            "mappings:\n  - source: dir:{certs}\n    target: {}\n",
            target.display()
        ),
    )
    .unwrap();
    symlink("..2026_11_24_23_00_00.1", vol.join("..data")).unwrap();
    symlink("..data/certsync.yaml", vol.join("certsync.yaml")).unwrap();
    let remounted = Command::new("mount")
        .args(["-o", "remount,ro"])
        .arg(&vol)
        .status()
        .is_ok_and(|s| s.success());
    let config = vol.join("certsync.yaml");
    let (code, err) = run_bounded(&["run", "--once", "--config", config.to_str().unwrap()]);
    let _ = Command::new("umount").arg(&vol).status();
    assert!(remounted, "cannot remount the volume read-only");
    assert_eq!(code, 0, "a config in a ConfigMap volume: {err}");
    fs::remove_dir_all(&target).unwrap();
    // A kubeconfig of the user's, and root's kubeconfig naming a
    // token file in the user's directory.
    let token = user.join("token");
    fs::write(&token, "t").unwrap();
    chown(&token, USER);
    let kubeconfig = |token_file: &Path| {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n\
             users:\n- name: u\n  user:\n    tokenFile: {}\n\
             contexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n",
            token_file.display()
        )
    };
    let users_kc = user.join("kubeconfig");
    fs::write(&users_kc, kubeconfig(&root_dir.join("none"))).unwrap();
    chown(&users_kc, USER);
    let roots_kc = root_dir.join("kubeconfig");
    fs::write(&roots_kc, kubeconfig(&token)).unwrap();
    for (kc, named) in [(&users_kc, &users_kc), (&roots_kc, &token)] {
        let (code, err) = run_bounded(&[
            "run",
            "--once",
            "--once-timeout",
            "5s",
            "--kubeconfig",
            kc.to_str().unwrap(),
            "--sync",
            &format!("secret:default/x={}", target.display()),
        ]);
        assert_ne!(code, 0, "{err}");
        assert!(
            err.contains(&named.display().to_string())
                && err.contains("may be changed by another user"),
            "{}: {err}",
            kc.display()
        );
    }
}

/// `rollback` run as root on a target a user owns restored what the user had
/// put in its history (root's key hard-linked there) as a root 0600 file in
/// the user's directory. As for `run`, `rollback` and `revisions` refuse a
/// target another user owns or may re-create, naming it.
#[test]
fn rollback_and_revisions_refuse_a_target_another_user_may_change() {
    let Some(d) = as_root() else {
        return;
    };
    let src = d.path().join("src");
    let target = d.path().join("t");
    let sync = format!("dir:{}={}", src.display(), target.display());
    for name in ["one", "two"] {
        write_pair(&src, &support::certs::Pair::new(name));
        let (code, err) = run_bounded(&["run", "--once", "--sync", &sync]);
        assert_eq!(code, 0, "{err}");
    }
    let t = target.to_str().unwrap();
    let (code, _, err) = support::run_bounded(&["revisions", t], d.path());
    assert_eq!(code, 0, "root's target: {err}");
    chown(&target, USER);
    for cmd in ["revisions", "rollback"] {
        let (code, out, err) = support::run_bounded(&[cmd, t], d.path());
        assert_ne!(code, 0, "{cmd}: {out}{err}");
        assert!(
            err.contains(t) && err.contains("may be changed by another user"),
            "{cmd}: {err}"
        );
    }
}
