//! The controller's native API routes the CLI uses, and how their answers are unwrapped.

use serde_json::Value;

/// The native API's prefix.
pub const PREFIX: &str = "/cumulo/v1";
/// Health check (no login).
pub const HEALTHZ: &str = "/cumulo/v1/healthz";
/// Tenants.
pub const TENANTS: &str = "/cumulo/v1/tenants";
/// Users.
pub const USERS: &str = "/cumulo/v1/users";
/// Flavors.
pub const FLAVORS: &str = "/cumulo/v1/flavors";
/// Images.
pub const IMAGES: &str = "/cumulo/v1/images";
/// Workloads.
pub const WORKLOADS: &str = "/cumulo/v1/workloads";
/// Instances.
pub const INSTANCES: &str = "/cumulo/v1/instances";
/// Nodes.
pub const NODES: &str = "/cumulo/v1/nodes";
/// Join tokens.
pub const JOIN_TOKENS: &str = "/cumulo/v1/join-tokens";
/// The hosts that joined with a token.
pub const JOINED_NODES: &str = "/cumulo/v1/joined-nodes";
/// CNCIs.
pub const CNCIS: &str = "/cumulo/v1/cncis";
/// Events.
pub const EVENTS: &str = "/cumulo/v1/events";
/// Traces.
pub const TRACES: &str = "/cumulo/v1/traces";
/// The Networking API's networks (the external one holds the floating IP pool).
pub const NETWORKS: &str = "/network/v2.0/networks";
/// The Networking API's floating IPs.
pub const FLOATING_IPS: &str = "/network/v2.0/floatingips";

/// One instance.
pub fn instance(id: &str) -> String {
    format!("{INSTANCES}/{id}")
}

/// An action on an instance (`stop`, `start`, `restart`).
pub fn instance_action(id: &str, action: &str) -> String {
    format!("{INSTANCES}/{id}/{action}")
}

/// The last `lines` lines of an instance's serial console log.
pub fn instance_console(id: &str, lines: usize) -> String {
    format!("{INSTANCES}/{id}/console?lines={lines}")
}

/// An instance's actions log.
pub fn instance_actions(id: &str) -> String {
    format!("{INSTANCES}/{id}/actions")
}

/// A user's roles (POST `{"tenant": .., "role": ..}` grants one).
pub fn roles(user: &str) -> String {
    format!("{USERS}/{user}/roles")
}

/// A JSON object of the fields that are set: the native API refuses `null` for an optional
/// field (absent means "not set").
pub fn present(fields: &[(&str, Option<Value>)]) -> Value {
    Value::Object(
        fields
            .iter()
            .filter_map(|(k, v)| v.clone().map(|v| (k.to_string(), v)))
            .collect(),
    )
}

/// A tenant's quota.
pub fn quota(tenant: &str) -> String {
    format!("{TENANTS}/{tenant}/quota")
}

/// The objects of a listing: the answer itself if it is an array, else the first array among
/// its values (`{"instances": [...]}`).
pub fn items(listing: &Value) -> Vec<Value> {
    match listing {
        Value::Array(items) => items.clone(),
        Value::Object(map) => map
            .values()
            .find_map(|v| v.as_array().cloned())
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// The object of a single-object answer: the answer itself if it has an `id`, else its only
/// object value (`{"instance": {...}}`).
pub fn item(answer: Value) -> Value {
    if answer.get("id").is_some() {
        return answer;
    }
    match &answer {
        Value::Object(map) if map.len() == 1 => map
            .values()
            .next()
            .filter(|v| v.is_object())
            .cloned()
            .unwrap_or(answer),
        _ => answer,
    }
}

/// An instance's fault as one line, `reason: message`: from its `fault`, else (a controller
/// without faults) its `error`.
pub fn fault_text(instance: &Value) -> Option<String> {
    let fault = &instance["fault"];
    match (fault["reason"].as_str(), fault["message"].as_str()) {
        (Some(reason), Some(message)) => Some(format!("{reason}: {message}")),
        _ => instance["error"].as_str().map(str::to_string),
    }
}

/// An instance action as one row: its fields, with `result` (`error` if an event failed,
/// `in progress` while one is unfinished, else `success`) and `detail` (the failed events'
/// `event: why`).
pub fn action_row(action: &Value) -> Value {
    let events = action["events"].as_array().cloned().unwrap_or_default();
    let failed: Vec<String> = events
        .iter()
        .filter(|e| e["result"] == "error")
        .map(|e| {
            let name = e["name"].as_str().unwrap_or_default();
            match e["detail"].as_str() {
                Some(why) => format!("{name}: {why}"),
                None => name.to_string(),
            }
        })
        .collect();
    let result = if !failed.is_empty() {
        "error"
    } else if events.iter().any(|e| e["finish"].is_null()) {
        "in progress"
    } else {
        "success"
    };
    let mut row = action.clone();
    row["result"] = Value::from(result);
    row["detail"] = Value::from(failed.join("; "));
    row
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_action_row_says_how_it_went() {
        let event = |name: &str, finish: Value, result: Value, detail: Value| json!({"name": name, "finish": finish, "result": result, "detail": detail});
        let done = event(
            "controller_start",
            json!("t"),
            json!("success"),
            Value::Null,
        );
        let open = event("node_start", Value::Null, Value::Null, Value::Null);
        let failed = event("node_start", json!("t"), json!("error"), json!("no image"));
        let row = action_row(&json!({"action": "start", "events": [done, open]}));
        assert_eq!(
            (&row["result"], &row["detail"]),
            (&json!("in progress"), &json!(""))
        );
        let row = action_row(&json!({"action": "start", "events": [done, failed]}));
        assert_eq!(row["result"], "error");
        assert_eq!(row["detail"], "node_start: no image");
        assert_eq!(row["action"], "start");
        let row = action_row(&json!({"action": "stop", "events": [done]}));
        assert_eq!(row["result"], "success");
    }

    #[test]
    fn listings_and_items_are_unwrapped() {
        assert_eq!(items(&json!([1, 2])).len(), 2);
        assert_eq!(items(&json!({"next": null, "instances": [1]})).len(), 1);
        assert!(items(&json!("x")).is_empty());
        assert_eq!(item(json!({"instance": {"id": "a"}}))["id"], "a");
        assert_eq!(item(json!({"id": "b", "x": {}}))["id"], "b");
    }
}
