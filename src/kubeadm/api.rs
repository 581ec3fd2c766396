//! The ConfigMaps adopt and status read and write through admin.conf
//! (`kube-system/kubeadm-config`, `kube-public/cluster-info`,
//! `kube-system/certsync-kubeadm-cas`): one client, one deadline per call,
//! and a write that carries the resourceVersion read, so a concurrent
//! change fails it rather than being overwritten.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;

use super::error::KubeadmError;

/// How long adopt waits for each answer (status: a third).
pub const TIMEOUT: Duration = Duration::from_secs(15);

/// certsync's own client for `config` (admin.conf as judged), as every
/// kubeadm command's: kube's default one logs each 500 of a restarting API
/// server as an ERROR line.
pub fn client(config: &kube::Config) -> Result<kube::Client, crate::source::client::ClientError> {
    crate::source::client::ClientSettings::default().client_for(config)
}

/// One ConfigMap, by namespace and name.
#[derive(Debug, Clone, Copy)]
pub struct Map {
    pub namespace: &'static str,
    pub name: &'static str,
}

impl Map {
    fn api(&self, config: &kube::Config) -> Result<kube::Api<ConfigMap>, KubeadmError> {
        let client = client(config).map_err(|source| KubeadmError::ApiClient {
            namespace: self.namespace,
            name: self.name,
            source,
        })?;
        Ok(kube::Api::namespaced(client, self.namespace))
    }

    fn failed(&self, action: &'static str) -> impl FnOnce(kube::Error) -> KubeadmError {
        let (namespace, name) = (self.namespace, self.name);
        move |source| KubeadmError::Api {
            namespace,
            name,
            action,
            source,
        }
    }

    async fn within<T>(
        &self,
        timeout: Duration,
        call: impl std::future::Future<Output = Result<T, KubeadmError>>,
    ) -> Result<T, KubeadmError> {
        tokio::time::timeout(timeout, call)
            .await
            .map_err(|_| KubeadmError::ApiTimeout {
                namespace: self.namespace,
                name: self.name,
                timeout,
            })?
    }

    /// The ConfigMap through `config`, `None` when there is none.
    pub async fn get(
        &self,
        config: &kube::Config,
        timeout: Duration,
    ) -> Result<Option<ConfigMap>, KubeadmError> {
        let call = async {
            self.api(config)?
                .get_opt(self.name)
                .await
                .map_err(self.failed("read"))
        };
        self.within(timeout, call).await
    }

    /// The ConfigMap through `config`; there being none is an error.
    pub async fn existing(
        &self,
        config: &kube::Config,
        timeout: Duration,
    ) -> Result<ConfigMap, KubeadmError> {
        let (namespace, name) = (self.namespace, self.name);
        (self.get(config, timeout).await?).ok_or(KubeadmError::NoMap { namespace, name })
    }

    /// Writes `object`: created when it carries no resourceVersion (there
    /// was none when read), else replaced at that version.
    pub async fn put(&self, config: &kube::Config, object: &ConfigMap) -> Result<(), KubeadmError> {
        let call = async {
            let api = self.api(config)?;
            let params = kube::api::PostParams::default();
            if object.metadata.resource_version.is_some() {
                api.replace(self.name, &params, object)
                    .await
                    .map_err(self.failed("write"))?;
            } else {
                api.create(&params, object)
                    .await
                    .map_err(self.failed("create"))?;
            }
            Ok(())
        };
        self.within(TIMEOUT, call).await
    }
}
