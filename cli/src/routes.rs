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
/// CNCIs.
pub const CNCIS: &str = "/cumulo/v1/cncis";
/// Events.
pub const EVENTS: &str = "/cumulo/v1/events";
/// Traces.
pub const TRACES: &str = "/cumulo/v1/traces";

/// One instance.
pub fn instance(id: &str) -> String {
    format!("{INSTANCES}/{id}")
}

/// An action on an instance (`stop`, `start`, `restart`).
pub fn instance_action(id: &str, action: &str) -> String {
    format!("{INSTANCES}/{id}/{action}")
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn listings_and_items_are_unwrapped() {
        assert_eq!(items(&json!([1, 2])).len(), 2);
        assert_eq!(items(&json!({"next": null, "instances": [1]})).len(), 1);
        assert!(items(&json!("x")).is_empty());
        assert_eq!(item(json!({"instance": {"id": "a"}}))["id"], "a");
        assert_eq!(item(json!({"id": "b", "x": {}}))["id"], "b");
    }
}
