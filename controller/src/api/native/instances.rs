//! Instances: list (paged), show, launch `count` instances of a workload (202), delete (202),
//! stop, start and restart (202), and the actions log of one (newest first; a deleted
//! instance's too, while the store keeps them). Members act in their project; admins in any
//! tenant.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::views;
use crate::api::compute::{headroom, unlocked};
use crate::api::extract::{JsonBody, PathParams, QueryParams, path_id, present};
use crate::api::{ApiError, ApiState, Principal};
use crate::cluster::{CONSOLE_MAX_LINES, InstanceAction, Launch, Rebuild, ResizeStep};
use store::{InstanceFilter, Page, Scope, StoreError};

/// The query of `GET /instances`: a page of at most `limit` (100 unless told) instances after
/// the one `marker` names, only those on `node` if given.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    #[serde(default)]
    #[param(nullable = false, minimum = 1, maximum = 1000)]
    limit: Option<u32>,
    #[serde(default)]
    #[param(nullable = false)]
    marker: Option<Uuid>,
    #[serde(default)]
    #[param(nullable = false)]
    node: Option<Uuid>,
}

/// The query of `GET /instances/{id}/console`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ConsoleQuery {
    #[serde(default)]
    #[param(nullable = false, minimum = 0, maximum = 10_000)]
    lines: Option<usize>,
}

/// The lines `GET /instances/{id}/console` gives unless told.
pub const CONSOLE_DEFAULT_LINES: usize = 100;

/// `count` (1 unless told) instances of a workload, in the caller's project or (admins) a named
/// tenant.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = InstanceCreate)]
pub struct CreateInstances {
    workload: Uuid,
    #[schema(min_length = 1, max_length = 255, pattern = r"\S")]
    name: String,
    #[serde(default, deserialize_with = "present")]
    #[schema(nullable = false, minimum = 1, maximum = 1000)]
    count: Option<u32>,
    #[serde(default, deserialize_with = "present")]
    #[schema(nullable = false)]
    tenant: Option<Uuid>,
}

#[utoipa::path(
    get,
    path = "/cumulo/v1/instances",
    operation_id = "list_instances",
    summary = "List instances",
    tag = "instances",
    params(ListQuery),
    responses((status = 200, description = "success", body = views::InstancePage)),
)]
pub async fn list(
    State(state): State<ApiState>,
    caller: Principal,
    QueryParams(query): QueryParams<ListQuery>,
) -> Result<Json<views::InstancePage>, ApiError> {
    let scope = caller.scope()?;
    let limit = query.limit.unwrap_or(100);
    if !(1..=Page::MAX_LIMIT).contains(&limit) {
        return Err(ApiError::BadRequest(format!(
            "limit must be from 1 to {}",
            Page::MAX_LIMIT
        )));
    }
    let page = Page {
        marker: query.marker,
        limit,
    };
    let filter = InstanceFilter { node: query.node };
    let paged = state
        .store(move |s| match s.instances(scope, filter, page) {
            Ok(paged) => Ok(paged),
            // The marker names no instance the caller sees.
            Err(StoreError::Invalid(_)) if page.marker.is_some() => {
                Err(ApiError::NotFound("the marker names no instance".into()))
            }
            Err(e) => Err(e.into()),
        })
        .await?;
    Ok(Json(views::InstancePage {
        instances: paged.items.iter().map(views::instance).collect(),
        next: paged.next,
    }))
}

