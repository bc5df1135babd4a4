//! VMs and containers on one node: [`WithContainers`] sends a container's operations to the
//! [`ContainerBackend`] and everything else to the node's VM backend (libvirt, or the sim).
//! An instance is a container's when the container backend has its directory; what the node
//! lists and measures is both backends'.

use uuid::Uuid;

use super::container::ContainerBackend;
use super::{Backend, BackendError, ConsoleError, Existing, ExportError};
use crate::model::{Action, InstanceSpec, NicSpec, Resources, Usage, VmKind, VolumeSpec};

/// `vms`, with containers beside them when `containers` is set (see the module docs).
pub struct WithContainers<B> {
    vms: B,
    containers: Option<ContainerBackend>,
}

impl<B: Backend> WithContainers<B> {
    /// Over the node's VM backend, and its containers if it runs any.
    pub fn new(vms: B, containers: Option<ContainerBackend>) -> WithContainers<B> {
        WithContainers { vms, containers }
    }

    /// The container backend, if `instance` is a container.
    fn container(&self, instance: Uuid) -> Option<&ContainerBackend> {
        self.containers.as_ref().filter(|c| c.has(instance))
    }
}

impl<B: Backend> Backend for WithContainers<B> {
    async fn create(&self, spec: &InstanceSpec) -> Result<(), BackendError> {
        if spec.kind != VmKind::Container {
            return self.vms.create(spec).await;
        }
        match &self.containers {
            Some(c) => c.create(spec).await,
            None => Err(BackendError::Unsupported(
                "this node runs no containers (its agent runs without --containers)".into(),
            )),
        }
    }

    async fn start(&self, instance: Uuid) -> Result<(), BackendError> {
        match self.container(instance) {
            Some(c) => c.start(instance).await,
            None => self.vms.start(instance).await,
        }
    }

    async fn wait_exit(&self, instance: Uuid) {
        match self.container(instance) {
            Some(c) => c.wait_exit(instance).await,
            None => self.vms.wait_exit(instance).await,
        }
    }

    async fn stop(&self, instance: Uuid) -> Result<(), BackendError> {
        match self.container(instance) {
            Some(c) => c.stop(instance).await,
            None => self.vms.stop(instance).await,
        }
    }

    async fn action(&self, instance: Uuid, action: Action) -> Result<(), BackendError> {
        match self.container(instance) {
            Some(c) => c.action(instance, action).await,
            None => self.vms.action(instance, action).await,
        }
    }

    async fn resize(&self, instance: Uuid, resources: Resources) -> Result<(), BackendError> {
        match self.container(instance) {
            Some(c) => c.resize(instance, resources).await,
            None => self.vms.resize(instance, resources).await,
        }
    }

    async fn delete(&self, instance: Uuid) -> Result<(), BackendError> {
        match self.container(instance) {
            Some(c) => c.delete(instance).await,
            None => self.vms.delete(instance).await,
        }
    }

    async fn stats(&self) -> Vec<(Uuid, Usage)> {
        let mut all = self.vms.stats().await;
        if let Some(c) = &self.containers {
            all.extend(c.stats().await);
        }
        all
    }

    async fn list(&self) -> Result<Vec<Existing>, BackendError> {
        let mut all = self.vms.list().await?;
        if let Some(c) = &self.containers {
            all.extend(c.list().await?);
        }
        Ok(all)
    }

    async fn console(&self, instance: Uuid, lines: usize) -> Result<String, ConsoleError> {
        match self.container(instance) {
            Some(c) => c.console(instance, lines).await,
            None => self.vms.console(instance, lines).await,
        }
    }

    async fn filter_port(&self, instance: Uuid, nic: &NicSpec) -> Result<(), BackendError> {
        match self.container(instance) {
            Some(c) => c.filter_port(instance, nic).await,
            None => self.vms.filter_port(instance, nic).await,
        }
    }

    async fn export_disk(&self, instance: Uuid, to: &std::path::Path) -> Result<(), ExportError> {
        match self.container(instance) {
            Some(_) => Err(ExportError::Unsupported(
                "a container keeps no disk to export".into(),
            )),
            None => self.vms.export_disk(instance, to).await,
        }
    }

    async fn attach_volume(&self, instance: Uuid, volume: &VolumeSpec) -> Result<(), BackendError> {
        match self.container(instance) {
            Some(c) => c.attach_volume(instance, volume).await,
            None => self.vms.attach_volume(instance, volume).await,
        }
    }

    async fn detach_volume(
        &self,
        instance: Uuid,
        volume: &VolumeSpec,
        force: bool,
    ) -> Result<(), BackendError> {
        match self.container(instance) {
            Some(c) => c.detach_volume(instance, volume, force).await,
            None => self.vms.detach_volume(instance, volume, force).await,
        }
    }

    async fn delete_volume(&self, volume: Uuid) -> Result<(), BackendError> {
        self.vms.delete_volume(volume).await
    }

    async fn serve_metadata(&self, spec: &InstanceSpec) -> Result<(), BackendError> {
        if spec.kind == VmKind::Container {
            return Ok(());
        }
        self.vms.serve_metadata(spec).await
    }
}
