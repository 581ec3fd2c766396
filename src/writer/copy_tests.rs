//! The copies outside the target (`update-pair=`, `update-kubeconfig=`):
//! their directory is judged on the descriptors one walk from `/` opens,
//! and written beneath the one it ends on, never opened again by name.

use super::error::*;
use super::*;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use super::kubeconfig::tests::{ADMIN_CONF as KUBECONFIG, CERT};

fn mode(p: &Path, m: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(m)).unwrap();
}

/// `d/good/pki` and `d/evil/pki`, each holding `admin.conf`; `evil` is
/// another user's (when the test runs as root, who can make one).
fn two_ways() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().canonicalize().unwrap();
    mode(&root, 0o755);
    for side in ["good", "evil"] {
        let pki = root.join(side).join("pki");
        fs::create_dir_all(&pki).unwrap();
        mode(&root.join(side), 0o755);
        mode(&pki, 0o755);
        fs::write(pki.join("admin.conf"), KUBECONFIG).unwrap();
        mode(&pki.join("admin.conf"), 0o600);
    }
    if nix::unistd::geteuid().is_root() {
        std::os::unix::fs::lchown(root.join("evil"), Some(65534), Some(65534)).unwrap();
    }
    (d, root)
}

/// Runs `step` once, when the next walk has judged its way and is about to
/// open the last name: what an attacker racing the walk would do then.
fn between_check_and_open(step: impl FnOnce() + 'static) {
    crate::beneath::BETWEEN_CHECK_AND_OPEN.with(|h| *h.borrow_mut() = Some(Box::new(step)));
}

/// `root/good` renamed away and `root/evil` linked in under its name.
fn swap_good_for_evil(root: &Path) -> impl FnOnce() + 'static {
    let (good, evil, old) = (root.join("good"), root.join("evil"), root.join("good.old"));
    move || {
        fs::rename(&good, &old).unwrap();
        std::os::unix::fs::symlink(&evil, &good).unwrap();
    }
}

fn swap_ran() -> bool {
    crate::beneath::BETWEEN_CHECK_AND_OPEN.with(|h| h.borrow().is_none())
}

/// A directory above `update-pair=`'s swapped for a link to another user's
/// once it was judged: the pair is written where the walk was, never
/// where the name leads now.
#[test]
fn attack_a_pair_directory_swapped_after_it_was_judged_is_not_written() {
    let (_d, root) = two_ways();
    let pair = crate::test_certs::Pair::new("copy");
    between_check_and_open(swap_good_for_evil(&root));
    let got = update_pair(&root.join("good/pki/apiserver"), &pair.cert, &pair.key);
    assert!(swap_ran(), "the swap ran");
    assert!(
        matches!(got, Ok(CopyUpdate::Replaced { before: None })),
        "{got:?}"
    );
    assert!(
        !root.join("evil/pki/apiserver.crt").exists()
            && !root.join("evil/pki/apiserver.key").exists(),
        "written through the swapped-in link"
    );
    let judged = root.join("good.old/pki");
    assert_eq!(fs::read(judged.join("apiserver.crt")).unwrap(), pair.cert);
    assert_eq!(fs::read(judged.join("apiserver.key")).unwrap(), pair.key);
}

/// The same for `update-kubeconfig=`: the file judged is the one
/// rewritten, another user's beside it left as it was.
#[test]
fn attack_a_kubeconfig_directory_swapped_after_it_was_judged_is_not_written() {
    let (_d, root) = two_ways();
    between_check_and_open(swap_good_for_evil(&root));
    let got = update_kubeconfig(&root.join("good/pki/admin.conf"), CERT, b"KEY");
    assert!(swap_ran(), "the swap ran");
    assert!(got.as_ref().is_ok_and(CopyUpdate::replaced), "{got:?}");
    assert_eq!(
        fs::read_to_string(root.join("evil/pki/admin.conf")).unwrap(),
        KUBECONFIG,
        "written through the swapped-in link"
    );
    let judged = fs::read_to_string(root.join("good.old/pki/admin.conf")).unwrap();
    assert_ne!(judged, KUBECONFIG);
}

/// Each copy's refusal of its directory, whichever it is.
fn refused_way(copy: &Path) -> crate::beneath::PathError {
    let problem = if copy.extension().is_some() {
        match check_kubeconfig(copy) {
            Err(WriterError::Of {
                what: "update-kubeconfig",
                problem,
                ..
            }) => *problem,
            other => panic!("{}: not refused: {other:?}", copy.display()),
        }
    } else {
        match check_pair(copy) {
            Err(WriterError::Of {
                what: "update-pair",
                problem,
                ..
            }) => *problem,
            other => panic!("{}: not refused: {other:?}", copy.display()),
        }
    };
    match problem {
        WriterError::DirOthersMayChange(p) => p,
        p => panic!("{}: not its way: {p:?}", copy.display()),
    }
}

/// The way to a copy is held to the rule of a file written with no second
/// look: every directory and symlink root's or certsync's user's, written
/// by no one else, a root-owned sticky directory included (a cleaner
/// removes root's entry and anyone makes it again). Each refusal names the
/// entry; the same way made root's only is accepted.
#[test]
fn attack_the_way_to_a_copy_that_another_user_may_change_is_refused_naming_it() {
    use crate::beneath::PathError;
    let (_d, root) = two_ways();
    let pki = root.join("good/pki");
    let copies = [pki.join("admin.conf"), pki.join("apiserver")];
    for copy in &copies {
        check_copy(copy).unwrap_or_else(|e| panic!("{}: {e}", copy.display()));
    }
    for bad in [0o777, 0o1777, 0o775] {
        mode(&pki, bad);
        for copy in &copies {
            let e = refused_way(copy);
            assert!(
                matches!(&e, PathError::Changeable { path, mode, .. }
                    if *path == pki && *mode == bad),
                "{}: {e:?}",
                copy.display()
            );
        }
    }
    mode(&pki, 0o755);
    if !nix::unistd::geteuid().is_root() {
        return; // needs root to make another user's link
    }
    let link = root.join("link");
    std::os::unix::fs::symlink(root.join("good"), &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
    for copy in [link.join("pki/admin.conf"), link.join("pki/apiserver")] {
        let e = refused_way(&copy);
        assert!(
            matches!(&e, PathError::LinkChangeable { path, uid: 65534 }
                if *path == link),
            "{}: {e:?}",
            copy.display()
        );
    }
    // Another user's directory on the way, whatever its mode.
    for copy in [
        root.join("evil/pki/admin.conf"),
        root.join("evil/pki/apiserver"),
    ] {
        let e = refused_way(&copy);
        assert!(
            matches!(&e, PathError::Changeable { path, uid: 65534, .. }
                if *path == root.join("evil")),
            "{}: {e:?}",
            copy.display()
        );
    }
}

fn check_copy(copy: &Path) -> Result<(), WriterError> {
    if copy.extension().is_some() {
        check_kubeconfig(copy)
    } else {
        check_pair(copy)
    }
}
