//! The component schemas of the OpenAPI document: the native API's request and response shapes
//! (responses as `native/views.rs` writes them; requests as the `native/` body types read them).

use serde_json::{Map, Value, json};

pub(super) fn r(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

pub(super) fn uuid() -> Value {
    json!({"type": "string", "format": "uuid"})
}

pub(super) fn nullable_uuid() -> Value {
    json!({"type": "string", "format": "uuid", "nullable": true})
}

pub(super) fn string() -> Value {
    json!({"type": "string"})
}

pub(super) fn time() -> Value {
    json!({"type": "string", "format": "date-time"})
}

pub(super) fn int(min: u64, max: Option<u64>) -> Value {
    let mut v = json!({"type": "integer", "minimum": min});
    if let Some(max) = max {
        v["maximum"] = json!(max);
    }
    v
}

pub(super) fn nullable_int(max: u64) -> Value {
    json!({"type": "integer", "minimum": 0, "maximum": max, "nullable": true})
}

pub(super) fn name() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 255, "pattern": "\\S"})
}

/// An object schema: `fields` are (name, schema, required).
pub(super) fn object(fields: &[(&str, Value, bool)], closed: bool) -> Value {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for (field, schema, needed) in fields {
        properties.insert((*field).to_string(), schema.clone());
        if *needed {
            required.push(json!(field));
        }
    }
    let mut v = json!({"type": "object", "properties": properties});
    if !required.is_empty() {
        v["required"] = Value::Array(required);
    }
    if closed {
        v["additionalProperties"] = json!(false);
    }
    v
}

/// Forbids `public: true` together with a `tenant` (an object is one or the other).
pub(super) trait NotBoth {
    fn merge_not_both(self) -> Value;
}

impl NotBoth for Value {
    fn merge_not_both(mut self) -> Value {
        self["not"] = json!({
            "required": ["public", "tenant"],
            "properties": {"public": {"enum": [true]}},
        });
        self
    }
}

/// An instance's fault: why it is in `error` (`null` in every other state).
fn fault() -> Value {
    let mut v = object(
        &[
            ("reason", string(), true),
            ("message", string(), true),
            ("created", time(), true),
        ],
        false,
    );
    v["nullable"] = json!(true);
    v["description"] = json!(
        "Why the instance is in error: the failure's code (a START_FAILURE reason such as \
         launch_failure, or the controller's own), its cause in words, and when it happened. \
         null unless the state is error."
    );
    v
}

pub(super) fn list_of(key: &str, item: &str) -> Value {
    object(
        &[(key, json!({"type": "array", "items": r(item)}), true)],
        false,
    )
}

pub(super) const U32: u64 = u32::MAX as u64;
pub(super) const I64: u64 = i64::MAX as u64;

