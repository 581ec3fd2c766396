//! The parsed command line (`cli`) and config file → a validated [`Config`]
//! for `run`, an `ApproverConfig` for `approve`.
//!
//! Every flag is also a `CERTSYNC_*` environment variable. Mappings come from
//! repeatable `--sync` flags and from the optional YAML `--config` file; both
//! forms go through the same [`MappingSpec`], so they accept exactly the same
//! options and produce the same errors.
//!
//! Flag form: `KIND:SOURCE=TARGET[,OPTION=VALUE]...`
//!
//! ```text
//! dir:/var/lib/kubelet/pki=/etc/certs/kubelet,combined=kubelet-server-current.pem
//! dir:/etc/kubernetes/pki=/etc/certs/apiserver,cert=apiserver.crt,key=apiserver.key
//! secret:openshift-kube-scheduler/kube-scheduler-client-cert-key=/etc/certs/client
//! configmap:kube-system/ca-bundle=/etc/certs/ca,ca-only,ca=ca-bundle.crt
//! csr:kubernetes.io/kube-apiserver-client=/etc/certs/client,cn=system:kube-scheduler
//! ca:/etc/kubernetes/pki/ca=/etc/kubernetes/pki/certsync/apiserver,template=/etc/kubernetes/pki/apiserver.crt
//! ```
//!
//! Paths containing `=` or `,` need the config file.
//!
//! - [`mapping`]: a mapping as written → one validated [`Mapping`] per
//!   source kind;
//! - [`options`]: the `--sync` form read into the file's struct, and the
//!   options a mapping sets checked against the grammar
//!   ([`crate::cli::grammar`]);
//! - [`issue`]: the options `csr:` and `ca:` share, and each one's own;
//! - [`file`]: the YAML config file (unknown keys refused; flags override)
//!   and `--print-config`;
//! - [`overlap`]: canonical paths, so no two mappings and no source and
//!   target overlap.

mod file;
#[cfg(test)]
mod grammar_tests;
mod issue;
mod mapping;
mod options;
mod overlap;
mod pod;
#[cfg(test)]
mod tests;

use crate::cli::{ApproveArgs, PolicyArgs, ReloadArgs, RunArgs};
use file::read_config_file;
pub use file::{Parsed, parse, print_config};
pub use issue::IssueError;
pub(crate) use issue::parse_renew;
pub use mapping::{DnsError, EventsOn, MappingSpec, Source};
pub use options::GrammarError;

use overlap::check_overlaps;
pub use overlap::resolve_path;
use std::path::PathBuf;
use std::time::Duration;

use crate::beneath::{Entry, Owners, ReadOnly, Trust};
use crate::bundle::{Item, Layout};
use crate::reload::http::{HttpHook, HttpHookConfig};
use crate::reload::pid::Target;
use crate::reload::verify::ServingCheck;
use crate::reload::{Method, ReloadConfig};
use crate::source::client::ClientSettings;
use crate::validate::Expect;
use crate::writer::WriterOptions;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--sync {spec:?}: {problem}")]
    Flag { spec: String, problem: String },
    #[error("{path}: {problem}")]
    File { path: PathBuf, problem: String },
    #[error("mapping {mapping:?}: {problem}")]
    Mapping { mapping: String, problem: String },
    #[error("no mappings: give at least one --sync or a --config file with mappings")]
    NoMappings,
    #[error("reload: {problem}")]
    Reload { problem: String },
    #[error("--events: {problem}")]
    Events { problem: String },
}

impl PolicyArgs {
    pub fn policy(&self) -> crate::approve::Policy {
        crate::approve::Policy {
            allowed_dns: self.allowed_dns.clone(),
            node_cidrs: self.node_cidrs.clone(),
            any_node_address: self.allow_any_node_address,
            service_cidrs: self.service_cidrs.clone(),
            reserved: self.reserved.clone(),
            max_expiration: self.max_expiration,
        }
    }

    /// Refuses a policy that would trust node-written addresses alone.
    pub fn check(&self) -> Result<(), PolicyError> {
        if let Some(all) = self.node_cidrs.iter().find(|c| c.is_everything()) {
            return Err(PolicyError::EveryAddress {
                cidr: all.to_string(),
            });
        }
        if self.node_cidrs.is_empty() && !self.allow_any_node_address {
            return Err(PolicyError::NoNodeCidr);
        }
        Ok(())
    }
}

