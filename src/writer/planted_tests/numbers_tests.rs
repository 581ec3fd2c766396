//! Revision numbers and history entries in a target others could write:
//! never counted from a planted or renamed entry, never reused, and a
//! retired revision never lost to one.

use super::*;

/// Whoever may write the target (made writable after start, an operator's
/// `chmod`) may rename what certsync made there: its own live revision
/// renamed to `..rev-18446744073709551615-…` (or one below) is certsync's
/// directory, but its number is none certsync wrote, and counting it
/// refused every publish, for good (or made certsync write u64::MAX and
/// refuse every later change).
#[test]
fn attack_a_renamed_own_revision_at_the_top_of_u64_does_not_stop_publishing() {
    let mut refused = Vec::new();
    for number in [u64::MAX, u64::MAX - 1] {
        let (_d, w) = setup();
        let a = bundle("a");
        w.publish(&a).unwrap();
        let own = fs::read_link(w.target().join(DATA)).unwrap();
        let own = own.to_str().unwrap().to_owned();
        let hash = own.rsplit('-').next().unwrap().to_owned();
        let renamed = w.target().join(format!("{REV_PREFIX}{number}-{hash}"));
        // The planter's one step: a rename in the target (needs only write
        // on the target, not on certsync's directory).
        fs::rename(w.target().join(&own), &renamed).unwrap();
        for tag in ["b", "c", "d"] {
            let out = w.publish(&bundle(tag));
            if !matches!(out, Ok(Outcome::Written { .. })) {
                refused.push(format!("{number}: publish of {tag}: {out:?}"));
            }
        }
    }
    assert!(refused.is_empty(), "{refused:#?}");
}

/// A planted `..rev-` entry (any kind, any owner) numbered near the top
/// of the range counts for nothing: counted, certsync wrote a number it
/// later did not count, went back to revision 2 and removed the revision
/// before it as "newer than live" instead of keeping it in history.
#[test]
fn attack_a_planted_revision_near_the_top_never_loses_the_live_revision_from_history() {
    let (_d, w) = setup();
    let (a, b, c) = (bundle("a"), bundle("b"), bundle("c"));
    w.publish(&a).unwrap();
    let planted = w
        .target()
        .join(format!("{REV_PREFIX}999999999999-deadbeef"));
    fs::write(&planted, "x").unwrap();
    fs::set_permissions(&planted, Permissions::from_mode(0o666)).unwrap();
    let rb = w.publish(&b).unwrap().revision();
    let rc = w.publish(&c).unwrap().revision();
    let history = w.history().unwrap();
    let b_kept = history.values().any(|n| n.ends_with(&b.hash().short()));
    assert!(
        rb < 1_000 && rc > rb && b_kept,
        "b published as {rb}, c as {rc}; history {history:?} (b kept: {b_kept})"
    );
}

/// Nor does one just below, nor certsync's own live revision renamed to
/// such a number (one rename, nothing planted: certsync's directory, but a
/// number it never wrote): counted, every publish after the next came back
/// to one number, whose history entries hid each other from pruning
/// (`..history` grew at every publish and kept every old key).
#[test]
fn attack_a_revision_near_the_top_never_makes_certsync_reuse_a_number() {
    for how in ["planted", "renamed"] {
        let (_d, w) = setup();
        w.publish(&bundle("a")).unwrap();
        if how == "planted" {
            let planted = w
                .target()
                .join(format!("{REV_PREFIX}999999999998-deadbeef"));
            fs::write(&planted, "x").unwrap();
            fs::set_permissions(&planted, Permissions::from_mode(0o666)).unwrap();
        } else {
            let own = live_name(&w);
            let hash = own.rsplit('-').next().unwrap().to_owned();
            let renamed = format!("{REV_PREFIX}999999999999-{hash}");
            fs::rename(w.target().join(&own), w.target().join(renamed)).unwrap();
        }
        let mut numbers = Vec::new();
        for i in 0..8 {
            numbers.push(w.publish(&bundle(&format!("n{i}"))).unwrap().revision());
        }
        let on_disk = fs::read_dir(w.target().join(HISTORY)).unwrap().count();
        let reused = numbers.windows(2).any(|p| p[1] <= p[0]);
        assert!(
            !reused && on_disk <= 3,
            "{how}: revisions {numbers:?}; ..history holds {on_disk} entries (keep 4: at most 3)"
        );
    }
}

