//! `GET /servers`, `/servers/detail`, `/servers/{id}`: instances in Nova's shape.
//!
//! Status mapping: pending → BUILD, active → ACTIVE, stopping → ACTIVE (task `powering-off`),
//! exited → SHUTOFF, deleted and hung → DELETED, missing → UNKNOWN, rebuilding → REBUILD (task
//! `rebuilding`), resized → VERIFY_RESIZE, error → ERROR with a
//! `fault` (`code` 500, `message`: the cause, `created`; `details`, the failure's code, for
//! admins). Listings leave out instances being deleted, as Nova does; their filters, sorting
//! and paging are [`super::server_query`]'s. `metadata` is the server's own
//! ([`super::server_metadata`]). `user_id` is the user who created it (empty for a server made
//! before users were recorded, or by a certificate login).
//! `os-extended-volumes:volumes_attached` lists the server's volumes (`id`,
//! `delete_on_termination`); a server booted from a volume shows `image` `""`, as Nova's.

use std::collections::HashMap;

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};
use uuid::Uuid;

use super::server_query::{self, ServerQuery};
use super::{BASE, flavors};
use crate::api::clock::rfc3339;
use crate::api::extract::{PathParams, path_id};
use crate::api::{ApiError, ApiState, Principal};
use store::{Instance, Page, Scope, Workload};

pub use super::status::nova_state;

fn image_reference(base: &str, id: Uuid) -> Value {
    json!({"id": id.to_string(), "links": [
        {"rel": "bookmark", "href": format!("{base}/compute/images/{id}")}
    ]})
}

fn links(base: &str, id: Uuid) -> Value {
    json!([
        {"rel": "self", "href": format!("{base}{BASE}/servers/{id}")},
        {"rel": "bookmark", "href": format!("{base}/compute/servers/{id}")},
    ])
}

/// Nova's `hostId`: the SHA-224 hex digest of the project id followed by the host, the same for
/// a project's servers on one host and unrelated across projects, so that a tenant can tell
/// whether two of its servers share a host without learning which host it is (Nova's
/// `generate_hostid`). Both are written as the admin view shows them (`tenant_id`,
/// `OS-EXT-SRV-ATTR:host`); empty while the server has no host.
fn host_id(tenant: Uuid, node: Option<Uuid>) -> String {
    use sha2::{Digest, Sha224};
    node.map_or_else(String::new, |node| {
        let digest = Sha224::new()
            .chain_update(tenant.to_string())
            .chain_update(node.to_string())
            .finalize();
        digest.iter().map(|b| format!("{b:02x}")).collect()
    })
}

/// What the Networking and Block Storage APIs say of a server: its port's security groups'
/// names, the floating IPs associated with it, the volumes attached to it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Related {
    /// The names of its port's groups.
    pub groups: Vec<String>,
    /// Its floating addresses.
    pub floating: Vec<std::net::Ipv4Addr>,
    /// Its volumes (attached, or being attached or detached), by device: each volume's id and
    /// whether it goes with the server (`delete_on_termination`).
    pub volumes: Vec<(Uuid, bool)>,
    /// Whether it boots from a volume (one is attached as its root disk).
    pub boots_from_volume: bool,
    /// The zone of the node it is on, when known.
    pub zone: Option<String>,
}

/// The [`Related`] of each of `instances`, read per tenant (the zones left out).
pub fn related(
    store: &dyn store::Store,
    instances: &[Instance],
) -> Result<HashMap<Uuid, Related>, store::StoreError> {
    let tenants = tenants_of(instances);
    let nets = nets_of(store, instances, &tenants)?;
    let volumes = volumes_of(store, &tenants)?;
    Ok(assemble(instances, &nets, &volumes))
}

/// The tenants of `instances`, each once.
fn tenants_of(instances: &[Instance]) -> Vec<Uuid> {
    let mut tenants: Vec<Uuid> = instances.iter().map(|i| i.tenant).collect();
    tenants.sort_unstable();
    tenants.dedup();
    tenants
}

/// Each tenant's networking of its servers among `instances`.
fn nets_of(
    store: &dyn store::Store,
    instances: &[Instance],
    tenants: &[Uuid],
) -> Result<HashMap<Uuid, store::ServersNet>, store::StoreError> {
    let mut nets = HashMap::new();
    for &tenant in tenants {
        let ids: Vec<Uuid> = instances
            .iter()
            .filter(|i| i.tenant == tenant)
            .map(|i| i.id)
            .collect();
        nets.insert(tenant, store.servers_networking(tenant, &ids)?);
    }
    Ok(nets)
}

