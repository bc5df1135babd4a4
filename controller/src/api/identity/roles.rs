//! Roles and role assignments as Keystone's: the four roles (`GET /v3/roles`, their ids are their
//! names), a user's roles in a project (grant, check, revoke: admins), and
//! `GET /v3/role_assignments` with Keystone's filters (`user.id`, `scope.project.id`, `role.id`,
//! `effective`, `include_names`; `group.id`, `scope.domain.id` and `scope.system` match nothing:
//! cumulo has no groups and no domain or system assignments). Admins see every assignment; a
//! manager sees those in its own project.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::{admin_for, domain, list_links, policy, role_ref};
use crate::api::extract::{PathParams, QueryParams, path_id};
use crate::api::{ApiError, ApiState, Principal};
use store::{IdentityStore, Role, RoleAssignment, StoreError};

fn description(role: Role) -> &'static str {
    match role {
        Role::Admin => "Everything, in every project, and the cluster itself",
        Role::Manager => "Manages its project (for now: a member that sees the role assignments)",
        Role::Member => "Reads and changes its project's objects",
        Role::Reader => "Reads its project's objects, never changes them",
    }
}

fn role_body(base: &str, role: Role) -> Value {
    json!({
        "id": role.as_str(),
        "name": role.as_str(),
        "domain_id": null,
        "description": description(role),
        "options": {},
        "links": {"self": format!("{base}/v3/roles/{}", role.as_str())},
    })
}