/// A kubelet-serving policy that would trust node-written addresses alone.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("--node-cidr {cidr} is every address: pass --allow-any-node-address if that is meant")]
    EveryAddress { cidr: String },
    #[error(
        "no --node-cidr: say which networks node addresses come from \
         (e.g. --node-cidr 192.168.10.0/24), or pass --allow-any-node-address \
         to accept any address a node lists in its own Node status"
    )]
    NoNodeCidr,
}

impl ApproveArgs {
    pub fn config(&self) -> crate::approve::ApproverConfig {
        // Without a flag or POD_NAMESPACE, the client configuration's
        // namespace (context or service account), known once it is loaded.
        let namespace = self.lease_namespace.clone().or_else(|| {
            std::env::var("POD_NAMESPACE")
                .ok()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
        });
        let identity = std::env::var("POD_NAME")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| format!("certsync-{}", std::process::id()));
        crate::approve::ApproverConfig {
            client: ClientSettings {
                kubeconfig: self.kubeconfig.clone(),
                context: self.context.clone(),
                watch_timeout: self.watch_timeout,
                ..ClientSettings::default()
            },
            policy: self.policy.policy(),
            signer: crate::approve::policy::SIGNER.into(),
            dry_run: self.dry_run,
            lease: (!self.lease_name.is_empty()).then(|| crate::approve::LeaseSettings {
                name: self.lease_name.clone(),
                namespace,
                identity,
                duration: self.lease_duration,
            }),
            events: self.events,
            admin_addr: self.admin_addr,
            selector: self.policy.selector.clone(),
        }
    }
}

impl ReloadArgs {
    pub(crate) fn build(&self) -> Result<ReloadConfig, ConfigError> {
        let err = |problem: String| ConfigError::Reload { problem };
        let signal = |target| Method::Signal {
            target,
            signal: self.reload_signal,
        };
        let method = if let Some(path) = &self.reload_pidfile {
            pidfile_dir_guarded(path)?;
            Some(signal(Target::Pidfile {
                path: path.clone(),
                name: self.reload_process.clone(),
            }))
        } else if let Some(name) = &self.reload_process {
            Some(signal(Target::Name(name.clone())))
        } else if let Some(re) = &self.reload_cmdline {
            let re = regex::Regex::new(re).map_err(|e| err(format!("--reload-cmdline: {e}")))?;
            Some(signal(Target::Cmdline(re)))
        } else if let Some(url) = &self.reload_url {
            let hook = HttpHook::new(&HttpHookConfig {
                url: url.clone(),
                method: self.reload_method.clone(),
                headers: self.reload_headers.clone(),
                bearer_token_file: self.reload_bearer_token_file.clone(),
                ca_file: self.reload_ca_file.clone(),
                insecure_skip_verify: self.reload_insecure_skip_verify,
                timeout: self.reload_timeout,
                retries: self.reload_retries,
                backoff: Duration::from_millis(250),
            })
            .map_err(|e| err(e.to_string()))?;
            Some(Method::Http(Box::new(hook)))
        } else {
            None
        };
        Ok(ReloadConfig {
            method,
            quiet: self.reload_quiet,
            max_delay: self.reload_max_delay.max(self.reload_quiet),
            find_timeout: self.reload_find_timeout,
            verify_timeout: self.verify_timeout,
            verify_retries: self.verify_retries,
        })
    }
}

/// A validated mapping: one source, one target directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub name: String,
    pub source: Source,
    /// Where the main container serves this pair, to check it after a reload.
    pub verify: Option<ServingCheck>,
    pub layout: Layout,
    /// Shared by the mapping's source and sync tasks.
    pub items: std::sync::Arc<[Item]>,
    pub expect: Expect,
    pub target: PathBuf,
    pub writer: WriterOptions,
    /// An absent object publishes no files rather than an error.
    pub optional: bool,
    /// A kubeconfig outside the target whose current-context user is kept
    /// holding the live pair, embedded (`update-kubeconfig=`).
    pub update_kubeconfig: Option<PathBuf>,
    /// `PREFIX.crt` and `PREFIX.key` outside the target kept holding the
    /// live pair (`update-pair=`).
    pub update_pair: Option<PathBuf>,
}