pub(super) fn schemas() -> Value {
    let quota = object(
        &[
            ("instances", nullable_int(U32), true),
            ("vcpus", nullable_int(U32), true),
            ("memory_mb", nullable_int(I64), true),
        ],
        false,
    );
    let quota_body = object(
        &[
            ("instances", nullable_int(U32), false),
            ("vcpus", nullable_int(U32), false),
            ("memory_mb", nullable_int(I64), false),
        ],
        true,
    );
    let usage = object(
        &[
            ("instances", int(0, None), true),
            ("vcpus", int(0, None), true),
            ("memory_mb", int(0, None), true),
        ],
        false,
    );
    let role = json!({"type": "string", "enum": ["admin", "member"]});
    let kind = json!({"type": "string", "enum": ["qcow2", "raw", "iso"]});
    let state = json!({"type": "string", "enum":
        store::InstanceState::NAMES});
    let mut all = json!({
        "Error": object(&[("error", object(&[
            ("code", int(400, Some(599)), true),
            ("title", string(), true),
            ("message", string(), true),
        ], false), true)], false),
        "Health": object(&[
            ("status", json!({"type": "string", "enum": ["ok", "degraded"]}), true),
            ("store", json!({"type": "boolean"}), true),
            ("scheduler", json!({"type": "boolean"}), true),
        ], false),
        "Quota": quota,
        "QuotaBody": quota_body.clone(),
        "QuotaUsage": object(&[
            ("tenant", uuid(), true),
            ("limits", r("Quota"), true),
            ("usage", usage, true),
        ], false),
        "Tenant": object(&[
            ("id", uuid(), true),
            ("name", string(), true),
            ("quota", r("Quota"), true),
            ("subnet_prefix", int(16, Some(30)), true),
            ("created", time(), true),
        ], false),
        "TenantCreate": object(&[
            ("name", name(), true),
            ("quota", r("QuotaBody"), false),
            ("subnet_prefix", int(16, Some(30)), false),
        ], true),
        "TenantUpdate": object(&[
            ("name", name(), false),
            ("quota", r("QuotaBody"), false),
        ], true),
        "User": object(&[
            ("id", uuid(), true),
            ("name", string(), true),
            ("created", time(), true),
            ("roles", json!({"type": "array", "items": r("RoleAssignment")}), false),
        ], false),
        "UserCreate": object(&[
            ("name", name(), true),
            ("password", json!({"type": "string", "minLength": 1, "maxLength": 1024}), true),
        ], true),
        "UserUpdate": object(&[
            ("password", json!({"type": "string", "minLength": 1, "maxLength": 1024}), true),
        ], true),
        "RoleAssignment": object(&[
            ("user", uuid(), true),
            ("tenant", uuid(), true),
            ("role", role.clone(), true),
        ], false),
        "RoleGrant": object(&[("tenant", uuid(), true), ("role", role, true)], true),
        "Flavor": object(&[
            ("id", uuid(), true),
            ("name", string(), true),
            ("vcpus", int(1, None), true),
            ("memory_mb", int(1, None), true),
            ("disk_gb", int(0, None), true),
        ], false),
        "FlavorCreate": object(&[
            ("name", name(), true),
            ("vcpus", int(1, Some(U32)), true),
            ("memory_mb", int(1, Some(I64)), true),
            ("disk_gb", int(0, Some(I64)), false),
        ], true),
        "Image": object(&[
            ("id", uuid(), true),
            ("name", string(), true),
            ("kind", kind.clone(), true),
            ("reference", string(), true),
            ("tenant", nullable_uuid(), true),
            ("public", json!({"type": "boolean"}), true),
            ("created", time(), true),
        ], false),
        "ImageCreate": object(&[
            ("name", name(), true),
            ("kind", kind, true),
            ("reference", json!({"type": "string", "minLength": 1, "pattern": "\\S"}), true),
            ("public", json!({"type": "boolean"}), false),
            ("tenant", uuid(), false),
        ], true).merge_not_both(),
        "Workload": object(&[
            ("id", uuid(), true),
            ("name", string(), true),
            ("tenant", nullable_uuid(), true),
            ("public", json!({"type": "boolean"}), true),
            ("flavor", uuid(), true),
            ("image", uuid(), true),
            ("user_data", string(), true),
            ("ephemeral", json!({"type": "boolean"}), true),
        ], false),
        "WorkloadCreate": object(&[
            ("name", name(), true),
            ("flavor", uuid(), true),
            ("image", uuid(), true),
            ("user_data", json!({"type": "string", "maxLength": 65535}), false),
            ("public", json!({"type": "boolean"}), false),
            ("tenant", uuid(), false),
            ("ephemeral", json!({"type": "boolean"}), false),
        ], true).merge_not_both(),
        "InstanceRebuild": object(&[
            ("image", uuid(), false),
            ("user_data", json!({"type": "string", "maxLength": 65535}), false),
            ("name", name(), false),
        ], true),
        "WorkloadUpdate": object(&[
            ("name", name(), false),
            ("user_data", json!({"type": "string", "maxLength": 65535}), false),
        ], true),
        "Instance": object(&[
            ("id", uuid(), true),
            ("tenant", uuid(), true),
            ("workload", uuid(), true),
            ("name", string(), true),
            ("state", state, true),
            ("error", json!({"type": "string", "nullable": true}), true),
            ("vcpus", int(0, None), true),
            ("memory_mb", int(0, None), true),
            ("node", nullable_uuid(), true),
            ("ip", json!({"type": "string", "format": "ipv4"}), true),
            ("mac", string(), true),
            ("subnet", string(), true),
            ("cnci", nullable_uuid(), true),
            ("fault", fault(), true),
            ("created", time(), true),
            ("updated", time(), true),
        ], false),
        "InstanceCreate": object(&[
            ("workload", uuid(), true),
            ("name", name(), true),
            ("count", int(1, Some(1000)), false),
            ("tenant", uuid(), false),
        ], true),
        "InstancePage": object(&[
            ("instances", json!({"type": "array", "items": r("Instance")}), true),
            ("next", nullable_uuid(), true),
        ], false),
        "Node": object(&[
            ("id", uuid(), true),
            ("compute", json!({"type": "boolean"}), true),
            ("network", json!({"type": "boolean"}), true),
            ("status", json!({"type": "string", "enum":
                ["ready", "full", "maintenance", "offline", "disconnected"]}), true),
            ("hostname", string(), true),
            ("mem_total_mb", int(0, None), true),
            ("mem_available_mb", int(0, None), true),
            ("disk_total_mb", int(0, None), true),
            ("disk_available_mb", int(0, None), true),
            ("vcpus_total", int(0, None), true),
            ("vcpus_available", int(0, None), true),
            ("load", int(0, None), true),
            ("instances", int(0, None), true),
            ("ips", json!({"type": "array", "items": string()}), true),
            ("connected", time(), true),
            ("last_stats", json!({"type": "string", "format": "date-time", "nullable": true}), true),
        ], false),
        "Cnci": object(&[
            ("id", uuid(), true),
            ("tenant", uuid(), true),
            ("subnet", uuid(), true),
            ("cidr", string(), true),
            ("state", json!({"type": "string", "enum": ["pending", "active", "exited", "failed"]}), true),
            ("ip", json!({"type": "string", "nullable": true}), true),
            ("node", nullable_uuid(), true),
            ("created", time(), true),
            ("updated", time(), true),
        ], false),
        "Event": object(&[
            ("seq", int(0, None), true),
            ("time", time(), true),
            ("tenant", nullable_uuid(), true),
            ("kind", json!({"type": "string", "enum": ["info", "warning", "error"]}), true),
            ("message", string(), true),
        ], false),
        "Trace": object(&[
            ("label", string(), true),
            ("frame", string(), true),
            ("total_ns", int(0, None), true),
            ("hops", json!({"type": "array", "items": object(&[
                ("uuid", uuid(), true),
                ("role", string(), true),
                ("tx_ns", int(0, None), true),
                ("rx_ns", int(0, None), true),
            ], false)}), true),
        ], false),
        "Tenants": list_of("tenants", "Tenant"),
        "Users": list_of("users", "User"),
        "Roles": list_of("roles", "RoleAssignment"),
        "Flavors": list_of("flavors", "Flavor"),
        "Images": list_of("images", "Image"),
        "Workloads": list_of("workloads", "Workload"),
        "Instances": list_of("instances", "Instance"),
        "Nodes": list_of("nodes", "Node"),
        "Cncis": list_of("cncis", "Cnci"),
        "Events": list_of("events", "Event"),
        "Traces": list_of("traces", "Trace"),
        "Cleared": object(&[("deleted", int(0, None), true)], false),
    });
    // Off-host hosts (issue 11), outside the macro above (its recursion limit).
    let off_host = json!({
        "RemoteNode": object(&[
            ("id", uuid(), true),
            ("name", string(), true),
            ("hostname", string(), true),
            ("status", json!({"type": "string", "enum": ["off-host"]}), true),
            ("launcher_on_host", json!({"type": "boolean", "enum": [false]}), true),
            ("libvirt_uri", string(), true),
            ("created", time(), true),
        ], false),
        "RemoteNodeCreate": object(&[
            ("name", string(), true),
            ("launcher_on_host", json!({"type": "boolean", "enum": [false]}), true),
            ("libvirt_uri", string(), true),
        ], true),
        // The instance actions log (issue 20).
        "InstanceAction": object(&[
            ("request_id", string(), true),
            ("instance", uuid(), true),
            ("tenant", uuid(), true),
            ("action", string(), true),
            ("user", nullable_uuid(), true),
            ("project", nullable_uuid(), true),
            ("start", time(), true),
            ("updated", time(), true),
            ("message", json!({"type": "string", "nullable": true}), true),
            ("events", json!({"type": "array", "items": object(&[
                ("name", string(), true),
                ("start", time(), true),
                ("finish", json!({"type": "string", "format": "date-time", "nullable": true}), true),
                ("result", json!({"type": "string", "enum": ["success", "error", null], "nullable": true}), true),
                ("detail", json!({"type": "string", "nullable": true}), true),
            ], false)}), true),
        ], false),
        "InstanceActions": list_of("actions", "InstanceAction"),
        // An instance's serial console log, fetched from its node (issue 20).
        "ConsoleOutput": object(&[("output", string(), true)], true),
        "LauncherCredentials": object(&[
            ("node", uuid(), true),
            ("issued", time(), true),
            ("not_after", time(), true),
        ], false),
    });
    if let (Some(all), Some(more)) = (all.as_object_mut(), off_host.as_object()) {
        all.extend(more.clone());
    }
    all
}
