//! `/os-keypairs`: the caller's SSH key pairs, in Nova 2.1's shapes. Key pairs belong to the
//! token's user (not its project): `POST` imports a public key (`public_key`) or generates an
//! Ed25519 key pair and answers its private key once, never stored (200); `GET` lists them,
//! `GET /{name}` shows one, `DELETE /{name}` deletes one (202). A user may hold
//! [`MAX_KEYPAIRS`] (Nova's default `key_pairs` quota; past it, 403 `forbidden` "Quota
//! exceeded, too many key pairs.", as Nova answers). A
//! certificate login has no user, so no key pairs (403).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::sshkey::{self, SshKeyError};
use crate::api::clock::nova_micro;
use crate::api::extract::{JsonBody, PathParams};
use crate::api::{ApiError, ApiState, Principal};
use store::{Keypair, KeypairKind, NewKeypair, QuotaKind, StoreError};

/// How many key pairs a user may hold (Nova's default `key_pairs` quota).
pub const MAX_KEYPAIRS: u32 = 100;

#[derive(Debug, Deserialize)]
pub struct CreateRequest {
    keypair: KeypairCreate,
}

#[derive(Debug, Deserialize)]
struct KeypairCreate {
    name: Value,
    #[serde(default)]
    public_key: Option<Value>,
    #[serde(default, rename = "type")]
    kind: Option<Value>,
    #[serde(default)]
    user_id: Option<Value>,
}

/// The user whose key pairs a caller reaches.
fn owner(caller: &Principal) -> Result<Uuid, ApiError> {
    caller.user.ok_or_else(|| {
        ApiError::Forbidden("key pairs belong to users: this needs a user's token".into())
    })
}

/// Nova's answer to bad key pair input.
fn invalid(reason: impl std::fmt::Display) -> ApiError {
    ApiError::BadRequest(format!("Keypair data is invalid: {reason}"))
}

/// A key pair name as Nova checks it: 1 to 255 characters of letters, digits, `_`, `-`, space.
fn checked_name(name: &Value) -> Result<String, ApiError> {
    let Value::String(name) = name else {
        return Err(ApiError::BadRequest("name must be a string".into()));
    };
    if name.is_empty() || name.len() > Keypair::MAX_NAME {
        return Err(invalid(
            "Keypair name must be string and between 1 and 255 characters long",
        ));
    }
    if !Keypair::valid_name(name) {
        return Err(invalid("Keypair name contains unsafe characters"));
    }
    Ok(name.clone())
}

/// What a create asks for, checked: the name, and the public key to import (or none: generate).
fn plan(request: KeypairCreate) -> Result<(String, Option<sshkey::PublicKey>), ApiError> {
    let name = checked_name(&request.name)?;
    if request.user_id.is_some_and(|u| !u.is_null()) {
        // Microversion 2.10: an admin's key pair for another user.
        return Err(ApiError::BadRequest(
            "user_id is not supported: key pairs are the caller's own".into(),
        ));
    }
    match &request.kind {
        None | Some(Value::Null) => {}
        Some(Value::String(kind)) if KeypairKind::from_name(kind).is_some() => {}
        Some(other) => {
            return Err(invalid(format!(
                "unsupported key pair type {other} (only ssh)"
            )));
        }
    }
    let public = match request.public_key {
        None => None,
        Some(Value::String(text)) => {
            if text.len() > Keypair::MAX_PUBLIC_KEY {
                return Err(invalid(format!(
                    "the public key is over {} bytes",
                    Keypair::MAX_PUBLIC_KEY
                )));
            }
            Some(sshkey::parse_public(&text).map_err(|e| match e {
                SshKeyError::Invalid(why) => {
                    invalid(format!("failed to generate fingerprint: {why}"))
                }
                other => ApiError::Internal(other.to_string()),
            })?)
        }
        Some(_) => return Err(ApiError::BadRequest("public_key must be a string".into())),
    };
    Ok((name, public))
}

/// The store's refusals in Nova's words.
fn store_error(name: &str, user: Uuid) -> impl FnOnce(StoreError) -> ApiError + '_ {
    move |e| match e {
        StoreError::Conflict(_) => ApiError::Conflict(format!("Key pair '{name}' already exists.")),
        StoreError::QuotaExceeded {
            what: QuotaKind::Keypairs,
            ..
        } => ApiError::Forbidden("Quota exceeded, too many key pairs.".into()),
        StoreError::NotFound {
            kind: "key pair", ..
        } => ApiError::NotFound(format!("Keypair {name} not found for user {user}")),
        other => other.into(),
    }
}

