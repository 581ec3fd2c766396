//! `run`'s configuration as one typed value ([`Settings`]): every flag the
//! command line or the environment gave, else the config file's setting,
//! else the flag's default, each read by the flag's own parser.

use std::path::Path;

use super::error::ConfigError;
use super::file::{ConfigFile, read_config_file};
use super::mapping::MappingSpec;
use crate::cli::{Cli, RunArgs};

/// Flags of `run` that are not settings of the config file (it is the
/// config, or they act once).
const NOT_IN_FILE: &[&str] = &["sync", "config", "print-config", "help", "once"];

/// One setting of `run` (a flag a config file may set): whether the command
/// line or the environment `given` it, and its texts (one per occurrence).
#[derive(Debug, Clone)]
pub struct Flag {
    pub name: String,
    pub switch: bool,
    pub given: bool,
    pub texts: Vec<String>,
}

/// `run`'s settings as clap declares them, with what `given` (`run`'s
/// matches) holds for each. A value that is not UTF-8 is refused.
pub(super) fn run_flags(given: Option<&clap::ArgMatches>) -> Result<Vec<Flag>, clap::Error> {
    use clap::Args;
    use clap::parser::ValueSource::{CommandLine, EnvVariable};
    let mut run = RunArgs::augment_args(clap::Command::new("run"));
    run.build();
    let text = |v: &std::ffi::OsStr| {
        v.to_str().map(str::to_owned).ok_or_else(|| {
            run.clone()
                .error(clap::error::ErrorKind::InvalidUtf8, "a value is not UTF-8")
        })
    };
    let mut flags = Vec::new();
    for arg in run.get_arguments() {
        let Some(name) = arg.get_long().filter(|l| !NOT_IN_FILE.contains(l)) else {
            continue;
        };
        let id = arg.get_id().as_str();
        let given = given
            .filter(|m| matches!(m.value_source(id), Some(CommandLine | EnvVariable)))
            .and_then(|m| m.get_raw(id));
        flags.push(Flag {
            name: name.to_owned(),
            switch: !arg.get_action().takes_values(),
            given: given.is_some(),
            texts: match given {
                Some(raw) => raw.map(text).collect::<Result<_, _>>()?,
                None => arg
                    .get_default_values()
                    .iter()
                    .map(|v| text(v))
                    .collect::<Result<_, _>>()?,
            },
        });
    }
    Ok(flags)
}

/// The command line with the mapping grammar after `run --help`: the one
/// the parser, the completions and the man pages are made of.
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    Cli::command().mut_subcommand("run", |run| run.after_help(super::grammar::help()))
}

/// The command line parsed, and for `run` what it gave each setting.
#[derive(Debug)]
pub struct Parsed {
    pub cli: Cli,
    pub flags: Vec<Flag>,
}

/// Parses the command line (the config file is read by [`Settings::load`]).
pub fn parse(argv: Vec<std::ffi::OsString>) -> Result<Parsed, clap::Error> {
    use clap::FromArgMatches;
    let matches = command().try_get_matches_from(argv)?;
    let cli = Cli::from_arg_matches(&matches)?;
    let flags = match matches.subcommand_matches("run") {
        Some(run) => run_flags(Some(run))?,
        None => Vec::new(),
    };
    Ok(Parsed { cli, flags })
}

/// `run`'s configuration as given: `args` every setting, `file` the
/// config file, `effective` each setting's texts (for `--print-config`).
#[derive(Debug)]
pub struct Settings {
    pub args: RunArgs,
    pub file: Option<ConfigFile>,
    pub effective: Vec<Flag>,
}

impl Settings {
    /// `run`'s settings: `args` as clap parsed them (those that are no
    /// settings kept), `flags` from [`Parsed`], the file from `args.config`.
    pub fn load(args: RunArgs, flags: &[Flag]) -> Result<Self, ConfigError> {
        let file = (args.config.as_deref())
            .map(|path| read_config_file(path, None))
            .transpose()?;
        let mut s = typed(flags, file)?;
        s.args = RunArgs {
            sync: args.sync,
            config: args.config,
            print_config: args.print_config,
            once: args.once,
            ..s.args
        };
        Ok(s)
    }

    /// `certsync run --once --config PATH` with `text` as PATH's, for
    /// `kubeadm adopt` and `status`: nothing comes from this process's
    /// command line or environment, as the node's certsync has neither.
    pub(crate) fn once(path: &Path, text: &str) -> Result<Self, ConfigError> {
        // Nothing is given, so no value can be refused; were the flags
        // unknown, every setting would be (refused, not skipped).
        let flags = run_flags(None).unwrap_or_default();
        let mut s = typed(&flags, Some(read_config_file(path, Some(text))?))?;
        s.args.config = Some(path.to_owned());
        s.args.once = true;
        Ok(s)
    }

    /// The config file's mappings, as written.
    pub(crate) fn file_mappings(&self) -> &[MappingSpec] {
        self.file.as_ref().map_or(&[], |f| &f.mappings)
    }
}

/// Every setting: the flag's texts where given, else the file's, else the
/// default's. A key of the file that is no setting is refused by its line.
fn typed(flags: &[Flag], given: Option<ConfigFile>) -> Result<Settings, ConfigError> {
    let file = given.as_ref();
    let set = |name: &str| file.and_then(|f| f.settings.iter().find(|s| s.key == name));
    if let Some(f) = file
        && let Some(unknown) = f
            .settings
            .iter()
            .find(|s| !flags.iter().any(|g| g.name == s.key))
    {
        return Err(ConfigError::of_file(
            &f.path,
            ConfigError::UnknownKey {
                line: unknown.line,
                key: unknown.key.clone(),
            },
        ));
    }
    let effective: Vec<Flag> = flags
        .iter()
        .map(|flag| match set(&flag.name) {
            Some(s) if !flag.given => Flag {
                texts: s.texts.clone(),
                ..flag.clone()
            },
            _ => flag.clone(),
        })
        .collect();
    let entries = effective.iter().map(|f| (f.name.as_str(), f.texts.clone()));
    let de = serde::de::value::MapDeserializer::<_, serde::de::value::Error>::new(entries);
    let args = serde_path_to_error::deserialize(de).map_err(|e| {
        let key = e.path().to_string();
        let source = e.into_inner();
        match (file, set(&key)) {
            (Some(f), Some(s)) => {
                let at = format!("line {}: {key}", s.line);
                ConfigError::of_file(&f.path, ConfigError::Setting { at, source })
            }
            _ => ConfigError::Setting {
                at: format!("--{key}"),
                source,
            },
        }
    })?;
    Ok(Settings {
        args,
        file: given,
        effective,
    })
}

/// A flag's value as YAML: a switch as a boolean, a number written the way
/// YAML writes it back as a number; anything else (a mode such as `0644`,
/// a duration, a name) as text, so it reads back exactly as given.
pub(super) fn typed_value(v: &str, switch: bool) -> serde_yaml_ng::Value {
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
