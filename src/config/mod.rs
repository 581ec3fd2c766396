//! The parsed command line (`cli`) and config file → a validated [`Config`]
//! for `run`, an `ApproverConfig` for `approve`.
//!
//! Mappings come from repeatable `--sync` flags
//! (`KIND:SOURCE=TARGET[,OPTION=VALUE]...`, e.g.
//! `dir:/etc/kubernetes/pki=/etc/certs/apiserver,cert=apiserver.crt`) and
//! from the YAML `--config` file; both forms go through the same
//! [`MappingSpec`], so they accept exactly the same options and produce the
//! same errors. Paths containing `=` or `,` need the config file.

mod error;
mod file;
pub mod grammar;
#[cfg(test)]
mod grammar_tests;
mod guard;
mod issue;
mod mapping;
mod options;
mod overlap;
mod pod;
mod settings;
#[cfg(test)]
mod tests;
mod tree;

pub use error::ConfigError;
pub(crate) use file::read_config_text;
use guard::{paths_guarded, pidfile_dir_guarded};
pub use mapping::{EventsOn, Mapping, MappingSpec, Source};
pub(crate) use options::as_written;
use overlap::{check_overlaps, copies_guarded};
use settings::typed_value;
pub use settings::{Flag, Parsed, Settings, command, parse};

use std::time::Duration;

use crate::cli::{ApproveArgs, PolicyArgs, RunArgs};
use crate::reload::http::{HttpHook, HttpHookConfig};
use crate::reload::pid::Target;
use crate::reload::{Method, ReloadConfig};
use crate::source::client::ClientSettings;

impl PolicyArgs {
    pub fn policy(&self) -> crate::approve::Policy {
        let mut policy = self.policy.clone();
        policy.max_expiration = self.max_expiration;
        policy
    }

    /// Refuses a policy that would trust node-written addresses alone.
    pub fn check(&self) -> Result<(), ConfigError> {
        if let Some(all) = self.policy.node_cidrs.iter().find(|c| c.is_everything()) {
            return Err(ConfigError::EveryAddress {
                cidr: all.to_string(),
            });
        }
        if self.policy.node_cidrs.is_empty() && !self.policy.any_node_address {
            return Err(ConfigError::NoNodeCidr);
        }
        Ok(())
    }
}

