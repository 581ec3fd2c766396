//! What adopting again keeps: the node's `--image`, `--admin-addr` and `--set` options
//! unless given now, so a re-adopt never moves a Prometheus target or a lifetime, and one
//! to put certsync's pod back after an outage needs no image looked up.

use std::net::SocketAddr;
use std::path::Path;

use super::manifest::CONFIG;
use super::options::{DEFAULT_ADMIN_ADDR, Options};
use super::paths::host;

/// One choice of the node: as it is (`None`: nothing there yet) and as adopt writes it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Choice {
    pub what: String,
    pub before: Option<String>,
    pub after: String,
}

impl Choice {
    pub fn changed(&self) -> bool {
        self.before.as_deref() != Some(self.after.as_str())
    }
}

/// `opts` with every choice it leaves open taken from the node's pod (`pod`), record
/// (`recorded`) and certsync.yaml, and the choices as they were and will be.
pub fn kept(
    opts: &Options,
    pod: Option<&super::pod::Probe>,
    (recorded, recorded_image): (Option<SocketAddr>, Option<&str>),
) -> (Options, Vec<Choice>) {
    let current_image = pod.and_then(|p| p.image.as_deref()).or(recorded_image);
    let image = opts.image.clone().or(current_image.map(str::to_owned));
    let current_admin = pod
        .map(|p| {
            p.admin
                .as_deref()
                .map_or(p.addr, |a| a.parse().unwrap_or(p.addr))
        })
        .or(recorded);
    let current = current_settings(&opts.dir);
    let admin = (opts.admin_addr.or(current_admin)).unwrap_or(DEFAULT_ADMIN_ADDR);
    let mut choices = vec![Choice {
        what: "--admin-addr".into(),
        before: current_admin.map(|a| a.to_string()),
        after: admin.to_string(),
    }];
    let mut set = Vec::new();
    for key in crate::cli::SETTABLE {
        let value = |s: &[(String, String)]| {
            let found = s.iter().rev().find(|(k, _)| k == key);
            found.map(|(_, v)| v.clone())
        };
        let was = current.as_deref().and_then(value);
        let now = value(&opts.set).or_else(|| was.clone());
        set.extend(now.clone().map(|v| (key.to_string(), v)));
        let shown = |v: Option<String>| v.unwrap_or_else(|| "certsync's default".into());
        let (before, after) = (Some(shown(was)), shown(now));
        choices.push(Choice {
            what: key.to_string(),
            before,
            after,
        });
    }
    // A node with nothing of certsync's yet has no choices to keep.
    if current_admin.is_none() && current.is_none() {
        choices.clear();
    }
    let out = Options {
        admin_addr: Some(admin),
        image,
        set,
        ..opts.clone()
    };
    (out, choices)
}

/// The `--set` options `spec` sets, by name, each value as `--set` takes it.
pub(super) fn set_options(spec: &crate::config::MappingSpec) -> Vec<(&'static str, String)> {
    let written = crate::config::as_written(spec).unwrap_or_default();
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.clone(),
        v => v.to_string(),
    };
    (crate::cli::SETTABLE.iter())
        .filter_map(|k| written.get(*k).map(|v| (*k, text(v))))
        .collect()
}

/// The `--set` options every mapping of the node's certsync.yaml holds alike (others, such
/// as a hand edit, are not kept); `None` when `run` could not read it.
fn current_settings(dir: &Path) -> Option<Vec<(String, String)>> {
    let text = crate::config::read_config_text(&host(dir, CONFIG)).ok()?;
    let settings = crate::config::Settings::once(Path::new(CONFIG), &text).ok()?;
    let set: Vec<_> = settings.file_mappings().iter().map(set_options).collect();
    let mut agreed = Vec::new();
    for key in crate::cli::SETTABLE {
        let mut values = set.iter().map(|s| s.iter().find(|(k, _)| *k == key));
        let Some(Some((_, first))) = values.next() else {
            continue;
        };
        if values.all(|v| v.map(|(_, v)| v) == Some(first)) {
            agreed.push((key.to_string(), first.clone()));
        }
    }
    Some(agreed)
}
