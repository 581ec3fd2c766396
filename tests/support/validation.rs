//! What the real API server refuses, for the objects the suites create.
//!
//! Transcribed from kube-apiserver's validation (pkg/apis/core/validation:
//! `ValidateSecret`, `ValidateSecretUpdate`, `ValidateConfigMap`,
//! `ValidateConfigMapUpdate`; apimachinery's `NameIsDNSSubdomain` and
//! `IsConfigMapKey`), so that a test which passes here passes against a
//! real cluster. Each error is a field path and a message in the real
//! server's words; [`invalid`] joins them the way its 422 Status does.
#![allow(dead_code)]

use base64::Engine as _;
use serde_json::{Value, json};

/// `core.MaxSecretSize`, also the ConfigMap limit.
const MAX_DATA_SIZE: usize = 1024 * 1024;

/// A DNS-1123 subdomain: what Secret, ConfigMap and CSR names must be.
pub fn dns_subdomain(name: &str) -> Option<String> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if name.len() > 253 {
        return Some("must be no more than 253 characters".into());
    }
    if name.is_empty() || !name.split('.').all(label_ok) {
        return Some(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \
             '-' or '.', and must start and end with an alphanumeric character"
                .into(),
        );
    }
    None
}

/// `IsConfigMapKey`: the rule for Secret and ConfigMap data keys.
fn config_map_key(key: &str) -> Option<String> {
    if key.len() > 253 {
        return Some("must be no more than 253 characters".into());
    }
    if key.is_empty()
        || !key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Some(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.'".into(),
        );
    }
    if key == "." || key == ".." || key.starts_with("..") {
        return Some("must not be '.' or '..', nor start with '..'".into());
    }
    None
}

/// Field errors: (path, message).
pub type Errors = Vec<(String, String)>;

/// The 422 message: `Secret "x" is invalid: data[tls.key]: Required value`,
/// several errors in brackets, as apimachinery's `NewInvalid` writes it.
pub fn invalid(kind: &str, name: &str, errors: &Errors) -> String {
    let each: Vec<String> = errors.iter().map(|(p, m)| format!("{p}: {m}")).collect();
    let all = if each.len() == 1 {
        each[0].clone()
    } else {
        format!("[{}]", each.join(", "))
    };
    format!("{kind} {name:?} is invalid: {all}")
}

/// Folds `stringData` into `data` (base64), as the API server does on
/// every write of a Secret.
pub fn fold_string_data(obj: &mut Value) {
    let Some(Value::Object(strings)) = obj.as_object_mut().and_then(|o| o.remove("stringData"))
    else {
        return;
    };
    for (k, v) in strings {
        let text = v.as_str().unwrap_or_default();
        obj["data"][k] = json!(base64::engine::general_purpose::STANDARD.encode(text));
    }
}

/// The decoded size of each data key (`data` is base64, `binaryData` too).
fn data_sizes<'a>(obj: &'a Value, field: &str, errors: &mut Errors) -> Vec<(&'a str, usize)> {
    let mut out = Vec::new();
    if let Some(map) = obj[field].as_object() {
        for (k, v) in map {
            let size = if field == "data" && obj["kind"] == "ConfigMap" {
                v.as_str().map_or(0, str::len)
            } else {
                match v
                    .as_str()
                    .map(|s| base64::engine::general_purpose::STANDARD.decode(s))
                {
                    Some(Ok(b)) => b.len(),
                    _ => {
                        errors.push((format!("{field}[{k}]"), "illegal base64 data".into()));
                        0
                    }
                }
            };
            out.push((k.as_str(), size));
        }
    }
    out
}

fn meta_name(obj: &Value, errors: &mut Errors) {
    if let Some(msg) = obj["metadata"]["name"].as_str().and_then(dns_subdomain) {
        errors.push((
            "metadata.name".into(),
            format!(
                "Invalid value: {:?}: {msg}",
                obj["metadata"]["name"].as_str().unwrap_or("")
            ),
        ));
    }
}