/// An attached volume (or one being attached or detached): its id and its attachment.
type Attached = (Uuid, store::VolumeAttachment);

/// Each tenant's attached volumes, by device.
fn volumes_of(
    store: &dyn store::Store,
    tenants: &[Uuid],
) -> Result<HashMap<Uuid, Vec<Attached>>, store::StoreError> {
    let mut all = HashMap::new();
    for &tenant in tenants {
        let mut volumes: Vec<Attached> = store
            .volumes(Scope::Tenant(tenant))?
            .into_iter()
            .filter_map(|v| v.attachment.map(|a| (v.id, a)))
            .collect();
        volumes.sort_by(|a, b| a.1.device.cmp(&b.1.device));
        all.insert(tenant, volumes);
    }
    Ok(all)
}

/// The [`Related`] of each of `instances` from its tenant's reads.
fn assemble(
    instances: &[Instance],
    nets: &HashMap<Uuid, store::ServersNet>,
    volumes: &HashMap<Uuid, Vec<Attached>>,
) -> HashMap<Uuid, Related> {
    let mut related: HashMap<Uuid, Related> = HashMap::new();
    for (tenant, net) in nets {
        let groups: HashMap<Uuid, &str> =
            net.groups.iter().map(|g| (g.id, g.name.as_str())).collect();
        let (ports, floating) = (&net.ports, &net.floating_ips);
        let volumes = volumes.get(tenant).map_or(&[][..], Vec::as_slice);
        for i in instances.iter().filter(|i| i.tenant == *tenant) {
            let attached: Vec<&(Uuid, store::VolumeAttachment)> =
                volumes.iter().filter(|(_, a)| a.instance == i.id).collect();
            let mut names: Vec<String> = ports
                .of(i.id)
                .iter()
                .filter_map(|g| groups.get(g).map(|name| name.to_string()))
                .collect();
            names.sort();
            related.insert(
                i.id,
                Related {
                    groups: names,
                    floating: floating
                        .iter()
                        .filter(|f| f.port == Some(i.id))
                        .map(|f| f.address)
                        .collect(),
                    volumes: attached
                        .iter()
                        .map(|(v, a)| (*v, a.delete_on_termination))
                        .collect(),
                    boots_from_volume: attached
                        .iter()
                        .any(|(_, a)| a.device == crate::volumes::ROOT_DEVICE),
                    zone: None,
                },
            );
        }
    }
    related
}

/// A server in Nova's detailed shape; `net` (its port's groups and floating IPs, its volumes)
/// as the Networking and Block Storage APIs have them, when read. A server booted from a volume
/// shows `image` `""`, as Nova's.
pub fn detailed(
    base: &str,
    instance: &Instance,
    workload: Option<&Workload>,
    admin: bool,
    net: Option<&Related>,
) -> Value {
    let (status, vm_state, task_state, power_state) = nova_state(&instance.state);
    let image = match workload {
        Some(w) if !net.is_some_and(|n| n.boots_from_volume) => image_reference(base, w.image),
        _ => json!(""),
    };
    let volumes: Vec<Value> = net.map_or_else(Vec::new, |n| {
        n.volumes
            .iter()
            .map(|(id, delete)| json!({"id": id, "delete_on_termination": delete}))
            .collect()
    });
    let flavor = workload.map_or(json!({}), |w| flavors::reference(base, w.flavor));
    let mac = instance.mac.to_string();
    let address = |addr: String, kind: &str| {
        json!({
            "version": 4,
            "addr": addr,
            "OS-EXT-IPS:type": kind,
            "OS-EXT-IPS-MAC:mac_addr": mac,
        })
    };
    let mut addresses = vec![address(instance.ip.to_string(), "fixed")];
    let groups: Vec<Value> = match net {
        Some(net) => {
            addresses.extend(
                net.floating
                    .iter()
                    .map(|f| address(f.to_string(), "floating")),
            );
            net.groups.iter().map(|g| json!({"name": g})).collect()
        }
        None => vec![json!({"name": "default"})],
    };
    let mut body = json!({
        "id": instance.id,
        "name": instance.name,
        "status": status,
        "tenant_id": instance.tenant,
        "user_id": instance.user.map_or_else(String::new, |u| u.to_string()),
        "metadata": instance.metadata,
        "hostId": host_id(instance.tenant, instance.node),
        "image": image,
        "flavor": flavor,
        "created": rfc3339(instance.created),
        "updated": rfc3339(instance.updated),
        "addresses": {"private": addresses},
        "accessIPv4": "",
        "accessIPv6": "",
        "links": links(base, instance.id),
        "key_name": instance.key.as_ref().map(|k| k.name.as_str()),
        "config_drive": "",
        "progress": 0,
        "security_groups": groups,
        "OS-DCF:diskConfig": "MANUAL",
        // The zone of its node, else the zone it was asked for, else the default one.
        "OS-EXT-AZ:availability_zone": net
            .and_then(|n| n.zone.as_deref())
            .or(instance.zone.as_deref())
            .unwrap_or(ssntp::payload::DEFAULT_ZONE),
        "OS-EXT-STS:vm_state": vm_state,
        "OS-EXT-STS:task_state": task_state,
        "OS-EXT-STS:power_state": power_state,
        "OS-SRV-USG:launched_at": rfc3339(instance.created),
        "OS-SRV-USG:terminated_at": null,
        "os-extended-volumes:volumes_attached": volumes,
    });
    // Nova shows a fault on servers in ERROR: code 500 (what Nova records for a failed build),
    // the cause in words, when it happened; the details (the failure's code) to admins only.
    if let Some(fault) = crate::engine::fault::shown(instance) {
        body["fault"] = json!({
            "code": 500,
            "message": fault.message,
            "created": rfc3339(fault.created),
        });
        if admin {
            body["fault"]["details"] = json!(fault.reason);
        }
    }
    if admin {
        let host = instance.node.map(|n| n.to_string());
        body["OS-EXT-SRV-ATTR:host"] = json!(host);
        body["OS-EXT-SRV-ATTR:hypervisor_hostname"] = json!(host);
        body["OS-EXT-SRV-ATTR:instance_name"] = json!(format!("instance-{}", instance.id));
    }
    body
}