#[utoipa::path(
    get,
    path = "/cumulo/v1/instances/{id}",
    operation_id = "show_an_instance",
    summary = "Show an instance",
    tag = "instances",
    params(("id" = Uuid, Path, description = "the object's id")),
    responses((status = 200, description = "success", body = views::Instance)),
)]
pub async fn show(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<views::Instance>, ApiError> {
    let id = path_id("instance", &id)?;
    let scope = caller.scope()?;
    let instance = state.store(move |s| Ok(s.instance(scope, id)?)).await?;
    Ok(Json(views::instance(&instance)))
}

#[utoipa::path(
    get,
    path = "/cumulo/v1/instances/{id}/actions",
    operation_id = "list_an_instances_actions",
    summary = "List an instance's actions",
    tag = "instances",
    params(("id" = Uuid, Path, description = "the object's id")),
    responses((status = 200, description = "success", body = views::InstanceActions)),
)]
pub async fn actions(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<views::InstanceActions>, ApiError> {
    let id = path_id("instance", &id)?;
    let scope = caller.scope()?;
    let actions = state
        .store(move |s| Ok(s.instance_actions(scope, id)?))
        .await?;
    Ok(Json(views::InstanceActions {
        actions: actions.iter().map(views::instance_action).collect(),
    }))
}

/// `GET /instances/{id}/console?lines=N`: `{"output": "..."}`, the last N lines (default
/// [`CONSOLE_DEFAULT_LINES`], at most [`CONSOLE_MAX_LINES`]) of the instance's serial console
/// log, fetched from its node.
#[utoipa::path(
    get,
    path = "/cumulo/v1/instances/{id}/console",
    operation_id = "show_the_last_lines_of_an_instances_serial_console_log",
    summary = "Show the last lines of an instance's serial console log",
    tag = "instances",
    params(("id" = Uuid, Path, description = "the object's id"), ConsoleQuery),
    responses((status = 200, description = "success", body = views::ConsoleOutput)),
)]
pub async fn console(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
    QueryParams(query): QueryParams<ConsoleQuery>,
) -> Result<Json<views::ConsoleOutput>, ApiError> {
    let id = path_id("instance", &id)?;
    let scope = caller.scope()?;
    // Console logs often hold secrets (cloud-init's generated passwords, keys): readers, who
    // may not ask for them through the Compute API either, are refused.
    if !caller.can_write() {
        return Err(ApiError::Forbidden(
            "a reader may not read console logs: the member role is needed".into(),
        ));
    }
    let lines = query.lines.unwrap_or(CONSOLE_DEFAULT_LINES);
    if lines > CONSOLE_MAX_LINES {
        return Err(ApiError::BadRequest(format!(
            "lines={lines}: at most {CONSOLE_MAX_LINES}"
        )));
    }
    let output = state
        .cluster(move |_, cluster| Ok(cluster.console(scope, id, lines)?))
        .await?;
    Ok(Json(views::ConsoleOutput { output }))
}

/// `GET /instance-counts`: how many instances the caller can see are in each state (an admin:
/// every tenant's; a member or reader: the project's), and how many in all.
#[utoipa::path(
    get,
    path = "/cumulo/v1/instance-counts",
    operation_id = "count_instances_by_state",
    summary = "Count instances by state",
    tag = "instances",
    responses((status = 200, description = "success", body = views::InstanceCounts)),
)]
pub async fn counts(
    State(state): State<ApiState>,
    caller: Principal,
) -> Result<Json<views::InstanceCounts>, ApiError> {
    let scope = caller.scope()?;
    let counts = state
        .store(move |s| match scope {
            Scope::All => Ok(s.instance_counts()?),
            Scope::Tenant(_) => {
                let mut counts = std::collections::BTreeMap::new();
                let mut page = Page::first(Page::MAX_LIMIT);
                loop {
                    let read = s.instances(scope, InstanceFilter::default(), page)?;
                    for i in &read.items {
                        *counts.entry(i.state.name()).or_insert(0) += 1;
                    }
                    match read.next {
                        Some(next) => page.marker = Some(next),
                        None => return Ok(counts),
                    }
                }
            }
        })
        .await?;
    Ok(Json(views::instance_counts(counts)))
}

#[utoipa::path(
    post,
    path = "/cumulo/v1/instances",
    operation_id = "launch_instances",
    summary = "Launch instances",
    tag = "instances",
    request_body = CreateInstances,
    responses((status = 202, description = "success", body = views::Instances)),
)]
pub async fn create(
    State(state): State<ApiState>,
    caller: Principal,
    JsonBody(body): JsonBody<CreateInstances>,
) -> Result<Response, ApiError> {
    let tenant = match body.tenant {
        Some(t) if caller.project == Some(t) => t,
        Some(t) => {
            caller.require_admin()?;
            t
        }
        None => caller.project()?,
    };
    let seen = crate::api::compute::flavor_scope(&caller)?;
    let by = caller.who();
    let count = body.count.unwrap_or(1);
    if count == 0 || count > Launch::MAX_COUNT {
        return Err(ApiError::BadRequest(format!(
            "count must be from 1 to {}",
            Launch::MAX_COUNT
        )));
    }
    if body.name.trim().is_empty() {
        return Err(ApiError::BadRequest("instances need a name".into()));
    }
    let instances = state
        .cluster(move |s, cluster| {
            s.tenant(tenant)?;
            let workload = s.workload(Scope::Tenant(tenant), body.workload)?;
            let flavor = s.flavor(seen, workload.flavor)?;
            if headroom(s, tenant, flavor.vcpus, flavor.memory_mb)? < u64::from(count) {
                return Err(ApiError::OverLimit(format!(
                    "quota exceeded: no room for {count} instance(s) of flavor {}",
                    flavor.name
                )));
            }
            let launch = Launch {
                tenant,
                workload: workload.id,
                name: body.name,
                count,
                key: None,
                groups: Vec::new(),
                metadata: store::Metadata::new(),
                user: by.user,
                server_group: None,
                reservation: store::Instance::new_reservation(),
                zone: None,
            };
            Ok(cluster.launch(Scope::Tenant(tenant), launch, &by)?)
        })
        .await?;
    let instances = views::Instances {
        instances: instances.iter().map(views::instance).collect(),
    };
    Ok((StatusCode::ACCEPTED, Json(instances)).into_response())
}