/// Everything `certsync run` needs.
#[derive(Debug, Clone)]
pub struct Config {
    pub mappings: Vec<Mapping>,
    /// `None`: no admin port (see `--admin-addr`).
    pub admin_addr: Option<std::net::SocketAddr>,
    pub stale_fraction: f64,
    /// `--generation`: the token `/readyz` answers with.
    pub generation: Option<String>,
    pub events: bool,
    /// With `events`: the Pod that `ca:` and `dir:` mappings' Events go on.
    pub events_pod: Option<crate::events::PodRef>,
    pub reload: ReloadConfig,
    pub client: ClientSettings,
    pub once: bool,
    /// With `once`: how long to wait for the API server to answer.
    pub once_timeout: Duration,
    pub debounce: Duration,
    pub resync: Duration,
    pub clock_skew: Duration,
    pub csr_renew_floor: Duration,
}

impl Config {
    /// Builds the configuration from `run`'s arguments (reading `--config`).
    pub fn from_args(args: &RunArgs) -> Result<Self, ConfigError> {
        Self::build(args, None)
    }

    /// [`Config::from_args`] with `--config`'s text `given` (not read).
    fn build(args: &RunArgs, given: Option<&str>) -> Result<Self, ConfigError> {
        let specs = mapping_specs(args, given)?;
        if specs.is_empty() {
            return Err(ConfigError::NoMappings);
        }
        let mappings = specs
            .into_iter()
            .map(|s| s.resolve(args))
            .collect::<Result<Vec<_>, _>>()?;
        check_overlaps(&mappings)?;
        mappings.iter().try_for_each(target_guarded)?;
        mappings.iter().try_for_each(source_guarded)?;
        mappings.iter().try_for_each(ca_paths_guarded)?;
        mappings.iter().try_for_each(csr_paths_guarded)?;
        copies_guarded(&mappings)?;
        let events_pod =
            pod::events_pod(args.events, args.once, &mappings, |v| std::env::var(v).ok())?;
        Ok(Self {
            events_pod,
            mappings,
            admin_addr: args.admin_addr,
            stale_fraction: args.stale_fraction,
            generation: args.generation.clone(),
            events: args.events,
            reload: args.reload.build()?,
            client: ClientSettings {
                kubeconfig: args.kubeconfig.clone(),
                context: args.context.clone(),
                tls_server_name: args.tls_server_name.clone(),
                watch_timeout: args.watch_timeout,
                keepalive: args.api_keepalive,
            },
            once: args.once,
            once_timeout: args.once_timeout,
            debounce: args.debounce,
            resync: args.resync,
            clock_skew: args.clock_skew,
            csr_renew_floor: args.csr_renew_floor,
        })
    }
}

/// `certsync run --once --config PATH` as `run` loads it, every check
/// made by the same code: PATH read, or (`text`) the configuration a
/// command is about to write there (`kubeadm adopt`, which must never
/// write one `run` refuses). Only where the file lives is not judged for
/// given text: there is no file yet, and `run` judges it when it reads it.
pub fn load_once(path: &std::path::Path, text: Option<&str>) -> Result<Config, ConfigError> {
    let argv = ["certsync", "run", "--once", "--config"]
        .into_iter()
        .map(std::ffi::OsString::from)
        .chain([path.as_os_str().to_owned()])
        .collect();
    let parsed = file::parse_given(argv, text).map_err(|e| ConfigError::File {
        path: path.to_owned(),
        problem: e
            .render()
            .to_string()
            .lines()
            .next()
            .unwrap_or_default()
            .trim_start_matches("error: ")
            .to_owned(),
    })?;
    let crate::cli::Command::Run(args) = parsed.cli.command else {
        return Err(ConfigError::File {
            path: path.to_owned(),
            problem: "not loaded as `certsync run`".into(),
        });
    };
    Config::build(&args, text)
}

/// The directories above a pidfile's own (which may be the consumer's), a
/// volume's root included:
/// otherwise the consumer's user may replace its directory with a link to
/// a root-owned one whose root-owned pidfile names a root process, which
/// the pidfile's owner check then accepts ([`above_guarded`]).
fn pidfile_dir_guarded(pidfile: &std::path::Path) -> Result<(), ConfigError> {
    let Some(dir) = pidfile.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Ok(());
    };
    above_guarded(dir).map_err(|problem| ConfigError::Reload {
        problem: format!(
            "--reload-pidfile {}: {problem}, who could replace the pidfile's directory \
             and have root signal another process; keep it in a directory under root's",
            pidfile.display()
        ),
    })
}

