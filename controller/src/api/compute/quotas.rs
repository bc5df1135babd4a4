//! `os-quota-sets` (Nova's quota API at microversion 2.1, as `openstack quota show` and `quota
//! set` use it): a project's limits (`GET /os-quota-sets/{project}`), with what it uses
//! (`/detail`), the defaults new projects get (`/defaults`), and an admin's change (`PUT`).
//!
//! `instances`, `cores` and `ram` are the tenant's own quota (`-1`: unlimited); `floating_ips`,
//! `security_groups` and `security_group_rules` (which 2.1 still shows) are its Networking
//! quota; `fixed_ips` is unlimited; the rest are the fixed limits this server applies
//! (`key_pairs` per user, as in Nova). A member reads its own project's only (403 otherwise);
//! an admin reads and changes any project's. A change of a figure this server does not keep is
//! a 400, not a silent no-op.

use axum::Json;
use axum::extract::State;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::limit_of;
use crate::api::extract::{JsonBody, PathParams};
use crate::api::{ApiError, ApiState, Principal};
use store::{NetworkQuota, Quota, Scope, ServerGroup, Store, TenantChange};

/// The limits this server applies to every project alike, with Nova's names (no usage kept).
const FIXED: [(&str, i64); 6] = [
    ("metadata_items", 128),
    ("injected_files", 5),
    ("injected_file_content_bytes", 10240),
    ("injected_file_path_bytes", 255),
    ("server_group_members", ServerGroup::MAX_MEMBERS as i64),
    ("fixed_ips", -1),
];

/// What one project's quota set is made of.
struct Figures {
    quota: Quota,
    network: NetworkQuota,
    /// Usage, for `/detail`: instances, cores, ram, floating IPs, security groups, rules, key
    /// pairs (none: they are per user), server groups.
    used: Option<[u64; 8]>,
}

fn body(project: Uuid, f: &Figures) -> Value {
    set_of(&project.to_string(), f, "quota_set")
}

/// The figures of `f` under `id`, in an object named `key`.
fn set_of(id: &str, f: &Figures, key: &str) -> Value {
    let network = |n: u32| i64::from(n);
    let limits: [(&str, i64); 8] = [
        ("instances", limit_of(f.quota.instances)),
        ("cores", limit_of(f.quota.vcpus)),
        ("ram", limit_of(f.quota.memory_mb)),
        ("floating_ips", network(f.network.floating_ips)),
        ("security_groups", network(f.network.security_groups)),
        (
            "security_group_rules",
            network(f.network.security_group_rules),
        ),
        ("key_pairs", i64::from(super::keypairs::MAX_KEYPAIRS)),
        ("server_groups", ServerGroup::MAX_PER_TENANT as i64),
    ];
    let mut set = Map::new();
    set.insert("id".into(), json!(id));
    for (k, (name, limit)) in limits.iter().enumerate() {
        let used = f.used.and_then(|u| u.get(k).copied());
        set.insert((*name).into(), shown(*limit, f.used.is_some(), used));
    }
    for (name, limit) in FIXED {
        set.insert(name.into(), shown(limit, f.used.is_some(), Some(0)));
    }
    let mut body = Map::new();
    body.insert(key.into(), Value::Object(set));
    Value::Object(body)
}

/// `GET /os-quota-class-sets/{class}` (admins; `openstack quota show --class CLASS`): every class
/// is the defaults new projects get, as `/os-quota-sets/{project}/defaults` shows them.
pub async fn class_show(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(class): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    caller.require_admin()?;
    let f = Figures {
        quota: state.config.default_quota,
        network: NetworkQuota::DEFAULT,
        used: None,
    };
    Ok(Json(set_of(&class, &f, "quota_class_set")))
}

/// `PUT /os-quota-class-sets/{class}` (admins): the defaults are the controller's configuration
/// (`--default-quota`), not changed through the API: a 400 that says so, rather than a change
/// that would not last.
pub async fn class_update(
    caller: Principal,
    PathParams(_class): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    caller.require_admin()?;
    Err(ApiError::BadRequest(
        "the default quotas are the controller's configuration (--default-quota): change them there; a project's own quota is set with PUT /os-quota-sets/{project}".into(),
    ))
}

/// A limit as it is shown: the number, or with usage `{"limit", "in_use", "reserved"}`.
fn shown(limit: i64, detail: bool, used: Option<u64>) -> Value {
    if detail {
        json!({"limit": limit, "in_use": used.unwrap_or(0), "reserved": 0})
    } else {
        json!(limit)
    }
}

/// The project in the path, which the caller may read: its own, or any for an admin.
fn readable(caller: &Principal, project: &str) -> Result<Uuid, ApiError> {
    let id = Uuid::parse_str(project)
        .map_err(|_| ApiError::NotFound(format!("project {project} could not be found")))?;
    if caller.is_admin() || caller.project().ok() == Some(id) {
        Ok(id)
    } else {
        Err(ApiError::Forbidden(
            "a project's quota is readable by its members and admins only".into(),
        ))
    }
}