fn summary(base: &str, instance: &Instance) -> Value {
    json!({"id": instance.id, "name": instance.name, "links": links(base, instance.id)})
}

struct Listing {
    instances: Vec<Instance>,
    workloads: HashMap<Uuid, Workload>,
    next: Option<Uuid>,
}

/// The port networking and the volumes of a listing's servers (for the detailed list).
async fn listing_nets(
    state: &ApiState,
    instances: Vec<Instance>,
) -> Result<HashMap<Uuid, Related>, ApiError> {
    // The networking and the volumes are read at once (on etcd, a round trip each).
    let tenants = tenants_of(&instances);
    let (nets, volumes, zones) = {
        let (mine, tenants_too) = (instances.clone(), tenants.clone());
        let nodes: Vec<Uuid> = instances.iter().filter_map(|i| i.node).collect();
        tokio::try_join!(
            state.store(move |store| Ok(nets_of(store, &mine, &tenants_too)?)),
            state.store(move |store| Ok(volumes_of(store, &tenants)?)),
            // The zones of the page's nodes only (a cluster may have 10,000 nodes; a page has
            // at most as many as its servers).
            state.cluster(move |_, cluster| {
                let mut zones: HashMap<Uuid, Option<String>> = HashMap::new();
                for node in nodes {
                    zones
                        .entry(node)
                        .or_insert_with(|| cluster.node(node).ok().map(|n| n.zone));
                }
                Ok(zones)
            }),
        )?
    };
    let mut related = assemble(&instances, &nets, &volumes);
    for i in &instances {
        if let (Some(node), Some(r)) = (i.node, related.get_mut(&i.id)) {
            r.zone = zones.get(&node).cloned().flatten();
        }
    }
    Ok(related)
}

async fn listing(
    state: &ApiState,
    caller: &Principal,
    query: &ServerQuery,
) -> Result<Listing, ApiError> {
    let asked = server_query::Listing::new(caller, query)?;
    if asked.limit == 0 {
        return Ok(Listing {
            instances: Vec::new(),
            workloads: HashMap::new(),
            next: None,
        });
    }
    let scope = asked.scope;
    let by_id = |all: Vec<Workload>| -> HashMap<Uuid, Workload> {
        all.into_iter().map(|w| (w.id, w)).collect()
    };
    if asked.scans() {
        // The scope's servers whole, filtered, sorted, then paged.
        return state
            .store(move |store| {
                let workloads = by_id(store.workloads(scope)?);
                let keeps = |i: &Instance| asked.keeps(i, workloads.get(&i.workload));
                let mut all = server_query::scan(store, scope, asked.filter, keeps)?;
                asked.sort(&mut all);
                let (instances, next) = asked.page(all)?;
                Ok(Listing {
                    instances,
                    workloads,
                    next,
                })
            })
            .await;
    }
    // One page, read beside the workloads (two reads at once: the page's round trips, on etcd,
    // do not wait for the workloads').
    let (filter, page) = (
        asked.filter,
        Page {
            marker: asked.marker,
            limit: asked.limit,
        },
    );
    let (workloads, read) = tokio::try_join!(
        state.store(move |store| Ok(store.workloads(scope)?)),
        state.store(move |store| Ok(store.instances(scope, filter, page)?)),
    )?;
    let workloads = by_id(workloads);
    let instances = read
        .items
        .into_iter()
        .filter(|i| asked.keeps(i, workloads.get(&i.workload)))
        .collect();
    Ok(Listing {
        instances,
        workloads,
        next: read.next,
    })
}

