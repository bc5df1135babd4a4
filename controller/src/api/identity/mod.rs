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
use serde_json::{Value, json};
use uuid::Uuid;

use super::table::{Body, Family, RouteTable, os, own};
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
    table().router()
}

/// The identity routes, one line each, as they are served and documented (`api/table.rs`).
#[rustfmt::skip]
pub(crate) fn table() -> RouteTable {
    let t = RouteTable::new(Family::Identity);
    t.get("/", versions, own("Version discovery", 300).public())
        .get("/v3", version, own("Version 3 details", 200).public())
        .get("/v3/", version, own("Version 3 details", 200).public())
        .post("/v3/auth/tokens", tokens::login, os("Password authentication with scoped authorization", 201).public().actions(AUTH_METHODS).errors(&[404, 429, 503]))
        .get("/v3/auth/tokens", tokens::validate, os("Validate and show information for token", 200).errors(&[400, 404]))
        .head("/v3/auth/tokens", tokens::validate, os("Check token", 200).errors(&[400, 404]))
        .delete("/v3/auth/tokens", tokens::revoke, os("Revoke token", 204).errors(&[400, 404]))
        .get("/v3/auth/catalog", catalog_route, os("Get service catalog", 200))
        .get("/v3/auth/projects", projects::mine, os("Get available project scopes", 200))
        .get("/v3/domains", domains::list, os("List domains", 200))
        .get("/v3/domains/{id}", domains::show, os("Show domain details", 200))
        .get("/v3/projects", projects::list, os("List projects", 200))
        .post("/v3/projects", projects::create, os("Create project", 201).errors(&[404, 409]))
        .get("/v3/projects/{id}", projects::show, os("Show project details", 200))
        .patch("/v3/projects/{id}", projects::update, os("Update project", 200).errors(&[409]))
        .delete("/v3/projects/{id}", projects::delete, os("Delete project", 204).errors(&[409]))
        .get("/v3/projects/{id}/users/{user}/roles", roles::of_user, os("List role assignments for user on project", 200))
        .get("/v3/projects/{id}/users/{user}/roles/{role}", roles::check, os("Check whether user has role assignment on project", 204))
        .head("/v3/projects/{id}/users/{user}/roles/{role}", roles::check, os("Check whether user has role assignment on project", 204))
        .put("/v3/projects/{id}/users/{user}/roles/{role}", roles::grant, os("Assign role to user on project", 204).request(Body::Empty))
        .delete("/v3/projects/{id}/users/{user}/roles/{role}", roles::revoke, os("Unassign role from user on project", 204).errors(&[409]))
        .get("/v3/roles", roles::list, os("List roles", 200))
        .get("/v3/roles/{id}", roles::show, os("Show role details", 200))
        .get("/v3/role_assignments", roles::assignments, os("List role assignments", 200).errors(&[400]))
        .get("/v3/users", users::list, os("List users", 200))
        .post("/v3/users", users::create, os("Create user", 201).errors(&[404, 409, 503]))
        .get("/v3/users/{id}", users::show, os("Show user details", 200))
        .patch("/v3/users/{id}", users::update, os("Update user", 200).errors(&[409, 503]))
        .delete("/v3/users/{id}", users::delete, os("Delete user", 204).errors(&[409]))
        .get("/v3/users/{id}/projects", users::projects, os("List projects for user", 200))
        .post("/v3/users/{id}/password", users::change_password, os("Change password for user", 204).errors(&[400, 429]))
        .post("/v3/users/{id}/application_credentials", app_creds::create, os("Create application credential", 201).errors(&[409, 503]))
        .get("/v3/users/{id}/application_credentials", app_creds::list, os("List application credentials", 200))
        .get("/v3/users/{id}/application_credentials/{cred}", app_creds::show, os("Show application credential details", 200))
        .delete("/v3/users/{id}/application_credentials/{cred}", app_creds::delete, os("Delete application credential", 204))
}

/// The API reference's names of the logins `POST /v3/auth/tokens` takes.
const AUTH_METHODS: &[&str] = &[
    "Password authentication with unscoped authorization",
    "Password authentication with scoped authorization",
    "Password authentication with explicit unscoped authorization",
    "Token authentication with unscoped authorization",
    "Token authentication with scoped authorization",
    "Authenticating with an Application Credential",
];

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
