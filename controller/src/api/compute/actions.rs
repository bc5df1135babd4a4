//! `GET /servers/{id}/os-instance-actions` and `GET /servers/{id}/os-instance-actions/{request_id}`:
//! the instance actions log in Nova's shape (`instanceActions`, `instanceAction` with `events`).
//!
//! Who sees what: a project's members its servers' actions, admins any server's (as `GET
//! /servers/{id}`). Unlike Nova at 2.1, where the default policy shows events to admins only,
//! every reader gets the events, `traceback` included: ours holds the failure's cause in words
//! (the same text as the server's `fault.message`), never a stack trace. The actions of a deleted
//! server stay readable (Nova from 2.21) while the store keeps them (`store::ActionStore`). An
//! unknown server, or one the caller may not see, is 404; so is an unknown request id.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use crate::api::clock::nova_micro;
use crate::api::extract::{PathParams, path_id};
use crate::api::{ApiError, ApiState, Principal};
use store::{ActionEvent, InstanceAction, StoreError};

/// An action in the list's shape.
fn summary(a: &InstanceAction) -> Value {
    json!({
        "action": a.action,
        "instance_uuid": a.instance,
        "message": a.message,
        "project_id": a.project,
        "request_id": a.request_id,
        "start_time": nova_micro(a.start),
        "user_id": a.user,
    })
}

/// An event in Nova's shape.
fn event(e: &ActionEvent) -> Value {
    json!({
        "event": e.name,
        "start_time": nova_micro(e.start),
        "finish_time": e.finish.map(nova_micro),
        "result": e.result.map(|r| r.as_str()),
        "traceback": e.detail,
    })
}

/// `GET /servers/{id}/os-instance-actions`: the server's actions, newest first.
pub async fn list(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let id = path_id("server", &id)?;
    let scope = caller.project_scope(true)?;
    let actions = state
        .store(move |s| Ok(s.instance_actions(scope, id)?))
        .await?;
    let actions: Vec<Value> = actions.iter().map(summary).collect();
    Ok(Json(json!({"instanceActions": actions})))
}

/// `GET /servers/{id}/os-instance-actions/{request_id}`: one action with its events.
pub async fn show(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams((id, request_id)): PathParams<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let id = path_id("server", &id)?;
    let scope = caller.project_scope(true)?;
    let action = state
        .store(move |s| match s.instance_action(scope, id, &request_id) {
            Err(StoreError::NotFound {
                kind: "instance action",
                ..
            }) => Err(ApiError::NotFound(format!("Action {request_id} not found"))),
            other => Ok(other?),
        })
        .await?;
    let mut body = summary(&action);
    body["events"] = action.events.iter().map(event).collect();
    Ok(Json(json!({"instanceAction": body})))
}
