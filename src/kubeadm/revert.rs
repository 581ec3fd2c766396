//! `certsync kubeadm revert`: kubeadm's manifests back (the backup when the
//! manifest is still the one adopt wrote, byte for byte; otherwise, after
//! a `kubeadm upgrade` rewrote it, adopt's flags and volumes taken out of
//! the current one so the upgrade is kept), certsync's static pod removed,
//! adopt's ClusterConfiguration fields taken out (exactly those: anything
//! else changed since stays). certsync's targets, configuration and
//! kubeconfigs move into the backup (removed with `--purge`): a stale copy
//! left in place would be used silently by a later `kubeadm upgrade` whose
//! ClusterConfiguration still names them (another node adopted), and
//! expire there unnoticed. The record moves into the backup, so a second
//! revert finds nothing to do.
//!
//! kubeadm's pairs and kubeconfigs come back from adopt's first backup,
//! any whose certificate ends within [`super::REVERT_MARGIN_SECS`] issued
//! again on the host ([`handback`]): never a file certsync's container
//! could have written, nothing that ends within a day.
//!
//! Refused before anything changes: a ClusterConfiguration it cannot read
//! (unless `--local-only`), a pair or kubeconfig whose kubeadm copy is not
//! in the backup, a certificate it cannot issue again to last a day.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::handback::{self, Handback, handbacks, until};
use super::manifest::{self, KUBECONFIGS, Manifest};
use super::plan::{CONFIG, POD, STATE, backup_path, targets};
use super::record::State;
use super::{KubeadmError, RevertOptions, cluster, digest, host, moves, node};
use crate::writer::{Claim, Writer, WriterError, replace_file};

/// certsync's kubeconfigs for the controller-manager and scheduler.
const OWN_KUBECONFIGS: [&str; 2] = ["controller-manager.conf", "scheduler.conf"];

pub async fn revert(opts: &RevertOptions) -> Result<String, KubeadmError> {
    let dir = &opts.dir;
    let mut out = String::new();
    let Some(mut state) = State::read(dir)? else {
        out.push_str("not adopted (no /etc/kubernetes/certsync/adopted.json): nothing to do\n");
        return Ok(out);
    };
    // Everything that could refuse comes before the first change.
    let admin = host(dir, "/etc/kubernetes/admin.conf");
    let stored = if state.cluster_config_reverted {
        out.push_str("ClusterConfiguration: holds none of adopt's fields (checked when adopting, or taken out by an earlier revert)\n");
        None
    } else {
        match cluster::read(&admin).await {
            Ok(stored) => Some(stored),
            Err(e) if opts.local_only => {
                let _ = writeln!(
                    out,
                    "ClusterConfiguration not read ({e}); --local-only: before the next `kubeadm upgrade` \
                     or `join`, remove these entries from kubeadm-config by hand (if no other node is adopted):"
                );
                for (field, name, value) in hand_edits() {
                    let _ = writeln!(out, "  {field}: {name}={value}");
                }
                None
            }
            Err(e) => {
                return Err(KubeadmError::Revert(format!(
                    "{e}; nothing was changed. Wait until the API server admin.conf names answers (after \
                     adopt or revert on another node it restarts for about 40 s: check its /readyz), or \
                     pass --local-only and take adopt's entries out of kubeadm-config by hand"
                )));
            }
        }
    };
    // certsync's files are moved or purged as root: none may be reached
    // through a symlink (a compromised certsync container could put one in
    // place of a target to have revert move or delete the host's files).
    for t in own_paths(dir) {
        if let Some(link) = symlink_on_the_way(dir, &t) {
            return Err(KubeadmError::Revert(format!(
                "{link} is a symlink, where certsync's {t} should be a directory or file of its \
                 own; nothing was changed: remove it (and check who made it), then run revert again"
            )));
        }
    }
    // What revert writes for kubeadm's pairs and kubeconfigs, computed
    // once (any certificate issued again in memory): the dry run prints
    // it, the real run writes it.
    let handbacks = handbacks(dir, &state)?;
    // `--dry-run`: past this point every write is skipped; each line says
    // what revert would do, where a real run says what it did.
    let dry = opts.dry_run;
    if dry {
        out.push_str("dry run: revert would do this, writing nothing:\n");
    }
    // The ClusterConfiguration first, the one step that needs the API
    // server: this node's is still running as adopted (restoring its
    // manifest restarts it for ~40 s), and a refused or lost write leaves
    // the node as it was. Once written, the record says so, and a revert
    // that stops later finishes without the API server.
    if let Some(stored) = &stored {
        let mut config = stored.config.clone();
        if cluster::unadopt(&mut config, &manifest::components()) {
            if !dry {
                cluster::write(stored, &config).await.map_err(|e| {
                    KubeadmError::Revert(format!(
                        "{e}; nothing was changed (the ClusterConfiguration is revert's first change): \
                         run `certsync kubeadm revert` again once the API server admin.conf names \
                         accepts writes, or pass --local-only and take adopt's entries out of \
                         kubeadm-config by hand"
                    ))
                })?;
            }
            let _ = writeln!(
                out,
                "{} adopt's fields out of the ClusterConfiguration in kubeadm-config",
                tense(dry, "took", "would take")
            );
        }
        if !dry {
            state.cluster_config_reverted = true;
            state.write(dir).map_err(|e| {
                KubeadmError::Revert(format!(
                    "the ClusterConfiguration is done, but recording it failed ({e}); nothing else \
                     was changed: run `certsync kubeadm revert` again (it finds adopt's fields gone)"
                ))
            })?;
        }
    }
    local(opts, &state, &handbacks, &mut out).await.map_err(|e| {
        let cc = if state.cluster_config_reverted {
            "the ClusterConfiguration is done (recorded in adopted.json: the re-run needs no API server); "
        } else {
            ""
        };
        KubeadmError::Revert(format!(
            "stopped partway, the node is part-reverted: {e}; {cc}run `certsync kubeadm revert` \
             again: it finishes what is left"
        ))
    })?;
    out.push_str(&super::audit::warnings(dir));
    if dry {
        out.push_str("dry run: nothing was changed\n");
    }
    Ok(out)
}

