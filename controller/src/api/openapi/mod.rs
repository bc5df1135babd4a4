//! `GET /openapi.json`: the OpenAPI 3.0 document of the native API (`/cumulo/v1`), built by hand
//! from the same shapes as `native/views.rs` and the request types of `native/`. Keep the three
//! in step: the API tests check that every native route is described.

use axum::Json;
use axum::extract::State;
use serde_json::{Map, Value, json};

mod schemas;

use schemas::{I64, int, r, schemas, uuid};

use super::ApiState;

/// The document.
pub async fn document(State(state): State<ApiState>) -> Json<Value> {
    Json(build(&state.config.public_url))
}

/// What a successful operation answers: a status and, maybe, a schema.
struct Success(&'static str, Option<&'static str>);

/// One operation.
struct Op {
    summary: &'static str,
    tag: &'static str,
    params: Vec<Value>,
    body: Option<&'static str>,
    ok: Success,
    auth: bool,
}

fn path_param(name: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "schema": uuid()})
}

fn query_param(name: &str, schema: Value) -> Value {
    json!({"name": name, "in": "query", "required": false, "schema": schema})
}

fn error_response(description: &str) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": r("Error")}}})
}

fn operation(op: Op) -> Value {
    let mut responses = Map::new();
    let ok = match op.ok.1 {
        Some(schema) => json!({"description": "success",
            "content": {"application/json": {"schema": r(schema)}}}),
        None => json!({"description": "success (no body)"}),
    };
    responses.insert(op.ok.0.to_string(), ok);
    for (code, text) in [
        (
            "400",
            "bad input (malformed JSON, unknown field, invalid value)",
        ),
        ("401", "no valid token or admin certificate"),
        ("403", "not allowed, or over quota"),
        ("404", "no such object, or another tenant's"),
        ("405", "method not allowed"),
        (
            "409",
            "conflict: duplicate name, object in use, stale version, wrong state",
        ),
        ("413", "body over the size limit"),
        ("503", "cluster unavailable or addresses exhausted"),
    ] {
        if op.auth || !matches!(code, "401" | "403") {
            responses.insert(code.to_string(), error_response(text));
        }
    }
    responses.insert("default".into(), error_response("server fault"));
    let mut v = json!({
        "summary": op.summary,
        "tags": [op.tag],
        "operationId": op.summary.to_lowercase().replace([' ', ','], "_").replace('\'', ""),
        "responses": responses,
    });
    if !op.params.is_empty() {
        v["parameters"] = Value::Array(op.params);
    }
    if let Some(schema) = op.body {
        v["requestBody"] = json!({"required": true,
            "content": {"application/json": {"schema": r(schema)}}});
    }
    if !op.auth {
        v["security"] = json!([]);
    }
    v
}

fn op(summary: &'static str, tag: &'static str, ok: Success) -> Op {
    Op {
        summary,
        tag,
        params: Vec::new(),
        body: None,
        ok,
        auth: true,
    }
}

impl Op {
    fn id(mut self, name: &str) -> Op {
        self.params.push(path_param(name));
        self
    }
    fn query(mut self, name: &str, schema: Value) -> Op {
        self.params.push(query_param(name, schema));
        self
    }
    fn body(mut self, schema: &'static str) -> Op {
        self.body = Some(schema);
        self
    }
    fn public(mut self) -> Op {
        self.auth = false;
        self
    }
}

