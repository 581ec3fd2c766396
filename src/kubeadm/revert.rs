//! What `certsync kubeadm revert` would do: the [`RevertPlan`], made from one reading of the
//! node, that `--dry-run` prints and `revert_apply` carries out. certsync's own files move
//! into the backup (or are purged): a stale copy left in place would be used silently by
//! anything still naming it, and expire there unnoticed.

use std::fmt::Write as _;
use std::path::Path;

use super::error::{FileProblem, KubeadmError, Refusal, RevertError};
use super::handback::{Handback, handbacks};
use super::manifest::{self, BY_FILE, KUBECONFIGS, Manifest, manifest_path};
use super::moves::{self, Left};
use super::options::RevertOptions;
use super::paths::host;
use super::plan::{CONFIG, POD, STATE, certs};
use super::pod;
use super::record::State;
use crate::validate::rfc3339;

/// Everything revert would do on an adopted node, in its order: carrying it out reads the
/// node again only to check what it wrote. certsync's files move into the `newest` backup.
pub struct RevertPlan {
    pub newest: String,
    pub pod: Option<pod::Current>,
    pub handbacks: Vec<Handback>,
    /// pki/ca.crt as the plan read it (none: unreadable): kubelet.conf is judged by it after.
    pub ca: Option<super::node::Cert>,
    /// The manifests, `backup` `None` when adopt's changes are taken out of the one in place.
    pub manifests: Vec<Handback>,
    /// certsync's own files, moved or purged: its targets first, `targets` of them.
    pub own: Vec<String>,
    pub targets: usize,
    pub opts: RevertOptions,
    /// The directories adopt made and what becomes of each: as foreseen, then as found.
    pub dirs: Vec<(String, Result<Left, KubeadmError>)>,
}

/// The plan for the node at `opts.dir` (`None`: not adopted): everything that could refuse.
pub fn plan(opts: &RevertOptions) -> Result<Option<RevertPlan>, KubeadmError> {
    let dir = &opts.dir;
    let Some((_, state)) = State::read(dir)? else {
        return Ok(None);
    };
    // Every client's target the record names too. The CA bundles too: one left behind is
    // one the next adopt, finding no record of it, must refuse.
    let targets = certs(dir, Some(&state));
    let own: Vec<String> = (targets.iter().map(|c| c.target.clone()))
        .chain([CONFIG, manifest::CA_BUNDLE, manifest::ETCD_CA_BUNDLE].map(str::to_owned))
        .chain(BY_FILE.map(|(f, ..)| format!("{KUBECONFIGS}/{f}")))
        .collect();
    // Moved or purged as root: none may be reached through a symlink (a compromised
    // container could have revert move or delete the host's files).
    for path in &own {
        if let Err(FileProblem::Link(link)) = moves::reach(dir, path) {
            let path = path.clone();
            return Err(RevertError::Planted(Box::new(Refusal::Link { path, link })).into());
        }
    }
    let pod = pod::Current::read(dir)?;
    super::audit::kubelet_bootstrap(dir, true, pod.as_ref()).map_err(RevertError::Planted)?;
    let moving: Vec<String> = own.iter().cloned().chain([STATE.to_owned()]).collect();
    let (handbacks, ca) = handbacks(dir, &state)?;
    Ok(Some(RevertPlan {
        newest: state.backups.last().cloned().unwrap_or_default(),
        pod,
        handbacks,
        ca,
        manifests: manifests(dir, &state)?,
        dirs: tidy(dir, &state.made_dirs, &moving, true),
        targets: targets.len(),
        own,
        opts: opts.clone(),
    }))
}

