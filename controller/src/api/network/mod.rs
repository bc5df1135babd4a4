//! The OpenStack Networking v2.0 (Neutron) subset at `/network`, as `openstack network`,
//! `subnet`, `port`, `floating ip`, `security group` and `quota` use it. Errors in Neutron's
//! shape: `{"NeutronError": {"type": "...", "message": "...", "detail": ""}}`.
//!
//! - networks and subnets (read-only): each of the project's tenant subnets is one network and
//!   one subnet ([`networks`]), plus the shared external network `public`, whose subnet is the
//!   floating-IP pool (`--floating-range`);
//! - ports (read-only but for their security groups): one per instance ([`ports`]);
//! - floating IPs: allocated from `public`, associated with a port, released
//!   ([`floatingips`]); recorded only, not yet routed (status `DOWN`);
//! - security groups and rules ([`secgroups`]); recorded only, not yet enforced;
//! - quotas ([`quotas`]).
//!
//! Everything is the token's project's (admins too: another project's objects are not seen);
//! another project's object is a 404. Lists take Neutron's filters (any field, exact match,
//! repeated for any of several values), `fields` (ignored: every field is answered), and
//! `limit`/`marker` (with a `next` link).

mod floatingips;
pub(crate) mod networks;
mod ports;
mod quotas;
mod secgroups;

use std::time::SystemTime;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::clock::rfc3339;
use super::table::{Family, RouteTable, os};
use super::{ApiError, ApiState};
use store::StoreError;

/// The base path of version 2.0.
pub const BASE: &str = "/network/v2.0";

/// The routes, with Neutron's error shape.
pub fn routes() -> Router<ApiState> {
    table()
        .router()
        .layer(middleware::map_response(neutron_errors))
}

/// The networking routes, one line each, as they are served and documented (`api/table.rs`).
#[rustfmt::skip]
pub(crate) fn table() -> RouteTable {
    let t = RouteTable::new(Family::Network);
    t.get("/network", versions, os("List API versions", 200).public())
        .get("/network/", versions, os("List API versions", 200).public())
        .get(BASE, version, os("Show API v2 details", 200).public())
        .get("/network/v2.0/", version, os("Show API v2 details", 200).public())
        .get("/network/v2.0/extensions", extensions, os("List extensions", 200).public())
        .get("/network/v2.0/networks", networks::list_networks, os("List networks", 200).errors(&[400]))
        .get("/network/v2.0/networks/{id}", networks::show_network, os("Show network details", 200))
        .get("/network/v2.0/subnets", networks::list_subnets, os("List subnets", 200).errors(&[400]))
        .get("/network/v2.0/subnets/{id}", networks::show_subnet, os("Show subnet details", 200))
        .get("/network/v2.0/ports", ports::list, os("List ports", 200).errors(&[400]))
        .get("/network/v2.0/ports/{id}", ports::show, os("Show port details", 200))
        .put("/network/v2.0/ports/{id}", ports::update, os("Update port", 200))
        .get("/network/v2.0/floatingips", floatingips::list, os("List floating IPs", 200).errors(&[400]))
        .post("/network/v2.0/floatingips", floatingips::create, os("Create floating IP", 201).errors(&[404, 409]))
        .get("/network/v2.0/floatingips/{id}", floatingips::show, os("Show floating IP details", 200))
        .put("/network/v2.0/floatingips/{id}", floatingips::update, os("Update floating IP", 200).errors(&[409]))
        .delete("/network/v2.0/floatingips/{id}", floatingips::delete, os("Delete floating IP", 204))
        .get("/network/v2.0/security-groups", secgroups::list, os("List security groups", 200).errors(&[400]))
        .post("/network/v2.0/security-groups", secgroups::create, os("Create security group", 201).errors(&[409]))
        .get("/network/v2.0/security-groups/{id}", secgroups::show, os("Show security group", 200))
        .put("/network/v2.0/security-groups/{id}", secgroups::update, os("Update security group", 200).errors(&[409]))
        .delete("/network/v2.0/security-groups/{id}", secgroups::delete, os("Delete security group", 204).errors(&[409]))
        .get("/network/v2.0/security-group-rules", secgroups::list_rules, os("List security group rules", 200).errors(&[400]))
        .post("/network/v2.0/security-group-rules", secgroups::create_rule, os("Create security group rule", 201).errors(&[404, 409]))
        .get("/network/v2.0/security-group-rules/{id}", secgroups::show_rule, os("Show security group rule", 200))
        .delete("/network/v2.0/security-group-rules/{id}", secgroups::delete_rule, os("Delete security group rule", 204))
        .get("/network/v2.0/quotas", quotas::list, os("List quotas for projects with non-default quota values", 200))
        .get("/network/v2.0/quotas/{project}", quotas::show, os("List quotas for a project", 200))
        .put("/network/v2.0/quotas/{project}", quotas::update, os("Update quota for a project", 200))
        .get("/network/v2.0/quotas/{project}/default", quotas::defaults, os("List default quotas for a project", 200))
        .get("/network/v2.0/quotas/{project}/details.json", quotas::details, os("Show quota details for a tenant", 200))
        // What openstacksdk asks for (`quota show --usage`).
        .get("/network/v2.0/quotas/{project}/details", quotas::details, os("Show quota details for a tenant", 200))
}

