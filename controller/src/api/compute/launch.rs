//! `POST /servers` (202) and `DELETE /servers/{id}` (204); the shared parts of a workload
//! reference that rebuild and resize use too. Actions are in [`super::server_action`].
//!
//! A create maps flavor + image + user data to a workload private to the project (reusing one the
//! project owns with the same three, else making one named `server-<hash>`), then asks the
//! cluster to launch `max_count` instances of it, or as many as the quota leaves and the cluster's
//! nodes could hold at all ([`Cluster::capacity`](crate::cluster::Cluster::capacity)) if that is
//! at least `min_count` (Nova's rule); the store re-checks the quota per instance, so parallel
//! creates never exceed it. A `key_name` names one of the caller's key pairs (400 "Invalid
//! key_name provided." otherwise, as Nova answers): every instance keeps its name and a copy of
//! its public key, which its START carries as `public-keys` meta data. `security_groups`
//! (`[{"name": ...}]`, a name or an id each) names the project's security groups for the
//! instances' ports (400 for one it does not have, as Nova answers); without it, `default`.
//!
//! A server may boot from a volume instead (`block_device_mapping_v2`, read by [`super::bdm`]):
//! an existing bootable volume of the project (its image is the workload's; one server only), or
//! a new volume per server made from `imageRef`'s image (`volume_size` GiB, which the image must
//! fit in; counted against the project's volume quota). The cluster attaches it to the server
//! as its root disk (`/dev/vda`, `in-use`) and boots from it
//! ([`Cluster::launch_from_volume`](crate::cluster::Cluster::launch_from_volume)).
//!
//! Deletes (and actions) act in the token's project, or on any project's server for admins (as
//! Nova's); a locked server is not deleted but by an admin (409, [`super::lock`]).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::BASE;
use super::bdm::{self, Root};
use crate::api::extract::{JsonBody, PathParams, path_id};
use crate::api::{ApiError, ApiState, Principal};
use crate::cluster::{BootVolume, ClusterError, Launch};
use crate::volumes as rules;
use store::{
    CatalogStore, IdentityStore, Image, InstanceKey, Keypair, KeypairStore, NetworkStore,
    NewWorkload, Scope, SecurityGroup, Store, StoreError, VolumeLimits,
};

/// The most user data accepted, decoded (Nova's limit).
const MAX_USER_DATA: usize = 65_535;

#[derive(Debug, Deserialize)]
pub struct CreateRequest {
    server: ServerCreate,
    /// Where to place it (`group`: a server group, [`super::server_groups`]).
    #[serde(
        rename = "os:scheduler_hints",
        alias = "OS-SCH-HNT:scheduler_hints",
        default
    )]
    scheduler_hints: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct ServerCreate {
    name: String,
    #[serde(rename = "flavorRef")]
    flavor_ref: Value,
    #[serde(rename = "imageRef", default)]
    image_ref: Option<Value>,
    #[serde(default)]
    user_data: Option<String>,
    #[serde(default)]
    min_count: Option<Value>,
    #[serde(default)]
    max_count: Option<Value>,
    #[serde(default)]
    key_name: Option<Value>,
    #[serde(default)]
    security_groups: Option<Value>,
    #[serde(default)]
    block_device_mapping_v2: Option<Value>,
    #[serde(default)]
    block_device_mapping: Option<Value>,
    #[serde(default)]
    metadata: Option<Value>,
    #[serde(default)]
    networks: Option<Value>,
    #[serde(rename = "accessIPv4", default)]
    access_ipv4: Option<Value>,
    #[serde(default)]
    availability_zone: Option<Value>,
    #[serde(rename = "accessIPv6", default)]
    access_ipv6: Option<Value>,
    #[serde(default)]
    return_reservation_id: Option<Value>,
}

