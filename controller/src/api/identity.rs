//! The OpenStack Identity v3 subset: version discovery, password login with a project scope
//! (`POST /v3/auth/tokens`), token validation and revocation, the service catalog, projects and
//! users. One domain exists: `default` ("Default").
//!
//! `DELETE /v3/auth/tokens` puts the subject token on the store's revocation list until it
//! expires: from then on it is 401 on use and 404 on validation, as Keystone answers, on every
//! controller sharing the store (see `auth.rs` for what else ends a token).

use std::time::SystemTime;

use axum::Extension;
use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::auth::{principal_of_token, token_ref};
use super::clock::rfc3339_micro;
use super::extract::{JsonBody, PathParams, QueryParams, path_id};
use super::token::Claims;
use super::{ApiError, ApiState, ClientCertificate, PeerAddr, Principal, password};
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
        .route("/v3/auth/tokens", get(validate).post(login).delete(revoke))
        .route("/v3/auth/catalog", get(catalog_route))
        .route("/v3/auth/projects", get(my_projects))
        .route("/v3/projects", get(list_projects))
        .route("/v3/projects/{id}", get(show_project))
        .route("/v3/users", get(list_users))
        .route("/v3/users/{id}", get(show_user))
        .route("/v3/users/{id}/projects", get(user_projects))
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

fn domain() -> Value {
    json!({"id": DOMAIN_ID, "name": DOMAIN_NAME})
}

fn role_name(role: Role) -> &'static str {
    role.as_str()
}

fn project_body(base: &str, tenant: &Tenant) -> Value {
    json!({
        "id": tenant.id,
        "name": tenant.name,
        "domain_id": DOMAIN_ID,
        "description": "",
        "enabled": true,
        "parent_id": DOMAIN_ID,
        "is_domain": false,
        "tags": [],
        "options": {},
        "links": {"self": format!("{base}/v3/projects/{}", tenant.id)},
    })
}

fn user_body(base: &str, user: &User) -> Value {
    json!({
        "id": user.id,
        "name": user.name,
        "domain_id": DOMAIN_ID,
        "enabled": true,
        "password_expires_at": null,
        "options": {},
        "links": {"self": format!("{base}/v3/users/{}", user.id)},
    })
}

fn token_body(base: &str, claims: &Claims, user: &User, tenant: &Tenant, roles: &[Role]) -> Value {
    let roles: Vec<Value> = roles
        .iter()
        .map(|r| json!({"id": role_name(*r), "name": role_name(*r)}))
        .collect();
    json!({"token": {
        "methods": ["password"],
        "user": {"id": user.id, "name": user.name, "domain": domain(), "password_expires_at": null},
        "audit_ids": [claims.audit],
        "issued_at": rfc3339_micro(claims.issued_at()),
        "expires_at": rfc3339_micro(claims.expires_at()),
        "project": {"id": tenant.id, "name": tenant.name, "domain": domain()},
        "is_domain": false,
        "roles": roles,
        "catalog": catalog(base, Some(tenant.id)),
    }})
}

#[derive(Debug, Deserialize)]
struct LoginRequest {
    auth: LoginAuth,
}

