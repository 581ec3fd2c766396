//! Proof that a reload took effect: connect to the main container's TLS
//! address and compare the leaf certificate it serves with the one just
//! written (SHA-256 fingerprint).
//!
//! Trust is not the question here (the CA may be private, the address a
//! loopback IP), so the chain is not validated; but the handshake signature
//! is, so a match also proves the server holds the matching private key.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{WebPkiSupportedAlgorithms, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ConfigBuilder, DigitallySignedStruct, SignatureScheme, WantsVerifier};

use crate::reload::error::ReloadError;

/// Where the main container serves TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServingCheck {
    /// `host:port`.
    pub addr: String,
    /// Server name to send (SNI); default: the host when it is a name.
    pub sni: Option<String>,
}

/// Accepts any server certificate: for [`ServingCheck`] (the chain is not
/// the question; the leaf presented is read from the connection) and
/// `--reload-insecure-skip-verify` (loopback URLs only, checked where the
/// hook is configured). The handshake signatures are still verified, so
/// the server holds the key of the leaf it presents.
#[derive(Debug)]
pub(crate) struct AnyCertificate {
    algorithms: WebPkiSupportedAlgorithms,
}

impl AnyCertificate {
    /// `builder`'s configuration, accepting any server certificate.
    pub(crate) fn config(builder: ConfigBuilder<ClientConfig, WantsVerifier>) -> ClientConfig {
        let algorithms = builder.crypto_provider().signature_verification_algorithms;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Self { algorithms }))
            .with_no_client_auth()
    }
}

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

impl ServingCheck {
    /// Parses `host:port` (e.g. `127.0.0.1:8443`, `[::1]:443`, `localhost:6443`).
    pub fn parse(addr: &str, sni: Option<String>) -> Result<Self, ReloadError> {
        let bad = || ReloadError::NotHostPort(addr.into());
        let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
        if host.is_empty() || port.parse::<u16>().is_err() {
            return Err(bad());
        }
        Ok(Self {
            addr: addr.to_owned(),
            sni,
        })
    }

    /// The SHA-256 of the leaf served now.
    pub async fn served(&self, timeout: Duration) -> Result<[u8; 32], ReloadError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = AnyCertificate::config(
            ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| ReloadError::Tls(e.into()))?,
        );
        let (host, _) = self
            .addr
            .rsplit_once(':')
            .ok_or_else(|| ReloadError::NotHostPort(self.addr.clone()))?;
        let name = self
            .sni
            .clone()
            .unwrap_or_else(|| host.trim_matches(['[', ']']).to_owned());
        let server_name = ServerName::try_from(name).map_err(|e| ReloadError::Tls(e.into()))?;
        let connect = async {
            let tcp = tokio::net::TcpStream::connect(&self.addr)
                .await
                .map_err(|e| ReloadError::Tls(e.into()))?;
            let tls = tokio_rustls::TlsConnector::from(Arc::new(config));
            tls.connect(server_name, tcp)
                .await
                .map_err(|e| ReloadError::Tls(e.into()))
        };
        let tls = tokio::time::timeout(timeout, connect)
            .await
            .map_err(|_| ReloadError::Tls("TLS handshake timed out".into()))??;
        let leaf = tls.get_ref().1.peer_certificates().and_then(<[_]>::first);
        leaf.map(|der| crate::bundle::sha256(der))
            .ok_or_else(|| ReloadError::Tls("no certificate presented".into()))
    }

    /// Polls until the served leaf is `expected` or `deadline` passes.
    pub async fn wait_for(
        &self,
        expected: [u8; 32],
        deadline: Duration,
    ) -> Result<Duration, ReloadError> {
        let started = Instant::now();
        let every = Duration::from_millis(100);
        // Owned by the check: with `self` borrowed, the spawned reloader's
        // future is not provably `Send` (an async closure's borrow).
        let check = self.clone();
        let last = crate::shutdown::poll(deadline, every, async move |_| {
            match check.served(Duration::from_secs(2)).await {
                Ok(fp) if fp == expected => Ok(()),
                last => Err(last),
            }
        })
        .await;
        let served = match last {
            Ok(()) => return Ok(started.elapsed()),
            Err(last) => last.map_or_else(|e| e.to_string(), |fp| short(&fp)),
        };
        Err(ReloadError::Stale {
            addr: self.addr.clone(),
            served,
            expected: short(&expected),
            waited: started.elapsed(),
        })
    }
}

/// A fingerprint as logged: `sha256:` and the first 16 hex digits.
pub fn short(fp: &[u8; 32]) -> String {
    format!("sha256:{}", hex::encode(&fp[..8]))
}
