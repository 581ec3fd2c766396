//! A mapping's options against the grammar ([`crate::config::grammar`]): the
//! `--sync` form read into the config file's struct, and the options a
//! mapping sets checked against the kinds each applies to.

use super::error::ConfigError;
use super::grammar::{self, MappingSpec, Shape, SourceKind};

impl MappingSpec {
    /// Reads the `--sync` form: each `OPTION=VALUE` read by the shape the
    /// grammar gives it into the config file's keys, then the file's mapping
    /// by the same deserializer as the file, so both forms are one grammar.
    pub fn parse_flag(spec: &str) -> Result<Self, ConfigError> {
        let err = |problem| ConfigError::At {
            at: format!("--sync {spec:?}"),
            problem: Box::new(problem),
        };
        // No `=`, or nothing after it: no target.
        let (source, rest) = spec.split_once('=').unwrap_or((spec, ""));
        let mut rest = rest.split(',');
        let target = rest.next().unwrap_or_default();
        if target.is_empty() {
            return Err(err(ConfigError::NoTarget));
        }
        let mut keys = serde_json::Map::new();
        keys.insert("source".into(), source.into());
        keys.insert("target".into(), target.into());
        for opt in rest {
            let (k, v) = opt.split_once('=').unwrap_or((opt, ""));
            let Some(option) = grammar::option(k) else {
                return Err(err(ConfigError::UnknownOption { option: k.into() }));
            };
            let refused = || {
                err(ConfigError::OptionValue {
                    option: k.into(),
                    value: v.into(),
                    takes: option.shape.takes(),
                })
            };
            let value: serde_json::Value = match (option.shape, v) {
                (Shape::Switch, "" | "true") => true.into(),
                (Shape::Switch, "false") => false.into(),
                (Shape::Switch, _) | (_, "") => return Err(refused()),
                (Shape::Id, _) => v.parse::<u32>().map_err(|_| refused())?.into(),
                (Shape::Text(_), _) => v.into(),
                (Shape::List(_), _) => {
                    let list = keys.entry(k).or_insert_with(|| Vec::<String>::new().into());
                    if let Some(list) = list.as_array_mut() {
                        list.push(v.into());
                    }
                    continue;
                }
            };
            if keys.insert(k.to_owned(), value).is_some() {
                let (what, value) = ("option", k.into());
                return Err(err(ConfigError::Twice { what, value }));
            }
        }
        serde_json::from_value(keys.into()).map_err(|e| err(ConfigError::Shape(e)))
    }
}

/// A mapping (`T`, the file's mapping) as written: the options it sets by
/// their names, without those it leaves unset (absent, off or empty).
pub(crate) fn as_written(
    mapping: &impl serde::Serialize,
) -> Result<serde_json::Map<String, serde_json::Value>, serde_json::Error> {
    let mut m = match serde_json::to_value(mapping)? {
        serde_json::Value::Object(m) => m,
        _ => serde_json::Map::new(),
    };
    m.retain(|_, v| {
        !(v.is_null() || *v == serde_json::json!(false) || *v == serde_json::json!([]))
    });
    Ok(m)
}

/// Every option `mapping` sets applies to `kind`, comes with the option it
/// needs and without those it excludes, as the grammar says.
pub(super) fn options_apply(
    mapping: &impl serde::Serialize,
    kind: SourceKind,
) -> Result<(), ConfigError> {
    // An option the grammar does not know is refused by name.
    let set = as_written(mapping)
        .map_err(ConfigError::Shape)?
        .into_iter()
        .filter(|(key, _)| key != "source" && key != "target")
        .map(|(option, _)| grammar::option(&option).ok_or(ConfigError::UnknownOption { option }))
        .collect::<Result<Vec<_>, _>>()?;
    let is_set = |name: &str| set.iter().any(|o| o.name == name);
    for &option in &set {
        if !option.kinds.contains(&kind) {
            return Err(ConfigError::NotForKind { option, kind });
        }
        if let Some(needs) = option.needs.filter(|n| !is_set(n)) {
            return Err(ConfigError::Needs {
                option: option.name,
                needs,
            });
        }
        if let Some(&other) = option.excludes.iter().find(|e| is_set(e)) {
            return Err(ConfigError::Excludes {
                option: option.name,
                other,
            });
        }
    }
    Ok(())
}
