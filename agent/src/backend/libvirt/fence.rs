//! The off-host launcher's fencing token on a domain ([`crate::remote::fence`]): libvirt
//! metadata in [`fence_token::FENCE_NAMESPACE`], on the persistent definition and on the
//! running domain.

use uuid::Uuid;

use super::LibvirtBackend;
use super::conn::ConnError;
use super::domain::our_domain;
use crate::backend::{BackendError, fence_token};
use virt::error::ErrorNumber;

impl LibvirtBackend {
    /// The fencing token recorded on the instance's domain (off-host launching,
    /// [`crate::remote::fence`]); `None` when there is no domain of ours or no token on it.
    pub async fn fence_token(&self, instance: Uuid) -> Result<Option<u64>, BackendError> {
        let owner = self.0.config.owner;
        let kind = virt::sys::VIR_DOMAIN_METADATA_ELEMENT as i32;
        let found = self
            .0
            .conn
            .run(move |c| {
                let Some(d) = our_domain(c, instance, owner)? else {
                    return Ok(None);
                };
                match d.get_metadata(kind, Some(fence_token::FENCE_NAMESPACE), 0) {
                    Ok(text) => Ok(Some(text)),
                    Err(e) if e.code() == ErrorNumber::NoDomainMetadata => Ok(None),
                    Err(e) => Err(e),
                }
            })
            .await;
        match found {
            Ok(None) | Err(ConnError::NoDomain) => Ok(None),
            Ok(Some(text)) => fence_token::parse_token(&text)
                .map(Some)
                .ok_or_else(|| BackendError::Other(format!("unreadable fencing token {text:?}"))),
            Err(e) => Err(BackendError::Other(e.to_string())),
        }
    }

    /// Records the fencing token on the instance's domain (its persistent definition, and the
    /// running domain too when it runs).
    pub async fn set_fence_token(&self, instance: Uuid, token: u64) -> Result<(), BackendError> {
        let owner = self.0.config.owner;
        let kind = virt::sys::VIR_DOMAIN_METADATA_ELEMENT as i32;
        let element = fence_token::token_element(token);
        let done = self
            .0
            .conn
            .run(move |c| {
                let Some(d) = our_domain(c, instance, owner)? else {
                    return Ok(false);
                };
                let mut flags = virt::sys::VIR_DOMAIN_AFFECT_CONFIG;
                if d.is_active()? {
                    flags |= virt::sys::VIR_DOMAIN_AFFECT_LIVE;
                }
                d.set_metadata(
                    kind,
                    Some(&element),
                    Some("cumulo-fence"),
                    Some(fence_token::FENCE_NAMESPACE),
                    flags,
                )?;
                Ok(true)
            })
            .await;
        match done {
            Ok(true) => Ok(()),
            Ok(false) | Err(ConnError::NoDomain) => Err(BackendError::NotFound),
            Err(e) => Err(BackendError::Other(e.to_string())),
        }
    }
}
