//! The HTTP reload hook: one request per reload, success is a 2xx.
//!
//! Each attempt has a timeout; failed attempts (connection errors, timeouts,
//! non-2xx) are retried a bounded number of times with exponential backoff
//! and jitter. A bearer token is read from its file on every call, so a
//! rotated token is picked up. HTTPS trusts either the system roots or only
//! a given CA file (which may be a `ca.crt` certsync itself publishes);
//! skipping verification is allowed for loopback URLs only.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{AUTHORIZATION, HeaderName, HeaderValue, LOCATION};
use http::{Method, Request, Uri};
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::reload::error::ReloadError;
use crate::reload::verify::AnyCertificate;

/// Settings of the hook, as given on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpHookConfig {
    pub url: String,
    pub method: String,
    pub headers: Vec<String>,
    pub bearer_token_file: Option<PathBuf>,
    pub ca_file: Option<PathBuf>,
    pub insecure_skip_verify: bool,
    pub timeout: Duration,
    pub retries: u32,
    /// First backoff; doubled per retry, plus up to as much again of jitter.
    pub backoff: Duration,
}

/// hyper's pooled HTTP/1.1 client over rustls, the stack the API client
/// already links: no second HTTP client in the binary. It never follows
/// redirects.
type HttpClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Empty<Bytes>>;

/// A ready-to-call hook. `Debug` shows neither header values nor the
/// URL's userinfo.
#[derive(Clone)]
pub struct HttpHook {
    /// Built once without a CA file; with one, built per call from the
    /// file's current content (it may be a ca.crt certsync has not written
    /// yet, or one that rotates).
    client: Option<HttpClient>,
    /// The settings: the URL and headers as given are never shown.
    config: HttpHookConfig,
    /// `METHOD URL` for logs, without the URL's user:password.
    described: String,
    /// The URL to request: without userinfo, which becomes the last header.
    uri: Uri,
    method: Method,
    /// As given, then `Authorization: Basic` from the URL's
    /// `user:password`, as browsers and curl send it.
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl std::fmt::Debug for HttpHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("HttpHook")
            .field("hook", &self.describe())
            .field("headers", &names)
            .finish_non_exhaustive()
    }
}

impl HttpHook {
    pub fn new(c: &HttpHookConfig) -> Result<Self, ReloadError> {
        let url = redact_text(&c.url);
        let url_err = |problem| ReloadError::Url {
            url: url.clone(),
            problem,
        };
        let given: Uri = c
            .url
            .parse()
            .map_err(|e| url_err(format!("{e} (expected http[s]://host[:port]/path)")))?;
        if !matches!(given.scheme_str(), Some("http" | "https")) {
            return Err(url_err("only http and https are supported".into()));
        }
        let Some(authority) = given.authority() else {
            return Err(url_err("no host".into()));
        };
        let host = authority.host();
        let loopback = host == "localhost"
            || host
                .trim_matches(['[', ']'])
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        if c.insecure_skip_verify && !loopback {
            return Err(url_err(
                "skipping TLS verification is allowed for loopback URLs only".into(),
            ));
        }
        let (uri, basic) = split_userinfo(&given).map_err(|e| url_err(e.to_string()))?;
        let method = Method::from_bytes(c.method.to_ascii_uppercase().as_bytes())
            .map_err(|_| url_err(format!("{:?} is not an HTTP method", c.method)))?;
        let mut headers = c
            .headers
            .iter()
            .map(|h| {
                let bad = || ReloadError::Header { header: h.clone() };
                let (name, value) = h.split_once(':').ok_or_else(bad)?;
                let name = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| bad())?;
                let value = HeaderValue::from_str(value.trim()).map_err(|_| bad())?;
                Ok((name, value))
            })
            .collect::<Result<Vec<_>, ReloadError>>()?;
        headers.extend(basic.map(|basic| (AUTHORIZATION, basic)));

