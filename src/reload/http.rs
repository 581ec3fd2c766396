//! The HTTP reload hook: one request per reload, success is a 2xx.
//!
//! Each attempt has a timeout; failed attempts (connection errors, timeouts,
//! non-2xx) are retried a bounded number of times with exponential backoff
//! and jitter. A bearer token is read from its file on every call, so a
//! rotated token is picked up. HTTPS trusts either the system roots or only
//! a given CA file (which may be a `ca.crt` certsync itself publishes);
//! skipping verification is allowed for loopback URLs only.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use reqwest::header::{AUTHORIZATION, HeaderName, HeaderValue};
use reqwest::{Method, Url};

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("reload URL {url:?}: {problem}")]
    Url { url: String, problem: String },
    #[error("reload header {header:?}: expected 'Name: value'")]
    Header { header: String },
    #[error("reload CA file {path}: {problem}")]
    CaFile { path: PathBuf, problem: String },
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
    #[error("{hook}: gave up after {attempts} attempts; last: {last}")]
    GaveUp {
        hook: String,
        attempts: u32,
        last: String,
    },
}

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

/// A ready-to-call hook. `Debug` shows neither header values nor the
/// URL's userinfo.
#[derive(Clone)]
pub struct HttpHook {
    /// Built once without a CA file; with one, built per call from the
    /// file's current content (it may be a ca.crt certsync has not written
    /// yet, or one that rotates).
    client: Option<reqwest::Client>,
    ca_file: Option<PathBuf>,
    timeout: Duration,
    insecure_skip_verify: bool,
    url: Url,
    method: Method,
    headers: Vec<(HeaderName, HeaderValue)>,
    bearer_token_file: Option<PathBuf>,
    retries: u32,
    backoff: Duration,
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
    pub fn new(c: &HttpHookConfig) -> Result<Self, HttpError> {
        let url_err = |problem: String| HttpError::Url {
            url: redact_text(&c.url),
            problem,
        };
        let url = Url::parse(&c.url).map_err(|e| url_err(e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(url_err("only http and https are supported".into()));
        }
        let loopback = url.host_str().is_some_and(|h| {
            h == "localhost"
                || h.trim_matches(['[', ']'])
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        });
        if c.insecure_skip_verify && !loopback {
            return Err(url_err(
                "skipping TLS verification is allowed for loopback URLs only".into(),
            ));
        }
        let method = Method::from_bytes(c.method.to_ascii_uppercase().as_bytes())
            .map_err(|_| url_err(format!("{:?} is not an HTTP method", c.method)))?;
        let headers = c
            .headers
            .iter()
            .map(|h| {
                let bad = || HttpError::Header { header: h.clone() };
                let (name, value) = h.split_once(':').ok_or_else(bad)?;
                let name = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| bad())?;
                let value = HeaderValue::from_str(value.trim()).map_err(|_| bad())?;
                Ok((name, value))
            })
            .collect::<Result<Vec<_>, HttpError>>()?;

        // reqwest is built without a bundled provider; ring is the one
        // certsync uses everywhere (see README). Installing twice is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut hook = Self {
            client: None,
            ca_file: c.ca_file.clone(),
            timeout: c.timeout,
            insecure_skip_verify: c.insecure_skip_verify,
            url,
            method,
            headers,
            bearer_token_file: c.bearer_token_file.clone(),
            retries: c.retries,
            backoff: c.backoff,
        };
        if hook.ca_file.is_none() {
            hook.client = Some(hook.build_client()?);
        }
        Ok(hook)
    }

    fn build_client(&self) -> Result<reqwest::Client, HttpError> {
        let mut builder = reqwest::Client::builder()
            .timeout(self.timeout)
            // A redirect is never a reload: a 302 to a login page is not
            // success, and following one could lead an unverified request
            // (--reload-insecure-skip-verify) off loopback.
            .redirect(reqwest::redirect::Policy::none())
            .danger_accept_invalid_certs(self.insecure_skip_verify);
        if let Some(path) = &self.ca_file {
            let ca_err = |problem: String| HttpError::CaFile {
                path: path.clone(),
                problem,
            };
            let pem = crate::files::read_regular(path, crate::validate::MAX_BUNDLE_SIZE as u64)
                .map_err(|e| ca_err(e.to_string()))?;
            let certs =
                reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| ca_err(e.to_string()))?;
            if certs.is_empty() {
                return Err(ca_err("no certificates in it".into()));
            }
            builder = builder.tls_certs_only(certs);
        }
        builder
            .build()
            .map_err(|e| HttpError::Client(e.to_string()))
    }

    /// `METHOD URL` for logs, with any user:password in the URL removed.
    pub fn describe(&self) -> String {
        format!("{} {}", self.method, redact(&self.url))
    }

    /// Calls the hook until a 2xx or the retries run out. Returns the status
    /// and the number of attempts.
    pub async fn call(&self) -> Result<(u16, u32), HttpError> {
        let mut last = String::new();
        for attempt in 0..=self.retries {
            if attempt > 0 {
                tokio::time::sleep(crate::backoff(self.backoff, attempt)).await;
            }
            let started = Instant::now();
            match self.attempt().await {
                Ok(status) if (200..300).contains(&status) => return Ok((status, attempt + 1)),
                Ok(status) => last = format!("HTTP {status}"),
                Err(e) => last = e,
            }
            tracing::debug!(hook = %self.describe(), attempt = attempt + 1, latency_ms = started.elapsed().as_millis() as u64, result = %last, "reload hook attempt failed");
        }
        Err(HttpError::GaveUp {
            hook: self.describe(),
            attempts: self.retries + 1,
            last,
        })
    }

    async fn attempt(&self) -> Result<u16, String> {
        let client = match &self.client {
            Some(c) => c.clone(),
            None => self.build_client().map_err(|e| e.to_string())?,
        };
        let mut req = client.request(self.method.clone(), self.url.clone());
        for (name, value) in &self.headers {
            req = req.header(name, value);
        }
        if let Some(path) = &self.bearer_token_file {
            let token = crate::files::read_text(path, crate::files::SMALL_FILE)
                .map_err(|e| format!("bearer token file {e}"))?;
            req = req.header(AUTHORIZATION, format!("Bearer {}", token.trim()));
        }
        // reqwest errors embed the URL, userinfo included: drop it (the
        // caller names the hook through `describe`).
        let resp = req
            .send()
            .await
            .map_err(|e| crate::error_chain(&e.without_url()))?;
        let status = resp.status();
        if status.is_redirection() {
            let to = resp
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|l| l.to_str().ok())
                .map_or_else(|| "nowhere".to_owned(), redact_text);
            return Err(format!(
                "HTTP {} redirect to {to}; redirects are not followed",
                status.as_u16()
            ));
        }
        Ok(status.as_u16())
    }
}

/// `url` with its user name and password removed.
pub fn redact(url: &Url) -> String {
    let mut u = url.clone();
    if !u.username().is_empty() || u.password().is_some() {
        let _ = u.set_username("");
        let _ = u.set_password(None);
        return u.as_str().replacen("://", "://***@", 1);
    }
    u.to_string()
}

/// [`redact`] for text that may not parse as a URL.
fn redact_text(text: &str) -> String {
    if let Ok(u) = Url::parse(text) {
        return redact(&u);
    }
    let Some((scheme, rest)) = text.split_once("://") else {
        return text.to_owned();
    };
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    match authority.rfind('@') {
        Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
        None => text.to_owned(),
    }
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