/// A `dir:` source may be its user's own, but not the directories above
/// it: whoever may rename its entry could put a link to a root-only
/// directory in its place, and certsync, which finds the source by its
/// path at every read, would publish what is beneath ([`above_guarded`],
/// a volume's root included).
fn source_guarded(m: &Mapping) -> Result<(), ConfigError> {
    let Source::Dir(dir) = &m.source else {
        return Ok(());
    };
    let err = |problem: String| ConfigError::Mapping {
        mapping: m.name.clone(),
        problem,
    };
    above_guarded(dir).map_err(|problem| {
        err(format!(
            "source {}: {problem}, who could replace the source directory with a link to \
             another and have certsync publish what is there; keep it in a directory \
             under root's",
            dir.display()
        ))
    })?;
    // The source itself: one writer, its owner (or root). A directory
    // group or others may write has several, and a file one of them
    // linked in (root's key, 0600) would be owned by whom the directory's
    // owner trusts. Not there yet: judged when it appears (every read
    // refuses what its writers could not read).
    // Whoever owns it; a read-only mount (a Secret or ConfigMap volume)
    // has no writer at all.
    let writers = Trust {
        owners: Owners::Anyone,
        read_only: ReadOnly::Writable,
        ..Trust::STRICT
    };
    if let Ok(open) = std::fs::File::open(dir)
        && open.metadata().is_ok_and(|m| m.is_dir())
        && let Ok(entry) = Entry::held(dir, std::os::fd::AsFd::as_fd(&open))
        && writers.judge(&entry).is_err()
    {
        return Err(err(format!(
            "source {}: owner {}, mode {:04o}: may be changed by another user (group or \
             others may write it), any of whom could link in a file the others could not \
             read and have certsync publish it; make it writable by its owner only",
            dir.display(),
            entry.uid,
            entry.mode
        )));
    }
    Ok(())
}

/// Every directory above `dir`, as written and where its symlinks lead,
/// can be changed by root (or certsync's user) only
/// ([`crate::files::only_root_may_change`]); `dir` itself is not judged:
/// it may belong to the user who writes in it. No exception for a volume's
/// root here (as there is for targets): whoever may write a mount point's
/// directory may rename what is in it, and a source or a pidfile's
/// directory swapped for a link leads certsync to root's files or
/// processes. A volume shared this way is named as the source itself
/// (`dir:/shared`): a mount point cannot be renamed.
fn above_guarded(dir: &std::path::Path) -> Result<(), crate::files::OwnedError> {
    let real = std::fs::canonicalize(dir).ok();
    [Some(dir), real.as_deref()]
        .into_iter()
        .flatten()
        .filter_map(std::path::Path::parent)
        .filter(|p| !p.as_os_str().is_empty())
        .try_for_each(crate::files::only_root_may_change)
}

/// Every other target: no directory on the way that another user could
/// use to re-create it, or a user's own (a /tmp cleaner removes an old
/// entry and anyone makes it again; the consumer then reads that user's
/// pair by path, and certsync's writes would go where that user chose).
/// A volume's root writable by a pod's containers (an emptyDir) is
/// accepted above a target ([`crate::files::no_other_user_may_recreate`]),
/// never as the target itself ([`crate::files::no_other_user_may_write`],
/// every mapping); `ca:` targets are held to the stricter rule below.
fn target_guarded(m: &Mapping) -> Result<(), ConfigError> {
    crate::files::no_other_user_may_write(&m.target).map_err(|problem| ConfigError::Mapping {
        mapping: m.name.clone(),
        problem: format!("target {problem}"),
    })?;
    if matches!(m.source, Source::Ca(_)) {
        return Ok(());
    }
    crate::files::no_other_user_may_recreate(&m.target).map_err(|problem| ConfigError::Mapping {
        mapping: m.name.clone(),
        problem: format!(
            "target {}: {problem}, who could re-create it and have the consumer read \
                 their own pair there; give a target whose directories are owned by root \
                 (or certsync's user) and writable by their owner only, or a subdirectory of \
                 a volume's root",
            m.target.display()
        ),
    })
}

