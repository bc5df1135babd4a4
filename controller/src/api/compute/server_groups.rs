//! `os-server-groups` as Nova has it at microversion 2.1 (`openstack server group create --policy
//! anti-affinity NAME`, `server group list/show/delete`, `server create --hint group=ID`): a
//! project's named groups of servers with a placement policy that the scheduler honours
//! (`affinity`: one node; `anti-affinity`: different nodes; `soft-affinity` and
//! `soft-anti-affinity`, which Nova added in 2.15 and cumulo takes at 2.1 too: the same where it
//! can, any node otherwise). A server joins a group when it is created with the `group` scheduler
//! hint, and leaves it when deleted; a group may be deleted while it has members (they stay, in
//! no group), as in Nova. At most ten groups per project and ten members per group (Nova's
//! `server_groups` and `server_group_members` quota defaults: 403 past them). The view shows
//! Nova's 2.1 fields (`id`, `name`, `policies`, `members`, `metadata`, always empty) and
//! `project_id` and `user_id` (2.13's), which clients of 2.1 ignore.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::api::extract::{JsonBody, PathParams, QueryParams, path_id};
use crate::api::{ApiError, ApiState, Principal};
use store::{NewServerGroup, SERVER_GROUP_POLICIES, Scope, ServerGroup, StoreError};

/// The body of `POST /os-server-groups`.
#[derive(Debug, Deserialize)]
pub struct CreateRequest {
    server_group: GroupCreate,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GroupCreate {
    name: String,
    policies: Vec<String>,
}

/// The query of `GET /os-server-groups`.
#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    #[serde(default)]
    all_projects: Option<String>,
    #[serde(default)]
    limit: Option<String>,
    #[serde(default)]
    offset: Option<String>,
}

fn view(g: &ServerGroup) -> Value {
    json!({
        "id": g.id,
        "name": g.name,
        "policies": [g.policy],
        "members": g.members,
        "metadata": {},
        "project_id": g.tenant.simple().to_string(),
        "user_id": g.user.map(|u| u.simple().to_string()).unwrap_or_default(),
    })
}

/// A store error of the group `id`, in Nova's words.
fn group_error(id: Uuid) -> impl Fn(StoreError) -> ApiError {
    move |e| match e {
        StoreError::NotFound { .. } => {
            ApiError::NotFound(format!("Instance group {id} could not be found."))
        }
        StoreError::QuotaExceeded { .. } => {
            ApiError::OverLimit("Quota exceeded, too many server groups.".into())
        }
        other => other.into(),
    }
}

/// A whole number in a query.
fn number(name: &str, text: &Option<String>) -> Result<Option<usize>, ApiError> {
    text.as_deref()
        .map(|t| {
            t.parse::<usize>().map_err(|_| {
                ApiError::BadRequest(format!(
                    "Invalid input for query parameters {name}. Value: {t}. {t} is not a \
                     non-negative integer"
                ))
            })
        })
        .transpose()
}

/// `GET /os-server-groups`: the project's groups (every project's for an admin asking
/// `all_projects`), oldest first, from `offset`, at most `limit`.
pub async fn list(
    State(state): State<ApiState>,
    caller: Principal,
    QueryParams(query): QueryParams<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    // As Nova, the parameter's presence asks for every project (its value is not read).
    let scope = caller.project_scope(query.all_projects.is_some())?;
    let offset = number("offset", &query.offset)?.unwrap_or(0);
    // As Nova, a limit of 0 is no limit.
    let limit = number("limit", &query.limit)?.filter(|n| *n > 0);
    let groups = state
        .store(move |store| Ok(store.server_groups(scope)?))
        .await?;
    let shown: Vec<Value> = groups
        .iter()
        .skip(offset)
        .take(limit.unwrap_or(usize::MAX))
        .map(view)
        .collect();
    Ok(Json(json!({"server_groups": shown})))
}