/// The native routes and their operations (path relative to `/cumulo/v1`).
fn paths() -> Vec<(&'static str, Vec<(&'static str, Op)>)> {
    vec![
        (
            "/healthz",
            vec![(
                "get",
                op("Health", "health", Success("200", Some("Health"))).public(),
            )],
        ),
        (
            "/tenants",
            vec![
                (
                    "get",
                    op("List tenants", "tenants", Success("200", Some("Tenants"))),
                ),
                (
                    "post",
                    op("Create a tenant", "tenants", Success("201", Some("Tenant")))
                        .body("TenantCreate"),
                ),
            ],
        ),
        (
            "/tenants/{id}",
            vec![
                (
                    "get",
                    op("Show a tenant", "tenants", Success("200", Some("Tenant"))).id("id"),
                ),
                (
                    "patch",
                    op("Update a tenant", "tenants", Success("200", Some("Tenant")))
                        .id("id")
                        .body("TenantUpdate"),
                ),
                (
                    "delete",
                    op("Delete a tenant", "tenants", Success("204", None)).id("id"),
                ),
            ],
        ),
        (
            "/tenants/{id}/quota",
            vec![
                (
                    "get",
                    op(
                        "Show a quota",
                        "tenants",
                        Success("200", Some("QuotaUsage")),
                    )
                    .id("id"),
                ),
                (
                    "put",
                    op("Set a quota", "tenants", Success("200", Some("QuotaUsage")))
                        .id("id")
                        .body("QuotaBody"),
                ),
            ],
        ),
        (
            "/users",
            vec![
                (
                    "get",
                    op("List users", "users", Success("200", Some("Users"))),
                ),
                (
                    "post",
                    op("Create a user", "users", Success("201", Some("User"))).body("UserCreate"),
                ),
            ],
        ),
        (
            "/users/{id}",
            vec![
                (
                    "get",
                    op("Show a user", "users", Success("200", Some("User"))).id("id"),
                ),
                (
                    "patch",
                    op("Change a password", "users", Success("200", Some("User")))
                        .id("id")
                        .body("UserUpdate"),
                ),
                (
                    "delete",
                    op("Delete a user", "users", Success("204", None)).id("id"),
                ),
            ],
        ),
        (
            "/users/{id}/roles",
            vec![
                (
                    "get",
                    op(
                        "List a user's roles",
                        "users",
                        Success("200", Some("Roles")),
                    )
                    .id("id"),
                ),
                (
                    "post",
                    op("Grant a role", "users", Success("204", None))
                        .id("id")
                        .body("RoleGrant"),
                ),
            ],
        ),
        (
            "/users/{id}/roles/{tenant}/{role}",
            vec![(
                "delete",
                Op {
                    params: vec![
                        path_param("id"),
                        path_param("tenant"),
                        json!({"name": "role", "in": "path", "required": true,
                        "schema": {"type": "string", "enum": ["admin", "member"]}}),
                    ],
                    ..op("Revoke a role", "users", Success("204", None))
                },
            )],
        ),
        (
            "/flavors",
            vec![
                (
                    "get",
                    op("List flavors", "flavors", Success("200", Some("Flavors"))),
                ),
                (
                    "post",
                    op("Create a flavor", "flavors", Success("201", Some("Flavor")))
                        .body("FlavorCreate"),
                ),
            ],
        ),
        (
            "/flavors/{id}",
            vec![
                (
                    "get",
                    op("Show a flavor", "flavors", Success("200", Some("Flavor"))).id("id"),
                ),
                (
                    "delete",
                    op("Delete a flavor", "flavors", Success("204", None)).id("id"),
                ),
            ],
        ),
        (
            "/images",
            vec![
                (
                    "get",
                    op("List images", "images", Success("200", Some("Images"))),
                ),
                (
                    "post",
                    op("Register an image", "images", Success("201", Some("Image")))
                        .body("ImageCreate"),
                ),
            ],
        ),
        (
            "/images/{id}",
            vec![
                (
                    "get",
                    op("Show an image", "images", Success("200", Some("Image"))).id("id"),
                ),
                (
                    "delete",
                    op("Delete an image", "images", Success("204", None)).id("id"),
                ),
            ],
        ),
        (
            "/workloads",
            vec![
                (
                    "get",
                    op(
                        "List workloads",
                        "workloads",
                        Success("200", Some("Workloads")),
                    ),
                ),
                (
                    "post",
                    op(
                        "Create a workload",
                        "workloads",
                        Success("201", Some("Workload")),
                    )
                    .body("WorkloadCreate"),
                ),
            ],
        ),
        (
            "/workloads/{id}",
            vec![
                (
                    "get",
                    op(
                        "Show a workload",
                        "workloads",
                        Success("200", Some("Workload")),
                    )
                    .id("id"),
                ),
                (
                    "patch",
                    op(
                        "Update a workload",
                        "workloads",
                        Success("200", Some("Workload")),
                    )
                    .id("id")
                    .body("WorkloadUpdate"),
                ),
                (
                    "delete",
                    op("Delete a workload", "workloads", Success("204", None)).id("id"),
                ),
            ],
        ),
        (
            "/instances",
            vec![
                (
                    "get",
                    op(
                        "List instances",
                        "instances",
                        Success("200", Some("InstancePage")),
                    )
                    .query("limit", int(1, Some(1000)))
                    .query("marker", uuid())
                    .query("node", uuid()),
                ),
                (
                    "post",
                    op(
                        "Launch instances",
                        "instances",
                        Success("202", Some("Instances")),
                    )
                    .body("InstanceCreate"),
                ),
            ],
        ),
        (
            "/instances/{id}",
            vec![
                (
                    "get",
                    op(
                        "Show an instance",
                        "instances",
                        Success("200", Some("Instance")),
                    )
                    .id("id"),
                ),
                (
                    "delete",
                    op("Delete an instance", "instances", Success("202", None)).id("id"),
                ),
            ],
        ),
        (
            "/instances/{id}/stop",
            vec![(
                "post",
                op(
                    "Stop an instance",
                    "instances",
                    Success("202", Some("Instance")),
                )
                .id("id"),
            )],
        ),
        (
            "/instances/{id}/start",
            vec![(
                "post",
                op(
                    "Start an instance",
                    "instances",
                    Success("202", Some("Instance")),
                )
                .id("id"),
            )],
        ),
        (
            "/instances/{id}/restart",
            vec![(
                "post",
                op(
                    "Restart an instance",
                    "instances",
                    Success("202", Some("Instance")),
                )
                .id("id"),
            )],
        ),
        (
            "/instances/{id}/console",
            vec![(
                "get",
                op(
                    "Show the last lines of an instance's serial console log",
                    "instances",
                    Success("200", Some("ConsoleOutput")),
                )
                .id("id")
                .query("lines", int(0, Some(10_000))),
            )],
        ),
        (
            "/instances/{id}/rebuild",
            vec![(
                "post",
                op(
                    "Rebuild an instance on its node from an image",
                    "instances",
                    Success("202", Some("Instance")),
                )
                .id("id")
                .body("InstanceRebuild"),
            )],
        ),
        (
            "/instances/{id}/actions",
            vec![(
                "get",
                op(
                    "List an instance's actions",
                    "instances",
                    Success("200", Some("InstanceActions")),
                )
                .id("id"),
            )],
        ),
        (
            "/nodes",
            vec![
                (
                    "get",
                    op(
                        "List nodes (SSNTP nodes and off-host hosts)",
                        "nodes",
                        Success("200", Some("Nodes")),
                    ),
                ),
                (
                    "post",
                    op(
                        "Register an off-host host",
                        "nodes",
                        Success("201", Some("RemoteNode")),
                    )
                    .body("RemoteNodeCreate"),
                ),
            ],
        ),
        (
            "/nodes/{id}",
            vec![
                (
                    "get",
                    op("Show a node", "nodes", Success("200", Some("Node"))).id("id"),
                ),
                (
                    "delete",
                    op("Forget an off-host host", "nodes", Success("204", None)).id("id"),
                ),
            ],
        ),
        (
            "/nodes/{id}/credentials",
            vec![(
                "post",
                op(
                    "Renew an off-host host's launcher credentials",
                    "nodes",
                    Success("200", Some("LauncherCredentials")),
                )
                .id("id"),
            )],
        ),
        (
            "/nodes/{id}/evacuate",
            vec![(
                "post",
                op("Evacuate a node", "nodes", Success("202", None)).id("id"),
            )],
        ),
        (
            "/nodes/{id}/restore",
            vec![(
                "post",
                op("Restore a node", "nodes", Success("202", None)).id("id"),
            )],
        ),
        (
            "/cncis",
            vec![(
                "get",
                op("List CNCIs", "cncis", Success("200", Some("Cncis"))),
            )],
        ),
        (
            "/cncis/{id}",
            vec![(
                "get",
                op("Show a CNCI", "cncis", Success("200", Some("Cnci"))).id("id"),
            )],
        ),
        (
            "/events",
            vec![
                (
                    "get",
                    op("List events", "events", Success("200", Some("Events")))
                        .query("after", int(0, Some(I64)))
                        .query("limit", int(1, Some(1000))),
                ),
                (
                    "delete",
                    op("Clear events", "events", Success("200", Some("Cleared"))),
                ),
            ],
        ),
        (
            "/traces",
            vec![(
                "get",
                op("List traces", "traces", Success("200", Some("Traces"))),
            )],
        ),
    ]
}