#[utoipa::path(
    delete,
    path = "/cumulo/v1/instances/{id}",
    operation_id = "delete_an_instance",
    summary = "Delete an instance",
    tag = "instances",
    params(("id" = Uuid, Path, description = "the object's id")),
    responses((status = 202, description = "success (no body)")),
)]
pub async fn delete(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<StatusCode, ApiError> {
    let id = path_id("instance", &id)?;
    let scope = caller.scope()?;
    let admin = caller.is_admin();
    let by = caller.who();
    state
        .cluster(move |store, cluster| {
            unlocked(store, scope, id, admin)?;
            Ok(cluster.delete(scope, id, &by)?)
        })
        .await?;
    Ok(StatusCode::ACCEPTED)
}

/// What `POST /instances/{id}/{action}` does.
#[derive(Debug, Clone, Copy)]
enum Action {
    Stop,
    Start,
    Node(InstanceAction),
}

async fn act(
    state: ApiState,
    caller: Principal,
    id: String,
    action: Action,
) -> Result<Response, ApiError> {
    let id = path_id("instance", &id)?;
    let scope = caller.scope()?;
    let admin = caller.is_admin();
    let by = caller.who();
    let instance = state
        .cluster(move |store, cluster| {
            unlocked(store, scope, id, admin)?;
            Ok(match action {
                Action::Stop => cluster.stop(scope, id, &by)?,
                Action::Start => cluster.start(scope, id, &by)?,
                Action::Node(action) => cluster.act(scope, id, action, &by)?,
            })
        })
        .await?;
    Ok((StatusCode::ACCEPTED, Json(views::instance(&instance))).into_response())
}

#[utoipa::path(
    post,
    path = "/cumulo/v1/instances/{id}/stop",
    operation_id = "stop_an_instance",
    summary = "Stop an instance",
    tag = "instances",
    params(("id" = Uuid, Path, description = "the object's id")),
    responses((status = 202, description = "success", body = views::Instance)),
)]
pub async fn stop(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Response, ApiError> {
    act(state, caller, id, Action::Stop).await
}

#[utoipa::path(
    post,
    path = "/cumulo/v1/instances/{id}/start",
    operation_id = "start_an_instance",
    summary = "Start an instance",
    tag = "instances",
    params(("id" = Uuid, Path, description = "the object's id")),
    responses((status = 202, description = "success", body = views::Instance)),
)]
pub async fn start(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Response, ApiError> {
    act(state, caller, id, Action::Start).await
}

/// The body of `POST /instances/{id}/rebuild`: all optional (the instance's own image and user
/// data, its name).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = InstanceRebuild)]
pub struct RebuildInstance {
    #[serde(default)]
    #[schema(nullable = false)]
    image: Option<Uuid>,
    #[serde(default)]
    #[schema(nullable = false, max_length = 65535)]
    user_data: Option<String>,
    #[serde(default)]
    #[schema(nullable = false, min_length = 1, max_length = 255, pattern = r"\S")]
    name: Option<String>,
}

/// The most user data a rebuild takes (as a workload).
const MAX_USER_DATA: usize = 65_535;

/// `POST /instances/{id}/rebuild`: re-made on its node from the image (202, state
/// `rebuilding`); 409 unless active or exited on its node; 400 for an image not seen.
#[utoipa::path(
    post,
    path = "/cumulo/v1/instances/{id}/rebuild",
    operation_id = "rebuild_an_instance_on_its_node_from_an_image",
    summary = "Rebuild an instance on its node from an image",
    tag = "instances",
    params(("id" = Uuid, Path, description = "the object's id")),
    request_body = RebuildInstance,
    responses((status = 202, description = "success", body = views::Instance)),
)]
pub async fn rebuild(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody<RebuildInstance>,
) -> Result<Response, ApiError> {
    let id = path_id("instance", &id)?;
    let scope = caller.scope()?;
    let admin = caller.is_admin();
    let by = caller.who();
    if body
        .user_data
        .as_ref()
        .is_some_and(|u| u.len() > MAX_USER_DATA)
    {
        return Err(ApiError::BadRequest(format!(
            "user_data is over {MAX_USER_DATA} bytes"
        )));
    }
    let instance = state
        .cluster(move |store, cluster| {
            let current = unlocked(store, scope, id, admin)?;
            let workload =
                crate::api::compute::rebuild_target(store, &current, body.image, body.user_data)?;
            let rebuild = Rebuild {
                workload,
                name: body.name,
            };
            Ok(cluster.rebuild(scope, id, rebuild, &by)?)
        })
        .await?;
    Ok((StatusCode::ACCEPTED, Json(views::instance(&instance))).into_response())
}

