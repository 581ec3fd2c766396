//! The YAML config file (`run --config`): `mappings:` and any of `run`'s
//! flags by their long names, unknown keys refused, the command line and
//! environment winning; and `--print-config`, which prints it back.

use super::*;
use crate::cli::{Cli, RunArgs};

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Why the config file is refused (its path is named beside it,
/// [`ConfigError::File`]).
#[derive(Debug, thiserror::Error)]
pub enum FileProblem {
    #[error(transparent)]
    Yaml(#[from] crate::files::YamlError),
    #[error(
        "line {line}: unknown key {key:?} (a setting is a flag of `certsync run` by its long \
         name, e.g. resync: 5m, reload-process: nginx; mappings go under mappings:)"
    )]
    UnknownKey { line: usize, key: String },
    #[error("line {line}: {key} takes a value or a list of values")]
    NotScalar { line: usize, key: String },
    #[error(transparent)]
    Unread(#[from] crate::files::OwnedError),
    #[error("not UTF-8 text")]
    NotUtf8,
    #[error("{0}")]
    Unresolved(#[source] std::io::Error),
    /// With `ca:` mappings, in a ConfigMap or Secret volume.
    #[error(
        "it goes with ca: mappings and is in a ConfigMap or Secret volume: anyone who may edit \
         that object could have the CA sign any identity. Give ca: mappings with --sync in the \
         pod's manifest, or keep this file on the node where only root may write"
    )]
    CaInVolume,
    /// With `ca:` mappings, changeable by another user.
    #[error(
        "it goes with ca: mappings, and {0}, who could have the CA sign any identity: make it \
         and its directories owned by root and writable by their owner only"
    )]
    CaOthersMayChange(#[source] crate::files::OwnedError),
    /// The command line with the file's settings, refused as clap words it.
    #[error("{0}")]
    Flags(String),
    #[error("not loaded as `certsync run`")]
    NotRun,
}

/// The config file: `mappings:` and any of `run`'s flags by their long
/// names (checked by [`file_settings`]).
#[derive(Debug, Deserialize)]
pub(crate) struct ConfigFile {
    #[serde(default)]
    mappings: Vec<MappingSpec>,
}

/// Flags that are not settings of the file (it is the config, or they act
/// once).
pub(crate) const NOT_IN_FILE: &[&str] = &["sync", "config", "print-config", "help", "once"];

/// The global settings of a config file, as `(flag, values)`, each key
/// checked against `run`'s flags; an unknown key is an error naming its
/// line.
pub(crate) fn file_settings(
    path: &Path,
    text: &str,
) -> Result<Vec<(String, Vec<String>)>, ConfigError> {
    use clap::CommandFactory;
    let err = |problem: FileProblem| ConfigError::File {
        path: path.to_owned(),
        problem: Box::new(problem),
    };
    let doc: serde_yaml_ng::Value = crate::files::parse_yaml(text).map_err(|e| err(e.into()))?;
    let Some(map) = doc.as_mapping() else {
        return Ok(Vec::new());
    };
    let mut cmd = Cli::command();
    cmd.build();
    let run = cmd.find_subcommand("run").cloned().unwrap_or_default();
    let known: Vec<String> = run
        .get_arguments()
        .filter_map(|a| a.get_long().map(str::to_owned))
        .filter(|l| !NOT_IN_FILE.contains(&l.as_str()))
        .collect();
    let line = |key: &str| {
        text.lines()
            .position(|l| l.starts_with(&format!("{key}:")))
            .map_or(0, |i| i + 1)
    };
    let mut out = Vec::new();
    for (k, v) in map {
        let key = k.as_str().unwrap_or_default();
        // `owner: null` (as --print-config shows an unset flag) sets nothing.
        if key == "mappings" || v.is_null() {
            continue;
        }
        if !known.iter().any(|l| l == key) {
            return Err(err(FileProblem::UnknownKey {
                line: line(key),
                key: key.to_owned(),
            }));
        }
        let scalar = |v: &serde_yaml_ng::Value| match v {
            serde_yaml_ng::Value::String(s) => Ok(s.clone()),
            serde_yaml_ng::Value::Number(n) => Ok(n.to_string()),
            serde_yaml_ng::Value::Bool(b) => Ok(b.to_string()),
            _ => Err(err(FileProblem::NotScalar {
                line: line(key),
                key: key.to_owned(),
            })),
        };
        let values = match v {
            serde_yaml_ng::Value::Sequence(items) => {
                items.iter().map(scalar).collect::<Result<Vec<_>, _>>()?
            }
            other => vec![scalar(other)?],
        };
        out.push((key.to_owned(), values));
    }
    Ok(out)
}