impl ApproveArgs {
    /// The approver's configuration, `env` read for `POD_NAMESPACE` and the
    /// identity (`POD_NAME`, else `HOSTNAME`). The Lease's name and
    /// namespace are refused unless Kubernetes names: each is a segment of
    /// the API path of every Lease request, and a `/` would address
    /// another object.
    pub fn config(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<crate::approve::ApproverConfig, ConfigError> {
        // Without a flag or POD_NAMESPACE, the client configuration's
        // namespace (context or service account), known once it is loaded.
        let namespace = match &self.lease_namespace {
            Some(ns) => Some(("--lease-namespace", ns.clone())),
            None => (env("POD_NAMESPACE").map(|s| s.trim().to_owned()))
                .filter(|s| !s.is_empty())
                .map(|ns| ("POD_NAMESPACE", ns)),
        };
        let identity = (env("POD_NAME").or_else(|| env("HOSTNAME")))
            .unwrap_or_else(|| format!("certsync-{}", std::process::id()));
        let lease = match self.lease_name.is_empty() {
            true => None,
            false => {
                mapping::api_name("--lease-name", "name", &self.lease_name)?;
                if let Some((at, ns)) = &namespace {
                    mapping::api_name(at, "namespace", ns)?;
                }
                Some(crate::approve::LeaseSettings {
                    name: self.lease_name.clone(),
                    namespace: namespace.map(|(_, ns)| ns),
                    identity,
                    duration: self.lease_duration,
                })
            }
        };
        Ok(crate::approve::ApproverConfig {
            client: ClientSettings {
                kubeconfig: self.kube.kubeconfig.clone(),
                context: self.kube.context.clone(),
                watch_timeout: self.watch_timeout,
                ..ClientSettings::default()
            },
            policy: self.policy.policy().into(),
            dry_run: self.dry_run,
            lease,
            events: self.events,
            admin_addr: self.admin_addr,
            selector: self.policy.selector.clone(),
        })
    }
}

impl RunArgs {
    /// How the main container is told about a new pair: one way at most
    /// (`--reload-pidfile` with `--reload-process`: the pidfile's process
    /// must have that name).
    pub(crate) fn reload(&self) -> Result<ReloadConfig, ConfigError> {
        let ways = [
            ("reload-pidfile", self.reload_pidfile.is_some()),
            (
                "reload-process",
                self.reload_process.is_some() && self.reload_pidfile.is_none(),
            ),
            ("reload-cmdline", self.reload_cmdline.is_some()),
            ("reload-url", self.reload_url.is_some()),
        ];
        let mut given = ways.iter().filter(|(_, set)| *set).map(|(name, _)| *name);
        if let (Some(first), Some(second)) = (given.next(), given.next()) {
            return Err(ConfigError::ReloadMethods { first, second });
        }
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
            let re = regex::Regex::new(re).map_err(ConfigError::ReloadCmdline)?;
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
            .map_err(ConfigError::ReloadUrl)?;
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

/// Everything `certsync run` needs.
#[derive(Debug, Clone)]
pub struct Config {
    /// `run`'s settings, each checked by its flag's parser.
    pub run: RunArgs,
    pub mappings: Vec<Mapping>,
    /// With `--events`: the Pod that `ca:` and `dir:` mappings' Events go on.
    pub events_pod: Option<crate::events::PodRef>,
    pub reload: ReloadConfig,
    pub client: ClientSettings,
}

impl Config {
    /// `run`'s configuration, every check made: the one place it is
    /// judged, for `run`, `--print-config` and `kubeadm adopt` alike.
    pub fn build(settings: &Settings) -> Result<Self, ConfigError> {
        let args = &settings.args;
        let specs = mapping_specs(settings)?;
        if specs.is_empty() {
            return Err(ConfigError::NoMappings);
        }
        let mappings = specs
            .into_iter()
            .map(|s| s.resolve(args))
            .collect::<Result<Vec<_>, _>>()?;
        check_overlaps(&mappings)?;
        paths_guarded(&mappings)?;
        copies_guarded(&mappings)?;
        let events_pod =
            pod::events_pod(args.events, args.once, &mappings, |v| std::env::var(v).ok())?;
        Ok(Self {
            events_pod,
            mappings,
            reload: args.reload()?,
            client: ClientSettings {
                kubeconfig: args.kubeconfig.clone(),
                context: args.context.clone(),
                tls_server_name: args.tls_server_name.clone(),
                watch_timeout: args.watch_timeout,
                keepalive: args.api_keepalive,
            },
            // The reload URL and headers may hold credentials: kept only in
            // `reload`, whose Debug hides them, so `{:?}` of this never shows them.
            run: RunArgs {
                reload_url: None,
                reload_headers: Vec::new(),
                ..args.clone()
            },
        })
    }
}

/// `run --print-config`: the effective settings and mappings as YAML,
/// header values and a reload URL's userinfo, query values and fragment
/// redacted (they may hold credentials).
pub fn print_config(settings: &Settings) -> Result<String, ConfigError> {
    // Everything `run` checks, checked: what is printed is what runs.
    Config::build(settings)?;
    let mut out = serde_yaml_ng::Mapping::new();
    for flag in &settings.effective {
        let shown: Vec<String> = flag
            .texts
            .iter()
            .map(|v| match flag.name.as_str() {
                "reload-header" => match v.split_once(':') {
                    Some((name, _)) => format!("{name}: <redacted>"),
                    None => "<redacted>".into(),
                },
                "reload-url" => crate::reload::http::redact_text(v),
                _ => v.clone(),
            })
            .collect();
        let typed = |v: &String| typed_value(v, flag.switch);
        let value = match shown.as_slice() {
            [] => serde_yaml_ng::Value::Null,
            [one] if flag.name != "reload-header" => typed(one),
            many => serde_yaml_ng::Value::Sequence(many.iter().map(typed).collect()),
        };
        out.insert(flag.name.clone().into(), value);
    }
    let mappings = (mapping_specs(settings)?.iter().map(as_written))
        .collect::<Result<Vec<_>, _>>()
        .map_err(ConfigError::Shape)?;
    out.insert(
        "mappings".into(),
        serde_yaml_ng::to_value(&mappings).map_err(ConfigError::Print)?,
    );
    serde_yaml_ng::to_string(&out).map_err(ConfigError::Print)
}

/// `certsync run --once --config PATH` as `run` loads it, with `text` as
/// PATH's: what `kubeadm adopt` is about to write there (never one `run`
/// refuses), or read there. Where the file lives is judged by `run`.
pub fn load_once(path: &std::path::Path, text: &str) -> Result<Config, ConfigError> {
    Config::build(&Settings::once(path, text)?)
}

/// Every mapping: the config file's, then the flags', with `tree:`
/// mappings expanded into one mapping per object.
fn mapping_specs(settings: &Settings) -> Result<Vec<MappingSpec>, ConfigError> {
    let mut specs = settings.file_mappings().to_vec();
    for s in &settings.args.sync {
        specs.push(MappingSpec::parse_flag(s)?);
    }
    let mut out = Vec::new();
    for spec in specs {
        out.extend(spec.expand_tree()?);
    }
    // Where the file lives is judged when it is read there.
    if let Some(file) = &settings.file
        && file.read
        && out.iter().any(|m| m.source.starts_with("ca:"))
    {
        file::ca_config_guarded(&file.path)?;
    }
    Ok(out)
}