/// The role of a path or query id; 404 otherwise, as Keystone's.
fn role_of(id: &str) -> Result<Role, ApiError> {
    Role::from_name(id).ok_or_else(|| {
        ApiError::NotFound(format!(
            "Could not find role: {}.",
            id.chars().take(64).collect::<String>()
        ))
    })
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct NameFilter {
    #[serde(default)]
    name: Option<String>,
}

/// `GET /v3/roles`: the four roles, to any token (Keystone lets project readers list them).
pub(super) async fn list(
    State(state): State<ApiState>,
    _caller: Principal,
    QueryParams(filter): QueryParams<NameFilter>,
) -> Json<Value> {
    let base = &state.config.public_url;
    let roles: Vec<Value> = Role::ALL
        .into_iter()
        .filter(|r| filter.name.as_deref().is_none_or(|n| n == r.as_str()))
        .map(|r| role_body(base, r))
        .collect();
    Json(json!({"roles": roles, "links": list_links(base, "/v3/roles")}))
}

pub(super) async fn show(
    State(state): State<ApiState>,
    _caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let role = role_of(&id)?;
    Ok(Json(
        json!({"role": role_body(&state.config.public_url, role)}),
    ))
}

/// Whether the caller may read the role assignments in `project`: an admin, or a manager of it.
fn reads_assignments_in(caller: &Principal, project: Option<Uuid>) -> bool {
    caller.is_admin()
        || (project.is_some()
            && caller.project == project
            && caller.effective_roles().contains(&Role::Manager))
}

/// `(project, user)` of a path, each 404 unless a UUID naming an object.
fn project_user(project: &str, user: &str) -> Result<(Uuid, Uuid), ApiError> {
    Ok((path_id("project", project)?, path_id("user", user)?))
}

/// `GET /v3/projects/{id}/users/{user}/roles`: the roles given to the user there.
pub(super) async fn of_user(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams((project, user)): PathParams<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let (project, user) = project_user(&project, &user)?;
    if !reads_assignments_in(&caller, Some(project)) {
        return Err(policy("identity:list_grants"));
    }
    let roles = state
        .store(move |s| {
            s.tenant(project)?;
            s.user(user)?;
            super::roles_in(s, user, project)
        })
        .await?;
    let base = &state.config.public_url;
    let path = format!("/v3/projects/{project}/users/{user}/roles");
    let roles: Vec<Value> = roles.into_iter().map(|r| role_body(base, r)).collect();
    Ok(Json(
        json!({"roles": roles, "links": list_links(base, &path)}),
    ))
}

/// `GET`/`HEAD /v3/projects/{id}/users/{user}/roles/{role}`: 204 if given, else 404.
pub(super) async fn check(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams((project, user, role)): PathParams<(String, String, String)>,
) -> Result<StatusCode, ApiError> {
    let (project, user) = project_user(&project, &user)?;
    if !reads_assignments_in(&caller, Some(project)) {
        return Err(policy("identity:check_grant"));
    }
    let role = role_of(&role)?;
    let given = state
        .store(move |s| Ok(super::roles_in(s, user, project)?.contains(&role)))
        .await?;
    if given {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(not_assigned(role, user, project))
    }
}

fn not_assigned(role: Role, user: Uuid, project: Uuid) -> ApiError {
    ApiError::NotFound(format!(
        "Could not find role assignment with role: {role}, user or group: {user}, project, \
         domain, or system: {project}."
    ))
}

/// `PUT /v3/projects/{id}/users/{user}/roles/{role}` (admins): 204 (again if given already);
/// 404 for a project, user or role that does not exist.
pub(super) async fn grant(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams((project, user, role)): PathParams<(String, String, String)>,
) -> Result<StatusCode, ApiError> {
    admin_for(&caller, "identity:create_grant")?;
    let (project, user) = project_user(&project, &user)?;
    let role = role_of(&role)?;
    state
        .store(move |s| Ok(s.grant_role(user, project, role)?))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /v3/projects/{id}/users/{user}/roles/{role}` (admins): 204; the user's tokens end.
/// 404 if not given; 409 for the caller's own role in the project of its token.
pub(super) async fn revoke(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams((project, user, role)): PathParams<(String, String, String)>,
) -> Result<StatusCode, ApiError> {
    admin_for(&caller, "identity:revoke_grant")?;
    let (project, user) = project_user(&project, &user)?;
    let role = role_of(&role)?;
    if caller.user == Some(user) && caller.project == Some(project) {
        return Err(ApiError::Conflict(
            "a user cannot revoke its own role in the project of its token".into(),
        ));
    }
    state
        .store(move |s| match s.revoke_role(user, project, role) {
            Err(StoreError::NotFound { .. }) => Err(not_assigned(role, user, project)),
            other => Ok(other?),
        })
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /v3/role_assignments`'s filters, as Keystone names them.
#[derive(Debug, Default, Deserialize)]
pub(super) struct AssignmentFilter {
    #[serde(default, rename = "user.id")]
    user: Option<String>,
    #[serde(default, rename = "scope.project.id")]
    project: Option<String>,
    #[serde(default, rename = "role.id")]
    role: Option<String>,
    #[serde(default, rename = "group.id")]
    group: Option<String>,
    #[serde(default, rename = "scope.domain.id")]
    domain: Option<String>,
    #[serde(default, rename = "scope.system")]
    system: Option<String>,
    #[serde(default)]
    effective: Option<String>,
    #[serde(default)]
    include_names: Option<String>,
}

/// Whether a flag given in a query is on (present, and not `false`/`0`/`no`).
fn flag(value: &Option<String>) -> bool {
    value
        .as_deref()
        .is_some_and(|v| !matches!(v.to_ascii_lowercase().as_str(), "false" | "0" | "no"))
}

/// An id filter: `Ok(None)` when absent, `Err(())` when it names nothing (not a UUID).
fn id_filter(value: &Option<String>) -> Result<Option<Uuid>, ()> {
    value
        .as_deref()
        .map(|v| Uuid::parse_str(v).map_err(|_| ()))
        .transpose()
}

/// The assignments that `filter` selects, with the roles they imply if `effective`.
fn select(
    store: &dyn IdentityStore,
    user: Option<Uuid>,
    project: Option<Uuid>,
    role: Option<Role>,
    effective: bool,
) -> Result<Vec<RoleAssignment>, ApiError> {
    let given = match (user, project) {
        (Some(user), _) => super::found(store.roles_of_user(user))?.unwrap_or_default(),
        (None, Some(project)) => super::found(store.roles_in_tenant(project))?.unwrap_or_default(),
        (None, None) => {
            let mut all = Vec::new();
            for tenant in store.tenants()? {
                all.extend(super::found(store.roles_in_tenant(tenant.id))?.unwrap_or_default());
            }
            all
        }
    };
    let mut out: Vec<RoleAssignment> = given
        .into_iter()
        .filter(|a| project.is_none_or(|p| a.tenant == p))
        .flat_map(|a| {
            let roles: &[Role] = if effective {
                a.role.implied()
            } else {
                std::slice::from_ref(&a.role)
            };
            roles
                .iter()
                .map(move |r| RoleAssignment { role: *r, ..a })
                .collect::<Vec<_>>()
        })
        .filter(|a| role.is_none_or(|r| a.role == r))
        .collect();
    out.sort_by_key(|a| (a.tenant, a.user, a.role));
    out.dedup();
    Ok(out)
}

/// `GET /v3/role_assignments` (admins; a manager with `scope.project.id` its own project).
pub(super) async fn assignments(
    State(state): State<ApiState>,
    caller: Principal,
    QueryParams(filter): QueryParams<AssignmentFilter>,
) -> Result<Json<Value>, ApiError> {
    let base = state.config.public_url.clone();
    let links = list_links(&base, "/v3/role_assignments");
    let (user, project) = match (id_filter(&filter.user), id_filter(&filter.project)) {
        (Ok(user), Ok(project)) => (user, project),
        _ => (None, Some(Uuid::nil())),
    };
    if !reads_assignments_in(&caller, project) {
        return Err(policy("identity:list_role_assignments"));
    }
    let role = match filter.role.as_deref() {
        None => None,
        Some(id) => match Role::from_name(id) {
            Some(role) => Some(role),
            None => return Ok(Json(json!({"role_assignments": [], "links": links}))),
        },
    };
    // Groups, domain and system assignments: cumulo has none.
    if filter.group.is_some() || filter.domain.is_some() || filter.system.is_some() {
        return Ok(Json(json!({"role_assignments": [], "links": links})));
    }
    let (effective, names) = (flag(&filter.effective), flag(&filter.include_names));
    let listed = state
        .store(move |store| {
            let chosen = select(store, user, project, role, effective)?;
            let mut users: HashMap<Uuid, Option<String>> = HashMap::new();
            let mut projects: HashMap<Uuid, Option<String>> = HashMap::new();
            let mut out = Vec::with_capacity(chosen.len());
            for a in chosen {
                let mut user_ref = json!({"id": a.user});
                let mut project_ref = json!({"id": a.tenant});
                let mut role_json = json!({"id": a.role.as_str()});
                if names {
                    if let Entry::Vacant(slot) = users.entry(a.user) {
                        slot.insert(super::found(store.user(a.user))?.map(|u| u.name));
                    }
                    if let Entry::Vacant(slot) = projects.entry(a.tenant) {
                        slot.insert(super::found(store.tenant(a.tenant))?.map(|t| t.name));
                    }
                    user_ref["name"] = json!(users.get(&a.user).cloned().flatten());
                    user_ref["domain"] = domain();
                    project_ref["name"] = json!(projects.get(&a.tenant).cloned().flatten());
                    project_ref["domain"] = domain();
                    role_json = role_ref(a.role);
                }
                out.push(json!({
                    "role": role_json,
                    "user": user_ref,
                    "scope": {"project": project_ref},
                    "links": {"assignment": format!(
                        "{base}/v3/projects/{}/users/{}/roles/{}", a.tenant, a.user, a.role
                    )},
                }));
            }
            Ok(out)
        })
        .await?;
    Ok(Json(json!({"role_assignments": listed, "links": links})))
}
