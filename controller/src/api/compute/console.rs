//! The `os-getConsoleOutput` server action: `{"os-getConsoleOutput": {"length": N}}` → `200
//! {"output": "..."}`, the last N lines of the server's serial console log, fetched from its
//! node ([`Cluster::console`](crate::cluster::Cluster::console)).
//!
//! `length` as Nova takes it: an integer or a string of one; absent, null or `-1` for all of
//! the log (here: at most [`CONSOLE_MAX_LINES`] lines and 1 MiB, as any larger length);
//! anything else, or below -1, is 400. A server on no node is 409 (Nova's "not ready"), an
//! off-host one 409, a node that cannot be reached 503.

use axum::Json;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::api::{ApiError, ApiState, Principal};
use crate::cluster::CONSOLE_MAX_LINES;

/// The lines `length` asks for (see the module docs).
pub fn parse_length(args: &Value) -> Result<usize, ApiError> {
    let bad = || {
        ApiError::BadRequest(format!(
            "os-getConsoleOutput: length must be an integer of -1 or more, or null (got {args})"
        ))
    };
    let length = match args {
        Value::Null => None,
        Value::Object(map) => {
            if let Some(key) = map.keys().find(|k| *k != "length") {
                return Err(ApiError::BadRequest(format!(
                    "os-getConsoleOutput: unknown field {key:?}"
                )));
            }
            map.get("length").cloned()
        }
        _ => return Err(bad()),
    };
    let n: i64 = match length {
        None | Some(Value::Null) => -1,
        Some(Value::Number(n)) => n.as_i64().ok_or_else(bad)?,
        Some(Value::String(s)) => s.trim().parse().map_err(|_| bad())?,
        Some(_) => return Err(bad()),
    };
    match n {
        -1 => Ok(CONSOLE_MAX_LINES),
        n if n < -1 => Err(bad()),
        n => Ok(usize::try_from(n)
            .unwrap_or(usize::MAX)
            .min(CONSOLE_MAX_LINES)),
    }
}

/// `POST /servers/{id}/action` with `os-getConsoleOutput` (its value is `args`).
pub async fn output(
    state: ApiState,
    caller: Principal,
    id: Uuid,
    args: &Value,
) -> Result<Response, ApiError> {
    let lines = parse_length(args)?;
    let scope = caller.project_scope(true)?;
    let output = state
        .cluster(move |_, cluster| Ok(cluster.console(scope, id, lines)?))
        .await?;
    Ok(Json(json!({ "output": output })).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_as_nova_takes_them() {
        let all = CONSOLE_MAX_LINES;
        for (args, lines) in [
            (json!({"length": 5}), 5),
            (json!({"length": "7"}), 7),
            (json!({"length": 0}), 0),
            (json!({"length": null}), all),
            (json!({"length": -1}), all),
            (json!({"length": "-1"}), all),
            (json!({}), all),
            (json!(null), all),
            (json!({"length": 1_000_000_000}), all),
        ] {
            assert_eq!(parse_length(&args).unwrap(), lines, "{args}");
        }
        for bad in [
            json!({"length": -2}),
            json!({"length": "-5"}),
            json!({"length": "x"}),
            json!({"length": 1.5}),
            json!({"length": true}),
            json!({"lines": 3}),
            json!([]),
        ] {
            assert_eq!(
                parse_length(&bad).err().map(|e| e.status().as_u16()),
                Some(400),
                "{bad}"
            );
        }
    }
}
