//! `GET /openapi.json`: the OpenAPI document of the native API (`/cumulo/v1`), derived by utoipa
//! from the handlers' `#[utoipa::path]` attributes and the `ToSchema` request and view types
//! they read and answer with, so that it cannot drift from them. Added here: the error answers
//! every operation may give (one list, [`ERRORS`]), the token security scheme, the servers (the
//! controller's public URL, known at run time), and what utoipa cannot say (see
//! [`one_owner`]).

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder, ServerBuilder};
use utoipa::{Modify, OpenApi, ToSchema};

use super::{catalog, cluster, instances, joins, tenants, users, views, workloads};
use crate::api::ApiState;

/// The native API's error body (`{"error": {...}}`, as `ApiError` writes it on native routes).
#[derive(ToSchema)]
#[allow(dead_code)]
struct Error {
    error: ErrorDetail,
}

/// An error: the HTTP status, its reason phrase, and what went wrong in words.
#[derive(ToSchema)]
#[allow(dead_code)]
struct ErrorDetail {
    #[schema(minimum = 400, maximum = 599)]
    code: u16,
    title: String,
    message: String,
}

/// The error answers of every operation: (status, description, only on authenticated ones).
const ERRORS: [(&str, &str, bool); 9] = [
    (
        "400",
        "bad input (malformed JSON, unknown field, invalid value)",
        false,
    ),
    ("401", "no valid token or admin certificate", true),
    ("403", "not allowed, or over quota", true),
    ("404", "no such object, or another tenant's", false),
    ("405", "method not allowed", false),
    (
        "409",
        "conflict: duplicate name, object in use, stale version, wrong state",
        false,
    ),
    ("413", "body over the size limit", false),
    (
        "503",
        "cluster unavailable, addresses exhausted, or the controller stopping",
        false,
    ),
    ("default", "server fault", false),
];

/// Adds [`ERRORS`] to every operation (401 and 403 only to those that need a token: those that
/// do not set their own, empty, security; or that list them themselves) and the `token`
/// security scheme.
struct Common;

impl Modify for Common {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "token",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new("X-Auth-Token"))),
        );
        doc.security = Some(vec![SecurityRequirement::new(
            "token",
            Vec::<String>::new(),
        )]);
        for item in doc.paths.paths.values_mut() {
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ];
            for op in operations.into_iter().flatten() {
                let authenticated = op.security.is_none();
                for (status, description, needs_token) in ERRORS {
                    // An operation without a token gives these only where it says so (the
                    // join, whose token is in its body: 401).
                    if needs_token && !authenticated && !op.responses.responses.contains_key(status)
                    {
                        continue;
                    }
                    let body = ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("Error")))
                        .build();
                    let response = ResponseBuilder::new()
                        .description(description)
                        .content("application/json", body)
                        .build();
                    op.responses
                        .responses
                        .insert(status.to_string(), response.into());
                }
            }
        }
    }
}

/// The native API.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "cumulo native API",
        version = "1.0.0",
        description = "cumulo-controller's native REST API. Authenticate with a token from \
            POST /v3/auth/tokens (OpenStack Identity v3) in X-Auth-Token, or with the admin \
            client certificate over TLS. Admins see every tenant; members their project.",
    ),
    paths(
        super::healthz,
        tenants::list,
        tenants::create,
        tenants::show,
        tenants::update,
        tenants::delete,
        tenants::quota,
        tenants::set_quota,
        users::list,
        users::create,
        users::show,
        users::update,
        users::delete,
        users::roles,
        users::grant,
        users::revoke,
        catalog::list_flavors,
        catalog::create_flavor,
        catalog::show_flavor,
        catalog::delete_flavor,
        catalog::list_images,
        catalog::create_image,
        catalog::show_image,
        catalog::delete_image,
        workloads::list,
        workloads::create,
        workloads::show,
        workloads::update,
        workloads::delete,
        instances::list,
        instances::create,
        instances::show,
        instances::delete,
        instances::stop,
        instances::start,
        instances::restart,
        instances::reboot_hard,
        instances::pause,
        instances::unpause,
        instances::suspend,
        instances::resume,
        instances::rebuild,
        instances::resize,
        instances::confirm_resize,
        instances::revert_resize,
        instances::actions,
        instances::console,
        instances::counts,
        cluster::nodes,
        cluster::register,
        cluster::node,
        cluster::history,
        cluster::unregister,
        cluster::renew_credentials,
        joins::create_token,
        joins::tokens,
        joins::delete_token,
        joins::ca,
        joins::join,
        joins::joined_nodes,
        joins::revoke,
        cluster::evacuate,
        cluster::restore,
        cluster::cncis,
        cluster::cnci,
        cluster::events,
        cluster::clear_events,
        cluster::traces,
    ),
    components(schemas(Error, views::Quota)),
    modifiers(&Common),
)]
struct NativeApi;

/// The constraint an image or a workload to create has that utoipa's derive cannot say: not
/// both `public: true` and a `tenant` (an object is one or the other; 400).
fn one_owner(schema: &mut Value) {
    schema["not"] = json!({
        "required": ["public", "tenant"],
        "properties": {"public": {"enum": [true]}},
    });
}

/// The whole document for a server at `base`.
pub fn build(base: &str) -> Value {
    let mut doc = NativeApi::openapi();
    doc.servers = Some(vec![ServerBuilder::new().url(base).build()]);
    let mut doc = serde_json::to_value(doc).unwrap_or_else(|e| {
        // Serializing plain data structures to a JSON value cannot fail.
        json!({"error": format!("the OpenAPI document could not be written: {e}")})
    });
    for name in ["ImageCreate", "WorkloadCreate"] {
        if let Some(schema) = doc
            .pointer_mut(&format!("/components/schemas/{name}"))
            .filter(|s| s.is_object())
        {
            one_owner(schema);
        }
    }
    doc
}

/// The document.
pub async fn document(State(state): State<ApiState>) -> Json<Value> {
    Json(build(&state.config.public_url))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `$ref` in `v`.
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

    #[test]
    fn public_operations_need_no_token_and_answer_no_401() {
        let doc = build("http://127.0.0.1:1");
        let health = &doc["paths"]["/cumulo/v1/healthz"]["get"];
        assert_eq!(health["security"], json!([{}]));
        assert!(health["responses"].get("401").is_none());
        let tenants = &doc["paths"]["/cumulo/v1/tenants"]["get"];
        assert!(tenants.get("security").is_none());
        assert!(tenants["responses"].get("401").is_some());
        assert_eq!(doc["security"], json!([{"token": []}]));
        assert!(doc["components"]["schemas"]["ImageCreate"]["not"].is_object());
    }
}