        // ring, the provider certsync uses everywhere (docs/security.md, Crypto provider).
        // Installing twice is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut hook = Self {
            client: None,
            config: c.clone(),
            described: format!("{method} {url}"),
            uri,
            method,
            headers,
        };
        if c.ca_file.is_none() {
            hook.client = Some(hook.build_client()?);
        }
        // Judged at start too, so a token file another user may change is
        // refused before anything is published, naming it.
        if let Some(path) = &c.bearer_token_file {
            bearer_token(path).map_err(|e| ReloadError::TokenFile(Box::new(e)))?;
        }
        // The CA decides where the token and the reload go: as the token
        // file, one only root may change (otherwise a user's CA vouched for
        // the user's server, which got root's token). It may not exist yet (a
        // ca.crt certsync publishes).
        if let Some(path) = &c.ca_file {
            crate::files::steering_or_absent(path, crate::validate::MAX_BUNDLE_SIZE as u64)
                .map_err(|source| ReloadError::CaFile {
                    path: path.clone(),
                    source: source.problem().into(),
                })?;
        }
        Ok(hook)
    }

    fn build_client(&self) -> Result<HttpClient, ReloadError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(ReloadError::Client)?;
        let tls = if self.config.insecure_skip_verify {
            AnyCertificate::config(builder)
        } else if let Some(path) = &self.config.ca_file {
            let bad = |source: Box<dyn std::error::Error + Send + Sync>| ReloadError::CaFile {
                path: path.clone(),
                source,
            };
            let pem = crate::files::read_steering(path, crate::validate::MAX_BUNDLE_SIZE as u64)
                .map_err(|e| bad(e.problem().into()))?;
            // Certificates only: a key or another block is refused, never
            // skipped ([`crate::pem::certificates`]).
            let mut roots = rustls::RootCertStore::empty();
            for der in crate::pem::certificates(&pem).map_err(|e| bad(e.into()))? {
                roots.add(der.into()).map_err(|e| bad(e.into()))?;
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        } else {
            use rustls_platform_verifier::BuilderVerifierExt;
            builder
                .with_platform_verifier()
                .map_err(ReloadError::Client)?
                .with_no_client_auth()
        };
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        Ok(Client::builder(TokioExecutor::new()).build(https))
    }

    /// `METHOD URL` for logs, with any user:password in the URL removed.
    pub fn describe(&self) -> String {
        self.described.clone()
    }

    /// Calls the hook until a 2xx or the retries run out. Says which
    /// status answered after how many attempts.
    pub async fn call(&self) -> Result<String, ReloadError> {
        let HttpHookConfig {
            timeout, retries, ..
        } = self.config;
        let mut last = ReloadError::Status(0);
        for attempt in 0..=retries {
            if attempt > 0 {
                tokio::time::sleep(crate::backoff(self.config.backoff, attempt)).await;
            }
            let started = Instant::now();
            let result = tokio::time::timeout(timeout, self.attempt()).await;
            match result {
                Ok(Ok(status)) if (200..300).contains(&status) => {
                    let hook = &self.described;
                    return Ok(format!(
                        "{hook} answered {status} after {} attempt(s)",
                        attempt + 1
                    ));
                }
                Ok(Ok(status)) => last = ReloadError::Status(status),
                Ok(Err(e)) => last = e,
                Err(_) => last = ReloadError::NoAnswer(timeout),
            }
            tracing::debug!(hook = %self.describe(), attempt = attempt + 1, latency_ms = started.elapsed().as_millis() as u64, result = %last, "reload hook attempt failed");
        }
        Err(ReloadError::GaveUp {
            hook: self.describe(),
            attempts: retries + 1,
            last: Box::new(last),
        })
    }

    /// One request; the status, or why there is none. hyper's errors do
    /// not carry the URL, so no credential can leak through them.
    async fn attempt(&self) -> Result<u16, ReloadError> {
        let client = match &self.client {
            Some(c) => c.clone(),
            None => self.build_client()?,
        };
        let mut req = Request::builder()
            .method(self.method.clone())
            .uri(self.uri.clone());
        for (name, value) in &self.headers {
            req = req.header(name, value);
        }
        if let Some(path) = &self.config.bearer_token_file {
            req = req.header(AUTHORIZATION, bearer_token(path)?);
        }
        let req = req.body(Empty::new()).map_err(ReloadError::Request)?;
        let resp = client.request(req).await.map_err(ReloadError::Send)?;
        let status = resp.status();
        if status.is_redirection() {
            let to = resp
                .headers()
                .get(LOCATION)
                .and_then(|l| l.to_str().ok())
                .map_or_else(|| "nowhere".to_owned(), redact_text);
            return Err(ReloadError::Redirect {
                status: status.as_u16(),
                to,
            });
        }
        Ok(status.as_u16())
    }
}