/// Parses the command line with `run --config FILE`'s settings filled in:
/// each setting of the file becomes its flag unless the command line or the
/// environment already set that flag, and the whole line is parsed again,
/// so a setting is checked by exactly the flag's own parser. Returns the
/// parsed command and, for `run`, the effective setting of every flag.
pub fn parse(argv: Vec<std::ffi::OsString>) -> Result<Parsed, clap::Error> {
    parse_given(argv, None)
}

/// [`parse`], the config file's text `given` instead of read from its path
/// (see [`super::load_once`]).
pub(crate) fn parse_given(
    argv: Vec<std::ffi::OsString>,
    given: Option<&str>,
) -> Result<Parsed, clap::Error> {
    use clap::{CommandFactory, FromArgMatches};
    let cmd = Cli::command();
    let matches = cmd.clone().try_get_matches_from(&argv)?;
    let mut argv = argv;
    let mut from_file = None;
    if let Some(run) = matches.subcommand_matches("run")
        && let Some(path) = run.get_one::<PathBuf>("config")
    {
        from_file = Some(path.clone());
        argv.extend(file_flags(&cmd, run, path, given)?);
    }
    let matches = cmd
        .clone()
        .try_get_matches_from(&argv)
        .map_err(|e| match &from_file {
            Some(path) => naming_file(&cmd, e, path),
            None => e,
        })?;
    let cli = Cli::from_arg_matches(&matches)?;
    let effective = matches
        .subcommand_matches("run")
        .map(effective)
        .unwrap_or_default();
    Ok(Parsed { cli, effective })
}

/// `run`'s arguments, as clap builds them.
fn run_arguments() -> Vec<clap::Arg> {
    use clap::CommandFactory;
    let mut built = Cli::command();
    built.build();
    built
        .find_subcommand("run")
        .into_iter()
        .flat_map(|sub| sub.get_arguments().cloned())
        .collect()
}

