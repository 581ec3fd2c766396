//! `certsync kubeadm revert`: kubeadm's manifests back (the backup when the
//! manifest is still the one adopt wrote, byte for byte; otherwise, after
//! a `kubeadm upgrade` rewrote it, adopt's flags and volumes taken out of
//! the current one so the upgrade is kept), certsync's static pod removed,
//! adopt's ClusterConfiguration fields taken out (exactly those: anything
//! else changed since stays). certsync's files stay for inspection unless
//! `--purge`. The record moves into the backup, so a second revert finds
//! nothing to do.

use std::fmt::Write as _;

use super::apply::State;
use super::manifest::{self, Manifest};
use super::plan::{CONFIG, POD, STATE, backup_path, targets};
use super::{KubeadmError, Options, cluster, digest, host, node};
use crate::writer::replace_file;

pub async fn revert(opts: &Options) -> Result<String, KubeadmError> {
    let dir = &opts.dir;
    let mut out = String::new();
    let Some(state) = State::read(dir)? else {
        out.push_str("not adopted (no /etc/kubernetes/certsync/adopted.json): nothing to do\n");
        return Ok(out);
    };
    // Components first: they stop reading certsync's files before
    // certsync's pod goes.
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
            replace_file(&host(dir, &path), 0o600, &saved)?;
            let _ = writeln!(out, "restored {path} from {backup}/");
            continue;
        }
        let text = String::from_utf8(now)
            .map_err(|_| KubeadmError::file(&host(dir, &path), "not UTF-8"))?;
        let mut m = Manifest::parse(&text).map_err(|e| KubeadmError::file(&host(dir, &path), e))?;
        if manifest::unadopt(&c, &mut m) {
            let text = m
                .render()
                .map_err(|e| KubeadmError::file(&host(dir, &path), e))?;
            replace_file(&host(dir, &path), 0o600, text.as_bytes())?;
            let _ = writeln!(
                out,
                "{path} changed since adoption: took adopt's flags and volumes out of it"
            );
        }
    }
    let newest = state.backups.last().cloned().unwrap_or_default();
    if node::read_optional(dir, POD)?.is_some() {
        let kept = backup_path(dir, &newest, POD);
        if let Some(parent) = kept.parent() {
            super::apply::mkdir(parent)?;
        }
        std::fs::rename(host(dir, POD), &kept)
            .map_err(|e| KubeadmError::Revert(format!("move {POD} away: {e}")))?;
        let _ = writeln!(out, "removed {POD} (kept in {newest}/)");
    }
    // kubeadm's admin.conf and super-admin.conf, as they were before
    // certsync renewed them in place (their pair may be certsync's short-lived one).
    for (k, backup) in &state.kubeconfigs {
        let saved = std::fs::read(backup_path(dir, backup, k))
            .map_err(|e| KubeadmError::Revert(format!("backup of {k}: {e}")))?;
        replace_file(&host(dir, k), 0o600, &saved)?;
        let _ = writeln!(out, "restored {k} from {backup}/");
    }
    // The ClusterConfiguration.
    let admin = host(dir, "/etc/kubernetes/admin.conf");
    match cluster::read(&admin).await {
        Ok(stored) => {
            let mut config = stored.config.clone();
            if cluster::unadopt(&mut config, &manifest::components()) {
                cluster::write(&admin, &stored, &config).await?;
                out.push_str(
                    "took adopt's fields out of the ClusterConfiguration in kubeadm-config\n",
                );
            }
        }
        Err(e) => {
            let _ = writeln!(
                out,
                "ClusterConfiguration NOT changed ({e}): remove certsync's extraArgs and extraVolumes \
                 from kubeadm-config by hand before the next `kubeadm upgrade`"
            );
        }
    }
    if opts.purge {
        for t in targets(dir) {
            let _ = std::fs::remove_dir_all(host(dir, &t));
        }
        for p in [
            CONFIG,
            "/etc/kubernetes/certsync/controller-manager.conf",
            "/etc/kubernetes/certsync/scheduler.conf",
        ] {
            let _ = std::fs::remove_file(host(dir, p));
        }
        out.push_str("purged certsync's configuration, kubeconfigs and targets (backups kept)\n");
    }
    std::fs::rename(
        host(dir, STATE),
        backup_path(dir, &newest, "/etc/kubernetes/reverted.json"),
    )
    .map_err(|e| KubeadmError::Revert(format!("move {STATE} away: {e}")))?;
    out.push_str("reverted\n");
    Ok(out)
}
