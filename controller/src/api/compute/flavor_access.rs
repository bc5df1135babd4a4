//! The access lists of private flavors, as Nova's `os-flavor-access` (admins only: 403
//! `forbidden` otherwise): `GET /flavors/{id}/os-flavor-access` lists the projects on a private
//! flavor's list (404 "Access list not available for public flavors." for a public one), and
//! `POST /flavors/{id}/action` with `{"addTenantAccess": {"tenant": P}}` or
//! `{"removeTenantAccess": {"tenant": P}}` changes it (200 with the list then). `openstack flavor
//! set --project P`, `flavor unset --project P`, `flavor create --private --project P`, and
//! `flavor show`'s `access_project_ids`.
//!
//! A project that does not exist is Nova's 400 ("Project ID P is not a valid project."); adding
//! one that is on the list already, or to a public flavor, is a 409; removing one that is not on
//! it a 404. A project that goes leaves every list; a flavor's list goes with the flavor.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};
use uuid::Uuid;

use super::flavors::{flavor_id, lookup, store_error};
use crate::api::extract::{JsonBody, PathParams};
use crate::api::{ApiError, ApiState, Principal};
use store::{Scope, StoreError};

/// Nova's body of an access list.
fn listed(flavor: Uuid, tenants: &[Uuid]) -> Value {
    let entries: Vec<Value> = tenants
        .iter()
        .map(|t| json!({"flavor_id": flavor.to_string(), "tenant_id": t.to_string()}))
        .collect();
    json!({ "flavor_access": entries })
}

fn not_a_project(project: &str) -> ApiError {
    ApiError::BadRequest(format!("Project ID {project} is not a valid project."))
}

/// `GET /flavors/{id}/os-flavor-access` (admins).
pub async fn list(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    caller.require_admin()?;
    let id = flavor_id(&id)?;
    if lookup(&state, Scope::All, id).await?.is_public {
        return Err(ApiError::NotFound(
            "Access list not available for public flavors.".into(),
        ));
    }
    let tenants = state
        .store(move |store| store.flavor_access(id).map_err(store_error(id)))
        .await?;
    Ok(Json(listed(id, &tenants)))
}

/// What an action body asks for.
#[derive(Debug, PartialEq, Eq)]
enum Change {
    Add(String),
    Remove(String),
}

/// Reads `{"addTenantAccess": {"tenant": P}}` or `{"removeTenantAccess": {"tenant": P}}` as
/// Nova's schema does: one action, whose only key is `tenant`, a string of 1 to 255 characters.
fn parse(body: &Value) -> Result<Change, ApiError> {
    let object = body
        .as_object()
        .ok_or_else(|| ApiError::BadRequest("an action body must be a JSON object".into()))?;
    let (name, args) = match object.iter().next() {
        Some((name, args)) if object.len() == 1 => (name.as_str(), args),
        _ => {
            let names: Vec<&String> = object.keys().collect();
            return Err(ApiError::BadRequest(format!(
                "There is no such action: {names:?} (one of addTenantAccess and \
                 removeTenantAccess is)"
            )));
        }
    };
    if name != "addTenantAccess" && name != "removeTenantAccess" {
        return Err(ApiError::BadRequest(format!(
            "There is no such action: {name}"
        )));
    }
    let args = args.as_object().ok_or_else(|| {
        ApiError::BadRequest(format!(
            "Invalid input for field/attribute {name}. Value: {args}. {args} is not of type \
             'object'"
        ))
    })?;
    if let Some(other) = args.keys().find(|k| *k != "tenant") {
        return Err(ApiError::BadRequest(format!(
            "Invalid input for field/attribute {name}. Additional properties are not allowed \
             ('{other}' was unexpected)"
        )));
    }
    let tenant = match args.get("tenant") {
        Some(Value::String(t)) if (1..=255).contains(&t.chars().count()) => t.clone(),
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "Invalid input for field/attribute tenant. Value: {other}. It is not a string \
                 of 1 to 255 characters"
            )));
        }
        None => {
            return Err(ApiError::BadRequest(format!(
                "Invalid input for field/attribute {name}. 'tenant' is a required property"
            )));
        }
    };
    Ok(if name == "addTenantAccess" {
        Change::Add(tenant)
    } else {
        Change::Remove(tenant)
    })
}

/// `POST /flavors/{id}/action` (admins): `addTenantAccess` or `removeTenantAccess`.
pub async fn action(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    caller.require_admin()?;
    let change = parse(&body)?;
    let id = flavor_id(&id)?;
    let project = match &change {
        Change::Add(p) | Change::Remove(p) => p.clone(),
    };
    let tenant = Uuid::parse_str(&project).map_err(|_| not_a_project(&project))?;
    let tenants = state
        .store(move |store| {
            let flavor = store.flavor(Scope::All, id).map_err(store_error(id))?;
            let unknown_project = |e: StoreError| match e {
                StoreError::NotFound { kind: "tenant", .. } => not_a_project(&project),
                other => store_error(id)(other),
            };
            match change {
                Change::Add(_) => {
                    if flavor.is_public {
                        return Err(ApiError::Conflict(
                            "Can not add access to a public flavor.".into(),
                        ));
                    }
                    store.add_flavor_access(id, tenant).map_err(|e| match e {
                        StoreError::Conflict(_) => ApiError::Conflict(format!(
                            "Flavor access already exists for flavor {id} and project \
                             {project} combination."
                        )),
                        StoreError::Invalid(_) => {
                            ApiError::Conflict("Can not add access to a public flavor.".into())
                        }
                        other => unknown_project(other),
                    })
                }
                Change::Remove(_) => {
                    store.tenant(tenant).map_err(unknown_project)?;
                    store.remove_flavor_access(id, tenant).map_err(|e| match e {
                        StoreError::NotFound {
                            kind: "flavor access",
                            ..
                        } => ApiError::NotFound(format!(
                            "Flavor access not found for {id} / {project} combination."
                        )),
                        other => unknown_project(other),
                    })
                }
            }
        })
        .await?;
    Ok(Json(listed(id, &tenants)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_are_read_as_nova_reads_them() {
        assert_eq!(
            parse(&json!({"addTenantAccess": {"tenant": "p"}})).unwrap(),
            Change::Add("p".into())
        );
        assert_eq!(
            parse(&json!({"removeTenantAccess": {"tenant": "p"}})).unwrap(),
            Change::Remove("p".into())
        );
        for bad in [
            json!([]),
            json!({}),
            json!({"addTenantAccess": {"tenant": "p"}, "removeTenantAccess": {"tenant": "p"}}),
            json!({"grant": {"tenant": "p"}}),
            json!({"addTenantAccess": "p"}),
            json!({"addTenantAccess": {}}),
            json!({"addTenantAccess": {"tenant": ""}}),
            json!({"addTenantAccess": {"tenant": 7}}),
            json!({"addTenantAccess": {"tenant": "x".repeat(256)}}),
            json!({"addTenantAccess": {"tenant": "p", "extra": 1}}),
        ] {
            assert!(matches!(parse(&bad), Err(ApiError::BadRequest(_))), "{bad}");
        }
    }
}
