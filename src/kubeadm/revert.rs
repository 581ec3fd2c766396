//! What `certsync kubeadm revert` would do: the [`RevertPlan`], made from one reading of the
//! node, that `--dry-run` prints and `revert_apply` carries out. certsync's own files move
//! into the backup (or are purged): a stale copy left in place would be used silently by
//! anything still naming it, and expire there unnoticed.

use std::fmt::Write as _;
use std::path::Path;

use super::error::{FileProblem, KubeadmError, RevertError};
use super::handback::{Handback, handbacks};
use super::manifest::{self, KUBECONFIGS, Manifest};
use super::options::RevertOptions;
use super::paths::{digest, host};
use super::plan::{CONFIG, POD, STATE, targets};
use super::record::State;
use super::{moves, node};
use crate::validate::rfc3339;

/// certsync's kubeconfigs for the controller-manager and scheduler.
const OWN_KUBECONFIGS: [&str; 2] = ["controller-manager.conf", "scheduler.conf"];

/// Everything revert would do on an adopted node, in its order: carrying it out reads the
/// node again only to check what it wrote.
pub struct RevertPlan {
    /// The newest backup: certsync's files move into it.
    pub newest: String,
    pub pod: Option<super::pod::Current>,
    pub handbacks: Vec<Handback>,
    pub manifests: Vec<ManifestBack>,
    /// certsync's own files, moved or purged: its targets first, `targets` of them.
    pub own: Vec<String>,
    pub targets: usize,
    pub purge: bool,
    pub api_server_timeout: std::time::Duration,
    /// The directories adopt made and what becomes of each: as foreseen, then as found.
    pub dirs: Vec<(String, Result<moves::Left, RevertError>)>,
}

pub struct ManifestBack {
    pub path: String,
    pub bytes: Vec<u8>,
    /// The backup it comes from; `None`: adopt's changes taken out of the one in place.
    pub backup: Option<String>,
}

/// The plan for the node at `opts.dir`; `None` when it is not adopted. Reads only:
/// everything that could refuse is found here.
pub fn plan(opts: &RevertOptions) -> Result<Option<RevertPlan>, KubeadmError> {
    let dir = &opts.dir;
    let Some(state) = State::read(dir)? else {
        return Ok(None);
    };
    // The CA bundles too: one left behind is one the next adopt, finding no record of it,
    // must refuse.
    let targets = targets(dir);
    let own: Vec<String> = (targets.iter().cloned())
        .chain([CONFIG, manifest::CA_BUNDLE, manifest::ETCD_CA_BUNDLE].map(str::to_owned))
        .chain(OWN_KUBECONFIGS.map(|f| format!("{KUBECONFIGS}/{f}")))
        .collect();
    // Moved or purged as root: none may be reached through a symlink (a compromised
    // container could have revert move or delete the host's files).
    for t in &own {
        if let Err(FileProblem::Link(link)) = moves::reach(dir, t) {
            let path = t.clone();
            return Err(RevertError::Symlink { link, path }.into());
        }
    }
    let pod = node::read_optional(dir, POD)?.map(|p| super::pod::Current::parse(&p));
    super::audit::kubelet_bootstrap(dir, true, pod.as_ref()).map_err(RevertError::Planted)?;
    let moving: Vec<String> = own.iter().cloned().chain([STATE.to_owned()]).collect();
    Ok(Some(RevertPlan {
        newest: state.backups.last().cloned().unwrap_or_default(),
        pod,
        handbacks: handbacks(dir, &state)?,
        manifests: manifests(dir, &state)?,
        dirs: tidy(dir, &state.made_dirs, &moving, true),
        targets: targets.len(),
        own,
        purge: opts.purge,
        api_server_timeout: opts.api_server_timeout,
    }))
}

/// kubeadm's copy from the backup while the manifest is adopt's byte for byte, else the one
/// in place without adopt's changes (a `kubeadm upgrade` rewrote it: the upgrade is kept).
fn manifests(dir: &Path, state: &State) -> Result<Vec<ManifestBack>, KubeadmError> {
    let mut all = Vec::new();
    for c in manifest::components() {
        let path = super::manifest::manifest_path(c.name);
        let Some(now) = node::read_optional(dir, &path)? else {
            continue;
        };
        let file = |e| KubeadmError::file(&host(dir, &path), e);
        let (bytes, backup) = match state.manifests.get(&path) {
            Some((backup, adopted)) if digest(&now) == *adopted => {
                let bytes = super::record::read_backup(dir, backup, &path)?;
                (bytes, Some(backup.clone()))
            }
            _ => {
                let text = String::from_utf8(now).map_err(|_| file(FileProblem::NotUtf8))?;
                let mut m = Manifest::parse(&text).map_err(file)?;
                if !manifest::unadopt(&c, &mut m) {
                    continue;
                }
                (m.render().map_err(file)?.into_bytes(), None)
            }
        };
        all.push(ManifestBack {
            path,
            bytes,
            backup,
        });
    }
    Ok(all)
}