/// The flags the settings of the config file `path` (its text `given`, or
/// read) add to the command line `run`: each one neither the command line
/// nor the environment set already.
fn file_flags(
    cmd: &clap::Command,
    run: &clap::ArgMatches,
    path: &Path,
    given: Option<&str>,
) -> Result<Vec<std::ffi::OsString>, clap::Error> {
    use clap::parser::ValueSource;
    let text = match given {
        Some(text) => text.to_owned(),
        None => {
            read_config_text(path).map_err(|e| cmd.clone().error(clap::error::ErrorKind::Io, e))?
        }
    };
    let settings = file_settings(path, &text).map_err(|e| {
        cmd.clone()
            .error(clap::error::ErrorKind::ValueValidation, e)
    })?;
    let ids: std::collections::HashMap<String, String> = run_arguments()
        .iter()
        .filter_map(|a| Some((a.get_long()?.to_owned(), a.get_id().as_str().to_owned())))
        .collect();
    let mut argv = Vec::new();
    for (flag, values) in settings {
        // `file_settings` checked every key against these long names.
        let Some(id) = ids.get(&flag) else { continue };
        let given = matches!(
            run.value_source(id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        );
        if given {
            continue;
        }
        let is_switch = matches!(
            values.as_slice(),
            [v] if v == "true" || v == "false"
        ) && run
            .get_raw(id)
            .is_none_or(|mut r| r.next().is_some_and(|v| v == "false"));
        for v in values {
            if is_switch {
                if v == "true" {
                    argv.push(format!("--{flag}").into());
                }
            } else {
                argv.push(format!("--{flag}={v}").into());
            }
        }
    }
    Ok(argv)
}

/// `e` naming the config file `path`, when it is a refusal (shown on
/// stderr): one of the file's settings may be what was refused.
fn naming_file(cmd: &clap::Command, e: clap::Error, path: &Path) -> clap::Error {
    if !e.use_stderr() {
        return e;
    }
    let first = e.render().to_string();
    let first = first.lines().next().unwrap_or_default();
    let first = first.strip_prefix("error: ").unwrap_or(first);
    cmd.clone().error(
        e.kind(),
        format!("{first} (with the settings of {})", path.display()),
    )
}

/// Every flag of `run` a config file may set, with its effective values.
fn effective(run: &clap::ArgMatches) -> Vec<(String, Vec<String>)> {
    run_arguments()
        .iter()
        .filter_map(|arg| {
            let long = arg.get_long()?;
            if NOT_IN_FILE.contains(&long) {
                return None;
            }
            let values: Vec<String> = run
                .get_raw(arg.get_id().as_str())
                .map(|r| r.map(|v| v.to_string_lossy().into_owned()).collect())
                .unwrap_or_default();
            Some((long.to_owned(), values))
        })
        .collect()
}

/// A parsed command line, and for `run` every flag's effective values.
#[derive(Debug)]
pub struct Parsed {
    pub cli: Cli,
    pub effective: Vec<(String, Vec<String>)>,
}

/// `run --print-config`: the effective settings and mappings as YAML,
/// header values and a reload URL's userinfo, query values and fragment
/// redacted (they may hold credentials).
pub fn print_config(
    args: &RunArgs,
    effective: &[(String, Vec<String>)],
) -> Result<String, ConfigError> {
    // Everything `run` checks, checked: what is printed is what runs.
    Config::from_args(args)?;
    let switches = switches();
    let mut settings = serde_yaml_ng::Mapping::new();
    for (flag, values) in effective {
        let shown: Vec<String> = values
            .iter()
            .map(|v| {
                if flag == "reload-header" {
                    match v.split_once(':') {
                        Some((name, _)) => format!("{name}: <redacted>"),
                        None => "<redacted>".into(),
                    }
                } else if flag == "reload-url" {
                    crate::reload::http::redact_text(v)
                } else {
                    v.clone()
                }
            })
            .collect();
        let typed = |v: &String| typed_value(v, switches.contains(flag));
        let value = match shown.as_slice() {
            [] => serde_yaml_ng::Value::Null,
            [one] if !matches!(flag.as_str(), "reload-header") => typed(one),
            many => serde_yaml_ng::Value::Sequence(many.iter().map(typed).collect()),
        };
        settings.insert(flag.clone().into(), value);
    }
    let mappings: Vec<_> = mapping_specs(args, None)?.iter().map(as_written).collect();
    settings.insert(
        "mappings".into(),
        serde_yaml_ng::to_value(&mappings).map_err(ConfigError::Print)?,
    );
    serde_yaml_ng::to_string(&settings).map_err(ConfigError::Print)
}

/// A mapping as written: the options it sets by their names, without
/// those it leaves unset (absent, off or empty).
pub(crate) fn as_written(spec: &MappingSpec) -> serde_json::Map<String, serde_json::Value> {
    let mut m = match serde_json::to_value(spec) {
        Ok(serde_json::Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    m.retain(|_, v| {
        !(v.is_null() || *v == serde_json::json!(false) || *v == serde_json::json!([]))
    });
    m
}

/// The long names of `run`'s on/off flags.
fn switches() -> Vec<String> {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    cmd.build();
    cmd.find_subcommand("run")
        .into_iter()
        .flat_map(|run| run.get_arguments())
        .filter(|a| !a.get_action().takes_values())
        .filter_map(|a| a.get_long().map(str::to_owned))
        .collect()
}

/// A flag's value as YAML: a switch as a boolean, a number written the way
/// YAML writes it back as a number; anything else (a mode such as `0644`,
/// a duration, a name) as text, so it reads back exactly as given.
fn typed_value(v: &str, switch: bool) -> serde_yaml_ng::Value {
    if switch && let Ok(b) = v.parse::<bool>() {
        return b.into();
    }
    if let Ok(n) = v.parse::<u64>()
        && n.to_string() == v
    {
        return n.into();
    }
    if let Ok(f) = v.parse::<f64>()
        && f.is_finite()
        && f.to_string() == v
    {
        return f.into();
    }
    v.into()
}

/// The config file's size cap: thousands of mappings fit in far less.
const CONFIG_LIMIT: u64 = 4 << 20;

/// Reads the config file as any file certsync is handed: a regular file
/// (judged on the opened descriptor, so a FIFO or device never hangs or
/// floods certsync), at most [`CONFIG_LIMIT`] bytes, UTF-8; as root, one
/// only root may change ([`crate::files::read_steering`]).
pub(crate) fn read_config_text(path: &Path) -> Result<String, ConfigError> {
    let err = |problem: FileProblem| ConfigError::File {
        path: path.to_owned(),
        problem: Box::new(problem),
    };
    let bytes = crate::files::read_steering(path, CONFIG_LIMIT).map_err(|e| err(e.into()))?;
    String::from_utf8(bytes).map_err(|_| err(FileProblem::NotUtf8))
}

/// The config file's mappings, its settings checked; its text `given`, or
/// read from `path`.
pub(crate) fn read_config_file(
    path: &Path,
    given: Option<&str>,
) -> Result<Vec<MappingSpec>, ConfigError> {
    let err = |problem: FileProblem| ConfigError::File {
        path: path.to_owned(),
        problem: Box::new(problem),
    };
    let text = match given {
        Some(text) => text.to_owned(),
        None => read_config_text(path)?,
    };
    // Settings beside the mappings are applied by `parse`; here they are
    // only checked, so a file is refused the same way from any caller.
    file_settings(path, &text)?;
    let file: ConfigFile = crate::files::parse_yaml(&text).map_err(|e| err(e.into()))?;
    Ok(file.mappings)
}

/// A config file that goes with `ca:` mappings (holding them, or settings
/// such as `owner:` that apply to them) decides what a CA on the node
/// signs and who may read the key: it must be as hard to change as the CA
/// key. Refused: a file in a ConfigMap or Secret volume (kubelet's
/// `..data` layout, on any directory of the way: anyone who may edit that
/// object would mint certificates), and a file or any directory above it
/// another user may change ([`crate::files::only_root_may_change`]).
/// Not seen: a ConfigMap mounted with `subPath` (a bind mount of the file
/// alone); the docs say to keep this file on the node.
pub(crate) fn ca_config_guarded(path: &Path) -> Result<(), ConfigError> {
    let err = |problem: FileProblem| ConfigError::File {
        path: path.to_owned(),
        problem: Box::new(problem),
    };
    let real = std::fs::canonicalize(path).map_err(|e| err(FileProblem::Unresolved(e)))?;
    let written = path.parent().and_then(|p| {
        std::fs::canonicalize(if p.as_os_str().is_empty() {
            Path::new(".")
        } else {
            p
        })
        .ok()
    });
    let in_volume = real
        .ancestors()
        .chain(written.iter().flat_map(|w| w.ancestors()))
        .any(|d| d.join("..data").symlink_metadata().is_ok())
        || real
            .components()
            .any(|c| c.as_os_str().to_string_lossy().starts_with("..2"));
    if in_volume {
        return Err(err(FileProblem::CaInVolume));
    }
    crate::files::only_root_may_change(path).map_err(|e| err(FileProblem::CaOthersMayChange(e)))
}