/// `ValidateSecret`.
pub fn secret(obj: &Value) -> Errors {
    let mut errors = Errors::new();
    meta_name(obj, &mut errors);
    let sizes = data_sizes(obj, "data", &mut errors);
    let mut total = 0;
    for (k, size) in &sizes {
        if let Some(msg) = config_map_key(k) {
            errors.push((format!("data[{k}]"), format!("Invalid value: {k:?}: {msg}")));
        }
        total += size;
    }
    if total > MAX_DATA_SIZE {
        errors.push((
            "data".into(),
            format!("Too long: may not be more than {MAX_DATA_SIZE} bytes"),
        ));
    }
    let has = |k: &str| sizes.iter().any(|(key, _)| *key == k);
    let size_of = |k: &str| sizes.iter().find(|(key, _)| *key == k).map_or(0, |e| e.1);
    let required = |errors: &mut Errors, k: &str| {
        errors.push((format!("data[{k}]"), "Required value".into()));
    };
    match obj["type"].as_str().unwrap_or("Opaque") {
        "kubernetes.io/tls" => {
            for k in ["tls.crt", "tls.key"] {
                if !has(k) {
                    required(&mut errors, k);
                }
            }
        }
        "kubernetes.io/service-account-token" => {
            let ann = &obj["metadata"]["annotations"]["kubernetes.io/service-account.name"];
            if ann.as_str().is_none_or(str::is_empty) {
                errors.push((
                    "metadata.annotations[kubernetes.io/service-account.name]".into(),
                    "Required value".into(),
                ));
            }
        }
        "kubernetes.io/dockercfg" if !has(".dockercfg") => required(&mut errors, ".dockercfg"),
        "kubernetes.io/dockerconfigjson" if !has(".dockerconfigjson") => {
            required(&mut errors, ".dockerconfigjson")
        }
        "kubernetes.io/basic-auth" if !has("username") && !has("password") => {
            required(&mut errors, "username");
            required(&mut errors, "password");
        }
        "kubernetes.io/ssh-auth" if size_of("ssh-privatekey") == 0 => {
            required(&mut errors, "ssh-privatekey")
        }
        _ => {}
    }
    errors
}

/// `ValidateConfigMap`.
pub fn config_map(obj: &Value) -> Errors {
    let mut errors = Errors::new();
    meta_name(obj, &mut errors);
    let mut total = 0;
    let data = data_sizes(obj, "data", &mut errors);
    let binary = data_sizes(obj, "binaryData", &mut errors);
    for (field, sizes) in [("data", &data), ("binaryData", &binary)] {
        for (k, size) in sizes {
            if let Some(msg) = config_map_key(k) {
                errors.push((
                    format!("{field}[{k}]"),
                    format!("Invalid value: {k:?}: {msg}"),
                ));
            }
            total += size;
        }
    }
    for (k, _) in &binary {
        if data.iter().any(|(d, _)| d == k) {
            errors.push((
                format!("data[{k}]"),
                "Invalid value: duplicate of key present in binaryData".into(),
            ));
        }
    }
    if total > MAX_DATA_SIZE {
        errors.push((
            String::new(),
            format!("Too long: may not be more than {MAX_DATA_SIZE} bytes"),
        ));
    }
    errors
}

/// `ValidateSecretUpdate` / `ValidateConfigMapUpdate`: the type of a Secret
/// never changes, and an immutable object's data never changes (nor does
/// it become mutable again).
pub fn update(old: &Value, new: &Value) -> Errors {
    let mut errors = Errors::new();
    // An absent type is Opaque, as the API server defaults it.
    let ty = |v: &Value| v["type"].as_str().unwrap_or("Opaque").to_owned();
    if old["kind"] == "Secret" && ty(old) != ty(new) {
        errors.push((
            "type".into(),
            format!("Invalid value: {:?}: field is immutable", ty(new)),
        ));
    }
    if old["immutable"] == json!(true) {
        if new["immutable"] != json!(true) {
            errors.push((
                "immutable".into(),
                "Forbidden: field is immutable when `immutable` is set".into(),
            ));
        }
        for field in ["data", "binaryData"] {
            let empty = json!({});
            let value = |v: &Value| {
                if v.is_null() {
                    empty.clone()
                } else {
                    v.clone()
                }
            };
            if value(&old[field]) != value(&new[field]) {
                errors.push((
                    field.into(),
                    "Forbidden: field is immutable when `immutable` is set".into(),
                ));
            }
        }
    }
    errors
}

