//! `POST /servers/{id}/action`: stop, start, reboot, pause/unpause, suspend/resume, rebuild,
//! resize with its confirm and revert (202; 204 for a confirmed resize), `lock` and `unlock`
//! ([`super::lock`]), `os-resetState` (admins), `forceDelete` (a delete: servers are not
//! soft-deleted here), `createImage` (202, [`super::snapshot`]) and `os-getConsoleOutput` (200,
//! [`super::console`]).
//!
//! The server is looked up before the body is read (404 for a server the caller cannot see,
//! whatever the action). Admins act on any project's server (`createImage` stays in the token's
//! project: the image would be that project's); others on their project's. A
//! locked server refuses every action but `lock`, `unlock`, `createImage` and
//! `os-getConsoleOutput` to non-admins (409).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::api::extract::{JsonBody, PathParams, path_id};
use crate::api::{ApiError, ApiState, Principal};
use crate::cluster::{InstanceAction, Rebuild, ResizeStep};
use store::{InstanceChange, InstanceState, Scope};

/// The server actions implemented.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Action {
    Stop,
    Start,
    Node(InstanceAction),
    Rebuild(super::rebuild::RebuildRequest),
    /// `resize` to a flavor.
    Resize(Uuid),
    /// `confirmResize` or `revertResize`.
    Resized(ResizeStep),
    /// `lock` (true) or `unlock` (false).
    Lock(bool),
    /// `os-resetState` to `active` or `error` (admins).
    ResetState(InstanceState),
    /// `forceDelete`.
    ForceDelete,
}

/// The state `os-resetState` asks for: `active` or `error`, as Nova's schema allows.
fn reset_state(value: &Value) -> Result<InstanceState, ApiError> {
    match value.get("state").and_then(Value::as_str) {
        Some("active") => Ok(InstanceState::Active),
        Some("error") => Ok(InstanceState::Error("state reset by an admin".into())),
        _ => Err(ApiError::BadRequest(format!(
            "Invalid input for field/attribute state. Value: {}. It is not one of ['active', 'error']",
            value.get("state").unwrap_or(&Value::Null)
        ))),
    }
}

fn parse_action(body: &Value) -> Result<Action, ApiError> {
    let object = body
        .as_object()
        .ok_or_else(|| ApiError::BadRequest("an action body must be a JSON object".into()))?;
    for (key, value) in object {
        match key.as_str() {
            "os-stop" => return Ok(Action::Stop),
            "os-start" => return Ok(Action::Start),
            "pause" => return Ok(Action::Node(InstanceAction::Pause)),
            "unpause" => return Ok(Action::Node(InstanceAction::Unpause)),
            "suspend" => return Ok(Action::Node(InstanceAction::Suspend)),
            "resume" => return Ok(Action::Node(InstanceAction::Resume)),
            "rebuild" => return super::rebuild::parse(value).map(Action::Rebuild),
            "resize" => return super::resize::parse(value).map(Action::Resize),
            "confirmResize" => return Ok(Action::Resized(ResizeStep::Confirm)),
            "revertResize" => return Ok(Action::Resized(ResizeStep::Revert)),
            "lock" => return Ok(Action::Lock(true)),
            "unlock" => return Ok(Action::Lock(false)),
            "os-resetState" => return reset_state(value).map(Action::ResetState),
            "forceDelete" => return Ok(Action::ForceDelete),
            "reboot" => {
                let kind = value.get("type").and_then(Value::as_str);
                return match kind {
                    Some(k) if k.eq_ignore_ascii_case("soft") => {
                        Ok(Action::Node(InstanceAction::Reboot))
                    }
                    Some(k) if k.eq_ignore_ascii_case("hard") => {
                        Ok(Action::Node(InstanceAction::RebootHard))
                    }
                    _ => Err(ApiError::BadRequest(
                        "reboot needs a type of SOFT or HARD".into(),
                    )),
                };
            }
            _ => {}
        }
    }
    let names: Vec<&String> = object.keys().collect();
    Err(ApiError::BadRequest(format!(
        "no supported action in {names:?}: os-stop, os-start, reboot, rebuild, resize, confirmResize, revertResize, pause, unpause, suspend, resume, lock, unlock, os-resetState, forceDelete, createImage and os-getConsoleOutput are"
    )))
}