/// The body of `POST /instances/{id}/resize`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = InstanceResize)]
pub struct ResizeInstance {
    flavor: Uuid,
}

/// `POST /instances/{id}/resize`: a stopped instance takes another flavor (202, state
/// `resized`); see `crate::resize`.
#[utoipa::path(
    post,
    path = "/cumulo/v1/instances/{id}/resize",
    operation_id = "resize_a_stopped_instance_to_another_flavor",
    summary = "Resize a stopped instance to another flavor",
    tag = "instances",
    params(("id" = Uuid, Path, description = "the object's id")),
    request_body = ResizeInstance,
    responses((status = 202, description = "success", body = views::Instance)),
)]
pub async fn resize(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody<ResizeInstance>,
) -> Result<Response, ApiError> {
    let id = path_id("instance", &id)?;
    let scope = caller.scope()?;
    let seen = crate::api::compute::flavor_scope(&caller)?;
    let admin = caller.is_admin();
    let by = caller.who();
    let instance = state
        .cluster(move |store, cluster| {
            let current = unlocked(store, scope, id, admin)?;
            let workload = crate::api::compute::resize_target(store, &current, body.flavor, seen)?;
            Ok(cluster.resize(scope, id, ResizeStep::To(workload), &by)?)
        })
        .await?;
    Ok((StatusCode::ACCEPTED, Json(views::instance(&instance))).into_response())
}

async fn resized(
    state: ApiState,
    caller: Principal,
    id: String,
    step: ResizeStep,
) -> Result<Response, ApiError> {
    let id = path_id("instance", &id)?;
    let scope = caller.scope()?;
    let admin = caller.is_admin();
    let by = caller.who();
    let instance = state
        .cluster(move |store, cluster| {
            unlocked(store, scope, id, admin)?;
            Ok(cluster.resize(scope, id, step, &by)?)
        })
        .await?;
    Ok((StatusCode::ACCEPTED, Json(views::instance(&instance))).into_response())
}

/// `POST /instances/{id}/confirm-resize`: keep the new flavor (202, `exited`).
#[utoipa::path(
    post,
    path = "/cumulo/v1/instances/{id}/confirm-resize",
    operation_id = "confirm_a_resize",
    summary = "Confirm a resize",
    tag = "instances",
    params(("id" = Uuid, Path, description = "the object's id")),
    responses((status = 202, description = "success", body = views::Instance)),
)]
pub async fn confirm_resize(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Response, ApiError> {
    resized(state, caller, id, ResizeStep::Confirm).await
}

/// `POST /instances/{id}/revert-resize`: back to the flavor it had (202, `exited`).
#[utoipa::path(
    post,
    path = "/cumulo/v1/instances/{id}/revert-resize",
    operation_id = "revert_a_resize",
    summary = "Revert a resize",
    tag = "instances",
    params(("id" = Uuid, Path, description = "the object's id")),
    responses((status = 202, description = "success", body = views::Instance)),
)]
pub async fn revert_resize(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Response, ApiError> {
    resized(state, caller, id, ResizeStep::Revert).await
}

/// `POST /instances/{id}/restart` (an orderly reboot), `/reboot-hard`, `/pause`, `/unpause`,
/// `/suspend`, `/resume`: an INSTANCE_ACTION to its node.
macro_rules! node_actions {
    ($($name:ident => $action:ident, $path:tt, $id:tt, $summary:tt;)*) => {$(
        #[utoipa::path(
            post,
            path = $path,
            operation_id = $id,
            summary = $summary,
            tag = "instances",
            params(("id" = Uuid, Path, description = "the object's id")),
            responses((status = 202, description = "success", body = views::Instance)),
        )]
        pub async fn $name(
            State(state): State<ApiState>,
            caller: Principal,
            PathParams(id): PathParams<String>,
        ) -> Result<Response, ApiError> {
            act(state, caller, id, Action::Node(InstanceAction::$action)).await
        }
    )*};
}

node_actions! {
    restart => Reboot, "/cumulo/v1/instances/{id}/restart", "restart_an_instance",
        "Restart an instance";
    reboot_hard => RebootHard, "/cumulo/v1/instances/{id}/reboot-hard", "reboot_an_instance_hard",
        "Reboot an instance hard";
    pause => Pause, "/cumulo/v1/instances/{id}/pause", "pause_an_instance", "Pause an instance";
    unpause => Unpause, "/cumulo/v1/instances/{id}/unpause", "unpause_an_instance",
        "Unpause an instance";
    suspend => Suspend, "/cumulo/v1/instances/{id}/suspend", "suspend_an_instance",
        "Suspend an instance";
    resume => Resume, "/cumulo/v1/instances/{id}/resume", "resume_an_instance",
        "Resume an instance";
}
