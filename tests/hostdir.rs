//! End to end through the real binary with a host-directory source.

mod support;

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use support::certs::Pair;
use support::*;

/// A temporary `src` directory holding `first`, and a `target` path beside it.
struct Dirs {
    tmp: tempfile::TempDir,
    src: PathBuf,
    target: PathBuf,
}

fn dirs_with(first: &Pair) -> Dirs {
    let tmp = tempfile::tempdir().unwrap();
    let (src, target) = (tmp.path().join("src"), tmp.path().join("target"));
    fs::create_dir(&src).unwrap();
    write_pair(&src, first);
    Dirs { tmp, src, target }
}

impl Dirs {
    /// Starts `certsync run` on this source/target with `extra` mapping
    /// options and a debounce window.
    fn start(&self, extra: &str, debounce: &str) -> Certsync {
        let sync = spec(&self.src, &self.target, extra);
        Certsync::start(
            &["run", "--sync", &sync, "--debounce", debounce],
            self.tmp.path(),
        )
    }
}

fn spec(src: &Path, target: &Path, extra: &str) -> String {
    format!("dir:{}={}{extra}", src.display(), target.display())
}

#[test]
fn non_atomic_rotation_publishes_exactly_one_matching_revision() {
    let first = Pair::new("first");
    let dirs = dirs_with(&first);
    let (src, target) = (dirs.src.clone(), dirs.target.clone());
    let mut cs = dirs.start("", "2s");
    assert!(wait_pair(&target, &first).starts_with("..rev-000001-"));

    // Certificate first, a pause shorter than the debounce window, then key.
    let second = Pair::new("second");
    fs::write(src.join("tls.crt"), &second.cert).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    fs::write(src.join("tls.key"), &second.key).unwrap();
    let rev = wait_pair(&target, &second);
    assert!(rev.starts_with("..rev-000002-"), "{rev}");

    // Give a wrong extra revision every chance to appear, then count.
    std::thread::sleep(Duration::from_millis(3000));
    let revs = revision_names(&target);
    assert_eq!(revs.len(), 2, "one new revision only: {revs:?}");
    assert!(revs[0].starts_with("..rev-000002-"), "live: {revs:?}");
    assert!(revs[1].starts_with("000001-"), "history: {revs:?}");
    let log = cs.log();
    assert!(
        !log.contains("key_mismatch"),
        "the half-written pair was reported:\n{log}"
    );
    assert!(cs.is_running());
}