fn next_link(base: &str, path: &str, query: &ServerQuery, next: Option<Uuid>) -> Option<Value> {
    let next = next?;
    let mut query = query.clone();
    query.marker = Some(next.to_string());
    let encoded = query.encode()?;
    Some(json!([{"rel": "next", "href": format!("{base}{BASE}{path}?{encoded}")}]))
}

/// `GET /servers`.
pub async fn list(
    State(state): State<ApiState>,
    caller: Principal,
    query: ServerQuery,
) -> Result<Json<Value>, ApiError> {
    let listing = listing(&state, &caller, &query).await?;
    let base = &state.config.public_url;
    let servers: Vec<Value> = listing.instances.iter().map(|i| summary(base, i)).collect();
    let mut body = json!({"servers": servers});
    if let Some(links) = next_link(base, "/servers", &query, listing.next) {
        body["servers_links"] = links;
    }
    Ok(Json(body))
}

/// `GET /servers/detail`.
pub async fn detail(
    State(state): State<ApiState>,
    caller: Principal,
    query: ServerQuery,
) -> Result<Json<Value>, ApiError> {
    let listing = listing(&state, &caller, &query).await?;
    let nets = listing_nets(&state, listing.instances.clone()).await?;
    let base = &state.config.public_url;
    let admin = caller.is_admin();
    let servers: Vec<Value> = listing
        .instances
        .iter()
        .map(|i| {
            detailed(
                base,
                i,
                listing.workloads.get(&i.workload),
                admin,
                nets.get(&i.id),
            )
        })
        .collect();
    let mut body = json!({"servers": servers});
    if let Some(links) = next_link(base, "/servers/detail", &query, listing.next) {
        body["servers_links"] = links;
    }
    Ok(Json(body))
}

/// One server with its workload, for `GET /servers/{id}`: admins may read any project's (as
/// with `all_tenants` listings); changes stay in the token's project (see `launch.rs`).
pub async fn lookup(
    state: &ApiState,
    caller: &Principal,
    id: Uuid,
) -> Result<(Instance, Option<Workload>), ApiError> {
    let scope = caller.project_scope(true)?;
    state
        .store(move |store| {
            let instance = store.instance(scope, id)?;
            let workload = store.workload(Scope::All, instance.workload).ok();
            Ok((instance, workload))
        })
        .await
}

/// `GET /servers/{id}`.
pub async fn show(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let id = path_id("server", &id)?;
    Ok(Json(json!({"server": shown(&state, &caller, id).await?})))
}

/// One server in the detailed shape, as the caller may see it (404 otherwise).
pub(super) async fn shown(
    state: &ApiState,
    caller: &Principal,
    id: Uuid,
) -> Result<Value, ApiError> {
    let (instance, workload) = lookup(state, caller, id).await?;
    let nets = listing_nets(state, vec![instance.clone()]).await?;
    Ok(detailed(
        &state.config.public_url,
        &instance,
        workload.as_ref(),
        caller.is_admin(),
        nets.get(&instance.id),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_id_is_nova_s_hash_of_project_and_host() {
        let (tenant, node) = (Uuid::from_u128(1), Uuid::from_u128(7));
        // hashlib.sha224(b"00000000-0000-0000-0000-000000000001"
        //                b"00000000-0000-0000-0000-000000000007").hexdigest()
        assert_eq!(
            host_id(tenant, Some(node)),
            "ba494ca0c05bc22958c5d50589b60826df01c8177f550702a1a6f5d1"
        );
        assert_ne!(
            host_id(Uuid::from_u128(2), Some(node)),
            host_id(tenant, Some(node))
        );
        assert_eq!(host_id(tenant, None), "");
    }
}