/// A `ca:` mapping's paths can be changed by root only: its target (a
/// directory on the way that another user may write, sticky or not, lets
/// that user re-create a removed target (a /tmp cleaner removes an old
/// entry; anyone makes it again) or swap a symlink in, and receive the
/// keys the CA issues; `..` is refused outright, since the kernel resolves
/// it after symlinks and the overlap checks cannot), its template (whoever
/// edits it chooses the identity), and, unless `allow-loose-ca-key`, the
/// CA's files.
fn ca_paths_guarded(m: &Mapping) -> Result<(), ConfigError> {
    let Source::Ca(spec) = &m.source else {
        return Ok(());
    };
    let err = |problem: String| ConfigError::Mapping {
        mapping: m.name.clone(),
        problem,
    };
    if m.target
        .components()
        .any(|c| c == std::path::Component::ParentDir)
    {
        return Err(err(format!(
            "target {}: no `..` in the target of a ca: mapping; give the path it means",
            m.target.display()
        )));
    }
    let mut paths = vec![("target", m.target.as_path())];
    paths.extend(spec.template.as_deref().map(|t| ("template", t)));
    if !spec.allow_loose_ca_key {
        paths.push(("CA key", spec.ca_key.as_path()));
        paths.push(("CA certificate", spec.ca_cert.as_path()));
    }
    for (what, path) in paths {
        crate::files::only_root_may_change(path).map_err(|problem| {
            err(format!(
                "{what} {}: {problem}, who could redirect or choose what the CA signs; make \
                 it and its directories owned by root and writable by their owner only",
                path.display()
            ))
        })?;
    }
    Ok(())
}

/// A `csr:` mapping's `ca=file:` (published as the consumer's `ca.crt`,
/// its trust anchor) and `bootstrap-kubeconfig=` (the credentials and
/// server its requests go to) steer root certsync as `--kubeconfig` does:
/// judged at start, naming the path, by the readers every later read uses
/// ([`crate::files::read_steering`]); one not there yet by the directories
/// it will appear in. Otherwise a user appended its CA to a `ca=file:` and
/// certsync published it; and a user's bootstrap kubeconfig
/// was refused only at the first request, where `run --once` retried
/// instead of exiting 64.
fn csr_paths_guarded(m: &Mapping) -> Result<(), ConfigError> {
    let Source::Csr(spec) = &m.source else {
        return Ok(());
    };
    let err = |what: &str, path: &std::path::Path, problem: String| ConfigError::Mapping {
        mapping: m.name.clone(),
        problem: format!("{what} {}: {problem}", path.display()),
    };
    if let Some(crate::source::csr::CaSource::File(path)) = &spec.ca {
        crate::files::steering_or_absent(path, crate::validate::MAX_BUNDLE_SIZE as u64)
            .map_err(|p| err("ca=file:", path, p.to_string()))?;
    }
    if let Some(path) = &spec.bootstrap {
        if path.exists() {
            crate::source::client::check_kubeconfig(path).map_err(|e| ConfigError::Mapping {
                mapping: m.name.clone(),
                problem: format!("bootstrap-kubeconfig=: {e}"),
            })?;
        } else {
            crate::files::steering_or_absent(path, 0)
                .map_err(|p| err("bootstrap-kubeconfig=", path, p.to_string()))?;
        }
    }
    Ok(())
}

