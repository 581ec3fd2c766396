//! The YAML config file (`run --config`): `mappings:` and beside it
//! `run`'s settings by their flags' long names, and where it may live when
//! it goes with `ca:` mappings.

use super::error::ConfigError;
use super::mapping::MappingSpec;

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The config file as read.
#[derive(Debug)]
pub struct ConfigFile {
    pub path: PathBuf,
    pub mappings: Vec<MappingSpec>,
    pub settings: Vec<FileSetting>,
    /// Read from `path` (not text given for it), so judged where it lives.
    pub read: bool,
}

/// A setting of the config file: a list's items, or the one value
/// (numbers and booleans as YAML writes them).
#[derive(Debug)]
pub struct FileSetting {
    pub key: String,
    pub line: usize,
    pub texts: Vec<String>,
}

#[derive(Default, Deserialize)]
struct Document {
    #[serde(default)]
    mappings: Vec<MappingSpec>,
    #[serde(flatten)]
    rest: serde_yaml_ng::Mapping,
}

/// The settings beside `mappings:`, each key with its line.
fn settings(text: &str, rest: serde_yaml_ng::Mapping) -> Result<Vec<FileSetting>, ConfigError> {
    use serde_yaml_ng::Value;
    let line = |key: &str| {
        text.lines()
            .position(|l| l.starts_with(&format!("{key}:")))
            .map_or(0, |i| i + 1)
    };
    let mut out = Vec::new();
    for (k, v) in rest {
        let key = k.as_str().unwrap_or_default().to_owned();
        let line = line(&key);
        let scalar = |v: Value| match v {
            Value::String(s) => Ok(s),
            Value::Number(n) => Ok(n.to_string()),
            Value::Bool(b) => Ok(b.to_string()),
            _ => Err(ConfigError::NotScalar {
                line,
                key: key.clone(),
            }),
        };
        let texts = match v {
            // `owner: null` (as --print-config shows an unset flag) sets nothing.
            Value::Null => continue,
            Value::Sequence(items) => items.into_iter().map(scalar).collect::<Result<_, _>>()?,
            other => vec![scalar(other)?],
        };
        out.push(FileSetting { key, line, texts });
    }
    Ok(out)
}

/// The config file's size cap: thousands of mappings fit in far less.
const CONFIG_LIMIT: u64 = 4 << 20;

/// Reads the config file as any file certsync is handed
/// ([`crate::files::read_steering`]: a regular file, capped, as root one
/// only root may change), UTF-8.
pub(crate) fn read_config_text(path: &Path) -> Result<String, ConfigError> {
    let err = |problem| ConfigError::of_file(path, problem);
    let bytes =
        crate::files::read_steering(path, CONFIG_LIMIT).map_err(|e| err(ConfigError::Unread(e)))?;
    String::from_utf8(bytes).map_err(|_| err(ConfigError::NotUtf8))
}

/// The config file: its text `given`, or read from `path`.
pub(crate) fn read_config_file(
    path: &Path,
    given: Option<&str>,
) -> Result<ConfigFile, ConfigError> {
    let err = |problem| ConfigError::of_file(path, problem);
    let text = match given {
        Some(text) => text.to_owned(),
        None => read_config_text(path)?,
    };
    let doc: Option<Document> = crate::files::parse_yaml(&text).map_err(|e| err(e.into()))?;
    let Document { mappings, rest } = doc.unwrap_or_default();
    Ok(ConfigFile {
        path: path.to_owned(),
        mappings,
        settings: settings(&text, rest).map_err(err)?,
        read: given.is_none(),
    })
}

/// A config file that goes with `ca:` mappings (holding them, or settings
/// such as `owner:`) decides what a CA on the node signs and who may read
/// the key: it must be as hard to change as the CA key. Refused: a file
/// in a ConfigMap or Secret volume (`..data` on any directory of the way:
/// whoever may edit that object would mint certificates), and one another
/// user may change. Not seen: a `subPath` mount (the docs say to keep this
/// file on the node).
pub(crate) fn ca_config_guarded(path: &Path) -> Result<(), ConfigError> {
    let err = |problem| ConfigError::of_file(path, problem);
    let real = std::fs::canonicalize(path).map_err(|e| err(ConfigError::Unresolved(e)))?;
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
        return Err(err(ConfigError::CaInVolume));
    }
    crate::files::only_root_may_change(path).map_err(|e| err(ConfigError::CaOthersMayChange(e)))
}
