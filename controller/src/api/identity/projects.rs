//! Projects (cumulo's tenants) as Keystone's: list, show, the caller's own; create, change and
//! delete (admins). A project made here gets the controller's default quota and /24 subnets, as
//! one made by `POST /cumulo/v1/tenants` without them. What cumulo's projects do not have is
//! refused with 400, not dropped: a hierarchy (`parent_id` other than the domain), a project
//! acting as a domain, tags, a disabled project.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    DOMAIN_ID, admin_for, default_domain_id, invalid, policy, project_body, projects_of,
    projects_response, roles_in,
};
use crate::api::extract::{JsonBody, PathParams, QueryParams, path_id};
use crate::api::{ApiError, ApiState, Principal};
use store::{MAX_DESCRIPTION, NewTenant, TenantChange};

/// The longest project name (Keystone's).
pub const MAX_PROJECT_NAME: usize = 64;

#[derive(Debug, Default, Deserialize)]
pub(super) struct ProjectFilter {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    domain_id: Option<String>,
}

/// `GET /v3/projects`: every project, for admins; Keystone's 403 (`identity:list_projects`)
/// for others, who list their own at `/v3/auth/projects` (`openstack project list
/// --my-projects`). A client looking a project up by name or id takes the 403 as "use it as
/// given", as it does with Keystone.
pub(super) async fn list(
    State(state): State<ApiState>,
    caller: Principal,
    QueryParams(filter): QueryParams<ProjectFilter>,
) -> Result<Json<Value>, ApiError> {
    admin_for(&caller, "identity:list_projects")?;
    let in_domain = default_domain_id(filter.domain_id.as_deref());
    let tenants = state
        .store(move |store| {
            Ok(store
                .tenants()?
                .into_iter()
                .filter(|t| in_domain && filter.name.as_ref().is_none_or(|n| *n == t.name))
                .collect::<Vec<_>>())
        })
        .await?;
    Ok(projects_response(
        &state.config.public_url,
        "/v3/projects",
        &tenants,
    ))
}

/// `GET /v3/auth/projects`: the projects where the caller has a role (an unscoped token's too).
pub(super) async fn mine(
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

pub(super) async fn show(
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

/// What `POST /v3/projects` and `PATCH /v3/projects/{id}` take (inside `"project"`).
#[derive(Debug, Deserialize)]
pub(super) struct ProjectFields {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    domain_id: Option<String>,
    #[serde(default)]
    enabled: Option<bool>,
    #[serde(default)]
    parent_id: Option<String>,
    #[serde(default)]
    is_domain: Option<bool>,
    #[serde(default)]
    tags: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
pub(super) struct ProjectBody {
    project: ProjectFields,
}

impl ProjectFields {
    /// Refuses what cumulo's projects do not have, and bad names and descriptions.
    fn check(&self) -> Result<(), ApiError> {
        if let Some(name) = &self.name
            && (name.trim().is_empty() || name.chars().count() > MAX_PROJECT_NAME)
        {
            return Err(invalid(
                "name",
                &format!("a project name has 1 to {MAX_PROJECT_NAME} characters, not blank"),
            ));
        }
        if self
            .description
            .as_ref()
            .is_some_and(|d| d.len() > MAX_DESCRIPTION)
        {
            return Err(invalid(
                "description",
                &format!("at most {MAX_DESCRIPTION} bytes"),
            ));
        }
        if !default_domain_id(self.domain_id.as_deref()) {
            return Err(ApiError::NotFound(format!(
                "Could not find domain: {}.",
                self.domain_id
                    .as_deref()
                    .unwrap_or("")
                    .chars()
                    .take(64)
                    .collect::<String>()
            )));
        }
        if self.enabled == Some(false) {
            return Err(invalid("enabled", "cumulo's projects cannot be disabled"));
        }
        if self.parent_id.as_deref().is_some_and(|p| p != DOMAIN_ID) {
            return Err(invalid("parent_id", "cumulo's projects have no hierarchy"));
        }
        if self.is_domain == Some(true) {
            return Err(invalid(
                "is_domain",
                "a project cannot act as a domain here",
            ));
        }
        if self.tags.as_ref().is_some_and(|t| !t.is_empty()) {
            return Err(invalid("tags", "cumulo's projects have no tags"));
        }
        Ok(())
    }
}

/// `POST /v3/projects` (admins): 201 with the project; 409 for a name taken.
pub(super) async fn create(
    State(state): State<ApiState>,
    caller: Principal,
    JsonBody(body): JsonBody<ProjectBody>,
) -> Result<Response, ApiError> {
    admin_for(&caller, "identity:create_project")?;
    let fields = body.project;
    fields.check()?;
    let name = fields
        .name
        .ok_or_else(|| invalid("name", "a project needs a name"))?;
    let new = NewTenant {
        name,
        quota: state.config.default_quota,
        subnet_prefix: 24,
    };
    let description = fields.description.unwrap_or_default();
    let tenant = state
        .store(move |s| Ok(s.create_described_tenant(new, description)?))
        .await?;
    let body = json!({"project": project_body(&state.config.public_url, &tenant)});
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// `PATCH /v3/projects/{id}` (admins): a new name or description.
pub(super) async fn update(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody<ProjectBody>,
) -> Result<Json<Value>, ApiError> {
    admin_for(&caller, "identity:update_project")?;
    let id = path_id("project", &id)?;
    let fields = body.project;
    fields.check()?;
    let tenant = state
        .store(move |s| {
            let current = s.tenant(id)?;
            let change = TenantChange {
                name: fields.name,
                description: fields.description,
                ..TenantChange::default()
            };
            Ok(s.update_tenant(id, current.version, change)?)
        })
        .await?;
    Ok(Json(
        json!({"project": project_body(&state.config.public_url, &tenant)}),
    ))
}

/// `DELETE /v3/projects/{id}` (admins): 204; its role assignments and application credentials
/// go with it; 409 while it has instances, subnets or volumes (Keystone has none to refuse).
pub(super) async fn delete(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<StatusCode, ApiError> {
    if !caller.is_admin() {
        return Err(policy("identity:delete_project"));
    }
    let id = path_id("project", &id)?;
    state.store(move |s| Ok(s.delete_tenant(id)?)).await?;
    Ok(StatusCode::NO_CONTENT)
}