/// With `..data` removed and `..history` renamed away (a plain unlink and
/// rename in a target the planter may write), certsync's own live revision
/// still counts: the next publish is one past it and retires it to history,
/// never goes back to 1 and removes it (and a renamed `..history` under a
/// `..rev-` name, with every rollback revision in it) as newer than live.
#[test]
fn attack_a_removed_data_link_and_a_renamed_history_never_lose_the_live_revision() {
    let mut failed = Vec::new();
    for moved_to in ["..rev-000006-00000000", "elsewhere"] {
        let (_d, w) = setup();
        let bundles: Vec<_> = ["a", "b", "c", "d", "e"].map(bundle).into();
        for b in &bundles {
            w.publish(b).unwrap();
        }
        let e = &bundles[4];
        assert_eq!(w.history().unwrap().len(), 3);
        // The planter's two steps (write on the target only).
        fs::rename(w.target().join(HISTORY), w.target().join(moved_to)).unwrap();
        fs::remove_file(w.target().join(DATA)).unwrap();
        let rf = w.publish(&bundle("f")).unwrap().revision();
        let history = w.history().unwrap();
        let e_kept = history.values().any(|n| n.ends_with(&e.hash().short()));
        let moved_stays = fs::symlink_metadata(w.target().join(moved_to)).is_ok();
        if rf <= 5 || !e_kept {
            failed.push(format!(
                "..history moved to {moved_to}: f published as {rf} (after 5); \
                 history {history:?} (e, the last live, kept: {e_kept}; \
                 the moved history still on disk: {moved_stays})"
            ));
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}

/// The same with `..data` replaced by a link of the planter's (another
/// user's, naming certsync's own live revision).
#[test]
fn attack_a_planted_data_link_and_a_renamed_history_never_lose_the_live_revision() {
    if !nix::unistd::geteuid().is_root() {
        return;
    }
    let (_d, w, e) = five_published();
    let own = live_name(&w);
    fs::rename(w.target().join(HISTORY), w.target().join("elsewhere")).unwrap();
    let data = w.target().join(DATA);
    fs::remove_file(&data).unwrap();
    std::os::unix::fs::symlink(&own, &data).unwrap();
    plant(&data, 0o777, Some(65534));
    let rf = w.publish(&bundle("f")).unwrap().revision();
    let history = w.history().unwrap();
    let e_kept = history.values().any(|n| n.ends_with(&e.hash().short()));
    assert!(
        rf > 5 && e_kept,
        "f published as {rf} (after 5); history {history:?} (e kept: {e_kept})"
    );
}

/// A history entry of the planter's under the number of the revision a
/// publish retires (another hash) is removed before that revision is
/// retired: never taken for certsync's entry of that number, which made
/// certsync drop the retired revision, the way back for a rollback.
#[test]
fn attack_a_planted_history_entry_never_takes_the_retired_revisions_place() {
    for (how, mode, owner) in plantings() {
        let (_d, w) = setup();
        let a = bundle("a");
        assert_eq!(w.publish(&a).unwrap().revision(), 1);
        let planted = w.target().join(HISTORY).join("000001-00000000");
        fs::create_dir_all(&planted).unwrap();
        plant(&planted, mode, owner);
        w.publish(&bundle("b")).unwrap();
        assert_holds(&w, 1, &a, &format!("{how}: a, retired, was lost"));
    }
}

/// A `..data` of the planter's naming an older number, met by the tidy at
/// start: never taken for certsync's live revision, whose newer number
/// would make certsync's own live revision a crash's leftover, removed
/// rather than retired to history.
#[test]
fn attack_a_planted_data_link_met_at_start_never_removes_the_live_revision() {
    if !nix::unistd::geteuid().is_root() {
        return;
    }
    let (_d, w, e) = five_published();
    let data = w.target().join(DATA);
    fs::remove_file(&data).unwrap();
    std::os::unix::fs::symlink(format!("{REV_PREFIX}000001-00000000"), &data).unwrap();
    plant(&data, 0o777, Some(65534));
    let opts = WriterOptions {
        keep: 4,
        ..Default::default()
    };
    Writer::open(w.target(), opts).unwrap();
    assert_holds(&w, 5, &e, "e, the live revision, was lost");
}

/// With `--keep-revisions 1` (no history) and `..data` removed, certsync's
/// own live revision still counts: the next number never goes back.
#[test]
fn attack_a_removed_data_link_with_keep_one_never_sends_the_count_back() {
    let (_d, w) = keeping(1);
    let mut numbers = Vec::new();
    for t in ["a", "b", "c"] {
        numbers.push(w.publish(&bundle(t)).unwrap().revision());
    }
    fs::remove_file(w.target().join(DATA)).unwrap();
    numbers.push(w.publish(&bundle("d")).unwrap().revision());
    let back = numbers.windows(2).any(|p| p[1] <= p[0]);
    assert!(!back, "revisions {numbers:?}: the count went back");
}

/// certsync's own revision renamed to a number history holds already
/// (`..rev-000005-E` -> `..rev-000003-E`, one rename) is not retired beside
/// it: two entries of one number would hide each other from `history()`,
/// pruning and `rollback --to`.
#[test]
fn attack_an_own_revision_renamed_to_a_history_number_never_shares_it() {
    let (_d, w) = setup();
    for t in ["a", "b", "c", "d", "e"] {
        w.publish(&bundle(t)).unwrap();
    }
    let own = live_name(&w);
    let hash = own.rsplit('-').next().unwrap().to_owned();
    fs::rename(
        w.target().join(&own),
        w.target().join(format!("{REV_PREFIX}000003-{hash}")),
    )
    .unwrap();
    w.publish(&bundle("f")).unwrap();
    let mut names: Vec<_> = fs::read_dir(w.target().join(HISTORY))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    let shown = w.history().unwrap();
    assert_eq!(
        names.len(),
        shown.len(),
        "..history holds {names:?}, history() shows {shown:?}"
    );
}

/// A history entry left empty for the previous live revision by an error
/// (EMFILE at its open after the flip) or a crash is made again and filled
/// at the next write, never taken for a number history holds already: the
/// previous revision was lost for rollback.
#[test]
fn attack_an_empty_history_entry_left_by_an_error_never_loses_the_previous_revision() {
    let (_d, w, e) = five_published();
    let entry = live_name(&w).strip_prefix(REV_PREFIX).unwrap().to_owned();
    fail_once(&entry, 0, nix::libc::EMFILE);
    let published = w.publish(&bundle("f"));
    assert!(emfile(&published), "{published:?}");
    w.publish(&bundle("g")).unwrap();
    assert_holds(
        &w,
        5,
        &e,
        "revision 5 (e, the previous live one) is not restorable",
    );
}

/// The state a crash or an error leaves between `retire`'s moves and its
/// `rmdir` (every file in `..history/000005-E`, the emptied `..rev-000005-E`
/// still at the root): the next write removes the empty directory and never
/// empties the history entry that holds the revision.
#[test]
fn attack_a_retire_interrupted_after_its_moves_never_empties_the_history_entry() {
    let (_d, w, e) = five_published();
    let e_name = live_name(&w);
    w.publish(&bundle("f")).unwrap();
    assert_holds(&w, 5, &e, "setup: revision 5 not in history");
    // What certsync made and moved everything out of, before the crash.
    fs::create_dir(w.target().join(&e_name)).unwrap();
    fs::set_permissions(w.target().join(&e_name), Permissions::from_mode(0o755)).unwrap();
    w.publish(&bundle("g")).unwrap();
    assert_holds(
        &w,
        5,
        &e,
        "revision 5 (e) was emptied from history by the next write",
    );
}

/// certsync's own live revision renamed, by whoever may write the target,
/// to the exact name of the previous one in history never replaces that
/// entry nor is merged into it, whether its files have the entry's names or
/// others (a mapping whose file names changed): another revision's content
/// under a name it was not written under.
#[test]
fn attack_an_own_revision_renamed_to_a_history_entrys_exact_name_never_replaces_it() {
    let other_names = || {
        let mut f = Bundle::default();
        let cert = crate::test_certs::Pair::new("planted-f").cert;
        f.insert("server.crt", cert, "t").unwrap();
        f.insert("server.key", b"key f".to_vec(), "t").unwrap();
        f
    };
    for (how, f) in [("same names", bundle("f")), ("other names", other_names())] {
        let (_d, w) = setup();
        for t in ["a", "b", "c", "d"] {
            w.publish(&bundle(t)).unwrap();
        }
        let e = bundle("e");
        w.publish(&e).unwrap();
        let e_name = live_name(&w);
        w.publish(&f).unwrap();
        let f_name = live_name(&w);
        fs::rename(w.target().join(&f_name), w.target().join(&e_name)).unwrap();
        let _ = w.publish(&bundle("g"));
        assert_holds(&w, 5, &e, &format!("{how}: revision 5 (e) not kept as e"));
    }
}