/// Every copy of a live pair outside the targets is one certsync may keep
/// updated, named by one mapping only, inside no mapping's target (the
/// target's writer owns every name there) and no other copy's file:
/// `update-kubeconfig=` files ([`crate::writer::check_kubeconfig`]: a
/// regular file of certsync's user, in directories only root may change,
/// whose current user authenticates by embedded client certificate data
/// only) and `update-pair=` prefixes ([`crate::writer::check_pair`]).
fn copies_guarded(mappings: &[Mapping]) -> Result<(), ConfigError> {
    use crate::files::identity;
    // Where a path leads (its directory resolved where it exists): a
    // symlink on the way must not hide a target or a CA file.
    let real = |p: &std::path::Path| -> PathBuf {
        if let Ok(c) = p.canonicalize() {
            return c;
        }
        match (p.parent().map(std::path::Path::canonicalize), p.file_name()) {
            (Some(Ok(dir)), Some(name)) => dir.join(name),
            _ => p.to_owned(),
        }
    };
    // Every copy once: (mapping, option, path as given, files written and
    // where each leads).
    let mut copies = Vec::new();
    for (i, m) in mappings.iter().enumerate() {
        if let Some(p) = &m.update_kubeconfig {
            copies.push((i, "update-kubeconfig", p, vec![p.clone()]));
        }
        if let Some(p) = &m.update_pair {
            let stem = p.file_name().unwrap_or_default().to_string_lossy();
            let files = ["crt", "key"].map(|ext| p.with_file_name(format!("{stem}.{ext}")));
            copies.push((i, "update-pair", p, files.into()));
        }
    }
    if copies.is_empty() {
        return Ok(());
    }
    let copies: Vec<_> = copies
        .into_iter()
        .map(|(i, option, path, files)| {
            let reals: Vec<PathBuf> = files.iter().map(|f| real(f)).collect();
            (i, option, path, files, reals)
        })
        .collect();
    // What no copy may write: each target (as given and where it leads),
    // and each CA file of a `ca:` mapping (a CA overwritten with a leaf
    // pair would be the CA lost).
    let targets: Vec<_> = mappings.iter().map(|o| (o, real(&o.target))).collect();
    // Each CA file where it leads and by device and inode.
    let cas: Vec<_> = mappings
        .iter()
        .filter_map(|o| match &o.source {
            Source::Ca(spec) => {
                let files = [&spec.ca_cert, &spec.ca_key];
                Some((o, files.map(|c| real(c)), files.map(|c| identity(c))))
            }
            _ => None,
        })
        .collect();
    let target_ids: Vec<_> = mappings
        .iter()
        .filter_map(|o| Some((o, identity(&o.target)?)))
        .collect();
    for (n, (i, option, path, files, reals)) in copies.iter().enumerate() {
        let m = &mappings[*i];
        let err = |problem: String| ConfigError::Mapping {
            mapping: m.name.clone(),
            problem: format!("{option} {}: {problem}", path.display()),
        };
        if path
            .components()
            .any(|c| c == std::path::Component::ParentDir)
        {
            return Err(err("no `..` in it; give the path it means".into()));
        }
        let both = || files.iter().zip(reals);
        for (o, ca, _) in &cas {
            if let Some((f, _)) = both().find(|(_, r)| ca.contains(r)) {
                return Err(err(format!(
                    "{} is a CA file of mapping {:?}; certsync never writes a CA",
                    f.display(),
                    o.name
                )));
            }
        }
        for (o, target) in &targets {
            if let Some((t, _)) =
                both().find(|(f, r)| f.starts_with(&o.target) || r.starts_with(target))
            {
                return Err(err(format!(
                    "{} is inside the target {} of mapping {:?}",
                    t.display(),
                    o.target.display(),
                    o.name
                )));
            }
        }
        // The same by device and inode: a bind mount (or, for a file, a
        // hard link) leads to a target or a CA file with no symlink for
        // the path checks above to see, and a copy written there would
        // overwrite the target or the CA.
        let above = crate::files::directory_and_ancestors(path.parent().unwrap_or(path));
        for (o, _, ids) in &cas {
            if let Some(f) = files
                .iter()
                .find(|f| identity(f).is_some_and(|id| ids.contains(&Some(id))))
            {
                return Err(err(format!(
                    "{} is a CA file of mapping {:?} (the same file by device and inode: a \
                     bind mount or hard link); certsync never writes a CA",
                    f.display(),
                    o.name
                )));
            }
        }
        if let Some((o, _)) = target_ids.iter().find(|(_, id)| above.contains(id)) {
            return Err(err(format!(
                "{} is inside the target {} of mapping {:?} (the same directory by device and \
                 inode: a bind mount)",
                files[0].display(),
                o.target.display(),
                o.name
            )));
        }
        let shared = copies
            .iter()
            .enumerate()
            .find(|(k, c)| *k != n && c.4.iter().any(|r| reals.contains(r)));
        if let Some((_, (j, other, ..))) = shared {
            return Err(err(format!(
                "mapping {:?} writes that file too ({other}); one copy per file",
                mappings[*j].name
            )));
        }
        let checked = match *option {
            "update-kubeconfig" => crate::writer::check_kubeconfig(path),
            _ => crate::writer::check_pair(path),
        };
        // The writer's error names the option and path itself.
        checked.map_err(|e| ConfigError::Mapping {
            mapping: m.name.clone(),
            problem: e.to_string(),
        })?;
    }
    Ok(())
}

/// Every mapping: the config file's, then the flags', with `tree:`
/// mappings expanded into one mapping per object.
/// `given`: the config file's text, when it is not (yet) the file's.
fn mapping_specs(args: &RunArgs, given: Option<&str>) -> Result<Vec<MappingSpec>, ConfigError> {
    let mut specs = Vec::new();
    if let Some(path) = &args.config {
        specs.extend(read_config_file(path, given)?);
    }
    for s in &args.sync {
        specs.push(MappingSpec::parse_flag(s)?);
    }
    let mut out = Vec::new();
    for spec in specs {
        out.extend(spec.expand_tree()?);
    }
    // Where the file lives is judged when it is read there.
    if let Some(path) = &args.config
        && given.is_none()
        && out.iter().any(|m| m.source.starts_with("ca:"))
    {
        file::ca_config_guarded(path)?;
    }
    Ok(out)
}