/// The part of `ValidatePod` a test's Pod meets: a name, and containers
/// each with a name and an image.
pub fn pod(obj: &Value) -> Errors {
    let mut errors = Errors::new();
    meta_name(obj, &mut errors);
    match obj["spec"]["containers"].as_array() {
        Some(cs) if !cs.is_empty() => {
            for (i, c) in cs.iter().enumerate() {
                for field in ["name", "image"] {
                    if c[field].as_str().is_none_or(str::is_empty) {
                        errors.push((
                            format!("spec.containers[{i}].{field}"),
                            "Required value".into(),
                        ));
                    }
                }
            }
        }
        _ => errors.push(("spec.containers".into(), "Required value".into())),
    }
    errors
}

/// `ValidateEventCreate` for events.k8s.io/v1 (eventTime set): the
/// reporter, action and reason required and at most 128 bytes, the note
/// at most 1 kB, the type Normal or Warning, and an event about a
/// cluster-scoped object only in `default` or `kube-system`. The object it
/// is about need not exist, as on the real server.
pub fn event(obj: &Value) -> Errors {
    let mut errors = Errors::new();
    meta_name(obj, &mut errors);
    if obj["eventTime"].as_str().is_none_or(str::is_empty) {
        errors.push(("eventTime".into(), "Required value".into()));
    }
    for (field, max) in [
        ("reportingController", 128),
        ("reportingInstance", 128),
        ("action", 128),
        ("reason", 128),
    ] {
        match obj[field].as_str() {
            None | Some("") => errors.push((field.into(), "Required value".into())),
            Some(v) if v.len() > max => errors.push((
                field.into(),
                format!("Too long: may not be more than {max} bytes"),
            )),
            Some(_) => {}
        }
    }
    if obj["note"].as_str().is_some_and(|n| n.len() > 1024) {
        errors.push((
            "note".into(),
            "Too long: may not be more than 1024 bytes".into(),
        ));
    }
    if !matches!(obj["type"].as_str(), Some("Normal" | "Warning")) {
        errors.push((
            "type".into(),
            format!(
                "Invalid value: \"\": has invalid value: {}",
                obj["type"].as_str().unwrap_or("")
            ),
        ));
    }
    let ns = obj["metadata"]["namespace"].as_str().unwrap_or("");
    if obj["regarding"]["namespace"]
        .as_str()
        .is_none_or(str::is_empty)
        && !matches!(ns, "default" | "kube-system")
    {
        errors.push((
            "involvedObject.namespace".into(),
            "Invalid value: \"\": does not match event.namespace".into(),
        ));
    }
    errors
}

/// One PEM block as Go's `pem.Decode` sees it.
pub struct GoPemBlock {
    pub label: String,
    /// `Key: value` lines before the base64 (RFC 1421 headers).
    pub headers: bool,
    pub der: Vec<u8>,
}

/// The PEM blocks of `text`, in order, as the API server's Go `pem.Decode`
/// loop reads them: text between blocks is ignored, and a block whose
/// base64 does not decode is skipped. Not certsync's reader
/// (rustls-pki-types): the test server must accept and refuse what Go
/// does, RFC 1421 headers and unknown labels included.
pub fn go_pem_blocks(text: &str) -> Vec<GoPemBlock> {
    let mut blocks = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(label) = line
            .trim()
            .strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
        else {
            continue;
        };
        let (mut headers, mut b64) = (false, String::new());
        for l in lines.by_ref() {
            if l.trim().starts_with("-----END ") {
                break;
            }
            if l.contains(':') {
                headers = true;
            } else {
                b64.push_str(l.trim());
            }
        }
        if let Ok(der) = base64::engine::general_purpose::STANDARD.decode(&b64) {
            blocks.push(GoPemBlock {
                label: label.to_owned(),
                headers,
                der,
            });
        }
    }
    blocks
}