/// The id in a reference that may be a bare id or a URL ending in one.
pub(super) fn reference_id(what: &str, reference: &Value) -> Result<Uuid, ApiError> {
    let text = match reference {
        Value::String(s) => s.as_str(),
        _ => return Err(ApiError::BadRequest(format!("{what} must be a string"))),
    };
    let last = text.trim_end_matches('/').rsplit('/').next().unwrap_or("");
    Uuid::parse_str(last)
        .map_err(|_| ApiError::BadRequest(format!("{what} {text} could not be found.")))
}

/// User data as Nova takes it: base64 of UTF-8 text, at most [`MAX_USER_DATA`] bytes decoded.
pub(super) fn decode_user_data(encoded: &str) -> Result<String, ApiError> {
    let bytes = STANDARD
        .decode(encoded.trim())
        .map_err(|_| ApiError::BadRequest("user_data is not valid base64".into()))?;
    if bytes.len() > MAX_USER_DATA {
        return Err(ApiError::BadRequest(format!(
            "user_data is over {MAX_USER_DATA} bytes"
        )));
    }
    String::from_utf8(bytes)
        .map_err(|_| ApiError::BadRequest("user_data must be UTF-8 text".into()))
}

/// A count given as a number or a numeric string, at least 1.
fn count(name: &str, value: &Option<Value>) -> Result<Option<u32>, ApiError> {
    let bad = || {
        ApiError::BadRequest(format!(
            "{name} must be an integer from 1 to {}",
            Launch::MAX_COUNT
        ))
    };
    let n = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.as_u64().ok_or_else(bad)?,
        Some(Value::String(s)) => s.trim().parse::<u64>().map_err(|_| bad())?,
        Some(_) => return Err(bad()),
    };
    if n == 0 || n > u64::from(Launch::MAX_COUNT) {
        return Err(bad());
    }
    u32::try_from(n).map(Some).map_err(|_| bad())
}

/// What a validated create asks for.
struct Plan {
    name: String,
    flavor: Uuid,
    /// What its root disk is made from: its image, or a volume.
    root: Root,
    user_data: String,
    min: u32,
    max: u32,
    key_name: Option<String>,
    /// The security groups asked for, by name or id (none: `default`).
    security_groups: Vec<String>,
    /// The servers' metadata.
    metadata: store::Metadata,
    /// The networks named (none, or the project's one).
    networks: Vec<Uuid>,
    /// Whether the answer is the reservation id rather than the first server.
    return_reservation_id: bool,
    /// The zone asked for, if any.
    zone: Option<String>,
}