/// The bearer token, read on every call (a rotated token is picked up)
/// through [`crate::files::read_owned`]: the token goes to whatever the
/// URL names, so a file another user may change (or link to root's
/// token) would hand them root's secret.
fn bearer_token(path: &std::path::Path) -> Result<HeaderValue, ReloadError> {
    let bad = |problem: Box<dyn std::error::Error + Send + Sync>| ReloadError::Token {
        path: path.to_owned(),
        problem,
    };
    let token = crate::files::read_owned(path, crate::files::SMALL_FILE)
        .map_err(|e| bad(e.problem().into()))?;
    let token = String::from_utf8(token).map_err(|_| bad("not UTF-8 text".into()))?;
    HeaderValue::from_str(&format!("Bearer {}", token.trim()))
        .map_err(|_| bad("not a valid header value".into()))
}

/// `uri` without its `user:password@`, and that userinfo as an
/// `Authorization: Basic` value (percent-decoded, as in RFC 3986).
/// `http::Error` renders the URI or header error it wraps as it is.
fn split_userinfo(uri: &Uri) -> Result<(Uri, Option<HeaderValue>), http::Error> {
    let Some(authority) = uri.authority() else {
        return Ok((uri.clone(), None));
    };
    let Some((userinfo, host)) = authority.as_str().rsplit_once('@') else {
        return Ok((uri.clone(), None));
    };
    let mut parts = uri.clone().into_parts();
    parts.authority = Some(host.parse::<http::uri::Authority>()?);
    let bare = Uri::from_parts(parts)?;
    let decoded: Vec<u8> = percent_encoding::percent_decode_str(userinfo).collect();
    use base64::Engine;
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(decoded)
    );
    let mut value = HeaderValue::from_str(&basic)?;
    value.set_sensitive(true);
    Ok((bare, Some(value)))
}

/// `text` (a URL, or a redirect's Location) as it may be shown: any
/// `user:password@` in its authority replaced by `***@`, every query value
/// by `REDACTED` (keys kept; a parameter without `=` is redacted whole),
/// and a fragment by `#REDACTED`. Hooks take tokens in all three places
/// (`?token=...`, `#access_token=...`), and a log or `--print-config`
/// output is read by more people than the hook's owner.
///
/// Fail closed: a password the operator did not percent-encode may hold
/// `/`, `?` or `#`, which end the authority early (`http://u:pa/ss@h/`).
/// So an `@` anywhere in the authority or the path ends a userinfo, and
/// when the authority as RFC 3986 reads it is not a plain `host[:port]`,
/// everything up to the last `@` is taken for userinfo.
pub fn redact_text(text: &str) -> String {
    // The authority follows "scheme://" or, in a scheme-relative
    // reference (a Location may be one), a leading "//".
    let start = match text.find("://") {
        Some(i)
            if i > 0
                && text[..i]
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b)) =>
        {
            Some(i + 3)
        }
        _ if text.starts_with("//") => Some(2),
        _ => None,
    };
    if let Some(start) = start {
        let rest = &text[start..];
        let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
        // The authority and path: an '@' in either ends a userinfo (in the
        // path, of a password holding a '/').
        let path = &rest[..rest.find(['?', '#']).unwrap_or(rest.len())];
        let at = match path.rfind('@') {
            Some(at) => Some(at),
            // A password holding '?' or '#' leaves no plain host before it.
            None if !plain_host_port(authority) => rest.rfind('@'),
            None => None,
        };
        // What follows the cut must be a plain host too, or the password
        // held an '@' as well as a '?' or '#'.
        let at = at.map(|at| {
            let after = &rest[at + 1..];
            let host = &after[..after.find(['/', '?', '#']).unwrap_or(after.len())];
            if !host.is_empty() && plain_host_port(host) {
                at
            } else {
                rest.rfind('@').unwrap_or(at)
            }
        });
        if let Some(at) = at {
            return format!(
                "{}***@{}",
                &text[..start],
                redact_after_authority(&rest[at + 1..])
            );
        }
    }
    redact_after_authority(text)
}

/// Whether `authority` is a host (a name, an IPv4 address or a bracketed
/// IPv6 literal) and an optional numeric port, with no userinfo.
fn plain_host_port(authority: &str) -> bool {
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((addr, port)) if addr.parse::<std::net::Ipv6Addr>().is_ok() => (None, port),
            _ => return false,
        },
        None => match authority.find(':') {
            Some(i) => (Some(&authority[..i]), &authority[i..]),
            None => (Some(authority), ""),
        },
    };
    let host_ok = host.is_none_or(|h| {
        h.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~%".contains(&b))
    });
    let port_ok = port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()));
    host_ok && port_ok
}