/// A Networking API error: an HTTP status, Neutron's exception name and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetError {
    status: StatusCode,
    kind: &'static str,
    message: String,
}

impl NetError {
    /// An error of `status`, named `kind`.
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> NetError {
        NetError {
            status,
            kind,
            message: message.into(),
        }
    }

    /// A 400 named `kind`.
    pub fn bad(kind: &'static str, message: impl Into<String>) -> NetError {
        NetError::new(StatusCode::BAD_REQUEST, kind, message)
    }

    /// A 400 `HTTPBadRequest`.
    pub fn invalid(message: impl Into<String>) -> NetError {
        NetError::bad("HTTPBadRequest", message)
    }

    /// A 404 named `kind`.
    pub fn not_found(kind: &'static str, message: impl Into<String>) -> NetError {
        NetError::new(StatusCode::NOT_FOUND, kind, message)
    }

    /// A 409 named `kind`.
    pub fn conflict(kind: &'static str, message: impl Into<String>) -> NetError {
        NetError::new(StatusCode::CONFLICT, kind, message)
    }
}

impl From<ApiError> for NetError {
    fn from(error: ApiError) -> NetError {
        let status = error.status();
        let kind = match status.as_u16() {
            400 => "HTTPBadRequest",
            401 => "HTTPUnauthorized",
            403 => "HTTPForbidden",
            404 => "HTTPNotFound",
            405 => "HTTPMethodNotAllowed",
            408 => "HTTPRequestTimeout",
            409 => "HTTPConflict",
            413 => "HTTPRequestEntityTooLarge",
            429 => "HTTPTooManyRequests",
            503 => "HTTPServiceUnavailable",
            _ => "HTTPInternalServerError",
        };
        let mut net = NetError::new(status, kind, error.public_message());
        if let ApiError::Internal(detail) = &error {
            tracing::error!(%detail, "internal error answering a networking request");
            net.message = error.public_message();
        }
        net
    }
}

impl From<StoreError> for NetError {
    fn from(error: StoreError) -> NetError {
        match error {
            StoreError::QuotaExceeded { what, limit } => NetError::conflict(
                "OverQuota",
                format!(
                    "Quota exceeded for resources: ['{}'].",
                    quota_key(what, limit)
                ),
            ),
            StoreError::Invalid(message) => NetError::invalid(message),
            other => ApiError::from(other).into(),
        }
    }
}

