//! Floating IPs: allocated from the external network's pool (`POST` with
//! `floating_network_id`, optionally `floating_ip_address`, `port_id`, `fixed_ip_address`,
//! `description`: 201), listed, shown, associated with a port or disassociated (`PUT` with
//! `port_id`, or `port_id: null`), released (`DELETE`: 204). One address is never held by two
//! projects. After every change the cluster brings the CNCIs' mappings in line (the engine's
//! `public_ip` module); `status` is `ACTIVE` once the instance's CNCI maps the address, `ERROR`
//! if it refused, `DOWN` otherwise (docs/api.md).

use std::net::Ipv4Addr;

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::networks::EXTERNAL_NETWORK;
use super::{
    NetError, NetResult, blocking, body_object, deleted, list_body, one_of, only_fields, opt_text,
    own_project, path_uuid, time,
};
use crate::api::extract::{JsonBody, PathParams};
use crate::api::{ApiState, Principal};
use crate::cluster::Cluster;
use store::{FloatingIp, FloatingIpChange, MAX_NET_TEXT, NewFloatingIp, Scope, StoreError};

/// A floating IP in Neutron's shape, with its status on its CNCI.
pub fn floating_body(ip: &FloatingIp, cluster: &dyn Cluster) -> Value {
    let project = ip.tenant.to_string();
    let status = cluster.floating_ip_status(ip.address, ip.port).as_str();
    json!({
        "id": ip.id,
        "floating_ip_address": ip.address.to_string(),
        "floating_network_id": EXTERNAL_NETWORK,
        "router_id": null,
        "port_id": ip.port,
        "fixed_ip_address": ip.fixed_ip.map(|a| a.to_string()),
        "status": status,
        "project_id": project,
        "tenant_id": project,
        "description": ip.description,
        "dns_domain": "",
        "dns_name": "",
        "port_details": null,
        "qos_policy_id": null,
        "tags": [],
        "created_at": time(ip.created),
        "updated_at": time(ip.updated),
        "revision_number": ip.revision,
    })
}

fn not_found(id: impl std::fmt::Display) -> NetError {
    NetError::not_found(
        "FloatingIPNotFound",
        format!("Floating IP {id} could not be found"),
    )
}

/// The store's refusals about floating IPs, in Neutron's names.
fn floating_error(e: StoreError) -> NetError {
    match e {
        StoreError::NotFound { kind: "port", id } => {
            NetError::not_found("PortNotFound", format!("Port {id} could not be found."))
        }
        StoreError::NotFound { id, .. } => not_found(id),
        StoreError::Conflict(message) if message.starts_with("IP address") => {
            NetError::conflict("IpAddressAlreadyAllocated", message)
        }
        StoreError::Conflict(message) => {
            NetError::conflict("FloatingIPPortAlreadyAssociated", message)
        }
        StoreError::Exhausted(message) => NetError::conflict("IpAddressGenerationFailure", message),
        StoreError::Invalid(message) if message.starts_with("IP address") => {
            NetError::bad("InvalidIpForNetwork", message)
        }
        other => other.into(),
    }
}

fn address_field(object: &Map<String, Value>, key: &str) -> NetResult<Option<Ipv4Addr>> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => s.parse().map(Some).map_err(|_| {
            NetError::bad(
                "InvalidInput",
                format!("Invalid input for {key}. Reason: '{s}' is not a valid IPv4 address."),
            )
        }),
        Some(other) => Err(NetError::bad(
            "InvalidInput",
            format!("Invalid input for {key}. Reason: '{other}' is not a valid IP address."),
        )),
    }
}

/// `port_id`: absent, null (none) or a port's UUID (an unknown one is a 404 later).
fn port_field(object: &Map<String, Value>) -> NetResult<Option<Option<Uuid>>> {
    match object.get("port_id") {
        None => Ok(None),
        Some(Value::Null) => Ok(Some(None)),
        Some(Value::String(s)) => Uuid::parse_str(s).map(|id| Some(Some(id))).map_err(|_| {
            NetError::not_found("PortNotFound", format!("Port {s} could not be found."))
        }),
        Some(other) => Err(NetError::bad(
            "InvalidInput",
            format!("Invalid input for port_id. Reason: '{other}' is not a valid UUID."),
        )),
    }
}

/// `GET /floatingips`.
pub async fn list(
    State(state): State<ApiState>,
    caller: Principal,
    uri: Uri,
) -> NetResult<Json<Value>> {
    let project = caller.project()?;
    let all = blocking(&state, move |store| Ok(store.floating_ips(project)?)).await?;
    let all = all
        .iter()
        .map(|ip| floating_body(ip, state.cluster.as_ref()))
        .collect();
    list_body(&state.config.public_url, "floatingips", &uri, all)
}

