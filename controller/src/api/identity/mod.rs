//! The OpenStack Identity v3 subset: version discovery, tokens (`tokens.rs`: password, token and
//! application credential logins, scoped or not, validation, revocation), the service catalog,
//! the one domain (`domains.rs`), projects (`projects.rs`), users (`users.rs`), roles and role
//! assignments (`roles.rs`), application credentials (`app_creds.rs`). One domain exists:
//! `default` ("Default").
//!
//! Errors are Keystone's shape; a caller without the rights gets Keystone's policy answer (403
//! "You are not authorized to perform the requested action: identity:..."). Every write route
//! but a user's own token and application credentials is an admin's.

mod app_creds;
mod domains;
mod projects;
mod roles;
mod secrets;
mod tokens;
mod users;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{ApiError, ApiState, Principal};

/// Keystone's 400 for a field of a body.
fn invalid(field: &str, why: &str) -> ApiError {
    ApiError::BadRequest(format!("Invalid input for field '{field}': {why}"))
}
use store::{IdentityStore, Role, StoreError, Tenant, User};

/// The one domain.
const DOMAIN_ID: &str = "default";
const DOMAIN_NAME: &str = "Default";
/// The header carrying the token being validated, and the issued token.
const SUBJECT_TOKEN: &str = "x-subject-token";

/// The identity routes.
pub fn routes() -> Router<ApiState> {
    Router::new()
        .route("/", get(versions))
        .route("/v3", get(version))
        .route("/v3/", get(version))
        .route(
            "/v3/auth/tokens",
            get(tokens::validate)
                .post(tokens::login)
                .delete(tokens::revoke),
        )
        .route("/v3/auth/catalog", get(catalog_route))
        .route("/v3/auth/projects", get(projects::mine))
        .route("/v3/domains", get(domains::list))
        .route("/v3/domains/{id}", get(domains::show))
        .route("/v3/projects", get(projects::list).post(projects::create))
        .route(
            "/v3/projects/{id}",
            get(projects::show)
                .patch(projects::update)
                .delete(projects::delete),
        )
        .route("/v3/projects/{id}/users/{user}/roles", get(roles::of_user))
        .route(
            "/v3/projects/{id}/users/{user}/roles/{role}",
            get(roles::check)
                .head(roles::check)
                .put(roles::grant)
                .delete(roles::revoke),
        )
        .route("/v3/roles", get(roles::list))
        .route("/v3/roles/{id}", get(roles::show))
        .route("/v3/role_assignments", get(roles::assignments))
        .route("/v3/users", get(users::list).post(users::create))
        .route(
            "/v3/users/{id}",
            get(users::show).patch(users::update).delete(users::delete),
        )
        .route("/v3/users/{id}/projects", get(users::projects))
        .route(
            "/v3/users/{id}/application_credentials",
            post(app_creds::create).get(app_creds::list),
        )
        .route(
            "/v3/users/{id}/application_credentials/{cred}",
            get(app_creds::show).delete(app_creds::delete),
        )
}

fn version_body(base: &str) -> Value {
    json!({
        "id": "v3.14",
        "status": "stable",
        "updated": "2020-04-07T00:00:00Z",
        "links": [{"rel": "self", "href": format!("{base}/v3/")}],
        "media-types": [{"base": "application/json", "type": "application/vnd.openstack.identity-v3+json"}],
    })
}

async fn versions(State(state): State<ApiState>) -> Response {
    let body = json!({"versions": {"values": [version_body(&state.config.public_url)]}});
    (StatusCode::MULTIPLE_CHOICES, Json(body)).into_response()
}

async fn version(State(state): State<ApiState>) -> Json<Value> {
    Json(json!({"version": version_body(&state.config.public_url)}))
}

/// The service catalog: identity, compute, image, network and, for a project-scoped token,
/// block storage (`volumev3` and `block-storage`, the project's id in the URL as Cinder's), all
/// at this server.
pub fn catalog(base: &str, project: Option<Uuid>) -> Value {
    let service = |kind: &str, name: &str, url: String| {
        let endpoints: Vec<Value> = ["public", "internal", "admin"]
            .iter()
            .map(|interface| {
                json!({
                    "id": format!("{name}-{interface}"),
                    "interface": interface,
                    "region": "RegionOne",
                    "region_id": "RegionOne",
                    "url": url,
                })
            })
            .collect();
        json!({"id": name, "type": kind, "name": name, "endpoints": endpoints})
    };
    let mut services = vec![
        service("identity", "keystone", format!("{base}/v3")),
        service("compute", "nova", format!("{base}/compute/v2.1")),
        service("image", "glance", format!("{base}/image")),
        service("network", "neutron", format!("{base}/network")),
    ];
    if let Some(project) = project {
        let url = format!("{base}/volume/v3/{project}");
        services.push(service("block-storage", "cinder", url.clone()));
        services.push(service("volumev3", "cinderv3", url));
    }
    Value::Array(services)
}

