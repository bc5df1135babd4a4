//! `POST /servers/{id}/action`: stop, start, reboot, pause/unpause, suspend/resume, rebuild,
//! resize with its confirm and revert (202; 204 for a confirmed resize), `createImage` (202,
//! [`super::snapshot`]) and `os-getConsoleOutput` (200, [`super::console`]).
//!
//! Actions act in the token's project only, admins included (see [`super::launch`]).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::api::extract::{JsonBody, PathParams, path_id};
use crate::api::{ApiError, ApiState, Principal};
use crate::cluster::{InstanceAction, Rebuild, ResizeStep};
use store::Scope;

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
        "no supported action in {names:?}: os-stop, os-start, reboot, rebuild, resize, confirmResize, revertResize, pause, unpause, suspend, resume, createImage and os-getConsoleOutput are"
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
    if let Some(args) = body.get("os-getConsoleOutput") {
        return super::console::output(state, caller, id, args).await;
    }
    if let Some(args) = body.get("createImage") {
        return super::snapshot::create_image(state, caller, id, args).await;
    }
    let scope = caller.project_scope(false)?;
    let action = parse_action(&body)?;
    let by = caller.who();
    let confirm = action == Action::Resized(ResizeStep::Confirm);
    let rebuilt = state
        .cluster(move |store, cluster| {
            match action {
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
                    let workload = super::resize_target(store, &current, flavor)?;
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
        for bad in [
            json!([]),
            json!({"shelve": null}),
            json!({"reboot": {}}),
            json!({}),
        ] {
            assert!(parse_action(&bad).is_err(), "{bad}");
        }
    }
}