/// kubeadm's copy from the backup while the manifest is adopt's byte for byte, else the one
/// in place without adopt's changes (a `kubeadm upgrade` rewrote it: the upgrade is kept).
fn manifests(dir: &Path, state: &State) -> Result<Vec<Handback>, KubeadmError> {
    let mut all = Vec::new();
    for (c, path, now) in manifest::on_node(dir) {
        let Some(now) = now? else {
            continue;
        };
        let file = |e| KubeadmError::file(&host(dir, &path), e);
        let (bytes, backup) = match state.wrote(&path, &now) {
            Some(backup) => {
                let (_, bytes) = super::record::read_backup(dir, backup, &path)?;
                (bytes, Some(backup.clone()))
            }
            None => {
                let mut m = Manifest::read(&now).map_err(file)?;
                if !manifest::unadopt(&c, &mut m) {
                    continue;
                }
                (m.render().map_err(file)?.into_bytes(), None)
            }
        };
        all.push(Handback {
            node_path: path,
            bytes,
            backup,
            ..Handback::default()
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
) -> Vec<(String, Result<Left, KubeadmError>)> {
    let tidy = |d: &String| {
        let names: Vec<String> = (moving.iter())
            .filter_map(|p| p.strip_prefix(&format!("{d}/")))
            .filter(|name| !name.contains('/'))
            .map(str::to_owned)
            .collect();
        (d.clone(), moves::remove_empty_dir(dir, d, &names, dry))
    };
    made.iter().map(tidy).collect()
}

impl RevertPlan {
    /// The API server's manifest, when revert writes it and waits for the API server.
    pub fn api_server(&self) -> Option<&Handback> {
        let path = manifest_path("kube-apiserver");
        let m = self.manifests.iter().find(|m| m.node_path == path)?;
        (!self.opts.api_server_timeout.is_zero()).then_some(m)
    }

    /// What a dry run would do (`done`: `None`), or what the real run did and then saw.
    pub fn report(&self, done: Option<(&str, &str)>) -> String {
        let warnings = super::audit::warnings(&self.opts.dir);
        if let Some((back, kubelet)) = done {
            return format!("{}{back}reverted\n{kubelet}{warnings}", self.text(true));
        }
        let wait = self.api_server().map_or(String::new(), |m| {
            format!(
                "would wait up to {} for the API server to restart on kubeadm's files (serving \
                 {}, /readyz ok through admin.conf)\n",
                humantime::format_duration(self.opts.api_server_timeout),
                (Manifest::read(&m.bytes).ok())
                    .and_then(|m| m.flag("tls-cert-file"))
                    .unwrap_or_default()
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
        let (mut out, newest) = (String::new(), &self.newest);
        let restore = t("restored", "would restore");
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
        for h in self.handbacks.iter().chain(&self.manifests) {
            let path = &h.node_path;
            let _ = match (h.reissued, &h.backup) {
                (Some((kubeadms, ends)), Some(backup)) => write!(
                    out,
                    "{} {path} again from kubeadm's copy in {backup}/ (that ends {}, within 24 h): \
                     until {}",
                    t("issued", "would issue"),
                    rfc3339(kubeadms),
                    rfc3339(ends)
                ),
                (_, Some(backup)) => write!(out, "{restore} {path} from {backup}/"),
                (_, None) => write!(
                    out,
                    "{path} changed since adoption: {} adopt's flags and volumes out of it",
                    t("took", "would take")
                ),
            };
            let ca = ", with the renewed CA certificate (pki/ca.crt) beside kubeadm's CA data";
            out.push_str(if h.ca_added { ca } else { "" });
            out.push('\n');
        }
        let what = "certsync's configuration, kubeconfigs, targets and CA bundles";
        let _ = match self.opts.purge {
            true => writeln!(out, "{} {what} (backups kept)", t("purged", "would purge")),
            false => writeln!(
                out,
                "{} {what} (pki/ca-bundle.crt, pki/etcd/ca-bundle.crt) into {newest}/ (nothing \
                 can use them by accident there)",
                t("moved", "would move")
            ),
        };
        let holds_backups = super::record::BACKUPS.rsplit_once('/').map(|(up, _)| up);
        for (d, left) in &self.dirs {
            let why = match left {
                Ok(Left::Absent) => continue,
                Ok(Left::Removed) => {
                    let removed = t("removed", "would remove");
                    let empty = t("now empty", "empty once certsync's files are out");
                    let _ = writeln!(out, "{removed} {d}/ (adopt made it; {empty})");
                    continue;
                }
                Ok(Left::Kept(why)) if holds_backups == Some(d.as_str()) => format!(
                    "{why} (private keys and admin.conf's credential: remove it once the node \
                     serves and they are no longer needed)"
                ),
                Ok(Left::Kept(why)) => why.clone(),
                Err(why) => why.to_string(),
            };
            let _ = writeln!(out, "{} {d}/ in place: {why}", t("left", "would leave"));
        }
        out
    }
}