/// What a line says revert did, or in a dry run would do.
fn tense<'a>(dry: bool, done: &'a str, would: &'a str) -> &'a str {
    if dry { would } else { done }
}

/// revert's changes on the node, in an order that a re-run completes from
/// wherever it stopped: each step finds its work done or does it.
async fn local(
    opts: &RevertOptions,
    state: &State,
    handbacks: &[Handback],
    out: &mut String,
) -> Result<(), KubeadmError> {
    let dir = &opts.dir;
    let dry = opts.dry_run;
    // certsync's pod first, and its daemon gone (its claims on the targets
    // taken) before kubeadm's files are handed back: a daemon still
    // running would bring them to its pair again at its next resync. The
    // components keep reading certsync's targets, which stay in place
    // until they have restarted on kubeadm's files.
    let newest = state.backups.last().cloned().unwrap_or_default();
    if node::read_optional(dir, POD)?.is_some() {
        if !dry {
            move_away(dir, &newest, POD)?;
        }
        let _ = writeln!(
            out,
            "{} {POD} (kept in {newest}/)",
            tense(dry, "removed", "would remove")
        );
    }
    // Held until every target has moved: no certsync publishes into one.
    let _claims = if dry {
        Vec::new()
    } else {
        claim_targets(dir, CLAIM_WAIT).await?
    };
    // kubeadm's kubeconfigs and pairs, before the manifests, so each
    // component starts on the files it keeps; once certsync's daemon is
    // gone, so it brings none of them to its pair again. Each is written
    // anew (root's, kubeadm's mode) beneath its directory's handle:
    // whatever certsync's container put at the name (a file, a link, a
    // mode) is gone.
    for h in handbacks {
        for (path, bytes, mode) in &h.files {
            if !dry {
                handback::write(dir, path, *mode, bytes)?;
            }
            let _ = match h.reissued {
                Some(ends) if *path == h.node_path => writeln!(
                    out,
                    "{} {path} again from kubeadm's copy in {}/ (that ends {}, within 24 h): \
                     until {}",
                    tense(dry, "issued", "would issue"),
                    h.backup,
                    until(h.kubeadms),
                    until(ends)
                ),
                _ => writeln!(
                    out,
                    "{} {path} from {}/",
                    tense(dry, "restored", "would restore"),
                    h.backup
                ),
            };
        }
    }
    // Then the components, onto kubeadm's files.
    for c in manifest::components() {
        let path = format!("/etc/kubernetes/manifests/{}.yaml", c.name);
        let Some(now) = node::read_optional(dir, &path)? else {
            continue;
        };
        if let Some((backup, adopted)) = state.manifests.get(&path)
            && digest(&now) == *adopted
        {
            let saved = std::fs::read(backup_path(dir, backup, &path))
                .map_err(|e| KubeadmError::Revert(format!("backup of {path}: {e}")))?;
            if !dry {
                replace_file(&host(dir, &path), 0o600, &saved)?;
            }
            let _ = writeln!(
                out,
                "{} {path} from {backup}/",
                tense(dry, "restored", "would restore")
            );
            continue;
        }
        let text = String::from_utf8(now)
            .map_err(|_| KubeadmError::file(&host(dir, &path), "not UTF-8"))?;
        let mut m = Manifest::parse(&text).map_err(|e| KubeadmError::file(&host(dir, &path), e))?;
        if manifest::unadopt(&c, &mut m) {
            let text = m
                .render()
                .map_err(|e| KubeadmError::file(&host(dir, &path), e))?;
            if !dry {
                replace_file(&host(dir, &path), 0o600, text.as_bytes())?;
            }
            let _ = writeln!(
                out,
                "{path} changed since adoption: {} adopt's flags and volumes out of it",
                tense(dry, "took", "would take")
            );
        }
    }
    for t in own_paths(dir) {
        let path = host(dir, &t);
        if dry || std::fs::symlink_metadata(&path).is_err() {
            continue;
        }
        // Again, now that certsync's container is gone: it may have made
        // one after the check at the start.
        if let Some(link) = symlink_on_the_way(dir, &t) {
            return Err(KubeadmError::Revert(format!(
                "{link} is a symlink, where certsync's {t} should be; not following it"
            )));
        }
        if opts.purge {
            let gone = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            gone.map_err(|e| KubeadmError::Revert(format!("purge {t}: {e}")))?;
        } else {
            move_away(dir, &newest, &t)?;
        }
    }
    if opts.purge {
        let _ = writeln!(
            out,
            "{} certsync's configuration, kubeconfigs and targets (backups kept)",
            tense(dry, "purged", "would purge")
        );
    } else {
        let _ = writeln!(
            out,
            "{} certsync's configuration, kubeconfigs and targets into {newest}/ \
             (nothing can use them by accident there)",
            tense(dry, "moved", "would move")
        );
    }
    // The directories adopt made, each once nothing is left in it (the
    // record, moved next, does not count). In a dry run, what is left once
    // certsync's files are out.
    let own = own_paths(dir);
    for d in &state.made_dirs {
        let moving: Vec<String> = own
            .iter()
            .chain([&STATE.to_owned()])
            .filter(|p| dry || *p == STATE)
            .filter_map(|p| p.strip_prefix(&format!("{d}/")))
            .filter(|name| !name.contains('/'))
            .map(str::to_owned)
            .collect();
        // Removing one is tidying, not reverting: a directory it cannot
        // remove (a mount point, EBUSY) is left, saying why, never a
        // revert stopped there at every re-run.
        match moves::remove_empty_dir(dir, d, &moving, dry) {
            Ok(moves::Left::Removed) => {
                let _ = writeln!(
                    out,
                    "{} {d}/ (adopt made it; {})",
                    tense(dry, "removed", "would remove"),
                    tense(dry, "now empty", "empty once certsync's files are out")
                );
            }
            Ok(moves::Left::Absent) => {}
            Ok(moves::Left::Kept(why)) | Err(why) => {
                let _ = writeln!(
                    out,
                    "{} {d}/ in place: {why}",
                    tense(dry, "left", "would leave")
                );
            }
        }
    }
    if dry {
        return Ok(());
    }
    // Last: while the record is in place, revert is not done.
    let to = backup_path(dir, &newest, "/etc/kubernetes/reverted.json");
    moves::move_path(&host(dir, STATE), &to).map_err(KubeadmError::Revert)?;
    out.push_str("reverted\n");
    Ok(())
}

