//! Fencing on the infrastructure: the claim's token is written into the domain (libvirt
//! metadata in [`FENCE_NAMESPACE`](crate::backend::fence_token::FENCE_NAMESPACE)) and checked before every change, so that a replica that lost
//! its claim (a pause, a partition) cannot undo the work of the replica that took over.
//!
//! libvirt has no compare-and-swap on metadata: the check and the change are two calls, so this
//! is best effort against a replica that resumes between them. The store's fencing (every write
//! back carries the token) is the hard guarantee; this one keeps the domain itself from being
//! destroyed or re-created by a stale replica in all but that window.

use std::future::Future;
use std::sync::Arc;

use uuid::Uuid;

use crate::backend::fence_token::{parse_token, token_element};
use crate::backend::libvirt::LibvirtBackend;
use crate::backend::{Backend, BackendError, ConsoleError, Existing};
use crate::model::{Action, InstanceSpec, Resources, Usage};
use crate::sim::SimBackend;

/// A backend that can keep a fencing token on an instance.
pub trait FenceMarks: Backend {
    /// The token recorded on the instance (`None`: no instance, or none recorded).
    fn fence_token(
        &self,
        instance: Uuid,
    ) -> impl Future<Output = Result<Option<u64>, BackendError>> + Send;

    /// Records `token` on the instance (it must exist).
    fn set_fence_token(
        &self,
        instance: Uuid,
        token: u64,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
}

impl FenceMarks for LibvirtBackend {
    async fn fence_token(&self, instance: Uuid) -> Result<Option<u64>, BackendError> {
        LibvirtBackend::fence_token(self, instance).await
    }