/// Neutron's name of a quota figure.
fn quota_key(what: store::QuotaKind, _limit: u64) -> &'static str {
    match what {
        store::QuotaKind::FloatingIps => "floatingip",
        store::QuotaKind::SecurityGroups => "security_group",
        store::QuotaKind::SecurityGroupRules => "security_group_rule",
        _ => "other",
    }
}

impl IntoResponse for NetError {
    fn into_response(self) -> Response {
        let body = json!({"NeutronError": {
            "type": self.kind,
            "message": self.message,
            "detail": "",
        }});
        let mut response = (self.status, Json(body)).into_response();
        response.extensions_mut().insert(Rendered);
        response
    }
}

/// Marks a response already in Neutron's shape.
#[derive(Debug, Clone, Copy)]
struct Rendered;

/// Re-renders the errors of extractors (authentication, bodies, paths) in Neutron's shape.
async fn neutron_errors(response: Response) -> Response {
    super::error::rerender::<Rendered>(response, |e| NetError::from(e).into_response())
}

/// A handler's result.
pub type NetResult<T> = Result<T, NetError>;

/// Runs `f` with the store on the blocking pool.
pub(super) async fn blocking<T, F>(state: &ApiState, f: F) -> NetResult<T>
where
    T: Send + 'static,
    F: FnOnce(&dyn store::Store) -> NetResult<T> + Send + 'static,
{
    let store = state.store.clone();
    tokio::task::spawn_blocking(move || f(store.as_ref()))
        .await
        .map_err(|e| NetError::from(ApiError::Internal(format!("store task failed: {e}"))))?
}

/// Tells the cluster that the project's security groups, rules or ports' groups changed (it
/// gives the ports' nodes their new firewalls; they apply them later).
pub(super) async fn groups_changed(state: &ApiState, project: Uuid) {
    let cluster = state.cluster.clone();
    if let Err(e) =
        tokio::task::spawn_blocking(move || cluster.security_groups_changed(project)).await
    {
        tracing::warn!(error = %e, "security group change not passed on");
    }
}

