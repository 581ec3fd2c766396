//! A mapping's options against the grammar ([`crate::cli::grammar`]): the
//! `--sync` form read into the config file's struct, and the options a
//! mapping sets checked against the kinds each applies to.

use super::ConfigError;
use crate::cli::grammar::{self, MappingOption, Shape, SourceKind};

/// A `--sync` flag that is not `KIND:SOURCE=TARGET[,OPTION=VALUE]...` as
/// the grammar reads it (the flag is named beside it,
/// [`ConfigError::Flag`]).
#[derive(Debug, thiserror::Error)]
pub enum FlagProblem {
    #[error("expected KIND:SOURCE=TARGET")]
    NoTarget,
    #[error("the target directory is empty")]
    EmptyTarget,
    #[error(
        "unknown option {option:?} (known: {}; `certsync run -h` says which kinds each applies to)",
        grammar::OPTIONS.iter().map(|o| o.name).collect::<Vec<_>>().join(", ")
    )]
    UnknownOption { option: String },
    #[error("option {option:?} needs a value ({option}=...)")]
    NeedsValue { option: String },
    #[error("{option} takes no value or true/false, got {value:?}")]
    NotSwitch { option: String, value: String },
    #[error("option {option:?} needs a numeric id, got {value:?}")]
    NotId { option: String, value: String },
    /// Given twice, one of the two would be dropped without a word.
    #[error("option {option:?} is given twice")]
    Twice { option: String },
    /// The options read, not the file's mapping (a value of the wrong
    /// shape).
    #[error("{0}")]
    Shape(#[source] serde_json::Error),
}

/// A mapping's options against the grammar, refused.
#[derive(Debug, thiserror::Error)]
pub enum GrammarError {
    #[error("unknown option {option:?}")]
    Unknown { option: String },
    #[error(
        "{name} does not apply to {kind}: sources{why}; {name} applies to {kinds} sources only",
        name = .option.name,
        kind = .kind.name(),
        why = .kind.publishes().map(|p| format!(" ({p})")).unwrap_or_default(),
        kinds = grammar::kinds_in_words(.option.kinds),
    )]
    NotForKind {
        option: &'static MappingOption,
        kind: SourceKind,
    },
    #[error("the mapping cannot be read back: {problem}")]
    Unreadable { problem: String },
    #[error("{option} goes with {needs}=")]
    Needs {
        option: &'static str,
        needs: &'static str,
    },
    #[error("{other} and {option}= exclude each other")]
    Excludes {
        option: &'static str,
        other: &'static str,
    },
}

/// Reads the `--sync` form: each `OPTION=VALUE` read by the shape the
/// grammar gives it into the config file's keys, then `T` (the file's
/// mapping) by the same deserializer as the file, so both forms are one
/// grammar.
pub(super) fn read_flag<T: serde::de::DeserializeOwned>(spec: &str) -> Result<T, ConfigError> {
    let err = |problem: FlagProblem| ConfigError::Flag {
        spec: spec.to_owned(),
        problem,
    };
    let (source, rest) = spec
        .split_once('=')
        .ok_or_else(|| err(FlagProblem::NoTarget))?;
    let mut parts = rest.split(',');
    let target = parts.next().unwrap_or_default();
    if target.is_empty() {
        return Err(err(FlagProblem::EmptyTarget));
    }
    let mut keys = serde_json::Map::new();
    keys.insert("source".into(), source.into());
    keys.insert("target".into(), target.into());
    for opt in parts {
        let (k, v) = opt.split_once('=').unwrap_or((opt, ""));
        let Some(option) = grammar::option(k) else {
            return Err(err(FlagProblem::UnknownOption { option: k.into() }));
        };
        let value = || {
            if v.is_empty() {
                Err(err(FlagProblem::NeedsValue { option: k.into() }))
            } else {
                Ok(serde_json::Value::from(v))
            }
        };
        let value = match option.shape {
            Shape::Text(_) => value()?,
            Shape::List(_) => {
                let item = value()?;
                let list = keys.entry(k).or_insert_with(|| Vec::<String>::new().into());
                if let Some(list) = list.as_array_mut() {
                    list.push(item);
                }
                continue;
            }
            Shape::Switch => match v {
                "" | "true" => true.into(),
                "false" => false.into(),
                _ => {
                    return Err(err(FlagProblem::NotSwitch {
                        option: k.into(),
                        value: v.into(),
                    }));
                }
            },
            Shape::Id => v
                .parse::<u32>()
                .map_err(|_| {
                    err(FlagProblem::NotId {
                        option: k.into(),
                        value: v.into(),
                    })
                })?
                .into(),
        };
        if keys.insert(k.to_owned(), value).is_some() {
            return Err(err(FlagProblem::Twice { option: k.into() }));
        }
    }
    serde_json::from_value(keys.into()).map_err(|e| err(FlagProblem::Shape(e)))
}

/// The options a mapping (`T`, the file's mapping) sets: its keys that are
/// not null, false or empty, by their grammar entries; an option the
/// grammar does not know is refused by name.
fn options_set(
    mapping: &impl serde::Serialize,
) -> Result<Vec<&'static MappingOption>, GrammarError> {
    let keys = serde_json::to_value(mapping).map_err(|e| GrammarError::Unreadable {
        problem: e.to_string(),
    })?;
    let mut set = Vec::new();
    for (key, value) in keys.as_object().into_iter().flatten() {
        let unset = value.is_null()
            || *value == serde_json::json!(false)
            || *value == serde_json::json!([]);
        if unset || key == "source" || key == "target" {
            continue;
        }
        let option = grammar::option(key).ok_or_else(|| GrammarError::Unknown {
            option: key.clone(),
        })?;
        set.push(option);
    }
    Ok(set)
}

/// Every option `mapping` sets applies to `kind`, comes with the option it
/// needs and without those it excludes, as the grammar says.
pub(super) fn options_apply(
    mapping: &impl serde::Serialize,
    kind: SourceKind,
) -> Result<(), GrammarError> {
    let set = options_set(mapping)?;
    let is_set = |name: &str| set.iter().any(|o| o.name == name);
    for &option in &set {
        if !option.kinds.contains(&kind) {
            return Err(GrammarError::NotForKind { option, kind });
        }
        if let Some(needs) = option.needs.filter(|n| !is_set(n)) {
            return Err(GrammarError::Needs {
                option: option.name,
                needs,
            });
        }
        if let Some(&other) = option.excludes.iter().find(|e| is_set(e)) {
            return Err(GrammarError::Excludes {
                option: option.name,
                other,
            });
        }
    }
    Ok(())
}