/// The whole document for a server at `base`.
pub fn build(base: &str) -> Value {
    let mut all = Map::new();
    for (path, ops) in paths() {
        let mut item = Map::new();
        for (method, op) in ops {
            item.insert(method.to_string(), operation(op));
        }
        all.insert(format!("/cumulo/v1{path}"), Value::Object(item));
    }
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "cumulo native API",
            "version": "1.0.0",
            "description": "cumulo-controller's native REST API. Authenticate with a token from \
                POST /v3/auth/tokens (OpenStack Identity v3) in X-Auth-Token, or with the admin \
                client certificate over TLS. Admins see every tenant; members their project.",
        },
        "servers": [{"url": base}],
        "security": [{"token": []}],
        "paths": all,
        "components": {
            "securitySchemes": {
                "token": {"type": "apiKey", "in": "header", "name": "X-Auth-Token"},
            },
            "schemas": schemas(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `$ref` names a schema that exists.
    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(map) => {
                if let Some(Value::String(target)) = map.get("$ref") {
                    out.push(target.clone());
                }
                map.values().for_each(|x| refs(x, out));
            }
            Value::Array(items) => items.iter().for_each(|x| refs(x, out)),
            _ => {}
        }
    }

    #[test]
    fn references_resolve_and_operation_ids_are_unique() {
        let doc = build("http://127.0.0.1:1");
        let mut found = Vec::new();
        refs(&doc, &mut found);
        assert!(!found.is_empty());
        for target in found {
            let name = target.trim_start_matches("#/components/schemas/");
            assert!(doc["components"]["schemas"].get(name).is_some(), "{target}");
        }
        let mut ids = Vec::new();
        for item in doc["paths"].as_object().unwrap().values() {
            for op in item.as_object().unwrap().values() {
                ids.push(op["operationId"].as_str().unwrap().to_string());
            }
        }
        let count = ids.len();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), count);
    }
}