/// certsync's own files on the node (node paths): its targets, its
/// configuration and the kubeconfigs adopt wrote for the components.
fn own_paths(dir: &Path) -> Vec<String> {
    targets(dir)
        .into_iter()
        .chain([CONFIG.to_owned()])
        .chain(OWN_KUBECONFIGS.map(|f| format!("{KUBECONFIGS}/{f}")))
        .collect()
}

/// The first name from `/etc/kubernetes` down to `node_path` that is a
/// symlink, if one is (a name absent is none), found as [`moves::reach`]
/// walks it: beneath the handle of the directory before it, never by a
/// path a name swapped meanwhile would lead elsewhere.
fn symlink_on_the_way(dir: &Path, node_path: &str) -> Option<String> {
    match moves::reach(dir, node_path) {
        Err(moves::Blocked::Link(at)) => Some(at),
        _ => None,
    }
}

/// How long revert waits for certsync's daemon to let go of its targets
/// once its static pod is gone: the kubelet stops it within the pod's
/// grace period (30 s unless the manifest says otherwise), and a
/// kubelet's manifest poll comes first.
const CLAIM_WAIT: std::time::Duration = std::time::Duration::from_secs(90);

/// certsync's claim (`..owner`) on each of its targets, taken before they
/// move. The daemon whose static pod revert just removed may still be
/// stopping; one that published after its target moved would create it
/// again in place (a target nothing renews, that a later `kubeadm upgrade`
/// could start a component on). Waits up to `wait` for it to exit.
pub(super) async fn claim_targets(
    dir: &Path,
    wait: std::time::Duration,
) -> Result<Vec<Claim>, KubeadmError> {
    let deadline = std::time::Instant::now() + wait;
    let mut claims = Vec::new();
    for t in targets(dir) {
        let path = host(dir, &t);
        if !path.is_dir() {
            continue;
        }
        loop {
            match Writer::existing(&path)?.claim() {
                Ok(c) => {
                    claims.push(c);
                    break;
                }
                Err(WriterError::Owned { .. }) if std::time::Instant::now() < deadline => {
                    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
                }
                Err(WriterError::Owned { pid, .. }) => {
                    return Err(KubeadmError::Revert(format!(
                        "certsync (pid {pid}) still holds {t} {} s after its static pod was \
                         removed; stop it, then run revert again",
                        wait.as_secs()
                    )));
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(claims)
}

/// Moves `node_path` to its place in the backup `backup`, which may be on
/// another filesystem (see [`moves`]).
fn move_away(dir: &Path, backup: &str, node_path: &str) -> Result<PathBuf, KubeadmError> {
    let from = host(dir, node_path);
    let base = backup_path(dir, backup, node_path);
    if let Some(parent) = base.parent() {
        super::record::mkdir(parent)?;
    }
    // The backup may hold an earlier copy under this name (a second adopt
    // backed up the pod and configuration it replaced): kept beside it as
    // NAME.reverted-N, never overwriting it. A move that stopped after its
    // copy is found again (the copy holds what is left of the original).
    let name = base
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut kept = base.clone();
    for n in 1.. {
        if std::fs::symlink_metadata(&kept).is_err()
            || moves::contained(&from, &kept)
                .map_err(|e| KubeadmError::Revert(format!("{}: {e}", kept.display())))?
        {
            break;
        }
        kept = base.with_file_name(format!("{name}.reverted-{n}"));
    }
    moves::move_path(&from, &kept).map_err(KubeadmError::Revert)?;
    Ok(kept)
}

/// Every ClusterConfiguration entry adopt sets: what to take out by hand.
fn hand_edits() -> Vec<cluster::Field> {
    let mut config = serde_yaml_ng::Value::Mapping(Default::default());
    cluster::adopt(&mut config, &manifest::components()).unwrap_or_default()
}
