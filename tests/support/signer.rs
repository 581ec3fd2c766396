//! A certificate signer driven by the tests, acting only through the API
//! (the `/approval` and `/status` subresources), as a human with `kubectl
//! certificate approve` and a signer controller would: the same tests run
//! against a real cluster for a custom signer name.

use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest as Csr, CertificateSigningRequestCondition as Condition,
    CertificateSigningRequestStatus as Status,
};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};

pub struct Signer {
    pub api: Api<Csr>,
    /// The signer name this signer serves (unique per test).
    pub name: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    /// The CA certificate (PEM).
    pub ca_pem: String,
}

/// A signer's CA, made before the API server that trusts it.
pub struct TestCa {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pub pem: String,
}

impl TestCa {
    pub fn new(name: &str) -> Self {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("{name} CA"));
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let ca = params.self_signed(&key).unwrap();
        Self {
            issuer: rcgen::Issuer::new(params, key),
            pem: ca.pem(),
        }
    }
}

impl Signer {
    pub fn new(client: Client, name: &str) -> Self {
        Self::with_ca(client, name, TestCa::new(name))
    }

    pub fn with_ca(client: Client, name: &str, ca: TestCa) -> Self {
        Self {
            api: Api::all(client),
            name: name.to_owned(),
            issuer: ca.issuer,
            ca_pem: ca.pem,
        }
    }

    /// This signer's requests, oldest first.
    pub async fn requests(&self) -> Vec<Csr> {
        let mut all: Vec<Csr> = self
            .api
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|c| c.spec.signer_name == self.name)
            .collect();
        all.sort_by_key(|c| c.metadata.creation_timestamp.clone().map(|t| t.0));
        all
    }

    /// Waits for a request not in `seen` and returns its name.
    pub async fn next_request(&self, seen: &[String]) -> String {
        let start = std::time::Instant::now();
        loop {
            if let Some(c) = self
                .requests()
                .await
                .into_iter()
                .find(|c| !seen.contains(c.metadata.name.as_ref().unwrap()))
            {
                return c.metadata.name.unwrap();
            }
            assert!(
                start.elapsed() < super::PATIENCE,
                "timed out waiting for a certificate request to {}",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn condition(&self, name: &str, sub: &str, cond: Condition) {
        let mut csr = self.api.get(name).await.unwrap();
        let status = csr.status.get_or_insert_with(Status::default);
        status.conditions.get_or_insert_with(Vec::new).push(cond);
        self.api
            .replace_subresource(sub, name, &PostParams::default(), &csr)
            .await
            .unwrap();
    }

    fn cond(ty: &str, reason: &str, message: &str) -> Condition {
        Condition {
            type_: ty.into(),
            status: "True".into(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            ..Default::default()
        }
    }

    /// What `kubectl certificate approve NAME` writes.
    pub async fn approve(&self, name: &str) {
        let c = Self::cond(
            "Approved",
            "KubectlApprove",
            "This CSR was approved by kubectl certificate approve.",
        );
        self.condition(name, "approval", c).await;
    }

    pub async fn deny(&self, name: &str, reason: &str, message: &str) {
        self.condition(name, "approval", Self::cond("Denied", reason, message))
            .await;
    }

    /// The signer gives up (a `Failed` condition through `/status`).
    pub async fn fail(&self, name: &str, reason: &str, message: &str) {
        self.condition(name, "status", Self::cond("Failed", reason, message))
            .await;
    }

    /// Issues the certificate the request asks for, valid from a few
    /// seconds ago for `lifetime`, with the requested usages; `tweak` may
    /// change it, and `other_key` certifies a key other than the
    /// request's (forged or mismatching certificates). Returns its PEM.
    pub async fn issue_with(
        &self,
        name: &str,
        lifetime: Duration,
        other_key: bool,
        tweak: impl FnOnce(&mut rcgen::CertificateParams),
    ) -> String {
        let mut csr = self.api.get(name).await.unwrap();
        let pem = String::from_utf8(csr.spec.request.0.clone()).unwrap();
        let mut req = rcgen::CertificateSigningRequestParams::from_pem(&pem).unwrap();
        let now = time::OffsetDateTime::now_utc();
        req.params.not_before = now - time::Duration::seconds(2);
        req.params.not_after = now + time::Duration::try_from(lifetime).unwrap();
        req.params.is_ca = rcgen::IsCa::ExplicitNoCa;
        let usages = csr.spec.usages.clone().unwrap_or_default();
        let has = |u: &str| usages.iter().any(|x| x == u);
        use rcgen::{ExtendedKeyUsagePurpose as Eku, KeyUsagePurpose as Ku};
        req.params.key_usages = [
            ("digital signature", Ku::DigitalSignature),
            ("key encipherment", Ku::KeyEncipherment),
        ]
        .into_iter()
        .filter(|(u, _)| has(u))
        .map(|(_, k)| k)
        .collect();
        req.params.extended_key_usages = [
            ("server auth", Eku::ServerAuth),
            ("client auth", Eku::ClientAuth),
        ]
        .into_iter()
        .filter(|(u, _)| has(u))
        .map(|(_, k)| k)
        .collect();
        tweak(&mut req.params);
        let cert = if other_key {
            let other = rcgen::KeyPair::generate().unwrap();
            req.params.signed_by(&other, &self.issuer).unwrap().pem()
        } else {
            req.signed_by(&self.issuer).unwrap().pem()
        };
        csr.status.get_or_insert_with(Status::default).certificate =
            Some(ByteString(cert.clone().into_bytes()));
        self.api
            .replace_subresource("status", name, &PostParams::default(), &csr)
            .await
            .unwrap();
        cert
    }

    /// The `expirationSeconds` request `name` asks for.
    pub async fn expiration_seconds(&self, name: &str) -> Option<i32> {
        self.api.get(name).await.unwrap().spec.expiration_seconds
    }

    /// Approves and issues as kube-controller-manager's signer does
    /// (v1.36, `pkg/controller/certificates/signer`), which
    /// `tests/real_signer.rs` meets on a real control plane: notBefore 5
    /// minutes back, notAfter the `expirationSeconds` asked (a year when
    /// none, its `--cluster-signing-duration` default) from now. A
    /// `lifetime=10m` request so gets a certificate valid for 900 s.
    pub async fn sign_as_kube_controller_manager(&self, name: &str) -> String {
        self.approve(name).await;
        let asked = self.expiration_seconds(name).await;
        let ttl = asked.map_or(Duration::from_secs(365 * 86_400), |s| {
            Duration::from_secs(u64::try_from(s).unwrap())
        });
        self.issue_with(name, ttl, false, |p| {
            p.not_before = time::OffsetDateTime::now_utc() - time::Duration::minutes(5);
        })
        .await
    }

    pub async fn issue(&self, name: &str, lifetime: Duration) -> String {
        self.issue_with(name, lifetime, false, |_| {}).await
    }

    /// Approves and issues.
    pub async fn sign(&self, name: &str, lifetime: Duration) -> String {
        self.approve(name).await;
        self.issue(name, lifetime).await
    }

    /// Deletes every request to this signer (a real cluster keeps them).
    pub async fn cleanup(&self) {
        for c in self.requests().await {
            let _ = self
                .api
                .delete(c.metadata.name.as_ref().unwrap(), &DeleteParams::default())
                .await;
        }
    }
}