#[test]
fn combined_pem_rotated_by_replacing_its_symlink() {
    let d = tempfile::tempdir().unwrap();
    let (src, target) = (d.path().join("pki"), d.path().join("target"));
    fs::create_dir(&src).unwrap();
    let current = src.join("kubelet-server-current.pem");
    let a = Pair::new("node-a");
    fs::write(src.join("kubelet-server-2026-01.pem"), a.combined()).unwrap();
    symlink("kubelet-server-2026-01.pem", &current).unwrap();
    let sync = spec(&src, &target, ",combined=kubelet-server-current.pem");
    let _cs = Certsync::start(&["run", "--sync", &sync, "--debounce", "200ms"], d.path());
    wait_pair(&target, &a);

    // kubelet writes the new file, then swaps the symlink with a rename.
    let b = Pair::new("node-b");
    fs::write(src.join("kubelet-server-2026-02.pem"), b.combined()).unwrap();
    symlink("kubelet-server-2026-02.pem", src.join("current.tmp")).unwrap();
    fs::rename(src.join("current.tmp"), &current).unwrap();
    let rev = wait_pair(&target, &b);
    assert!(rev.starts_with("..rev-000002-"), "{rev}");
    let mode = fs::metadata(target.join("tls.key"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
}

#[test]
fn bad_pair_leaves_target_untouched_and_process_running() {
    let good = Pair::new("good");
    let dirs = dirs_with(&good);
    let (src, target) = (dirs.src.clone(), dirs.target.clone());
    let mut cs = dirs.start(",name=web", "200ms");
    let rev = wait_pair(&target, &good);

    let other = Pair::new("other");
    write_atomic(&src.join("tls.key"), &other.key);
    cs.wait_log("reason=\"key_mismatch\"");
    let log = cs.log();
    let line = log.lines().find(|l| l.contains("key_mismatch")).unwrap();
    assert!(line.contains("mapping=web"), "{line}");
    assert!(
        line.contains("tls.key does not match the leaf certificate in"),
        "{line}"
    );
    assert!(
        line.contains(&src.join("tls.crt").display().to_string()),
        "{line}"
    );
    assert_eq!(
        read_live(&target).unwrap(),
        (rev.clone(), good.cert.clone(), good.key.clone())
    );
    assert_eq!(revision_names(&target).len(), 1);
    assert!(cs.is_running());

    // Garbage is refused too, and a good pair afterwards is published.
    write_atomic(&src.join("tls.crt"), b"not a certificate");
    cs.wait_log("reason=\"bad_pem\"");
    assert_eq!(read_live(&target).unwrap().0, rev);
    let fixed = Pair::new("fixed");
    write_pair(&src, &fixed);
    wait_pair(&target, &fixed);
}

/// A certificate Go's x509 refuses (here
/// version 4; every shape is in `src/x509/certificate.rs`) replaced the
/// last good pair, and kube-apiserver then failed at its next start. It
/// is refused, naming the file and Go's rule, and the good pair stays.
#[test]
fn a_certificate_go_refuses_keeps_the_last_good_pair() {
    let good = Pair::new("good");
    let dirs = dirs_with(&good);
    let mut cs = dirs.start("", "200ms");
    let rev = wait_pair(&dirs.target, &good);
    let bad = Pair::new("v4");
    write_pair_files(
        &dirs.src,
        &support::certs::as_version_4(&bad.cert),
        &bad.key,
    );
    cs.wait_log("reason=\"bad_certificate\"");
    let log = cs.log();
    let line = log.lines().find(|l| l.contains("bad_certificate")).unwrap();
    assert!(
        line.contains("tls.crt") && line.contains("Go's x509"),
        "{line}"
    );
    assert_eq!(
        read_live(&dirs.target).unwrap(),
        (rev, good.cert.clone(), good.key.clone())
    );
    assert_eq!(revision_names(&dirs.target).len(), 1);
    assert!(cs.is_running());
}

#[test]
fn drift_in_the_target_is_repaired() {
    let good = Pair::new("good");
    let dirs = dirs_with(&good);
    let target = dirs.target.clone();
    let _cs = dirs.start("", "100ms");
    let rev = wait_pair(&target, &good);

    fs::remove_file(target.join("tls.key")).unwrap();
    wait_for("tls.key link restored", || {
        fs::read(target.join("tls.key"))
            .ok()
            .filter(|k| *k == good.key)
    });
    fs::write(target.join(&rev).join("tls.crt"), b"edited").unwrap();
    let new_rev = wait_pair(&target, &good);
    assert_ne!(new_rev, rev, "an edited revision is replaced by a new one");
}

#[test]
fn once_exit_codes() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    fs::create_dir(&src).unwrap();
    let good = Pair::new("good");
    write_pair(&src, &good);
    let run = |args: &[&str]| Command::new(certsync_bin()).args(args).output().unwrap();

    let ok = run(&[
        "run",
        "--once",
        "--sync",
        &spec(&src, &d.path().join("t1"), ""),
    ]);
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert_eq!(read_live(&d.path().join("t1")).unwrap().1, good.cert);
    // A restart with the same content creates no revision.
    let t1 = spec(&src, &d.path().join("t1"), "");
    let again = run(&["run", "--once", "--sync", &t1]);
    assert_eq!(again.status.code(), Some(0));
    assert_eq!(revision_names(&d.path().join("t1")).len(), 1);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(!stderr.contains("published new revision"), "{stderr}");

    fs::write(src.join("tls.key"), Pair::new("x").key).unwrap();
    let bad = run(&[
        "run",
        "--once",
        "--sync",
        &spec(&src, &d.path().join("t2"), ""),
    ]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("does not match"));
    assert!(
        read_live(&d.path().join("t2")).is_none(),
        "nothing published"
    );

    let usage = run(&["run", "--once", "--sync", "nfs:/x=/y"]);
    assert_eq!(usage.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&usage.stderr).contains("unknown source kind"));
    let usage = run(&["run", "--no-such-flag"]);
    assert_eq!(usage.status.code(), Some(64));
    let help = run(&["run", "--help"]);
    assert_eq!(help.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&help.stdout).contains("CERTSYNC_SYNC"));
}

