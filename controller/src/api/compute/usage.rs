//! `os-simple-tenant-usage` as Nova has it at microversion 2.1 (`openstack usage list`, `usage
//! show`): what the projects' servers used over a period, in vCPU-hours, MiB-hours and GiB-hours
//! of local disk, and for how many server-hours.
//!
//! `start` and `end` (ISO 8601; both default to now, and `start` must come before `end`: Nova's
//! 400 `Invalid start time. The start time cannot occur after the end time.`) bound the period;
//! a server counts from its creation to now, within the period. Only servers that still have a
//! record count: a deleted server's record goes with it, so its past use is not kept (the usage
//! of servers deleted within the period is missing, where Nova keeps it). `detailed=1` adds each
//! server (`server_usages`) to the list; one project's usage always has them. Without `start`
//! and `end` the period is empty (Nova's: 200 with no usage). The list is for admins (every project with servers); a member reads
//! its own project's (403 for another's, as Nova's policy).

use std::collections::{BTreeMap, HashMap};
use std::time::SystemTime;

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::server_query::scan;
use super::status::nova_state;
use crate::api::clock::nova_micro;
use crate::api::clock::parse_time;
use crate::api::extract::{PathParams, QueryParams};
use crate::api::{ApiError, ApiState, Principal};
use store::{Instance, InstanceFilter, Scope, Store};

/// The query of a usage request.
#[derive(Debug, Default, Deserialize)]
pub struct UsageQuery {
    #[serde(default)]
    start: Option<String>,
    #[serde(default)]
    end: Option<String>,
    #[serde(default)]
    detailed: Option<String>,
}

/// The period asked for.
struct Period {
    start: SystemTime,
    end: SystemTime,
    detailed: bool,
}

fn period(query: &UsageQuery) -> Result<Period, ApiError> {
    let now = SystemTime::now();
    let at = |text: &Option<String>| match text.as_deref() {
        None => Ok(now),
        // Nova also takes a space between date and time.
        Some(t) => parse_time(&t.replacen(' ', "T", 1))
            .ok_or_else(|| ApiError::BadRequest(format!("Invalid time format: {t}"))),
    };
    let (start, end) = (at(&query.start)?, at(&query.end)?);
    // Without either, Nova's period is the instant between its two readings of the clock: an
    // empty one, not an error.
    if query.start.is_none() && query.end.is_none() {
        return Ok(Period {
            start,
            end,
            detailed: false,
        });
    }
    if start >= end {
        return Err(ApiError::BadRequest(
            "Invalid start time. The start time cannot occur after the end time.".into(),
        ));
    }
    let detailed = query
        .detailed
        .as_deref()
        .is_some_and(|d| !matches!(d, "0" | "false" | "False" | ""));
    Ok(Period {
        start,
        end,
        detailed,
    })
}

/// Every server in `scope` (at most [`super::server_query::MAX_SCAN`]), with each one's flavor's disk in GiB and name.
fn servers(store: &dyn Store, scope: Scope) -> Result<Vec<(Instance, u64, String)>, ApiError> {
    let flavors: HashMap<Uuid, (u64, String)> = store
        .flavors(Scope::All)?
        .into_iter()
        .map(|f| (f.id, (f.disk_gb, f.name)))
        .collect();
    let workloads: HashMap<Uuid, Uuid> = store
        .workloads(scope)?
        .into_iter()
        .map(|w| (w.id, w.flavor))
        .collect();
    let instances = scan(store, scope, InstanceFilter::default(), |_| true)?;
    Ok(instances
        .into_iter()
        .map(|i| {
            let (disk, name) = workloads
                .get(&i.workload)
                .and_then(|f| flavors.get(f))
                .cloned()
                .unwrap_or((0, String::new()));
            (i, disk, name)
        })
        .collect())
}

/// Hours of `instance` within the period (from its creation to now).
fn hours(instance: &Instance, p: &Period, now: SystemTime) -> f64 {
    let from = instance.created.max(p.start);
    let to = now.min(p.end);
    to.duration_since(from)
        .map_or(0.0, |d| d.as_secs_f64() / 3600.0)
}

