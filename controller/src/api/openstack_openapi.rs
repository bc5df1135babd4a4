//! `GET /openapi-openstack.json`: the OpenAPI 3.1 document of the OpenStack-compatible routes
//! (Identity, Compute, Image, Networking, Block Storage), written from the route tables the
//! routers are built from (`table.rs`), so that it lists exactly the routes served.
//!
//! A document of its own rather than more paths in `/openapi.json`: that one is derived by
//! utoipa from the native handlers' request and view types, schema for schema, and
//! `scripts/schemathesis.sh` holds the native API to it; this one says, for each route, its
//! method and path, path parameters, the API reference's operation name, the success and error
//! statuses and the family's error shape, but leaves request and answer bodies as loose
//! `object`s (OpenStack's own API reference is the authority on those, and deriving them would
//! mean a typed body for each of the hand-written JSON handlers). Merging the two would either
//! weaken the native document or point schemathesis at schemas that do not constrain anything.

use axum::Json;
use axum::extract::State;
use serde_json::{Map, Value, json};

use super::ApiState;
use super::table::{Body, Route};

/// Every route of the OpenStack-compatible families, in the order the routers add them.
pub fn routes() -> Vec<Route> {
    [
        super::identity::table(),
        super::compute::table(),
        super::image::table(),
        super::network::table(),
        super::volume::table(),
    ]
    .iter()
    .flat_map(|table| table.routes().to_vec())
    .collect()
}

/// What a path parameter names.
fn param_description(name: &str) -> &'static str {
    match name {
        "id" => {
            "the object's id (a UUID for most objects; flavors, roles and hypervisors also take other ids)"
        }
        "project" => "a project's id",
        "target" => "the project whose quota is read or set",
        "user" => "a user's id",
        "role" => "a role's id (its name)",
        "cred" => "an application credential's id",
        "key" => "a metadata or extra spec key",
        "name" => "a key pair's name",
        "network" => "a network's label (`private`)",
        "volume" => "a volume's id",
        "request_id" => "a request id (`req-<uuid>`)",
        "member" => "the member project's id",
        "tag" => "an image tag",
        "class" => "a quota class",
        "host" => "a compute host's name or id",
        "action" => "`disable`, `disable-log-reason` or `enable`",
        _ => "a path parameter",
    }
}

/// A content map for `body`, if it has one.
fn content(body: Body) -> Option<Value> {
    match body {
        Body::Empty => None,
        Body::Json => Some(json!({"application/json": {"schema": {"type": "object"}}})),
        Body::JsonPatch => Some(json!({
            "application/openstack-images-v2.1-json-patch": {
                "schema": {"type": "array", "items": {"type": "object"}}
            }
        })),
        Body::Octets => Some(json!({
            "application/octet-stream": {
                "schema": {"type": "string", "contentMediaType": "application/octet-stream"}
            }
        })),
    }
}

/// What an error status means, in broad terms.
fn error_description(status: u16) -> &'static str {
    match status {
        400 => "bad input: malformed body, wrong types, invalid values or query parameters",
        401 => "no valid token",
        403 => {
            "not allowed (a member's or reader's request for an admin's route; a change without the member role), or over a quota (Compute)"
        }
        404 => "no such object, or one the caller may not see",
        406 => "a microversion this server does not serve",
        408 => "the body stopped arriving",
        409 => "conflict: a name taken, an object in use, a state that does not allow it",
        413 => "body over the size limit, or over a quota (Block Storage)",
        415 => "a content type the route does not take",
        429 => "login attempts over the limit (`Retry-After`)",
        503 => {
            "the cluster cannot take it now (scheduler not connected, password hashing queue full)"
        }
        _ => "an error",
    }
}