/// `POST /os-keypairs`.
pub async fn create(
    State(state): State<ApiState>,
    caller: Principal,
    JsonBody(request): JsonBody<CreateRequest>,
) -> Result<Json<Value>, ApiError> {
    let user = owner(&caller)?;
    let (name, imported) = plan(request.keypair)?;
    let (public, private) = match imported {
        Some(public) => (public, None),
        None => {
            let generated = sshkey::generate().map_err(|e| ApiError::Internal(e.to_string()))?;
            (generated.public, Some(generated.private_pem))
        }
    };
    let new = NewKeypair {
        user,
        name: name.clone(),
        kind: KeypairKind::Ssh,
        public_key: public.line,
        fingerprint: public.fingerprint,
    };
    let keypair = state
        .store(move |store| {
            store
                .create_keypair(new, MAX_KEYPAIRS)
                .map_err(store_error(&name, user))
        })
        .await?;
    let mut body = json!({
        "name": keypair.name,
        "public_key": keypair.public_key,
        "fingerprint": keypair.fingerprint,
        "user_id": keypair.user,
    });
    if let Some(private) = private {
        body["private_key"] = json!(private);
    }
    Ok(Json(json!({"keypair": body})))
}

/// `GET /os-keypairs`.
pub async fn list(
    State(state): State<ApiState>,
    caller: Principal,
) -> Result<Json<Value>, ApiError> {
    let user = owner(&caller)?;
    let keypairs = state.store(move |store| Ok(store.keypairs(user)?)).await?;
    let keypairs: Vec<Value> = keypairs
        .iter()
        .map(|k| {
            json!({"keypair": {
                "name": k.name,
                "public_key": k.public_key,
                "fingerprint": k.fingerprint,
            }})
        })
        .collect();
    Ok(Json(json!({"keypairs": keypairs})))
}

/// `GET /os-keypairs/{name}`.
pub async fn show(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(name): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let user = owner(&caller)?;
    let k = state
        .store(move |store| store.keypair(user, &name).map_err(store_error(&name, user)))
        .await?;
    Ok(Json(json!({"keypair": {
        "name": k.name,
        "public_key": k.public_key,
        "fingerprint": k.fingerprint,
        "user_id": k.user,
        "created_at": nova_micro(k.created),
        "updated_at": null,
        "deleted": false,
        "deleted_at": null,
    }})))
}

/// `DELETE /os-keypairs/{name}`: 202, as Nova 2.1.
pub async fn delete(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(name): PathParams<String>,
) -> Result<StatusCode, ApiError> {
    let user = owner(&caller)?;
    state
        .store(move |store| {
            store
                .delete_keypair(user, &name)
                .map_err(store_error(&name, user))
        })
        .await?;
    Ok(StatusCode::ACCEPTED)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn planned(body: Value) -> Result<(String, Option<sshkey::PublicKey>), ApiError> {
        plan(serde_json::from_value(body).unwrap())
    }

    #[test]
    fn create_requests_are_checked() {
        let (name, public) = planned(json!({"name": "my key_1-x"})).unwrap();
        assert_eq!((name.as_str(), public), ("my key_1-x", None));
        let key =
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDqQAmShDSQy5PElKTKfr2Xx0D8ZW+CSzdNTY+7C0SPx";
        let (_, public) = planned(json!({"name": "k", "public_key": key, "type": "ssh"})).unwrap();
        assert_eq!(public.unwrap().line, key);
        let long = "k".repeat(256);
        for bad in [
            json!({"name": ""}),
            json!({"name": long}),
            json!({"name": "a/b"}),
            json!({"name": "a.b"}),
            json!({"name": 5}),
            json!({"name": "k", "type": "x509"}),
            json!({"name": "k", "public_key": "ssh-rsa nonsense"}),
            json!({"name": "k", "public_key": 7}),
            json!({"name": "k", "user_id": "someone"}),
            json!({"name": "k", "public_key": format!("{key} {}", "c".repeat(20_000))}),
        ] {
            let e = planned(bad.clone()).unwrap_err();
            assert_eq!(e.status(), StatusCode::BAD_REQUEST, "{bad}: {e}");
        }
        assert!(
            planned(json!({"name": "a/b"}))
                .unwrap_err()
                .to_string()
                .contains("unsafe characters")
        );
    }

    #[test]
    fn a_certificate_login_has_no_key_pairs() {
        let cert = Principal {
            user: None,
            project: None,
            roles: vec![store::Role::Admin],
            claims: None,
            app_credential: None,
            request: None,
            trace: None,
        };
        assert_eq!(owner(&cert).unwrap_err().status(), StatusCode::FORBIDDEN);
    }

    #[test]
    fn store_refusals_read_as_novas() {
        let user = Uuid::nil();
        let quota = store_error("k", user)(StoreError::QuotaExceeded {
            what: QuotaKind::Keypairs,
            limit: 100,
        });
        assert_eq!(quota.status(), StatusCode::FORBIDDEN);
        assert_eq!(quota.to_string(), "Quota exceeded, too many key pairs.");
        let dup = store_error("k", user)(StoreError::Conflict("x".into()));
        assert_eq!(dup.status(), StatusCode::CONFLICT);
        let missing = store_error("k", user)(StoreError::not_found("key pair", "k"));
        assert_eq!(missing.status(), StatusCode::NOT_FOUND);
        let no_user = store_error("k", user)(StoreError::not_found("user", user));
        assert_eq!(no_user.status(), StatusCode::NOT_FOUND);
    }
}