/// `POST /servers/{id}/action`: 202, or 200 with the log for `os-getConsoleOutput`
/// ([`super::console`]).
pub async fn action(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody<Value>,
) -> Result<Response, ApiError> {
    let id = path_id("server", &id)?;
    // 404 for a server the caller cannot see, whatever the body.
    super::servers::lookup(&state, &caller, id).await?;
    if let Some(args) = body.get("os-getConsoleOutput") {
        return super::console::output(state, caller, id, args).await;
    }
    if let Some(args) = body.get("createImage") {
        return super::snapshot::create_image(state, caller, id, args).await;
    }
    let scope = caller.project_scope(true)?;
    let seen = super::flavor_scope(&caller)?;
    let action = parse_action(&body)?;
    match action {
        Action::Lock(lock) => {
            let caller = caller.clone();
            state
                .store(move |store| super::lock::set(store, &caller, scope, id, lock))
                .await?;
            return Ok(StatusCode::ACCEPTED.into_response());
        }
        Action::ResetState(to) => {
            caller.require_admin()?;
            state.store(move |store| reset(store, id, to)).await?;
            return Ok(StatusCode::ACCEPTED.into_response());
        }
        _ => {}
    }
    let by = caller.who();
    let admin = caller.is_admin();
    let confirm = action == Action::Resized(ResizeStep::Confirm);
    let rebuilt = state
        .cluster(move |store, cluster| {
            super::lock::unlocked(store, scope, id, admin)?;
            match action {
                Action::Lock(_) | Action::ResetState(_) => return Ok(None),
                Action::ForceDelete => {
                    cluster.delete(scope, id, &by)?;
                    return Ok(None);
                }
                Action::Stop => cluster.stop(scope, id, &by)?,
                Action::Start => cluster.start(scope, id, &by)?,
                Action::Node(action) => cluster.act(scope, id, action, &by)?,
                Action::Rebuild(request) => {
                    let current = store.instance(scope, id)?;
                    let workload = super::rebuild::target_workload(
                        store,
                        &current,
                        Some(request.image),
                        request.user_data,
                    )?;
                    let rebuild = Rebuild {
                        workload,
                        name: request.name,
                    };
                    let instance = cluster.rebuild(scope, id, rebuild, &by)?;
                    let workload = store.workload(Scope::All, instance.workload).ok();
                    return Ok(Some((instance, workload)));
                }
                Action::Resize(flavor) => {
                    let current = store.instance(scope, id)?;
                    let workload = super::resize_target(store, &current, flavor, seen)?;
                    cluster.resize(scope, id, ResizeStep::To(workload), &by)?
                }
                Action::Resized(step) => cluster.resize(scope, id, step, &by)?,
            };
            Ok(None)
        })
        .await?;
    // A rebuild answers with the server, as Nova does (no `adminPass`: none is set).
    Ok(match rebuilt {
        Some((instance, workload)) => {
            let nets = {
                let instance = instance.clone();
                state
                    .store(move |store| Ok(super::servers::related(store, &[instance])?))
                    .await?
            };
            let server = super::servers::detailed(
                &state.config.public_url,
                &instance,
                workload.as_ref(),
                caller.is_admin(),
                nets.get(&instance.id),
            );
            (StatusCode::ACCEPTED, Json(json!({"server": server}))).into_response()
        }
        // Nova answers a confirmed resize with 204.
        None if confirm => StatusCode::NO_CONTENT.into_response(),
        None => StatusCode::ACCEPTED.into_response(),
    })
}

/// `os-resetState`: the record's state becomes `to` (its fault cleared), whatever its node says,
/// and stays so until an action or a node's report of a change moves it (as in Nova).
fn reset(store: &dyn store::Store, id: Uuid, to: InstanceState) -> Result<(), ApiError> {
    super::change::retried(store, Scope::All, id, "its state", |_| {
        Ok(InstanceChange {
            state: Some(to.clone()),
            fault: Some(None),
            ..InstanceChange::default()
        })
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_are_parsed() {
        assert_eq!(
            parse_action(&json!({"os-stop": null})).unwrap(),
            Action::Stop
        );
        assert_eq!(
            parse_action(&json!({"os-start": null})).unwrap(),
            Action::Start
        );
        for (body, action) in [
            (json!({"reboot": {"type": "SOFT"}}), InstanceAction::Reboot),
            (
                json!({"reboot": {"type": "HARD"}}),
                InstanceAction::RebootHard,
            ),
            (json!({"pause": null}), InstanceAction::Pause),
            (json!({"unpause": null}), InstanceAction::Unpause),
            (json!({"suspend": null}), InstanceAction::Suspend),
            (json!({"resume": null}), InstanceAction::Resume),
        ] {
            assert_eq!(parse_action(&body).unwrap(), Action::Node(action), "{body}");
        }
        assert_eq!(
            parse_action(&json!({"lock": null})).unwrap(),
            Action::Lock(true)
        );
        assert_eq!(
            parse_action(&json!({"unlock": null})).unwrap(),
            Action::Lock(false)
        );
        assert_eq!(
            parse_action(&json!({"forceDelete": null})).unwrap(),
            Action::ForceDelete
        );
        assert_eq!(
            parse_action(&json!({"os-resetState": {"state": "active"}})).unwrap(),
            Action::ResetState(InstanceState::Active)
        );
        for bad in [
            json!([]),
            json!({"shelve": null}),
            json!({"reboot": {}}),
            json!({"os-resetState": {"state": "deleted"}}),
            json!({"os-resetState": null}),
            json!({}),
        ] {
            assert!(parse_action(&bad).is_err(), "{bad}");
        }
    }
}