/// One operation of the document.
fn operation(route: &Route) -> Value {
    let doc = &route.doc;
    let mut op = Map::new();
    // `get_compute_v2_1_servers__id_`; a path with a trailing slash (`/compute/`) is its
    // index, apart from the one without (`/compute`).
    let mut id = format!("{}{}", route.verb.as_str(), route.path)
        .replace(|c: char| !c.is_ascii_alphanumeric(), "_")
        .trim_end_matches('_')
        .to_string();
    if route.path.ends_with('/') {
        id.push_str("_index");
    }
    op.insert("operationId".into(), json!(id));
    op.insert("summary".into(), json!(doc.summary));
    op.insert("tags".into(), json!([route.family.tag()]));
    if let Some(name) = doc.name {
        op.insert("x-openstack-operation".into(), json!(name));
    }
    if !doc.actions.is_empty() {
        op.insert("x-openstack-actions".into(), json!(doc.actions));
        op.insert(
            "description".into(),
            json!(format!(
                "The request body names the operation: {}.",
                doc.actions.join("; ")
            )),
        );
    }
    let params: Vec<Value> = route
        .params()
        .into_iter()
        .map(|name| {
            json!({
                "name": name,
                "in": "path",
                "required": true,
                "description": param_description(name),
                "schema": {"type": "string"},
            })
        })
        .collect();
    if !params.is_empty() {
        op.insert("parameters".into(), json!(params));
    }
    if let Some(content) = content(route.request()) {
        op.insert(
            "requestBody".into(),
            json!({"required": true, "content": content}),
        );
    }
    let mut responses = Map::new();
    for status in std::iter::once(doc.status).chain(doc.also.iter().copied()) {
        let mut ok = json!({"description": "success"});
        if let Some(content) = content(route.answer()).filter(|_| status != 204) {
            ok["content"] = content;
        }
        responses.insert(status.to_string(), ok);
    }
    let error = json!({"$ref": format!("#/components/schemas/{}", route.family.error_schema())});
    for status in route.errors() {
        responses.insert(
            status.to_string(),
            json!({
                "description": error_description(status),
                "content": {"application/json": {"schema": error}},
            }),
        );
    }
    responses.insert(
        "default".into(),
        json!({
            "description": "server fault (the message is generic; the controller logs the cause)",
            "content": {"application/json": {"schema": error}},
        }),
    );
    op.insert("responses".into(), Value::Object(responses));
    if doc.public {
        op.insert("security".into(), json!([{}]));
    }
    Value::Object(op)
}

/// The error bodies, one shape a family (Identity and Image share Keystone's).
fn error_schemas() -> Value {
    let fault = |names: &[&str], what: &str| {
        json!({
            "description": what,
            "type": "object",
            "minProperties": 1,
            "maxProperties": 1,
            "propertyNames": {"enum": names},
            "additionalProperties": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {
                    "code": {"type": "integer", "minimum": 400, "maximum": 599},
                    "message": {"type": "string"},
                },
            },
        })
    };
    json!({
        "KeystoneError": {
            "description": "Keystone's error shape, which the Identity and Image routes answer: {\"error\": {\"code\", \"title\", \"message\"}}",
            "type": "object",
            "required": ["error"],
            "properties": {"error": {
                "type": "object",
                "required": ["code", "title", "message"],
                "properties": {
                    "code": {"type": "integer", "minimum": 400, "maximum": 599},
                    "title": {"type": "string"},
                    "message": {"type": "string"},
                },
            }},
        },
        "NovaFault": fault(
            &["badRequest", "unauthorized", "forbidden", "itemNotFound", "methodNotAllowed",
              "notAcceptable", "conflictingRequest", "requestTimeout", "unsupportedMediaType",
              "overLimit", "serviceUnavailable", "computeFault"],
            "Nova's error shape, keyed by the fault's name: {\"itemNotFound\": {\"code\": 404, \"message\": \"...\"}}",
        ),
        "CinderFault": fault(
            &["badRequest", "unauthorized", "forbidden", "itemNotFound", "badMethod",
              "notAcceptable", "conflictingRequest", "overLimit", "badMediaType",
              "serviceUnavailable", "computeFault"],
            "Cinder's error shape, keyed by the fault's name: {\"itemNotFound\": {\"code\": 404, \"message\": \"...\"}}",
        ),
        "NeutronError": {
            "description": "Neutron's error shape: {\"NeutronError\": {\"type\": \"SecurityGroupRuleExists\", \"message\": \"...\", \"detail\": \"\"}}",
            "type": "object",
            "required": ["NeutronError"],
            "properties": {"NeutronError": {
                "type": "object",
                "required": ["type", "message", "detail"],
                "properties": {
                    "type": {"type": "string"},
                    "message": {"type": "string"},
                    "detail": {"type": "string"},
                },
            }},
        },
    })
}

