//! The `rebuild` server action: the same server (id, addresses, node) with its disk made anew
//! from `imageRef` (the server's image, or another), its user data kept or replaced, its name
//! kept or changed. 202 with the server (status `REBUILD`); 409 unless it is ACTIVE or SHUTOFF;
//! 400 for an image the project cannot see, and for another image than its own for a server
//! booted from a volume (its root disk is the volume, which a rebuild keeps). The engine does it with a DELETE then a START pinned
//! to the node (`crate::engine`'s `rebuild` module).

use serde_json::Value;
use uuid::Uuid;

use super::launch::{decode_user_data, reference_id, workload_for};
use crate::api::ApiError;
use crate::cluster::{ClusterError, rebuild_allowed};
use store::{Instance, Scope, Store, StoreError};

/// A validated rebuild request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebuildRequest {
    /// The image to re-make the disk from.
    pub image: Uuid,
    /// A new name.
    pub name: Option<String>,
    /// New user data (`Some("")` removes it); `None` keeps the server's.
    pub user_data: Option<String>,
}

/// Parses `{"rebuild": {...}}`'s value: `imageRef` (required), `name`, `user_data` (base64;
/// `null` removes it). Other keys (`adminPass`, `metadata`, `preserve_ephemeral`, ...) are
/// accepted and ignored.
pub fn parse(value: &Value) -> Result<RebuildRequest, ApiError> {
    let body = value
        .as_object()
        .ok_or_else(|| ApiError::BadRequest("rebuild needs an object".into()))?;
    let image = match body.get("imageRef") {
        Some(r) if r.as_str() != Some("") => reference_id("Image", r)?,
        _ => return Err(ApiError::BadRequest("rebuild needs an imageRef".into())),
    };
    let name = match body.get("name") {
        None => None,
        Some(Value::String(n)) if !n.trim().is_empty() && n.trim().len() <= 255 => {
            Some(n.trim().to_string())
        }
        Some(_) => {
            return Err(ApiError::BadRequest(
                "name must have 1 to 255 characters".into(),
            ));
        }
    };
    let user_data = match body.get("user_data") {
        None => None,
        Some(Value::Null) => Some(String::new()),
        Some(Value::String(encoded)) => Some(decode_user_data(encoded)?),
        Some(_) => {
            return Err(ApiError::BadRequest(
                "user_data must be a base64 string".into(),
            ));
        }
    };
    Ok(RebuildRequest {
        image,
        name,
        user_data,
    })
}

/// The workload `instance` is rebuilt from (`image` `None`: its own image): its own when the
/// image and the user data stay, else
/// the project's workload of its flavor with that image and user data (made if it has none,
/// ephemeral as its own). 409 when the instance's state does not allow a rebuild (checked first,
/// so that a refused request makes nothing), 400 for an image the project cannot see.
pub fn target_workload(
    store: &dyn Store,
    instance: &Instance,
    image: Option<Uuid>,
    user_data: Option<String>,
) -> Result<Uuid, ApiError> {
    if !rebuild_allowed(&instance.state) {
        return Err(ClusterError::InvalidState {
            id: instance.id,
            state: instance.state.name().into(),
            operation: "rebuild",
        }
        .into());
    }
    let own = store.workload(Scope::All, instance.workload)?;
    let image = image.unwrap_or(own.image);
    // The root disk of a server booted from a volume is the volume: a rebuild makes the server
    // anew on it, and cannot put another image on it (Nova's answer before 2.93).
    if image != own.image && crate::volumes::boot_volume(store, instance)?.is_some() {
        return Err(ApiError::BadRequest(
            "Unable to rebuild with a different image for a volume-backed server.".into(),
        ));
    }
    match store.image(Scope::Tenant(instance.tenant), image) {
        Ok(i) if i.status != store::ImageStatus::Active => {
            return Err(ApiError::BadRequest(format!(
                "Image {image} is not active."
            )));
        }
        Ok(_) => {}
        Err(StoreError::NotFound { .. }) => {
            return Err(ApiError::BadRequest(format!(
                "Image {image} could not be found."
            )));
        }
        Err(e) => return Err(e.into()),
    }
    let user_data = user_data.unwrap_or_else(|| own.user_data.clone());
    if image == own.image && user_data == own.user_data {
        return Ok(own.id);
    }
    workload_for(
        store,
        instance.tenant,
        own.flavor,
        image,
        &user_data,
        own.ephemeral,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rebuild_requests_are_validated() {
        let i = Uuid::new_v4();
        let r = parse(
            &json!({"imageRef": format!("http://x/images/{i}"), "name": " web ",
            "adminPass": "x", "user_data": "I2Nsb3VkLWNvbmZpZwo="}),
        )
        .unwrap();
        assert_eq!(
            r,
            RebuildRequest {
                image: i,
                name: Some("web".into()),
                user_data: Some("#cloud-config\n".into()),
            }
        );
        let kept = parse(&json!({"imageRef": i.to_string()})).unwrap();
        assert_eq!((kept.name, kept.user_data), (None, None));
        let cleared = parse(&json!({"imageRef": i.to_string(), "user_data": null})).unwrap();
        assert_eq!(cleared.user_data.as_deref(), Some(""));
        for bad in [
            json!(null),
            json!({}),
            json!({"imageRef": ""}),
            json!({"imageRef": "not-a-uuid"}),
            json!({"imageRef": i.to_string(), "name": ""}),
            json!({"imageRef": i.to_string(), "user_data": "!!"}),
            json!({"imageRef": i.to_string(), "user_data": 5}),
        ] {
            assert_eq!(
                parse(&bad).err().map(|e| e.status().as_u16()),
                Some(400),
                "{bad}"
            );
        }
    }
}