/// `GET /floatingips/{id}` (an id that is not a UUID, such as an address, is a 404, which is
/// what lets the CLI go on to look for it by address).
pub async fn show(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> NetResult<Json<Value>> {
    let project = caller.project()?;
    let id = path_uuid("FloatingIPNotFound", "Floating IP", &id)?;
    let ip = one_of(
        &state,
        move |store| store.floating_ips(project),
        move |f: &FloatingIp| f.id == id,
        not_found(id),
    )
    .await?;
    Ok(Json(
        json!({"floatingip": floating_body(&ip, state.cluster.as_ref())}),
    ))
}

/// `POST /floatingips` (201).
pub async fn create(
    State(state): State<ApiState>,
    caller: Principal,
    JsonBody(body): JsonBody<Value>,
) -> NetResult<(StatusCode, Json<Value>)> {
    let project = caller.project()?;
    let ip = body_object(body, "floatingip")?;
    own_project(&ip, project)?;
    let network = match ip.get("floating_network_id") {
        Some(Value::String(s)) => s.clone(),
        _ => {
            return Err(NetError::invalid(
                "Failed to parse request. Required attribute 'floating_network_id' not specified",
            ));
        }
    };
    let address = address_field(&ip, "floating_ip_address")?;
    let fixed = address_field(&ip, "fixed_ip_address")?;
    let port = port_field(&ip)?.flatten();
    let description = opt_text(&ip, "description", MAX_NET_TEXT)?.unwrap_or_default();
    let pool = state.config.floating_range;
    let made = blocking(&state, move |store| {
        if network != EXTERNAL_NETWORK.to_string() {
            let subnets = store.subnets(Scope::Tenant(project))?;
            let known =
                Uuid::parse_str(&network).is_ok_and(|id| subnets.iter().any(|s| s.id == id));
            return Err(if known {
                NetError::invalid(format!(
                    "Bad floatingip request: Network {network} is not a valid external network."
                ))
            } else {
                NetError::not_found(
                    "NetworkNotFound",
                    format!("Network {network} could not be found."),
                )
            });
        }
        store
            .create_floating_ip(NewFloatingIp {
                tenant: project,
                pool,
                address,
                description: description.clone(),
                port,
                fixed_ip: fixed,
            })
            .map_err(floating_error)
    })
    .await?;
    changed(&state, project).await;
    Ok((
        StatusCode::CREATED,
        Json(json!({"floatingip": floating_body(&made, state.cluster.as_ref())})),
    ))
}

/// `PUT /floatingips/{id}`: `port_id` (null: disassociate), `fixed_ip_address`,
/// `description`.
pub async fn update(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody<Value>,
) -> NetResult<Json<Value>> {
    let project = caller.project()?;
    let id = path_uuid("FloatingIPNotFound", "Floating IP", &id)?;
    let ip = body_object(body, "floatingip")?;
    only_fields(&ip, &["port_id", "fixed_ip_address", "description"])?;
    let change = FloatingIpChange {
        port: port_field(&ip)?,
        fixed_ip: address_field(&ip, "fixed_ip_address")?,
        description: opt_text(&ip, "description", MAX_NET_TEXT)?,
    };
    let updated = blocking(&state, move |store| {
        store
            .update_floating_ip(project, id, change)
            .map_err(floating_error)
    })
    .await?;
    changed(&state, project).await;
    Ok(Json(
        json!({"floatingip": floating_body(&updated, state.cluster.as_ref())}),
    ))
}

/// `DELETE /floatingips/{id}` (204).
pub async fn delete(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> NetResult<StatusCode> {
    let project = caller.project()?;
    let id = path_uuid("FloatingIPNotFound", "Floating IP", &id)?;
    let status = deleted(&state, move |store| {
        store
            .delete_floating_ip(project, id)
            .map_err(floating_error)
    })
    .await?;
    changed(&state, project).await;
    Ok(status)
}

/// Tells the cluster that the project's floating IPs changed (it sends what its CNCIs must map
/// or unmap; their answers come later).
async fn changed(state: &ApiState, project: Uuid) {
    let cluster = state.cluster.clone();
    if let Err(e) = tokio::task::spawn_blocking(move || cluster.floating_ips_changed(project)).await
    {
        tracing::warn!(error = %e, "floating IP change not passed on");
    }
}