/// The whole document for a server at `base`.
pub fn build(base: &str) -> Value {
    let mut paths = Map::new();
    for route in routes() {
        let item = paths
            .entry(route.path)
            .or_insert_with(|| Value::Object(Map::new()));
        item[route.verb.as_str()] = operation(&route);
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "cumulo's OpenStack-compatible API",
            "version": "1.0.0",
            "description": "The OpenStack Identity v3, Compute v2.1, Image v2, Networking v2.0 and \
                Block Storage v3 subsets cumulo-controller serves: every route, with its \
                OpenStack API reference name (x-openstack-operation, or x-openstack-actions for \
                the operations an action body chooses between), success and error statuses and \
                each family's error shape. Request and answer bodies are described only as JSON \
                objects: see OpenStack's API reference and cumulo's docs/api.md for their fields. \
                Authenticate with a token from POST /v3/auth/tokens in X-Auth-Token. A GET \
                route also answers HEAD, without its body. The native API is at /openapi.json.",
        },
        "servers": [{"url": base}],
        "tags": [
            {"name": "Identity v3"},
            {"name": "Compute v2.1"},
            {"name": "Image v2"},
            {"name": "Networking v2.0"},
            {"name": "Block Storage v3"},
        ],
        "security": [{"token": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"token": {"type": "apiKey", "in": "header", "name": "X-Auth-Token"}},
            "schemas": error_schemas(),
        },
    })
}

/// The document.
pub async fn document(State(state): State<ApiState>) -> Json<Value> {
    Json(build(&state.config.public_url))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_one_operation_with_unique_ids() {
        let routes = routes();
        let doc = build("http://127.0.0.1:1");
        let mut ids = Vec::new();
        let mut count = 0;
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                count += 1;
                assert!(
                    routes
                        .iter()
                        .any(|r| r.path == path && r.verb.as_str() == method),
                    "{method} {path}"
                );
                ids.push(op["operationId"].as_str().unwrap().to_string());
                for target in op["responses"]
                    .as_object()
                    .unwrap()
                    .values()
                    .filter_map(|r| r.pointer("/content/application~1json/schema/$ref"))
                {
                    let name = target.as_str().unwrap();
                    let name = name.trim_start_matches("#/components/schemas/");
                    assert!(doc["components"]["schemas"].get(name).is_some(), "{name}");
                }
            }
        }
        assert_eq!(count, routes.len());
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), count);
    }

    #[test]
    fn operations_say_their_statuses_parameters_and_shapes() {
        let doc = build("http://127.0.0.1:1");
        let show = &doc["paths"]["/compute/v2.1/servers/{id}"]["get"];
        assert_eq!(show["x-openstack-operation"], "Show Server Details");
        assert_eq!(show["parameters"][0]["name"], "id");
        assert!(show["responses"]["200"].is_object());
        assert_eq!(
            show["responses"]["404"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/NovaFault"
        );
        assert!(show["responses"]["406"].is_object());
        assert!(show.get("security").is_none());
        let login = &doc["paths"]["/v3/auth/tokens"]["post"];
        assert_eq!(login["security"], json!([{}]));
        assert!(login["responses"]["201"].is_object());
        assert!(login["responses"].get("401").is_none());
        assert!(login["x-openstack-actions"].as_array().unwrap().len() > 1);
        let rule = &doc["paths"]["/network/v2.0/security-group-rules/{id}"]["delete"];
        assert!(rule["responses"]["204"].get("content").is_none());
        assert_eq!(
            rule["responses"]["404"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/NeutronError"
        );
        let upload = &doc["paths"]["/image/v2/images/{id}/file"]["put"];
        assert!(upload["requestBody"]["content"]["application/octet-stream"].is_object());
        assert!(doc["paths"]["/v3/auth/tokens"]["head"].is_object());
    }

    #[test]
    fn path_parameters_are_whole_segments() {
        for route in routes() {
            assert!(route.path.starts_with('/'), "{}", route.path);
            for segment in route.path.split('/') {
                let braces = segment.matches(['{', '}']).count();
                assert!(
                    braces == 0 || (segment.starts_with('{') && segment.ends_with('}')),
                    "{}",
                    route.path
                );
            }
            assert!(route.doc.status < 400, "{}", route.path);
            assert!(route.doc.errors.iter().all(|s| *s >= 400));
        }
    }
}