fn plan(server: ServerCreate) -> Result<Plan, ApiError> {
    let name = server.name.trim().to_string();
    if name.is_empty() || name.len() > 255 {
        return Err(ApiError::BadRequest(
            "name must have 1 to 255 characters".into(),
        ));
    }
    let flavor = reference_id("Flavor", &server.flavor_ref)?;
    let image = match &server.image_ref {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(r) => Some(reference_id("Image", r)?),
    };
    let root = bdm::root(
        image,
        server.block_device_mapping_v2.as_ref(),
        server.block_device_mapping.as_ref(),
    )?;
    let user_data = match server.user_data {
        None => String::new(),
        Some(encoded) => decode_user_data(&encoded)?,
    };
    let min = count("min_count", &server.min_count)?;
    let max = count("max_count", &server.max_count)?;
    let (min, max) = match (min, max) {
        (None, None) => (1, 1),
        (Some(m), None) => (m, m),
        (None, Some(m)) => (1, m),
        (Some(a), Some(b)) if a <= b => (a, b),
        _ => {
            return Err(ApiError::BadRequest(
                "min_count must be <= max_count".into(),
            ));
        }
    };
    let key_name = match server.key_name {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) => Some(name),
        Some(_) => return Err(ApiError::BadRequest("key_name must be a string".into())),
    };
    let security_groups = match server.security_groups {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(groups)) if groups.len() <= store::MAX_PORT_GROUPS => groups
            .iter()
            .map(|g| match g.get("name") {
                Some(Value::String(name)) if !name.is_empty() => Ok(name.clone()),
                _ => Err(ApiError::BadRequest(
                    "Invalid input for field/attribute security_groups: each must be \
                     {\"name\": \"...\"}"
                        .into(),
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(ApiError::BadRequest(format!(
                "security_groups must be a list of at most {} {{\"name\": ...}} objects",
                store::MAX_PORT_GROUPS
            )));
        }
    };
    let metadata = match &server.metadata {
        None | Some(Value::Null) => store::Metadata::new(),
        Some(value) => super::server_metadata::parse(value)?,
    };
    let networks = super::create_checks::parse_networks(server.networks.as_ref())?;
    let zone = super::create_checks::parse_zone(server.availability_zone.as_ref())?;
    super::create_checks::check_access_ips(
        server.access_ipv4.as_ref(),
        server.access_ipv6.as_ref(),
    )?;
    // Nova's `parameter_types.boolean`: a boolean or its text.
    let return_reservation_id = match &server.return_reservation_id {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => v
            .as_str()
            .and_then(super::flavors::boolean)
            .ok_or_else(|| {
                ApiError::BadRequest(format!(
                    "Invalid input for field/attribute return_reservation_id. Value: {v}. It is \
                     not a boolean"
                ))
            })?,
    };
    if matches!(root, Root::Volume { .. }) && max > 1 {
        return Err(ApiError::BadRequest(
            "Cannot attach one or more volumes to multiple instances".into(),
        ));
    }
    Ok(Plan {
        name,
        flavor,
        root,
        user_data,
        min,
        max,
        key_name,
        security_groups,
        metadata,
        networks,
        return_reservation_id,
        zone,
    })
}

/// The caller's key pair `name` as an instance keeps it; Nova's 400 when the caller has none of
/// that name (or is no user: a certificate login has no key pairs).
fn instance_key(
    store: &dyn KeypairStore,
    user: Option<Uuid>,
    name: &str,
) -> Result<InstanceKey, ApiError> {
    let invalid = || ApiError::BadRequest("Invalid key_name provided.".into());
    let user = user.ok_or_else(invalid)?;
    if !Keypair::valid_name(name) {
        return Err(invalid());
    }
    match store.keypair(user, name) {
        Ok(k) => Ok(InstanceKey {
            name: k.name,
            public_key: k.public_key,
        }),
        Err(StoreError::NotFound { .. }) => Err(invalid()),
        Err(other) => Err(other.into()),
    }
}

/// The project's security groups named (by name or id) in a server create, as Nova checks
/// them: 400 for one the project does not have, 409 for a name several groups have; none named:
/// the project's `default`.
fn security_groups(
    store: &dyn NetworkStore,
    tenant: Uuid,
    asked: &[String],
) -> Result<Vec<SecurityGroup>, ApiError> {
    let groups = store.security_groups(tenant)?;
    if asked.is_empty() {
        return Ok(groups.into_iter().filter(|g| g.default).collect());
    }
    let mut chosen: Vec<SecurityGroup> = Vec::new();
    for name in asked {
        let by_id: Vec<&SecurityGroup> = groups
            .iter()
            .filter(|g| g.id.to_string() == *name)
            .collect();
        let found = if by_id.is_empty() {
            groups.iter().filter(|g| g.name == *name).collect()
        } else {
            by_id
        };
        match found.as_slice() {
            [one] => {
                if !chosen.iter().any(|c| c.id == one.id) {
                    chosen.push((*one).clone());
                }
            }
            [] => {
                return Err(ApiError::BadRequest(format!(
                    "Security group {name} not found for project {tenant}."
                )));
            }
            _ => {
                return Err(ApiError::Conflict(format!(
                    "Multiple security groups found matching '{name}'. Use an ID to be more \
                     specific."
                )));
            }
        }
    }
    Ok(chosen)
}

/// How many instances of `per` vCPUs and `mem` MiB the tenant's quota still allows.
pub(crate) fn headroom(
    store: &dyn IdentityStore,
    tenant: Uuid,
    vcpus: u32,
    mem: u64,
) -> Result<u64, ApiError> {
    let quota = store.tenant(tenant)?.quota;
    let used = store.usage(tenant)?;
    let mut room = u64::MAX;
    if let Some(limit) = quota.instances {
        room = room.min(u64::from(limit.saturating_sub(used.instances)));
    }
    if let Some(limit) = quota.vcpus {
        room = room.min(u64::from(limit.saturating_sub(used.vcpus)) / u64::from(vcpus.max(1)));
    }
    if let Some(limit) = quota.memory_mb {
        room = room.min(limit.saturating_sub(used.memory_mb) / mem.max(1));
    }
    Ok(room)
}

/// How the names of the workloads [`workload_for`] makes begin (then 12 hex digits).
const IMPLICIT: &str = "server-";

/// Whether the Compute API made `workload` for its servers ([`workload_for`]) rather than a
/// user through the native API: such a workload goes when its image does (once no instance
/// uses it).
pub fn is_implicit(workload: &store::Workload) -> bool {
    workload
        .name
        .strip_prefix(IMPLICIT)
        .is_some_and(|short| short.len() == 12 && short.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The project's workload for flavor + image + user data (ephemeral or not), made if it has
/// none.
pub fn workload_for(
    store: &dyn CatalogStore,
    tenant: Uuid,
    flavor: Uuid,
    image: Uuid,
    user_data: &str,
    ephemeral: bool,
) -> Result<Uuid, ApiError> {
    let existing = store
        .workloads(Scope::Tenant(tenant))?
        .into_iter()
        .find(|w| {
            w.owner == Some(tenant)
                && w.flavor == flavor
                && w.image == image
                && w.user_data == user_data
                && w.ephemeral == ephemeral
        });
    if let Some(workload) = existing {
        return Ok(workload.id);
    }
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        format!(
            "{flavor}\n{image}\n{user_data}{}",
            if ephemeral { "\nephemeral" } else { "" }
        )
        .as_bytes(),
    );
    let short: String = digest.as_ref()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let workload = store.create_workload(NewWorkload {
        owner: Some(tenant),
        name: format!("{IMPLICIT}{short}"),
        flavor,
        image,
        user_data: user_data.to_string(),
        ephemeral,
    })?;
    Ok(workload.id)
}

/// Image `id` as the tenant boots it: 400 when it does not see it or it is not active.
fn bootable_image(store: &dyn Store, tenant: Uuid, id: Uuid) -> Result<Image, ApiError> {
    let image = store
        .image(Scope::Tenant(tenant), id)
        .map_err(|e| match e {
            StoreError::NotFound { .. } => {
                ApiError::BadRequest(format!("Image {id} could not be found."))
            }
            other => other.into(),
        })?;
    if image.status != store::ImageStatus::Active {
        return Err(ApiError::BadRequest(format!("Image {id} is not active.")));
    }
    // A kernel image, or a disk that names one: what it names must be there for the tenant.
    crate::images::kernel::plan(store, Scope::Tenant(tenant), &image)?
        .map_err(ApiError::BadRequest)?;
    Ok(image)
}

/// The image a server of `root` is made from (its workload's), and the volume it boots from, if
/// it boots from one: an existing volume's image (it must still be one the tenant may boot), or
/// the image of a new volume (which must fit in it).
fn boot_of(
    store: &dyn Store,
    tenant: Uuid,
    root: &Root,
    limits: VolumeLimits,
) -> Result<(Uuid, Option<BootVolume>), ApiError> {
    match *root {
        Root::Image(id) => Ok((bootable_image(store, tenant, id)?.id, None)),
        Root::Volume {
            id,
            delete_on_termination,
        } => {
            let volume = rules::plan_boot(store, tenant, id).map_err(|e| match e {
                // Nova's own words, without the cluster's prefix.
                ClusterError::Invalid(message) => ApiError::BadRequest(message),
                other => other.into(),
            })?;
            let image = volume.image.ok_or_else(|| {
                ApiError::BadRequest(format!("Block Device {id} is not bootable."))
            })?;
            let image = bootable_image(store, tenant, image).map_err(|e| {
                ApiError::BadRequest(format!(
                    "volume {id} boots with the image it was made from, {image}: {e}"
                ))
            })?;
            let boot = BootVolume::Volume {
                id,
                delete_on_termination,
            };
            Ok((image.id, Some(boot)))
        }
        Root::NewVolume {
            image,
            size_gb,
            delete_on_termination,
        } => {
            let image = bootable_image(store, tenant, image)?;
            rules::check_volume_image(&image, size_gb, false).map_err(ApiError::BadRequest)?;
            let boot = BootVolume::Image {
                size_gb,
                delete_on_termination,
                limits,
            };
            Ok((image.id, Some(boot)))
        }
    }
}

/// `POST /servers`.
pub async fn create(
    State(state): State<ApiState>,
    caller: Principal,
    JsonBody(request): JsonBody<CreateRequest>,
) -> Result<Response, ApiError> {
    let tenant = caller.project()?;
    let seen = super::flavor_scope(&caller)?;
    let by = caller.who();
    let user = caller.user;
    let plan = plan(request.server)?;
    let server_group = super::server_groups::hinted_group(&request.scheduler_hints)?;
    let return_reservation_id = plan.return_reservation_id;
    let volume_limits = state.config.volume_limits;
    let instances = state
        .cluster(move |store, cluster| {
            let flavor = store.flavor(seen, plan.flavor).map_err(|e| match e {
                StoreError::NotFound { .. } => {
                    ApiError::BadRequest(format!("Flavor {} could not be found.", plan.flavor))
                }
                other => other.into(),
            })?;
            let (image, boot) = boot_of(store, tenant, &plan.root, volume_limits)?;
            let key = plan
                .key_name
                .as_deref()
                .map(|name| instance_key(store, user, name))
                .transpose()?;
            let groups = security_groups(store, tenant, &plan.security_groups)?;
            super::create_checks::check_networks(store, tenant, &plan.networks)?;
            if let Some(zone) = &plan.zone {
                super::create_checks::check_zone(&cluster.nodes(), zone)?;
            }
            let room = headroom(store, tenant, flavor.vcpus, flavor.memory_mb)?;
            if room < u64::from(plan.min) {
                return Err(ApiError::OverLimit(format!(
                    "Quota exceeded: requested {} instance(s) of flavor {}, room for {room}",
                    plan.min, flavor.name
                )));
            }
            let capacity = cluster.capacity(&flavor)?.unwrap_or(u64::MAX);
            if capacity < u64::from(plan.min) {
                return Err(ClusterError::OverCapacity {
                    requested: plan.min,
                    capacity,
                }
                .into());
            }
            let room = room.min(capacity);
            let mut count = u32::try_from(room.min(u64::from(plan.max))).unwrap_or(plan.max);
            if let Some(group) = server_group {
                count = count.min(super::server_groups::room_in(
                    store, tenant, group, plan.min,
                )?);
            }
            let workload = workload_for(store, tenant, flavor.id, image, &plan.user_data, false)?;
            // The ports' groups, unless only `default` (what a port has when none are set).
            let ids: Vec<Uuid> = if groups.len() == 1 && groups[0].default {
                Vec::new()
            } else {
                groups.iter().map(|g| g.id).collect()
            };
            let launch = Launch {
                tenant,
                workload,
                name: plan.name,
                count,
                key,
                groups: ids,
                metadata: plan.metadata,
                user,
                server_group,
                reservation: store::Instance::new_reservation(),
                zone: plan.zone,
            };
            let instances = match boot {
                None => cluster.launch(Scope::Tenant(tenant), launch, &by)?,
                Some(boot) => {
                    cluster.launch_from_volume(Scope::Tenant(tenant), launch, boot, &by)?
                }
            };
            let names: Vec<String> = groups.into_iter().map(|g| g.name).collect();
            Ok((instances, names))
        })
        .await?;
    let (instances, group_names) = instances;
    let first = instances
        .first()
        .ok_or_else(|| ApiError::Internal("the cluster launched no instance".into()))?;
    if return_reservation_id {
        // Nova's answer to `return_reservation_id`: the reservation alone, 202 as a create's.
        let body = json!({"reservation_id": first.reservation});
        return Ok((StatusCode::ACCEPTED, Json(body)).into_response());
    }
    let base = &state.config.public_url;
    let body = json!({"server": {
        "id": first.id,
        "links": [
            {"rel": "self", "href": format!("{base}{BASE}/servers/{}", first.id)},
            {"rel": "bookmark", "href": format!("{base}/compute/servers/{}", first.id)},
        ],
        "OS-DCF:diskConfig": "MANUAL",
        "security_groups": group_names.iter().map(|name| json!({"name": name})).collect::<Vec<_>>(),
    }});
    Ok((StatusCode::ACCEPTED, Json(body)).into_response())
}

/// `DELETE /servers/{id}`.
pub async fn delete(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<StatusCode, ApiError> {
    let id = path_id("server", &id)?;
    let scope = caller.project_scope(true)?;
    let (by, admin) = (caller.who(), caller.is_admin());
    state
        .cluster(move |store, cluster| {
            super::lock::unlocked(store, scope, id, admin)?;
            Ok(cluster.delete(scope, id, &by)?)
        })
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(body: Value) -> Result<Plan, ApiError> {
        plan(serde_json::from_value(body).unwrap())
    }

    #[test]
    fn create_requests_are_validated() {
        let f = Uuid::new_v4();
        let i = Uuid::new_v4();
        let ok = server(json!({"name": "a", "flavorRef": f.to_string(),
            "imageRef": format!("http://x/images/{i}"), "user_data": STANDARD.encode("#cloud-config\n"),
            "min_count": "2", "max_count": 3, "networks": "auto"}))
        .unwrap();
        assert_eq!(
            (ok.flavor, &ok.root, ok.min, ok.max),
            (f, &Root::Image(i), 2, 3)
        );
        assert_eq!(ok.user_data, "#cloud-config\n");
        assert!(!ok.return_reservation_id);
        for yes in [json!(true), json!("True"), json!("on")] {
            let asked = server(json!({"name": "a", "flavorRef": f.to_string(),
                "imageRef": i.to_string(), "return_reservation_id": yes}))
            .unwrap();
            assert!(asked.return_reservation_id);
        }
        for bad in [
            json!({"name": "", "flavorRef": f.to_string(), "imageRef": i.to_string()}),
            json!({"name": "a", "flavorRef": "small", "imageRef": i.to_string()}),
            json!({"name": "a", "flavorRef": f.to_string()}),
            json!({"name": "a", "flavorRef": f.to_string(), "imageRef": i.to_string(), "user_data": "!!"}),
            json!({"name": "a", "flavorRef": f.to_string(), "imageRef": i.to_string(), "min_count": 0}),
            json!({"name": "a", "flavorRef": f.to_string(), "imageRef": i.to_string(), "min_count": 3, "max_count": 2}),
            json!({"name": "a", "flavorRef": 5, "imageRef": i.to_string()}),
            json!({"name": "a", "flavorRef": f.to_string(), "imageRef": i.to_string(), "key_name": 5}),
            json!({"name": "a", "flavorRef": f.to_string(), "imageRef": i.to_string(), "metadata": {"k": 1}}),
            json!({"name": "a", "flavorRef": f.to_string(), "imageRef": i.to_string(), "metadata": "k"}),
            json!({"name": "a", "flavorRef": f.to_string(), "imageRef": i.to_string(), "networks": "none"}),
            json!({"name": "a", "flavorRef": f.to_string(), "imageRef": i.to_string(), "accessIPv4": "1.2"}),
            json!({"name": "a", "flavorRef": f.to_string(), "imageRef": i.to_string(), "return_reservation_id": "maybe"}),
            json!({"name": "a", "flavorRef": f.to_string(), "imageRef": i.to_string(), "return_reservation_id": 1}),
        ] {
            assert_eq!(
                server(bad.clone()).err().map(|e| e.status().as_u16()),
                Some(400),
                "{bad}"
            );
        }
    }
}