/// Runs a deletion in the store: 204.
pub(super) async fn deleted<F>(state: &ApiState, f: F) -> NetResult<StatusCode>
where
    F: FnOnce(&dyn store::Store) -> NetResult<()> + Send + 'static,
{
    blocking(state, f).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The one of the objects `all` reads that `matches`, or `missing`.
pub(super) async fn one_of<T, A, M>(
    state: &ApiState,
    all: A,
    matches: M,
    missing: NetError,
) -> NetResult<T>
where
    T: Send + 'static,
    A: FnOnce(&dyn store::Store) -> Result<Vec<T>, StoreError> + Send + 'static,
    M: Fn(&T) -> bool + Send + 'static,
{
    blocking(state, move |store| {
        all(store)?.into_iter().find(|x| matches(x)).ok_or(missing)
    })
    .await
}

fn version_body(base: &str) -> Value {
    json!({
        "id": "v2.0",
        "status": "CURRENT",
        "links": [{"rel": "self", "href": format!("{base}{BASE}/")}],
    })
}

async fn versions(State(state): State<ApiState>) -> Json<Value> {
    Json(json!({"versions": [version_body(&state.config.public_url)]}))
}

async fn version(State(state): State<ApiState>) -> Json<Value> {
    let base = &state.config.public_url;
    let resources: Vec<Value> = [
        ("network", "networks"),
        ("subnet", "subnets"),
        ("port", "ports"),
        ("floatingip", "floatingips"),
        ("security_group", "security-groups"),
        ("security_group_rule", "security-group-rules"),
        ("quota", "quotas"),
    ]
    .iter()
    .map(|(name, collection)| {
        json!({"name": name, "collection": collection, "links": [
            {"rel": "self", "href": format!("{base}{BASE}/{collection}")}
        ]})
    })
    .collect();
    Json(json!({"resources": resources}))
}

/// The API extensions this subset has (what the CLI looks for before using a field).
async fn extensions() -> Json<Value> {
    let list: Vec<Value> = [
        (
            "security-group",
            "security-group",
            "The security groups extension.",
        ),
        (
            "external-net",
            "External Network",
            "Adds external network attribute.",
        ),
        (
            "quotas",
            "Quota management support",
            "Expose functions for quotas management.",
        ),
        (
            "standard-attr-description",
            "standard-attr-description",
            "Resource description.",
        ),
        (
            "standard-attr-revisions",
            "Resource revision numbers",
            "Revision numbers.",
        ),
        (
            "standard-attr-timestamp",
            "Resource timestamps",
            "Created and updated times.",
        ),
        (
            "quota_details",
            "Quota details management support",
            "Quota usage.",
        ),
    ]
    .iter()
    .map(|(alias, name, description)| {
        json!({"alias": alias, "name": name, "description": description,
            "updated": "2013-01-01T10:00:00-00:00", "links": []})
    })
    .collect();
    Json(json!({"extensions": list}))
}

/// A time as Neutron writes it.
pub(super) fn time(t: SystemTime) -> String {
    rfc3339(t)
}

/// A path id: anything that is not a UUID names no object (Neutron's 404 `kind`).
pub(super) fn path_uuid(kind: &'static str, what: &str, id: &str) -> NetResult<Uuid> {
    Uuid::parse_str(id)
        .map_err(|_| NetError::not_found(kind, format!("{what} {id} could not be found.")))
}

/// The query parameters of a list, in order (repeated keys kept).
pub(super) fn query_pairs(uri: &Uri) -> NetResult<Vec<(String, String)>> {
    serde_urlencoded::from_str::<Vec<(String, String)>>(uri.query().unwrap_or(""))
        .map_err(|e| NetError::invalid(format!("bad query string: {e}")))
}

/// Parameters that are not filters.
const NOT_FILTERS: &[&str] = &[
    "fields",
    "limit",
    "marker",
    "page_reverse",
    "sort_dir",
    "sort_key",
    "verbose",
];

/// Whether `value` (a field of an object) matches a filter's text.
fn matches(value: &Value, wanted: &str) -> bool {
    match value {
        Value::String(s) => s == wanted,
        Value::Bool(b) => wanted.eq_ignore_ascii_case(if *b { "true" } else { "false" }),
        Value::Number(n) => n.to_string() == wanted,
        Value::Null => wanted.is_empty() || wanted == "None",
        Value::Array(items) => items.iter().any(|item| matches(item, wanted)),
        Value::Object(_) => false,
    }
}

/// Whether an object passes a `fixed_ips` filter (`ip_address=...` or `subnet_id=...`).
fn fixed_ip_matches(object: &Map<String, Value>, wanted: &str) -> bool {
    let Some((key, value)) = wanted.split_once('=') else {
        return false;
    };
    object
        .get("fixed_ips")
        .and_then(Value::as_array)
        .is_some_and(|ips| {
            ips.iter()
                .any(|ip| ip.get(key).is_some_and(|v| matches(v, value)))
        })
}

/// Neutron's list: `objects` filtered by the query (parameters naming a field the objects do
/// not have are ignored), then paged by `limit` and `marker` (an id), as `{collection: [...]}`
/// with `{collection}_links` when there is a next page.
pub(super) fn list_body(
    base: &str,
    collection: &str,
    uri: &Uri,
    objects: Vec<Value>,
) -> NetResult<Json<Value>> {
    let query = query_pairs(uri)?;
    let mut filters: Vec<(&str, Vec<&str>)> = Vec::new();
    for (key, value) in &query {
        if NOT_FILTERS.contains(&key.as_str()) {
            continue;
        }
        match filters.iter_mut().find(|(k, _)| k == key) {
            Some((_, values)) => values.push(value),
            None => filters.push((key, vec![value])),
        }
    }
    let kept: Vec<Value> = objects
        .into_iter()
        .filter(|o| {
            let Some(object) = o.as_object() else {
                return false;
            };
            filters.iter().all(|(key, values)| {
                if *key == "fixed_ips" {
                    return values.iter().any(|v| fixed_ip_matches(object, v));
                }
                match object.get(*key) {
                    Some(field) => values.iter().any(|v| matches(field, v)),
                    None => true,
                }
            })
        })
        .collect();
    let param = |name: &str| {
        query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let limit = match param("limit") {
        None | Some("") => None,
        Some(text) => Some(
            text.parse::<usize>()
                .map_err(|_| NetError::invalid(format!("'{text}' is not an integer")))?,
        ),
    };
    let start = match param("marker") {
        None | Some("") => 0,
        Some(marker) => {
            kept.iter().position(|o| o["id"] == marker).ok_or_else(|| {
                NetError::not_found("HTTPNotFound", format!("marker {marker} not found"))
            })? + 1
        }
    };
    let rest = kept.len().saturating_sub(start);
    let take = limit.filter(|l| *l > 0).unwrap_or(rest).min(rest);
    let page: Vec<Value> = kept.into_iter().skip(start).take(take).collect();
    let mut body = Map::new();
    if take < rest
        && let Some(last) = page.last()
    {
        let mut next: Vec<(String, String)> = query
            .iter()
            .filter(|(k, _)| k != "marker")
            .cloned()
            .collect();
        next.push((
            "marker".into(),
            last["id"].as_str().unwrap_or("").to_string(),
        ));
        let encoded = serde_urlencoded::to_string(&next).unwrap_or_default();
        body.insert(
            format!("{collection}_links"),
            json!([{"rel": "next", "href": format!("{base}{BASE}/{collection}?{encoded}")}]),
        );
    }
    body.insert(collection.to_string(), Value::Array(page));
    Ok(Json(Value::Object(body)))
}

/// A request body's object under `key` (Neutron's 400 otherwise).
pub(super) fn body_object(body: Value, key: &str) -> NetResult<Map<String, Value>> {
    match body {
        Value::Object(mut outer) => match outer.remove(key) {
            Some(Value::Object(inner)) => Ok(inner),
            _ => Err(NetError::invalid(format!(
                "Resource body required: the body must be {{\"{key}\": {{...}}}}"
            ))),
        },
        _ => Err(NetError::invalid("the body must be a JSON object")),
    }
}

/// An optional string field, at most `max` bytes.
pub(super) fn opt_text(
    object: &Map<String, Value>,
    key: &str,
    max: usize,
) -> NetResult<Option<String>> {
    match object.get(key) {
        None => Ok(None),
        Some(Value::String(s)) if s.len() <= max => Ok(Some(s.clone())),
        Some(Value::String(_)) => Err(NetError::invalid(format!(
            "Invalid input for {key}. Reason: '...' exceeds maximum length of {max}."
        ))),
        Some(Value::Null) if key == "description" => Ok(Some(String::new())),
        Some(other) => Err(NetError::invalid(format!(
            "Invalid input for {key}. Reason: '{other}' is not a valid string."
        ))),
    }
}

/// Refuses a body naming a project other than the caller's (`project_id` or `tenant_id`).
pub(super) fn own_project(object: &Map<String, Value>, project: Uuid) -> NetResult<()> {
    for key in ["project_id", "tenant_id"] {
        match object.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s.replace('-', "") == project.simple().to_string() => {}
            Some(Value::String(s)) if *s == project.to_string() => {}
            Some(_) => {
                return Err(NetError::new(
                    StatusCode::FORBIDDEN,
                    "HTTPForbidden",
                    "objects may be made in the token's own project only",
                ));
            }
        }
    }
    Ok(())
}

/// Refuses fields other than `allowed` in an update (Neutron's 400 for attributes it will not
/// change).
pub(super) fn only_fields(object: &Map<String, Value>, allowed: &[&str]) -> NetResult<()> {
    match object.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(key) => Err(NetError::invalid(format!(
            "Cannot update read-only attribute {key}"
        ))),
        None => Ok(()),
    }
}