/// `POST /os-server-groups`: one policy of [`SERVER_GROUP_POLICIES`].
pub async fn create(
    State(state): State<ApiState>,
    caller: Principal,
    JsonBody(request): JsonBody<CreateRequest>,
) -> Result<Json<Value>, ApiError> {
    let tenant = caller.project()?;
    let GroupCreate { name, policies } = request.server_group;
    // Nova's name: 1 to 255 characters, no leading or trailing space; kept as at most 255
    // bytes (the store's bound for every name).
    if name.trim().is_empty() || name.trim() != name || name.len() > 255 {
        return Err(ApiError::BadRequest(
            "Invalid input for field/attribute name. A name is 1 to 255 bytes, not blank, \
             without leading or trailing spaces"
                .into(),
        ));
    }
    let policy = match policies.as_slice() {
        [one] if SERVER_GROUP_POLICIES.contains(&one.as_str()) => one.clone(),
        _ => {
            return Err(ApiError::BadRequest(format!(
                "Invalid input for field/attribute policies. Value: {policies:?}. Exactly one \
                 of {} is needed",
                SERVER_GROUP_POLICIES.join(", ")
            )));
        }
    };
    let new = NewServerGroup {
        tenant,
        user: caller.user,
        name,
        policy,
    };
    let made = state
        .store(move |store| {
            store
                .create_server_group(new)
                .map_err(group_error(Uuid::nil()))
        })
        .await?;
    Ok(Json(json!({"server_group": view(&made)})))
}

/// `GET /os-server-groups/{id}`: the project's group (any project's for an admin).
pub async fn show(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let id = path_id("server group", &id)?;
    let scope = caller.project_scope(true)?;
    let group = state
        .store(move |store| store.server_group(scope, id).map_err(group_error(id)))
        .await?;
    Ok(Json(json!({"server_group": view(&group)})))
}

/// `DELETE /os-server-groups/{id}`: its members stay, in no group.
pub async fn delete(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<StatusCode, ApiError> {
    let id = path_id("server group", &id)?;
    let scope = caller.project_scope(true)?;
    state
        .store(move |store| {
            store
                .delete_server_group(scope, id)
                .map_err(group_error(id))
        })
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The group a server create's scheduler hints name (`os:scheduler_hints: {"group": ID}`), if
/// any: a UUID (400 otherwise); other hints are ignored, as Nova ignores hints no filter reads.
pub fn hinted_group(hints: &Option<Value>) -> Result<Option<Uuid>, ApiError> {
    let Some(hints) = hints else {
        return Ok(None);
    };
    let bad = |why: &str| {
        ApiError::BadRequest(format!(
            "Invalid input for field/attribute os:scheduler_hints. {why}"
        ))
    };
    let object = hints
        .as_object()
        .ok_or_else(|| bad("It is not an object"))?;
    match object.get("group") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Uuid::parse_str(text)
            .map(Some)
            .map_err(|_| bad(&format!("group {text:?} is not a UUID"))),
        Some(_) => Err(bad("group is not a string")),
    }
}

/// Checks that `group` is the project's and has room for `count` more members: 400 for a
/// group it cannot see (as Nova), 403 past [`ServerGroup::MAX_MEMBERS`]. Returns how many it
/// has room for.
pub fn room_in(
    store: &dyn store::Store,
    tenant: Uuid,
    group: Uuid,
    count: u32,
) -> Result<u32, ApiError> {
    let g = store
        .server_group(Scope::Tenant(tenant), group)
        .map_err(|e| match e {
            StoreError::NotFound { .. } => {
                ApiError::BadRequest(format!("Invalid server group: {group} could not be found."))
            }
            other => other.into(),
        })?;
    let room = ServerGroup::MAX_MEMBERS.saturating_sub(g.members.len());
    if (count as usize) > room {
        return Err(ApiError::OverLimit(format!(
            "Quota exceeded, too many servers in group: {} of {} places taken",
            g.members.len(),
            ServerGroup::MAX_MEMBERS
        )));
    }
    Ok(u32::try_from(room).unwrap_or(u32::MAX))
}