#[derive(Debug, Deserialize)]
struct LoginAuth {
    identity: LoginIdentity,
    #[serde(default)]
    scope: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct LoginIdentity {
    methods: Vec<String>,
    #[serde(default)]
    password: Option<PasswordMethod>,
}

#[derive(Debug, Deserialize)]
struct PasswordMethod {
    user: UserRef,
}

#[derive(Debug, Deserialize)]
struct UserRef {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    domain: Option<DomainRef>,
    password: String,
}

#[derive(Debug, Deserialize)]
struct DomainRef {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ProjectRef {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    domain: Option<DomainRef>,
}

fn unauthorized() -> ApiError {
    ApiError::Unauthorized("The request you have made requires authentication.".into())
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

fn find_user(store: &dyn IdentityStore, user: &UserRef) -> Result<Option<User>, ApiError> {
    let found = match (&user.id, &user.name) {
        (Some(id), _) => match Uuid::parse_str(id) {
            Ok(id) => store.user(id),
            Err(_) => return Ok(None),
        },
        (None, Some(name)) => store.user_by_name(name),
        (None, None) => {
            return Err(ApiError::BadRequest(
                "the password method needs a user id or name".into(),
            ));
        }
    };
    match found {
        Ok(user) => Ok(Some(user)),
        Err(StoreError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn find_project(store: &dyn IdentityStore, scope: &Option<Value>) -> Result<Tenant, ApiError> {
    let project = scope
        .as_ref()
        .and_then(|s| s.get("project"))
        .ok_or_else(|| ApiError::BadRequest("a project scope is required".into()))?;
    let project: ProjectRef = serde_json::from_value(project.clone())
        .map_err(|e| ApiError::BadRequest(format!("bad project scope: {e}")))?;
    if !default_domain(project.domain.as_ref()) {
        return Err(unauthorized());
    }
    let found = match (&project.id, &project.name) {
        (Some(id), _) => match Uuid::parse_str(id) {
            Ok(id) => store.tenant(id).ok(),
            Err(_) => None,
        },
        (None, Some(name)) => store.tenants()?.into_iter().find(|t| &t.name == name),
        (None, None) => {
            return Err(ApiError::BadRequest(
                "the project scope needs an id or a name".into(),
            ));
        }
    };
    found.ok_or_else(unauthorized)
}

/// `POST /v3/auth/tokens`: a password login scoped to a project. Rate limited per user name
/// and per source address unless the caller shows an admin client certificate (429 with
/// `Retry-After`); the password is checked on the hashing pool (503 with `Retry-After` when it is
/// full), an unknown user's as long as a known one's.
async fn login(
    State(state): State<ApiState>,
    peer: Option<Extension<PeerAddr>>,
    cert: Option<Extension<ClientCertificate>>,
    JsonBody(request): JsonBody<LoginRequest>,
) -> Result<Response, ApiError> {
    let identity = request.auth.identity;
    if !identity.methods.iter().any(|m| m == "password") {
        return Err(ApiError::Unauthorized(
            "only the password method is supported".into(),
        ));
    }
    let method = identity
        .password
        .ok_or_else(|| ApiError::BadRequest("the password method needs a password".into()))?;
    let scope = request.auth.scope;
    let mut user_ref = method.user;
    if !default_domain(user_ref.domain.as_ref()) {
        return Err(unauthorized());
    }
    let limited_as = match (&user_ref.id, &user_ref.name) {
        (Some(id), _) => format!("id:{id}"),
        (None, Some(name)) => format!("name:{name}"),
        (None, None) => {
            return Err(ApiError::BadRequest(
                "the password method needs a user id or name".into(),
            ));
        }
    };
    let admin_cert = cert.is_some_and(|Extension(c)| c.admin);
    let admission = if admin_cert {
        None
    } else {
        let source = peer.map(|Extension(PeerAddr(addr))| addr.ip());
        Some(state.login_limiter.admit(source, &limited_as)?)
    };
    let password = std::mem::take(&mut user_ref.password);
    let user = state
        .store(move |store| find_user(store, &user_ref))
        .await?;
    let iterations = state.config.password_iterations;
    let stored = user.as_ref().map(|u| u.password_hash.clone());
    let checked = state
        .hashing
        .run(move || match stored {
            Some(stored) => password::verify(&password, &stored),
            None => {
                password::verify_nothing(&password, iterations);
                false
            }
        })
        .await;
    let right = match checked {
        Ok(right) => right,
        Err(e) => {
            // Nothing was hashed: the attempt is not counted.
            if let Some(admission) = admission {
                admission.refund();
            }
            return Err(e);
        }
    };
    let Some(user) = user.filter(|_| right) else {
        return Err(unauthorized());
    };
    if let Some(admission) = admission {
        admission.refund();
    }
    let signer = state.signer.clone();
    let base = state.config.public_url.clone();
    let (token, body) = state
        .store(move |store| {
            let tenant = find_project(store, &scope)?;
            let roles = roles_in(store, user.id, tenant.id)?;
            if roles.is_empty() {
                return Err(ApiError::Unauthorized(format!(
                    "user {} has no role in project {}",
                    user.name, tenant.name
                )));
            }
            let (token, claims) = signer
                .issue(user.id, tenant.id, user.token_generation, SystemTime::now())
                .map_err(|e| ApiError::Internal(e.to_string()))?;
            Ok((token, token_body(&base, &claims, &user, &tenant, &roles)))
        })
        .await?;
    let mut response = (StatusCode::CREATED, Json(body)).into_response();
    let value = HeaderValue::from_str(&token)
        .map_err(|_| ApiError::Internal("token is not a header value".into()))?;
    response.headers_mut().insert(SUBJECT_TOKEN, value);
    Ok(response)
}

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

fn subject_token(headers: &HeaderMap) -> Result<String, ApiError> {
    headers
        .get(SUBJECT_TOKEN)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .ok_or_else(|| ApiError::BadRequest("X-Subject-Token is required".into()))
}

/// `GET /v3/auth/tokens`: the token in `X-Subject-Token`, if valid (asked by its own user or an
/// admin).
async fn validate(
    State(state): State<ApiState>,
    caller: Principal,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let subject_text = subject_token(&headers)?;
    let subject = principal_of_token(&state, &subject_text)
        .await
        .map_err(|_| ApiError::NotFound("the subject token is not valid".into()))?;
    if !caller.is_admin() && caller.user != subject.user {
        return Err(ApiError::Forbidden(
            "only admins may validate other users' tokens".into(),
        ));
    }
    let claims = subject
        .claims
        .clone()
        .ok_or_else(|| ApiError::Internal("a token principal without claims".into()))?;
    let base = state.config.public_url.clone();
    let body = state
        .store(move |store| {
            let user = store.user(claims.user)?;
            let tenant = store.tenant(claims.project)?;
            let roles = roles_in(store, user.id, tenant.id)?;
            Ok(token_body(&base, &claims, &user, &tenant, &roles))
        })
        .await?;
    let mut response = Json(body).into_response();
    if let Ok(value) = HeaderValue::from_str(&subject_text) {
        response.headers_mut().insert(SUBJECT_TOKEN, value);
    }
    Ok(response)
}

/// `DELETE /v3/auth/tokens`: revokes the token in `X-Subject-Token` (its own user's, or any for
/// admins); 404 when it is not valid (already revoked, expired, forged).
async fn revoke(
    State(state): State<ApiState>,
    caller: Principal,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    let subject = principal_of_token(&state, &subject_token(&headers)?)
        .await
        .map_err(|_| ApiError::NotFound("the subject token is not valid".into()))?;
    if !caller.is_admin() && caller.user != subject.user {
        return Err(ApiError::Forbidden(
            "only admins may revoke other users' tokens".into(),
        ));
    }
    let claims = subject
        .claims
        .as_ref()
        .ok_or_else(|| ApiError::Internal("a token principal without claims".into()))?;
    let entry = token_ref(claims);
    state
        .store(move |store| Ok(store.revoke_token(&entry)?))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn catalog_route(State(state): State<ApiState>, caller: Principal) -> Json<Value> {
    let base = &state.config.public_url;
    Json(
        json!({"catalog": catalog(base, caller.project), "links": {"self": format!("{base}/v3/auth/catalog")}}),
    )
}

/// The projects where `user` has a role.
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
        match store.tenant(id) {
            Ok(t) => tenants.push(t),
            Err(StoreError::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    tenants.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(tenants)
}

fn projects_response(base: &str, path: &str, tenants: &[Tenant]) -> Json<Value> {
    let projects: Vec<Value> = tenants.iter().map(|t| project_body(base, t)).collect();
    Json(json!({
        "projects": projects,
        "links": {"self": format!("{base}{path}"), "previous": null, "next": null},
    }))
}

async fn my_projects(
    State(state): State<ApiState>,
    caller: Principal,
) -> Result<Json<Value>, ApiError> {
    let user = caller
        .user
        .ok_or_else(|| ApiError::Forbidden("a certificate login has no projects".into()))?;
    let tenants = state.store(move |store| projects_of(store, user)).await?;
    Ok(projects_response(
        &state.config.public_url,
        "/v3/auth/projects",
        &tenants,
    ))
}

#[derive(Debug, Default, Deserialize)]
struct NameFilter {
    #[serde(default)]
    name: Option<String>,
}

/// `GET /v3/projects`: every project, for admins; Keystone's 403 (`identity:list_projects`)
/// for others, who list their own at `/v3/auth/projects` (`openstack project list
/// --my-projects`). A client looking a project up by name or id takes the 403 as "use it as
/// given", as it does with Keystone.
async fn list_projects(
    State(state): State<ApiState>,
    caller: Principal,
    QueryParams(filter): QueryParams<NameFilter>,
) -> Result<Json<Value>, ApiError> {
    if !caller.is_admin() {
        return Err(ApiError::Forbidden(
            "You are not authorized to perform the requested action: identity:list_projects."
                .into(),
        ));
    }
    let tenants = state
        .store(move |store| {
            Ok(store
                .tenants()?
                .into_iter()
                .filter(|t| filter.name.as_ref().is_none_or(|n| *n == t.name))
                .collect::<Vec<_>>())
        })
        .await?;
    Ok(projects_response(
        &state.config.public_url,
        "/v3/projects",
        &tenants,
    ))
}

async fn show_project(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let id = path_id("project", &id)?;
    let tenant = state
        .store(move |store| {
            let visible = caller.is_admin()
                || caller
                    .user
                    .map(|u| roles_in(store, u, id).map(|r| !r.is_empty()))
                    .transpose()?
                    .unwrap_or(false);
            // Keystone's policy answer, whether the project exists or not: a client that meets
            // it (the CLI's `image add project`) goes on with the id as given.
            if !visible {
                return Err(ApiError::Forbidden(format!(
                    "You are not authorized to perform the requested action: \
                     identity:get_project (project {id})."
                )));
            }
            Ok(store.tenant(id)?)
        })
        .await?;
    Ok(Json(
        json!({"project": project_body(&state.config.public_url, &tenant)}),
    ))
}

/// `GET /v3/users` (admin).
async fn list_users(
    State(state): State<ApiState>,
    caller: Principal,
    QueryParams(filter): QueryParams<NameFilter>,
) -> Result<Json<Value>, ApiError> {
    caller.require_admin()?;
    let users = state.store(|store| Ok(store.users()?)).await?;
    let base = &state.config.public_url;
    let users: Vec<Value> = users
        .iter()
        .filter(|u| filter.name.as_ref().is_none_or(|n| *n == u.name))
        .map(|u| user_body(base, u))
        .collect();
    Ok(Json(json!({
        "users": users,
        "links": {"self": format!("{base}/v3/users"), "previous": null, "next": null},
    })))
}

fn self_or_admin(caller: &Principal, user: Uuid) -> Result<(), ApiError> {
    if caller.is_admin() || caller.user == Some(user) {
        Ok(())
    } else {
        // Keystone's policy answer (identity:get_user), whether the user exists or not.
        Err(ApiError::Forbidden(format!(
            "You are not authorized to perform the requested action: identity:get_user (user \
             {user})."
        )))
    }
}

async fn show_user(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let id = path_id("user", &id)?;
    self_or_admin(&caller, id)?;
    let user = state.store(move |store| Ok(store.user(id)?)).await?;
    Ok(Json(
        json!({"user": user_body(&state.config.public_url, &user)}),
    ))
}

async fn user_projects(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let id = path_id("user", &id)?;
    self_or_admin(&caller, id)?;
    let tenants = state
        .store(move |store| {
            store.user(id)?;
            projects_of(store, id)
        })
        .await?;
    let path = format!("/v3/users/{id}/projects");
    Ok(projects_response(&state.config.public_url, &path, &tenants))
}