/// The directories adopt made, each removed once empty but for `moving` (with `dry`, what
/// would become of each). Tidying, not reverting: one it cannot remove is left, saying why,
/// never a revert stopped there at every re-run.
pub(super) fn tidy(
    dir: &Path,
    made: &[String],
    moving: &[String],
    dry: bool,
) -> Vec<(String, Result<moves::Left, RevertError>)> {
    let names_in = |d: &str| -> Vec<String> {
        (moving.iter())
            .filter_map(|p| p.strip_prefix(&format!("{d}/")))
            .filter(|name| !name.contains('/'))
            .map(str::to_owned)
            .collect()
    };
    (made.iter())
        .map(|d| {
            (
                d.clone(),
                moves::remove_empty_dir(dir, d, &names_in(d), dry),
            )
        })
        .collect()
}

impl RevertPlan {
    /// The API server's manifest, when revert writes it and waits for the API server.
    pub fn api_server(&self) -> Option<&ManifestBack> {
        let path = manifest::manifest_path("kube-apiserver");
        let m = self.manifests.iter().find(|m| m.path == path)?;
        (!self.api_server_timeout.is_zero()).then_some(m)
    }

    /// What a dry run would do (`done`: `None`), or what the real run did and then saw.
    pub fn report(&self, done: Option<(&str, &str)>, warnings: &str) -> String {
        if let Some((back, kubelet)) = done {
            return format!("{}{back}reverted\n{kubelet}{warnings}", self.text(true));
        }
        let wait = self.api_server().map_or(String::new(), |m| {
            format!(
                "would wait up to {} for the API server to restart on kubeadm's files (serving \
                 {}, /readyz ok through admin.conf)\n",
                humantime::format_duration(self.api_server_timeout),
                super::wait::serving_cert(&m.bytes).unwrap_or_default()
            )
        });
        let text = self.text(false);
        let unchanged = "dry run: nothing was changed";
        format!(
            "dry run: revert would do this, writing nothing:\n{text}{wait}{warnings}{unchanged}\n"
        )
    }

    fn text(&self, done: bool) -> String {
        let t = |did, would| if done { did } else { would };
        let mut out = String::new();
        let newest = &self.newest;
        if self.pod.is_some() {
            let _ = writeln!(
                out,
                "{} {POD} (kept in {newest}/) and {} for certsync's pod to stop (about {} s) \
                 before handing anything back",
                t("removed", "would remove"),
                t("waited", "wait"),
                super::wait::STOPPED_AFTER.as_secs()
            );
        }
        for h in &self.handbacks {
            let (path, backup) = (&h.node_path, &h.backup);
            let _ = match h.reissued {
                Some((kubeadms, ends)) => write!(
                    out,
                    "{} {path} again from kubeadm's copy in {backup}/ (that ends {}, within 24 h): \
                     until {}",
                    t("issued", "would issue"),
                    rfc3339(kubeadms),
                    rfc3339(ends)
                ),
                None => write!(
                    out,
                    "{} {path} from {backup}/",
                    t("restored", "would restore")
                ),
            };
            if h.ca_added {
                out.push_str(
                    ", with the renewed CA certificate (pki/ca.crt) beside kubeadm's CA data",
                );
            }
            out.push('\n');
        }
        for m in &self.manifests {
            let path = &m.path;
            let _ = match &m.backup {
                Some(backup) => {
                    writeln!(
                        out,
                        "{} {path} from {backup}/",
                        t("restored", "would restore")
                    )
                }
                None => writeln!(
                    out,
                    "{path} changed since adoption: {} adopt's flags and volumes out of it",
                    t("took", "would take")
                ),
            };
        }
        let _ = if self.purge {
            writeln!(
                out,
                "{} certsync's configuration, kubeconfigs, targets and CA bundles (backups kept)",
                t("purged", "would purge")
            )
        } else {
            writeln!(
                out,
                "{} certsync's configuration, kubeconfigs, targets and CA bundles \
                 (pki/ca-bundle.crt, pki/etcd/ca-bundle.crt) into {newest}/ (nothing can use \
                 them by accident there)",
                t("moved", "would move")
            )
        };
        for (d, left) in &self.dirs {
            out.push_str(&dir_line(d, left, done));
        }
        out
    }
}

fn dir_line(d: &str, left: &Result<moves::Left, RevertError>, done: bool) -> String {
    let t = |did, would| if done { did } else { would };
    match left {
        Ok(moves::Left::Removed) => format!(
            "{} {d}/ (adopt made it; {})\n",
            t("removed", "would remove"),
            t("now empty", "empty once certsync's files are out")
        ),
        Ok(moves::Left::Absent) => String::new(),
        Ok(moves::Left::Kept(why)) => {
            let holds_backups = super::record::BACKUPS.rsplit_once('/').map(|(up, _)| up);
            let keys = if holds_backups == Some(d) {
                " (private keys and admin.conf's credential: remove it once the node serves \
                 and they are no longer needed)"
            } else {
                ""
            };
            format!("{} {d}/ in place: {why}{keys}\n", t("left", "would leave"))
        }
        Err(why) => format!("{} {d}/ in place: {why}\n", t("left", "would leave")),
    }
}
