//! Ports: one per instance, its id the instance's (`device_id` too, `device_owner`
//! `compute:nova`), on the network of the instance's tenant subnet with the instance's address
//! and MAC. Read-only but for `security_groups`, which `PUT` sets (any other field is a 400, as
//! Neutron answers for attributes it will not change); status `ACTIVE` while the instance runs,
//! else `DOWN`.

use axum::Json;
use axum::extract::State;
use axum::http::Uri;
use serde_json::{Value, json};
use uuid::Uuid;

use super::networks::{network_of, subnet_id};
use super::{
    NetError, NetResult, blocking, body_object, groups_changed, list_body, only_fields, path_uuid,
    time,
};
use crate::api::extract::{JsonBody, PathParams};
use crate::api::{ApiState, Principal};
use store::{
    Instance, InstanceFilter, InstanceState, Page, PortGroups, Scope, Store, StoreError, Subnet,
};

fn port_body(instance: &Instance, subnets: &[Subnet], groups: &PortGroups) -> Value {
    let network = network_of(subnets, &instance.subnet);
    let project = instance.tenant.to_string();
    json!({
        "id": instance.id,
        "name": "",
        "network_id": network,
        "project_id": project,
        "tenant_id": project,
        "mac_address": instance.mac.to_string(),
        "fixed_ips": [{
            "subnet_id": network.map(subnet_id),
            "ip_address": instance.ip.to_string(),
        }],
        "device_id": instance.id,
        "device_owner": "compute:nova",
        "status": if instance.state == InstanceState::Active { "ACTIVE" } else { "DOWN" },
        "admin_state_up": true,
        "security_groups": groups.of(instance.id),
        "port_security_enabled": true,
        "allowed_address_pairs": [],
        "extra_dhcp_opts": [],
        "binding:vnic_type": "normal",
        "description": "",
        "tags": [],
        "created_at": time(instance.created),
        "updated_at": time(instance.updated),
        "revision_number": instance.version,
    })
}

/// Every instance of the project.
fn all_instances(store: &dyn Store, project: Uuid) -> Result<Vec<Instance>, StoreError> {
    let mut all = Vec::new();
    let mut page = Page::first(Page::MAX_LIMIT);
    loop {
        let got = store.instances(Scope::Tenant(project), InstanceFilter::default(), page)?;
        all.extend(got.items);
        match got.next {
            Some(marker) => page.marker = Some(marker),
            None => return Ok(all),
        }
    }
}

/// The project's ports.
pub(super) fn ports_of(store: &dyn Store, project: Uuid) -> NetResult<Vec<Value>> {
    let subnets = store.subnets(Scope::Tenant(project))?;
    let groups = store.port_groups(project)?;
    Ok(all_instances(store, project)?
        .iter()
        .map(|i| port_body(i, &subnets, &groups))
        .collect())
}

/// The port `id` of the project.
pub(super) fn port_of(store: &dyn Store, project: Uuid, id: Uuid) -> NetResult<Value> {
    let instance = store
        .instance(Scope::Tenant(project), id)
        .map_err(|e| match e {
            StoreError::NotFound { .. } => not_found(&id.to_string()),
            other => other.into(),
        })?;
    let subnets = store.subnets(Scope::Tenant(project))?;
    let groups = store.port_groups(project)?;
    Ok(port_body(&instance, &subnets, &groups))
}

fn not_found(id: &str) -> NetError {
    NetError::not_found("PortNotFound", format!("Port {id} could not be found."))
}

/// `GET /ports`.
pub async fn list(
    State(state): State<ApiState>,
    caller: Principal,
    uri: Uri,
) -> NetResult<Json<Value>> {
    let project = caller.project()?;
    let all = blocking(&state, move |store| ports_of(store, project)).await?;
    list_body(&state.config.public_url, "ports", &uri, all)
}

/// `GET /ports/{id}`.
pub async fn show(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> NetResult<Json<Value>> {
    let project = caller.project()?;
    let id = path_uuid("PortNotFound", "Port", &id)?;
    let port = blocking(&state, move |store| port_of(store, project, id)).await?;
    Ok(Json(json!({ "port": port })))
}

/// The ids in a `security_groups` list.
pub(super) fn group_ids(value: &Value) -> NetResult<Vec<Uuid>> {
    let bad =
        || NetError::invalid("Invalid input for security_groups: a list of security group ids");
    value
        .as_array()
        .ok_or_else(bad)?
        .iter()
        .map(|v| {
            v.as_str()
                .and_then(|s| Uuid::parse_str(s).ok())
                .ok_or_else(bad)
        })
        .collect()
}

/// `PUT /ports/{id}`: sets `security_groups` (the only field that may change).
pub async fn update(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody<Value>,
) -> NetResult<Json<Value>> {
    let project = caller.project()?;
    let id = path_uuid("PortNotFound", "Port", &id)?;
    let port = body_object(body, "port")?;
    only_fields(&port, &["security_groups"])?;
    let groups = port.get("security_groups").map(group_ids).transpose()?;
    let regroup = groups.is_some();
    let shown = blocking(&state, move |store| {
        if let Some(groups) = &groups {
            store
                .set_port_groups(project, id, groups)
                .map_err(|e| match e {
                    StoreError::NotFound { kind: "port", .. } => not_found(&id.to_string()),
                    StoreError::NotFound { id: group, .. } => NetError::not_found(
                        "SecurityGroupNotFound",
                        format!("Security group {group} does not exist"),
                    ),
                    other => other.into(),
                })?;
        }
        port_of(store, project, id)
    })
    .await?;
    if regroup {
        groups_changed(&state, project).await;
    }
    Ok(Json(json!({ "port": shown })))
}