async fn catalog_route(State(state): State<ApiState>, caller: Principal) -> Json<Value> {
    let base = &state.config.public_url;
    Json(
        json!({"catalog": catalog(base, caller.project), "links": {"self": format!("{base}/v3/auth/catalog")}}),
    )
}

/// The one domain, as tokens and role assignments name it.
fn domain() -> Value {
    json!({"id": DOMAIN_ID, "name": DOMAIN_NAME})
}

/// A role as tokens and role assignments name it (its id is its name).
fn role_ref(role: Role) -> Value {
    json!({"id": role.as_str(), "name": role.as_str()})
}

fn project_body(base: &str, tenant: &Tenant) -> Value {
    json!({
        "id": tenant.id,
        "name": tenant.name,
        "domain_id": DOMAIN_ID,
        "description": tenant.description,
        "enabled": true,
        "parent_id": DOMAIN_ID,
        "is_domain": false,
        "tags": [],
        "options": {},
        "links": {"self": format!("{base}/v3/projects/{}", tenant.id)},
    })
}

fn user_body(base: &str, user: &User) -> Value {
    let mut body = json!({
        "id": user.id,
        "name": user.name,
        "domain_id": DOMAIN_ID,
        "enabled": user.enabled,
        "password_expires_at": null,
        "options": {},
        "links": {"self": format!("{base}/v3/users/{}", user.id)},
    });
    if let Some(project) = user.default_project {
        body["default_project_id"] = json!(project);
    }
    body
}

/// A collection's `links`.
fn list_links(base: &str, path: &str) -> Value {
    json!({"self": format!("{base}{path}"), "previous": null, "next": null})
}

/// Keystone's policy answer: 403 naming the rule (`identity:create_project`).
fn policy(action: &str) -> ApiError {
    ApiError::Forbidden(format!(
        "You are not authorized to perform the requested action: {action}."
    ))
}

/// Refuses callers that are not admins with Keystone's answer for `action`.
fn admin_for(caller: &Principal, action: &str) -> Result<(), ApiError> {
    if caller.is_admin() {
        Ok(())
    } else {
        Err(policy(action))
    }
}

/// `Some` of a store answer, `None` for `NotFound`.
fn found<T>(result: Result<T, StoreError>) -> Result<Option<T>, ApiError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(StoreError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The roles given to `user` in `tenant` (without those they imply), strongest first.
fn roles_in(store: &dyn IdentityStore, user: Uuid, tenant: Uuid) -> Result<Vec<Role>, ApiError> {
    let mut roles: Vec<Role> = store
        .roles_of_user(user)?
        .into_iter()
        .filter(|a| a.tenant == tenant)
        .map(|a| a.role)
        .collect();
    roles.sort();
    roles.dedup();
    Ok(roles)
}

/// The projects where `user` has a role, by name.
fn projects_of(store: &dyn IdentityStore, user: Uuid) -> Result<Vec<Tenant>, ApiError> {
    let mut ids: Vec<Uuid> = store
        .roles_of_user(user)?
        .into_iter()
        .map(|a| a.tenant)
        .collect();
    ids.sort();
    ids.dedup();
    let mut tenants = Vec::new();
    for id in ids {
        if let Some(t) = found(store.tenant(id))? {
            tenants.push(t);
        }
    }
    tenants.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(tenants)
}

fn projects_response(base: &str, path: &str, tenants: &[Tenant]) -> Json<Value> {
    let projects: Vec<Value> = tenants.iter().map(|t| project_body(base, t)).collect();
    Json(json!({"projects": projects, "links": list_links(base, path)}))
}

/// A domain as a login names it (by id or name).
#[derive(Debug, serde::Deserialize)]
struct DomainRef {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
}

/// Whether a domain reference names the one domain (an absent one does).
fn default_domain(domain: Option<&DomainRef>) -> bool {
    domain.is_none_or(|d| {
        d.id.as_deref().is_none_or(|id| id == DOMAIN_ID)
            && d.name
                .as_deref()
                .is_none_or(|n| n.eq_ignore_ascii_case(DOMAIN_NAME))
    })
}

/// Keystone's answer to a failed login.
fn unauthorized() -> ApiError {
    ApiError::Unauthorized("The request you have made requires authentication.".into())
}

/// Whether a domain named in a body or a query (`domain_id`) is the one domain; none is.
fn default_domain_id(id: Option<&str>) -> bool {
    id.is_none_or(|id| id == DOMAIN_ID)
}