    async fn set_fence_token(&self, instance: Uuid, token: u64) -> Result<(), BackendError> {
        LibvirtBackend::set_fence_token(self, instance, token).await
    }
}

/// The simulation keeps the token beside its instance's file (`.fence-<uuid>` in its directory,
/// which replicas share as they would share a remote host); without a directory its instances
/// live in one process and there is nothing to fence.
impl FenceMarks for SimBackend {
    async fn fence_token(&self, instance: Uuid) -> Result<Option<u64>, BackendError> {
        let (Some(dir), Some(_)) = (self.dir(), self.status(instance)) else {
            return Ok(None);
        };
        match std::fs::read_to_string(dir.join(format!(".fence-{instance}"))) {
            Ok(text) => Ok(parse_token(&text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(BackendError::Other(format!("fencing token: {e}"))),
        }
    }

    async fn set_fence_token(&self, instance: Uuid, token: u64) -> Result<(), BackendError> {
        let Some(dir) = self.dir() else {
            return Ok(());
        };
        std::fs::write(dir.join(format!(".fence-{instance}")), token_element(token))
            .map_err(|e| BackendError::Other(format!("fencing token: {e}")))
    }
}

/// `inner`, with every change checked against and stamped with the claim's `token`.
pub struct Fenced<B> {
    inner: Arc<B>,
    token: u64,
}

impl<B: FenceMarks> Fenced<B> {
    /// Wraps `inner` for a claim with `token`.
    pub fn new(inner: Arc<B>, token: u64) -> Fenced<B> {
        Fenced { inner, token }
    }

    /// `Err` when the instance carries a newer token than ours: another replica holds it now.
    /// Returns the token found.
    async fn check(&self, instance: Uuid) -> Result<Option<u64>, BackendError> {
        let found = self.inner.fence_token(instance).await?;
        match found {
            Some(theirs) if theirs > self.token => Err(BackendError::Other(format!(
                "fenced: the instance carries token {theirs}, this claim's is {}",
                self.token
            ))),
            _ => Ok(found),
        }
    }
}

impl<B: FenceMarks> Backend for Fenced<B> {
    async fn create(&self, spec: &InstanceSpec) -> Result<(), BackendError> {
        // Leftovers of an older claim of the same operation (its replica died part-way): ours
        // now, so they go before the instance is made again.
        if let Some(older) = self.check(spec.instance).await? {
            tracing::info!(instance = %spec.instance, older, token = self.token, "taking over an older claim's instance");
            self.inner.delete(spec.instance).await?;
        }
        match self.inner.create(spec).await {
            // Made by an older claim that died before it could stamp its token (between the
            // two calls): ours now, as above. A domain that is not ours at all is not deleted
            // by the backend, and the second create says so again.
            Err(BackendError::Exists) => {
                tracing::info!(instance = %spec.instance, token = self.token, "taking over an unstamped instance");
                self.inner.delete(spec.instance).await?;
                self.inner.create(spec).await?;
            }
            other => other?,
        }
        self.inner.set_fence_token(spec.instance, self.token).await
    }

    async fn start(&self, instance: Uuid) -> Result<(), BackendError> {
        self.check(instance).await?;
        self.inner.set_fence_token(instance, self.token).await?;
        self.inner.start(instance).await
    }

    async fn wait_exit(&self, instance: Uuid) {
        self.inner.wait_exit(instance).await;
    }

    async fn stop(&self, instance: Uuid) -> Result<(), BackendError> {
        if self.check(instance).await?.is_some() {
            self.inner.set_fence_token(instance, self.token).await?;
        }
        self.inner.stop(instance).await
    }

    async fn action(&self, instance: Uuid, action: Action) -> Result<(), BackendError> {
        self.check(instance).await?;
        self.inner.action(instance, action).await
    }

    async fn resize(&self, instance: Uuid, resources: Resources) -> Result<(), BackendError> {
        self.check(instance).await?;
        self.inner.resize(instance, resources).await
    }

    async fn delete(&self, instance: Uuid) -> Result<(), BackendError> {
        self.check(instance).await?;
        self.inner.delete(instance).await
    }

    async fn stats(&self) -> Vec<(Uuid, Usage)> {
        self.inner.stats().await
    }

    async fn list(&self) -> Result<Vec<Existing>, BackendError> {
        self.inner.list().await
    }

    /// The log is a file on the remote host, which an off-host replica cannot read.
    async fn console(&self, _instance: Uuid, _lines: usize) -> Result<String, ConsoleError> {
        Err(ConsoleError::OffHost)
    }

    /// The instance's NIC is on the remote host, whose own agent filters it.
    async fn filter_port(
        &self,
        _instance: Uuid,
        _nic: &crate::model::NicSpec,
    ) -> Result<(), BackendError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::SimConfig;

    fn spec(instance: Uuid) -> InstanceSpec {
        InstanceSpec {
            instance,
            tenant: Uuid::from_u128(7),
            workload: Uuid::nil(),
            kind: crate::model::VmKind::Qemu,
            role: crate::model::InstanceRole::Workload,
            firmware: crate::model::Firmware::Legacy,
            image: "tiny".into(),
            resources: crate::model::Resources {
                vcpus: 1,
                mem_mb: 64,
                disk_mb: 10,
            },
            nic: None,
            disks: Vec::new(),
            volumes: Vec::new(),
            user_data: None,
            meta_data: Default::default(),
            restart: false,
            kernel: None,
        }
    }

    /// A replica that died between making the instance and stamping its token left an
    /// unstamped instance: the next claim takes it over; a newer claim's is refused.
    #[tokio::test]
    async fn an_older_claims_leftovers_are_taken_over_a_newer_ones_refused() {
        let dir = tempfile::tempdir().unwrap();
        let sim = Arc::new(
            SimBackend::new(SimConfig {
                dir: Some(dir.path().to_path_buf()),
                ..SimConfig::default()
            })
            .unwrap(),
        );
        let id = Uuid::from_u128(0xf1);
        // The dead replica's create, never stamped.
        sim.create(&spec(id)).await.unwrap();
        assert_eq!(sim.fence_token(id).await, Ok(None));
        Fenced::new(sim.clone(), 5).create(&spec(id)).await.unwrap();
        assert_eq!(sim.fence_token(id).await, Ok(Some(5)));
        // Stamped by an older claim: taken over too.
        Fenced::new(sim.clone(), 6).create(&spec(id)).await.unwrap();
        assert_eq!(sim.fence_token(id).await, Ok(Some(6)));
        // A stale claim changes nothing.
        let stale = Fenced::new(sim.clone(), 4);
        assert!(stale.create(&spec(id)).await.is_err());
        assert!(stale.delete(id).await.is_err());
        assert_eq!(sim.fence_token(id).await, Ok(Some(6)));
    }
}