async fn figures(state: &ApiState, project: Uuid, detail: bool) -> Result<Figures, ApiError> {
    state
        .store(move |store: &dyn Store| {
            let tenant = store.tenant(project)?;
            let network = store.network_quota(project)?;
            // Key pairs are per user, not per project: 0 in use here, as Nova shows them.
            let used = if detail {
                let u = store.usage(project)?;
                let n = store.network_usage(project)?;
                Some([
                    u64::from(u.instances),
                    u64::from(u.vcpus),
                    u.memory_mb,
                    u64::from(n.floating_ips),
                    u64::from(n.security_groups),
                    u64::from(n.security_group_rules),
                    0,
                    store.server_groups(Scope::Tenant(project))?.len() as u64,
                ])
            } else {
                None
            };
            Ok(Figures {
                quota: tenant.quota,
                network,
                used,
            })
        })
        .await
}

/// `GET /os-quota-sets/{project}`.
pub async fn show(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(project): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let project = readable(&caller, &project)?;
    let f = figures(&state, project, false).await?;
    Ok(Json(body(project, &f)))
}

/// `GET /os-quota-sets/{project}/detail`.
pub async fn detail(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(project): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let project = readable(&caller, &project)?;
    let f = figures(&state, project, true).await?;
    Ok(Json(body(project, &f)))
}

/// `GET /os-quota-sets/{project}/defaults`: what a new project gets.
pub async fn defaults(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(project): PathParams<String>,
) -> Result<Json<Value>, ApiError> {
    let project = readable(&caller, &project)?;
    let f = Figures {
        quota: state.config.default_quota,
        network: NetworkQuota::DEFAULT,
        used: None,
    };
    Ok(Json(body(project, &f)))
}

/// A figure of a PUT: a whole number from -1 (unlimited, where allowed) up.
fn figure(name: &str, v: &Value) -> Result<i64, ApiError> {
    let n = v
        .as_i64()
        .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
        .ok_or_else(|| {
            ApiError::BadRequest(format!(
                "Invalid input for field/attribute {name}. Value: {v}. It must be an integer"
            ))
        })?;
    if n < -1 {
        return Err(ApiError::BadRequest(format!(
            "Invalid input for field/attribute {name}. Value: {n}. It must be -1 or more"
        )));
    }
    Ok(n)
}

/// `PUT /os-quota-sets/{project}` (admins): `{"quota_set": {"instances"?, "cores"?, "ram"?,
/// "floating_ips"?, "security_groups"?, "security_group_rules"?}}`; the answer is the new set.
pub async fn update(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(project): PathParams<String>,
    JsonBody(request): JsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    caller.require_admin()?;
    let project = readable(&caller, &project)?;
    let Some(set) = request.get("quota_set").and_then(Value::as_object).cloned() else {
        return Err(ApiError::BadRequest(
            "Invalid input: the body must be {\"quota_set\": {...}}".into(),
        ));
    };
    let mut asked: Vec<(String, i64)> = Vec::new();
    for (name, v) in &set {
        match name.as_str() {
            // Nova takes these flags and ignores them here.
            "force" | "id" => continue,
            "instances"
            | "cores"
            | "ram"
            | "floating_ips"
            | "security_groups"
            | "security_group_rules" => asked.push((name.clone(), figure(name, v)?)),
            other => {
                return Err(ApiError::BadRequest(format!(
                    "Invalid input: {other} is not a quota this server keeps (it keeps \
                     instances, cores, ram, floating_ips, security_groups and \
                     security_group_rules)"
                )));
            }
        }
    }
    state
        .store(move |store: &dyn Store| {
            let tenant = store.tenant(project)?;
            let mut quota = tenant.quota;
            let mut network = store.network_quota(project)?;
            let mut network_changed = false;
            for (name, n) in &asked {
                let unlimited = *n < 0;
                let bounded = |max: u32| -> Result<u32, ApiError> {
                    u32::try_from(*n).ok().filter(|v| *v <= max).ok_or_else(|| {
                        ApiError::BadRequest(format!(
                            "Invalid input for field/attribute {name}: from 0 to {max} here"
                        ))
                    })
                };
                match name.as_str() {
                    "instances" => {
                        quota.instances =
                            (!unlimited).then(|| u32::try_from(*n).unwrap_or(u32::MAX))
                    }
                    "cores" => {
                        quota.vcpus = (!unlimited).then(|| u32::try_from(*n).unwrap_or(u32::MAX))
                    }
                    "ram" => quota.memory_mb = (!unlimited).then(|| n.unsigned_abs()),
                    "floating_ips" => {
                        network.floating_ips = bounded(NetworkQuota::MAX.floating_ips)?;
                        network_changed = true;
                    }
                    "security_groups" => {
                        network.security_groups = bounded(NetworkQuota::MAX.security_groups)?;
                        network_changed = true;
                    }
                    _ => {
                        network.security_group_rules =
                            bounded(NetworkQuota::MAX.security_group_rules)?;
                        network_changed = true;
                    }
                }
            }
            if quota != tenant.quota {
                store.update_tenant(
                    project,
                    tenant.version,
                    TenantChange {
                        quota: Some(quota),
                        ..TenantChange::default()
                    },
                )?;
            }
            if network_changed {
                store.set_network_quota(project, network)?;
            }
            Ok(())
        })
        .await?;
    let f = figures(&state, project, false).await?;
    Ok(Json(body(project, &f)))
}
