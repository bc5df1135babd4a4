//! Networks and subnets (read-only). Each tenant subnet cumulo carved for the project is one
//! network and one subnet: the network's id is the tenant subnet's id, the subnet's id that id
//! with its last eight bytes XORed with `0x3c` ([`subnet_id`]), so both are stable while the
//! tenant subnet exists (it goes when its last instance does). Its first host is the gateway
//! (the CNCI side), DHCP is on, names are `private-<cidr>`. The external network `public`
//! (`router:external`, shared) has fixed ids ([`EXTERNAL_NETWORK`], [`EXTERNAL_SUBNET`]) and
//! the floating-IP pool as its one subnet.

use std::net::{IpAddr, Ipv4Addr};

use axum::Json;
use axum::extract::State;
use axum::http::Uri;
use serde_json::{Value, json};
use ssntp::payload::Cidr;
use uuid::Uuid;

use super::{NetError, NetResult, blocking, list_body, path_uuid};
use crate::api::extract::PathParams;
use crate::api::{ApiState, Principal};
use store::{Scope, Subnet};

/// The external network's id.
pub const EXTERNAL_NETWORK: Uuid = Uuid::from_u128(0x5f0a_7e1c_9c3b_4d2a_8e61_70b5_c0ff_ee01);
/// The external network's subnet's id (the floating-IP pool).
pub const EXTERNAL_SUBNET: Uuid = Uuid::from_u128(0x5f0a_7e1c_9c3b_4d2a_8e61_70b5_c0ff_ee02);
/// The external network's name.
pub const EXTERNAL_NAME: &str = "public";

/// The Neutron subnet id of a tenant subnet (whose Neutron network id is its own id).
pub fn subnet_id(network: Uuid) -> Uuid {
    Uuid::from_u128(network.as_u128() ^ 0x3c3c_3c3c_3c3c_3c3c)
}

fn gateway(cidr: &Cidr) -> Option<Ipv4Addr> {
    match cidr.addr {
        IpAddr::V4(a) => Some(Ipv4Addr::from(u32::from(a).wrapping_add(1))),
        IpAddr::V6(_) => None,
    }
}

fn last_host(cidr: &Cidr) -> Option<Ipv4Addr> {
    match cidr.addr {
        IpAddr::V4(a) => {
            let size = store::net::block_size(cidr.prefix);
            let last = u64::from(u32::from(a)) + size - 2;
            u32::try_from(last).ok().map(Ipv4Addr::from)
        }
        IpAddr::V6(_) => None,
    }
}

fn network_body(id: Uuid, name: &str, project: &str, external: bool, subnet: Uuid) -> Value {
    json!({
        "id": id,
        "name": name,
        "project_id": project,
        "tenant_id": project,
        "status": "ACTIVE",
        "admin_state_up": true,
        "shared": external,
        "router:external": external,
        "subnets": [subnet],
        "mtu": 1450,
        "description": "",
        "availability_zones": [],
        "availability_zone_hints": [],
        "ipv4_address_scope": null,
        "ipv6_address_scope": null,
        "port_security_enabled": true,
        "is_default": external,
        "tags": [],
        "revision_number": 1,
    })
}

fn subnet_body(
    id: Uuid,
    network: Uuid,
    name: &str,
    project: &str,
    cidr: &Cidr,
    allocation_start: Option<Ipv4Addr>,
) -> Value {
    json!({
        "id": id,
        "network_id": network,
        "name": name,
        "project_id": project,
        "tenant_id": project,
        "ip_version": 4,
        "cidr": cidr.to_string(),
        "gateway_ip": gateway(cidr),
        "allocation_pools": [{"start": allocation_start, "end": last_host(cidr)}],
        "enable_dhcp": true,
        "dns_nameservers": [],
        "host_routes": [],
        "ipv6_ra_mode": null,
        "ipv6_address_mode": null,
        "subnetpool_id": null,
        "service_types": [],
        "description": "",
        "tags": [],
        "revision_number": 1,
    })
}

fn tenant_name(subnet: &Subnet) -> String {
    format!("private-{}", subnet.cidr)
}

fn second_host(cidr: &Cidr) -> Option<Ipv4Addr> {
    gateway(cidr).map(|g| Ipv4Addr::from(u32::from(g).wrapping_add(1)))
}

/// The project's networks and subnets as Neutron objects, the external one first.
fn objects(state: &ApiState, subnets: &[Subnet], want_networks: bool) -> Vec<Value> {
    let pool = state.config.floating_range;
    let mut all = vec![if want_networks {
        network_body(EXTERNAL_NETWORK, EXTERNAL_NAME, "", true, EXTERNAL_SUBNET)
    } else {
        subnet_body(
            EXTERNAL_SUBNET,
            EXTERNAL_NETWORK,
            &format!("{EXTERNAL_NAME}-subnet"),
            "",
            &pool,
            second_host(&pool),
        )
    }];
    for s in subnets {
        let project = s.tenant.to_string();
        let name = tenant_name(s);
        all.push(if want_networks {
            network_body(s.id, &name, &project, false, subnet_id(s.id))
        } else {
            subnet_body(
                subnet_id(s.id),
                s.id,
                &name,
                &project,
                &s.cidr,
                second_host(&s.cidr),
            )
        });
    }
    all
}

async fn tenant_subnets(state: &ApiState, caller: &Principal) -> NetResult<Vec<Subnet>> {
    let project = caller.project()?;
    blocking(state, move |store| {
        Ok(store.subnets(Scope::Tenant(project))?)
    })
    .await
}

/// `GET /networks`.
pub async fn list_networks(
    State(state): State<ApiState>,
    caller: Principal,
    uri: Uri,
) -> NetResult<Json<Value>> {
    let subnets = tenant_subnets(&state, &caller).await?;
    let all = objects(&state, &subnets, true);
    list_body(&state.config.public_url, "networks", &uri, all)
}

/// `GET /subnets`.
pub async fn list_subnets(
    State(state): State<ApiState>,
    caller: Principal,
    uri: Uri,
) -> NetResult<Json<Value>> {
    let subnets = tenant_subnets(&state, &caller).await?;
    let all = objects(&state, &subnets, false);
    list_body(&state.config.public_url, "subnets", &uri, all)
}

async fn one(
    state: &ApiState,
    caller: &Principal,
    id: &str,
    networks: bool,
) -> NetResult<Json<Value>> {
    let (kind, what, key) = if networks {
        ("NetworkNotFound", "Network", "network")
    } else {
        ("SubnetNotFound", "Subnet", "subnet")
    };
    let wanted = path_uuid(kind, what, id)?;
    let subnets = tenant_subnets(state, caller).await?;
    objects(state, &subnets, networks)
        .into_iter()
        .find(|o| o["id"] == wanted.to_string())
        .map(|o| Json(json!({ key: o })))
        .ok_or_else(|| NetError::not_found(kind, format!("{what} {id} could not be found.")))
}

/// `GET /networks/{id}`.
pub async fn show_network(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> NetResult<Json<Value>> {
    one(&state, &caller, &id, true).await
}

/// `GET /subnets/{id}`.
pub async fn show_subnet(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> NetResult<Json<Value>> {
    one(&state, &caller, &id, false).await
}

/// The Neutron network id of the tenant subnet holding `cidr`, if the project has it.
pub fn network_of(subnets: &[Subnet], cidr: &Cidr) -> Option<Uuid> {
    subnets.iter().find(|s| s.cidr == *cidr).map(|s| s.id)
}