/// [`redact_text`]'s query and fragment redaction, for text whose
/// authority (if any) holds no userinfo.
fn redact_after_authority(text: &str) -> String {
    // RFC 3986: the fragment starts at the first '#', the query at the first
    // '?' before it.
    let (text, fragment) = text
        .split_once('#')
        .map_or((text, ""), |(t, _)| (t, "#REDACTED"));
    let Some((head, query)) = text.split_once('?') else {
        return format!("{text}{fragment}");
    };
    let params: Vec<String> = query
        .split('&')
        .map(|p| match p.split_once('=') {
            Some((key, "")) => format!("{key}="),
            Some((key, _)) => format!("{key}=REDACTED"),
            None if p.is_empty() => String::new(),
            None => "REDACTED".to_owned(),
        })
        .collect();
    format!("{head}?{}{fragment}", params.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(url: &str) -> HttpHookConfig {
        HttpHookConfig {
            url: url.into(),
            method: "post".into(),
            headers: vec![],
            bearer_token_file: None,
            ca_file: None,
            insecure_skip_verify: false,
            timeout: Duration::from_secs(1),
            retries: 2,
            backoff: Duration::from_millis(10),
        }
    }

    /// A hook trusting the CA file `ca.crt` in `d` (not written yet).
    fn hook_trusting(d: &std::path::Path) -> (std::path::PathBuf, HttpHook) {
        let ca = d.join("ca.crt");
        let hook = HttpHook::new(&HttpHookConfig {
            ca_file: Some(ca.clone()),
            ..config("https://127.0.0.1:1/")
        })
        .unwrap();
        (ca, hook)
    }

    fn example(name: &str) -> Vec<u8> {
        let at = format!("{}/examples/certs/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read(at).unwrap()
    }

    #[test]
    fn config_errors_are_clear() {
        let cases = [
            (config("not a url"), "reload URL \"not a url\""),
            (config("ftp://x/"), "only http and https"),
            (
                HttpHookConfig {
                    insecure_skip_verify: true,
                    ..config("https://example.com/")
                },
                "loopback URLs only",
            ),
            (
                HttpHookConfig {
                    headers: vec!["NoColon".into()],
                    ..config("http://127.0.0.1/")
                },
                "expected 'Name: value'",
            ),
        ];
        for (c, want) in cases {
            let e = HttpHook::new(&c).unwrap_err().to_string();
            assert!(e.contains(want), "{e:?} lacks {want:?}");
        }
        let ok = HttpHook::new(&HttpHookConfig {
            insecure_skip_verify: true,
            ..config("https://localhost:8443/-/reload")
        })
        .unwrap();
        assert_eq!(ok.describe(), "POST https://localhost:8443/-/reload");
        // A CA file that does not exist yet (a ca.crt certsync will publish)
        // is read at call time, not refused at start.
        HttpHook::new(&HttpHookConfig {
            ca_file: Some("/nonexistent/ca.crt".into()),
            ..config("https://127.0.0.1/")
        })
        .unwrap();
    }

    /// A CA file that appears after start
    /// (a ca.crt certsync publishes) is held to the token file's rule at
    /// every read, not only at start: root's own file left 0666 is
    /// refused, naming it, and nothing is sent.
    #[test]
    fn a_reload_ca_file_others_may_write_is_refused_at_every_read() {
        use std::os::unix::fs::PermissionsExt as _;
        if !nix::unistd::geteuid().is_root() {
            eprintln!("SKIP: needs root (read_owned judges files as root only)");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let (ca, hook) = hook_trusting(d.path());
        std::fs::write(&ca, example("ca.crt")).unwrap();
        std::fs::set_permissions(&ca, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(hook.build_client().is_ok(), "root's 0644 file");
        std::fs::set_permissions(&ca, std::fs::Permissions::from_mode(0o666)).unwrap();
        let Err(e) = hook.build_client() else {
            panic!("a 0666 CA file was read");
        };
        let e = e.to_string();
        assert!(
            e.contains(&ca.display().to_string()) && e.contains("may be changed"),
            "{e}"
        );
    }

    /// A CA file is certificates only: a key or another block beside them
    /// is refused, never skipped (a file that is not what the operator
    /// thinks it is), and so is PEM Go's reader would read otherwise.
    #[test]
    fn attack_a_reload_ca_file_with_a_block_that_is_no_certificate_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let (ca, hook) = hook_trusting(d.path());
        let cert = example("ca.crt");
        std::fs::write(&ca, &cert).unwrap();
        assert!(hook.build_client().is_ok(), "a CA certificate");
        std::fs::write(&ca, [cert, example("tls.key")].concat()).unwrap();
        let Err(e) = hook.build_client() else {
            panic!("a CA file holding a key was read");
        };
        assert!(
            matches!(&e, ReloadError::CaFile { source, .. }
                if matches!(source.downcast_ref(), Some(crate::pem::PemError::Kind(_)))),
            "{e}"
        );
    }

    #[test]
    fn credentials_never_reach_messages() {
        let hook = HttpHook::new(&config("http://admin:hunter2@127.0.0.1:1/-/reload")).unwrap();
        assert_eq!(hook.describe(), "POST http://***@127.0.0.1:1/-/reload");
        let e = HttpHook::new(&config("http://admin:hunter2@[::1/x"))
            .unwrap_err()
            .to_string();
        assert!(!e.contains("hunter2") && e.contains("***@"), "{e}");
        assert_eq!(redact_text("http://u:p@h/x"), "http://***@h/x");
        assert_eq!(redact_text("/relative/login"), "/relative/login");
    }

    #[test]
    fn query_values_and_fragments_are_redacted() {
        for (given, shown) in [
            (
                "http://h/x?token=s3cret&x=1",
                "http://h/x?token=REDACTED&x=REDACTED",
            ),
            (
                "https://u:p@h:8443/r?a=1#frag",
                "https://***@h:8443/r?a=REDACTED#REDACTED",
            ),
            // An '@' in the query is not userinfo.
            ("http://h?mail=a@b", "http://h?mail=REDACTED"),
            ("http://h/?s3cret&k=", "http://h/?REDACTED&k="),
            ("http://h/#access_token=s3cret", "http://h/#REDACTED"),
            ("/login?next=%2F", "/login?next=REDACTED"),
            ("http://h/plain", "http://h/plain"),
        ] {
            assert_eq!(redact_text(given), shown, "{given}");
        }
        let hook = HttpHook::new(&config("http://127.0.0.1:1/-/reload?token=s3cret")).unwrap();
        assert_eq!(
            hook.describe(),
            "POST http://127.0.0.1:1/-/reload?token=REDACTED"
        );
        assert!(!format!("{hook:?}").contains("s3cret"));
        let e = HttpHook::new(&config("ftp://h/?token=s3cret"))
            .unwrap_err()
            .to_string();
        assert!(!e.contains("s3cret"), "{e}");
        let with_header = HttpHook::new(&HttpHookConfig {
            headers: vec!["X-Api-Key: topsecret".into()],
            ..config("http://u:hunter2@127.0.0.1/")
        })
        .unwrap();
        let debug = format!("{with_header:?}");
        assert!(
            debug.contains("x-api-key") && !debug.contains("topsecret"),
            "{debug}"
        );
        assert!(!debug.contains("hunter2"), "{debug}");
    }

    /// Attack: a password the operator did not percent-encode (a base64
    /// token holds '/'; others '?' or '#') ends the authority early, as
    /// RFC 3986 reads it, so the '@' and what precedes it were taken for
    /// a path, query or fragment and shown: in the error for the URL (its
    /// "port" is not a number), in `--print-config` and in the log. A
    /// redirect's Location may be scheme-relative (`//user:pass@host/`).
    #[test]
    fn attack_credentials_that_end_the_authority_early_are_redacted() {
        for given in [
            "http://admin:hunt/er2@127.0.0.1:1/-/reload",
            "http://admin:hunt?er2@127.0.0.1:1/-/reload",
            "http://admin:hunt#er2@127.0.0.1:1/-/reload",
            "http://admin:12/hunter2@127.0.0.1:1/-/reload",
            "//admin:hunter2@evil.example/x",
            "http://admin:hu@nt/er2@127.0.0.1:1/-/reload",
        ] {
            let shown = redact_text(given);
            assert!(
                !shown.contains("hunt") && !shown.contains("er2") && !shown.contains("12/"),
                "{given} shown as {shown}"
            );
        }
        for given in [
            "http://admin:hunt/er2@127.0.0.1:1/-/reload",
            "http://admin:hunt#er2@127.0.0.1:1/-/reload",
        ] {
            let e = match HttpHook::new(&config(given)) {
                Ok(hook) => hook.describe(),
                Err(e) => e.to_string(),
            };
            assert!(!e.contains("hunt") && !e.contains("er2"), "{e}");
        }
    }

    #[test]
    fn backoff_grows_with_jitter_within_bounds() {
        let base = Duration::from_millis(100);
        for attempt in 1..=4 {
            let exp = base * (1 << (attempt - 1));
            let d = crate::backoff(base, attempt);
            assert!(d >= exp && d < exp * 2, "attempt {attempt}: {d:?}");
        }
    }
}