#[test]
fn environment_variables_configure_and_sigterm_exits_zero() {
    let good = Pair::new("env");
    let Dirs {
        tmp: d,
        src,
        target,
    } = dirs_with(&good);
    let cs = Certsync::start_with(
        Command::new(certsync_bin())
            .arg("run")
            .env("CERTSYNC_SYNC", spec(&src, &target, ",key-mode=0640"))
            .env("CERTSYNC_LOG_FORMAT", "json"),
        d.path(),
    );
    wait_pair(&target, &good);
    let mode = fs::metadata(target.join("tls.key"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o640);
    cs.wait_log("\"message\":\"published new revision\"");
    assert_eq!(cs.terminate().code(), Some(0));
}

/// At the default level, rotations log what certsync did and nothing of
/// the file watcher's routine: the watch of a retired revision directory
/// is dropped by the kernel, which notify reports at info on every
/// rotation.
#[test]
fn rotations_at_info_level_log_no_watcher_noise() {
    let first = Pair::new("r0");
    let dirs = dirs_with(&first);
    let sync = spec(&dirs.src, &dirs.target, "");
    let cs = Certsync::start(
        &[
            "run",
            "--sync",
            &sync,
            "--debounce",
            "50ms",
            "--keep-revisions",
            "1",
            "--log-level",
            "info",
        ],
        dirs.tmp.path(),
    );
    wait_pair(&dirs.target, &first);
    for i in 1..=3 {
        let next = Pair::new(&format!("r{i}"));
        write_pair(&dirs.src, &next);
        wait_pair(&dirs.target, &next);
    }
    // Past the debounce, so the drift checks of the last flip have run.
    std::thread::sleep(Duration::from_millis(500));
    let log = cs.log();
    assert_eq!(log.matches("published new revision").count(), 4, "{log}");
    assert!(!log.contains("notify"), "{log}");
}

/// `files=all` from a directory: a name certsync would not write is
/// refused with the name, as is a non-PEM file unless allowed; nothing is
/// published until the directory is acceptable.
#[test]
fn files_all_refuses_hostile_names_and_non_pem() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let p = Pair::new("files");
    std::fs::write(src.join("ca-bundle.crt"), &p.ca_cert).unwrap();
    std::fs::write(src.join("bad name.crt"), &p.ca_cert).unwrap();
    let target = d.path().join("t");
    let spec = format!("dir:{}={},files=all", src.display(), target.display());
    let once = |spec: &str| {
        std::process::Command::new(certsync_bin())
            .args(["run", "--once", "--sync", spec])
            .output()
            .unwrap()
    };
    let out = once(&spec);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("bad name.crt"), "{err}");
    assert!(!target.join("ca-bundle.crt").exists(), "nothing published");

    std::fs::remove_file(src.join("bad name.crt")).unwrap();
    std::fs::write(src.join("notes.bin"), [0u8, 159, 146, 150]).unwrap();
    let out = once(&spec);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("notes.bin") && err.contains("allow-non-pem"),
        "{err}"
    );

    let out = once(&format!("{spec},allow-non-pem"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read(target.join("ca-bundle.crt")).unwrap(),
        p.ca_cert
    );
    assert_eq!(
        std::fs::read(target.join("notes.bin")).unwrap(),
        [0u8, 159, 146, 150]
    );
    // Content certsync cannot tell is not secret gets the key mode.
    let mode = |f: &str| fs::metadata(target.join(f)).unwrap().permissions().mode() & 0o777;
    assert_eq!((mode("notes.bin"), mode("ca-bundle.crt")), (0o600, 0o644));
}

/// A source directory (and its parent) created after start is picked up
/// at once, not at the next resync (an hour here); while it is missing the
/// log says so in plain words, never notify's "No path was found".
#[test]
fn a_source_directory_created_after_start_is_picked_up_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("later/src");
    let target = tmp.path().join("target");
    let cs = Certsync::start(
        &[
            "run",
            "--sync",
            &spec(&src, &target, ""),
            "--debounce",
            "100ms",
            "--resync",
            "1h",
        ],
        tmp.path(),
    );
    cs.wait_log(&format!(
        "source directory {} does not exist yet; waiting for it",
        src.display()
    ));
    assert!(!cs.log().contains("No path was found"), "{}", cs.log());
    let p = Pair::new("later");
    // The directory and its parent appear, then the files in it.
    fs::create_dir_all(&src).unwrap();
    write_pair(&src, &p);
    wait_pair(&target, &p);
    assert!(!cs.log().contains("No path was found"), "{}", cs.log());
}