/// One project's usage over the period, from its servers.
fn tenant_usage(tenant: Uuid, servers: &[&(Instance, u64, String)], p: &Period) -> Value {
    let now = SystemTime::now();
    let (mut total_hours, mut vcpu_hours, mut mem_hours, mut disk_hours) = (0.0, 0.0, 0.0, 0.0);
    let mut detail = Vec::new();
    for (i, disk_gb, flavor) in servers.iter().copied() {
        let h = hours(i, p, now);
        if h <= 0.0 {
            continue;
        }
        total_hours += h;
        vcpu_hours += f64::from(i.vcpus) * h;
        mem_hours += i.memory_mb as f64 * h;
        disk_hours += *disk_gb as f64 * h;
        if p.detailed {
            let uptime = now.duration_since(i.created).map_or(0, |d| d.as_secs());
            detail.push(json!({
                "instance_id": i.id,
                "name": i.name,
                "hours": h,
                "memory_mb": i.memory_mb,
                "local_gb": disk_gb,
                "vcpus": i.vcpus,
                "tenant_id": tenant,
                "flavor": flavor,
                "started_at": nova_micro(i.created),
                "ended_at": null,
                "state": nova_state(&i.state).1,
                "uptime": uptime,
            }));
        }
    }
    let mut usage = json!({
        "tenant_id": tenant,
        "total_hours": total_hours,
        "total_vcpus_usage": vcpu_hours,
        "total_memory_mb_usage": mem_hours,
        "total_local_gb_usage": disk_hours,
        "start": nova_micro(p.start),
        "stop": nova_micro(p.end.min(now)),
    });
    if p.detailed {
        usage["server_usages"] = Value::Array(detail);
    }
    usage
}

/// `GET /os-simple-tenant-usage` (admins): every project with servers in the period.
pub async fn list(
    State(state): State<ApiState>,
    caller: Principal,
    QueryParams(query): QueryParams<UsageQuery>,
) -> Result<Json<Value>, ApiError> {
    caller.require_admin()?;
    let p = period(&query)?;
    let all = state.store(move |store| servers(store, Scope::All)).await?;
    let now = SystemTime::now();
    let mut by_tenant: BTreeMap<Uuid, Vec<&(Instance, u64, String)>> = BTreeMap::new();
    for s in all.iter().filter(|s| hours(&s.0, &p, now) > 0.0) {
        by_tenant.entry(s.0.tenant).or_default().push(s);
    }
    let usages: Vec<Value> = by_tenant
        .iter()
        .map(|(tenant, servers)| tenant_usage(*tenant, servers, &p))
        .collect();
    Ok(Json(json!({ "tenant_usages": usages })))
}

/// `GET /os-simple-tenant-usage/{project}`: the project's usage (its members and admins).
pub async fn show(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(project): PathParams<String>,
    QueryParams(query): QueryParams<UsageQuery>,
) -> Result<Json<Value>, ApiError> {
    let tenant = Uuid::parse_str(&project).ok();
    let own = caller.project.is_some_and(|p| Some(p) == tenant);
    if !own && !caller.is_admin() {
        return Err(ApiError::Forbidden(
            "Policy doesn't allow os_compute_api:os-simple-tenant-usage:show to be performed."
                .into(),
        ));
    }
    // One project's usage is always detailed, as Nova's.
    let p = Period {
        detailed: true,
        ..period(&query)?
    };
    let Some(tenant) = tenant else {
        // Nova answers an unknown project with an empty usage.
        return Ok(Json(json!({"tenant_usage": {}})));
    };
    let all = state
        .store(move |store| servers(store, Scope::Tenant(tenant)))
        .await?;
    let refs: Vec<&(Instance, u64, String)> = all.iter().collect();
    let usage = if refs
        .iter()
        .any(|s| hours(&s.0, &p, SystemTime::now()) > 0.0)
    {
        tenant_usage(tenant, &refs, &p)
    } else {
        json!({})
    };
    Ok(Json(json!({ "tenant_usage": usage })))
}

/// `GET /os-migrations` (admins): none, since servers do not migrate between nodes here (an
/// evacuation restarts ephemeral servers elsewhere, which Nova does not count as a migration
/// either).
pub async fn migrations(caller: Principal) -> Result<Json<Value>, ApiError> {
    caller.require_admin()?;
    Ok(Json(json!({"migrations": []})))
}
