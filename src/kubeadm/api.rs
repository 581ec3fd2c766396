//! The ConfigMaps read and written through admin.conf: one deadline per
//! call, and a write carrying the resourceVersion read, so a concurrent
//! change fails it rather than being overwritten.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;

use super::error::KubeadmError;

/// How long adopt waits for each answer (status: a third).
pub const TIMEOUT: Duration = Duration::from_secs(15);

/// certsync's own client for `config`: kube's default one logs each 500
/// of a restarting API server as an ERROR line.
pub fn client(config: &kube::Config) -> Result<kube::Client, crate::source::client::ClientError> {
    crate::source::client::ClientSettings::default().client_for(config)
}

#[derive(Debug, Clone, Copy)]
pub struct Map {
    pub namespace: &'static str,
    pub name: &'static str,
}

impl Map {
    async fn call<T>(
        &self,
        config: &kube::Config,
        (timeout, action): (Duration, &'static str),
        call: impl AsyncFnOnce(kube::Api<ConfigMap>) -> Result<T, kube::Error>,
    ) -> Result<T, KubeadmError> {
        let (namespace, name) = (self.namespace, self.name);
        let client = client(config).map_err(|source| KubeadmError::ApiClient {
            namespace,
            name,
            source,
        })?;
        match tokio::time::timeout(timeout, call(kube::Api::namespaced(client, namespace))).await {
            Err(_) => Err(KubeadmError::ApiTimeout {
                namespace,
                name,
                timeout,
            }),
            Ok(r) => r.map_err(|source| KubeadmError::Api {
                namespace,
                name,
                action,
                source,
            }),
        }
    }

    pub async fn get(
        &self,
        config: &kube::Config,
        timeout: Duration,
    ) -> Result<Option<ConfigMap>, KubeadmError> {
        self.call(config, (timeout, "read"), async |api| {
            api.get_opt(self.name).await
        })
        .await
    }

    pub async fn existing(
        &self,
        config: &kube::Config,
        timeout: Duration,
    ) -> Result<ConfigMap, KubeadmError> {
        let (namespace, name) = (self.namespace, self.name);
        (self.get(config, timeout).await?).ok_or(KubeadmError::NoMap { namespace, name })
    }

    /// Created without a resourceVersion, else replaced at that version.
    pub async fn put(&self, config: &kube::Config, object: &ConfigMap) -> Result<(), KubeadmError> {
        let params = kube::api::PostParams::default();
        let replace = object.metadata.resource_version.is_some();
        let action = if replace { "write" } else { "create" };
        self.call(config, (TIMEOUT, action), async |api| match replace {
            true => api.replace(self.name, &params, object).await,
            false => api.create(&params, object).await,
        })
        .await
        .map(drop)
    }
}
