//! Quotas: a project's limits on floating IPs (`floatingip`, 50 by default), security groups
//! (`security_group`, 10) and rules (`security_group_rule`, 100), Neutron's defaults and names.
//! A member reads its own project's (another's is a 403); an admin reads and sets any
//! project's (`PUT`, each at most [`store::NetworkQuota::MAX`]; -1, unlimited, is refused).
//! Past a limit, a creation is a 409 `OverQuota`.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};
use uuid::Uuid;

use super::{NetError, NetResult, blocking, body_object};
use crate::api::extract::JsonBody;
use crate::api::extract::PathParams;
use crate::api::{ApiState, Principal};
use store::NetworkQuota;

/// Neutron's figures, as `(name, value)`.
fn figures(q: &NetworkQuota) -> [(&'static str, u32); 3] {
    [
        ("floatingip", q.floating_ips),
        ("security_group", q.security_groups),
        ("security_group_rule", q.security_group_rules),
    ]
}

fn quota_body(q: &NetworkQuota) -> Value {
    let mut body = serde_json::Map::new();
    for (name, value) in figures(q) {
        body.insert(name.into(), json!(value));
    }
    Value::Object(body)
}

/// The project a caller may read the quotas of.
fn readable(caller: &Principal, project: &str) -> NetResult<Uuid> {
    let id = Uuid::parse_str(project)
        .map_err(|_| NetError::not_found("HTTPNotFound", format!("Project {project} not found")))?;
    if caller.is_admin() || caller.project == Some(id) {
        Ok(id)
    } else {
        Err(NetError::new(
            StatusCode::FORBIDDEN,
            "HTTPForbidden",
            "a project's quotas are its members' and admins'",
        ))
    }
}

/// `GET /quotas`: the projects' limits (an admin's: every project; a member's: none).
pub async fn list(State(state): State<ApiState>, caller: Principal) -> NetResult<Json<Value>> {
    if !caller.is_admin() {
        return Ok(Json(json!({"quotas": []})));
    }
    let all = blocking(&state, |store| {
        let mut all = Vec::new();
        for t in store.tenants()? {
            let mut body = quota_body(&store.network_quota(t.id)?);
            body["project_id"] = json!(t.id);
            body["tenant_id"] = json!(t.id);
            all.push(body);
        }
        Ok(all)
    })
    .await?;
    Ok(Json(json!({ "quotas": all })))
}

/// `GET /quotas/{project}`.
pub async fn show(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(project): PathParams<String>,
) -> NetResult<Json<Value>> {
    let id = readable(&caller, &project)?;
    let q = blocking(&state, move |store| Ok(store.network_quota(id)?)).await?;
    Ok(Json(json!({"quota": quota_body(&q)})))
}

/// `GET /quotas/{project}/default`.
pub async fn defaults(
    caller: Principal,
    PathParams(project): PathParams<String>,
) -> NetResult<Json<Value>> {
    readable(&caller, &project)?;
    Ok(Json(json!({"quota": quota_body(&NetworkQuota::DEFAULT)})))
}

/// `GET /quotas/{project}/details.json`: limit, use and reservations (none) of each figure.
pub async fn details(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(project): PathParams<String>,
) -> NetResult<Json<Value>> {
    let id = readable(&caller, &project)?;
    let (q, used) = blocking(&state, move |store| {
        Ok((store.network_quota(id)?, store.network_usage(id)?))
    })
    .await?;
    let mut body = serde_json::Map::new();
    for ((name, limit), (_, used)) in figures(&q).into_iter().zip(figures(&used)) {
        body.insert(
            name.into(),
            json!({"limit": limit, "used": used, "reserved": 0}),
        );
    }
    Ok(Json(json!({"quota": body})))
}

/// `PUT /quotas/{project}` (admins).
pub async fn update(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(project): PathParams<String>,
    JsonBody(body): JsonBody<Value>,
) -> NetResult<Json<Value>> {
    caller.require_admin()?;
    let id = readable(&caller, &project)?;
    let asked = body_object(body, "quota")?;
    let q = blocking(&state, move |store| {
        let mut q = store.network_quota(id)?;
        for (key, value) in &asked {
            let n = value
                .as_u64()
                .or_else(|| value.as_str().and_then(|s| s.parse().ok()))
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| {
                    NetError::bad(
                        "InvalidInput",
                        format!("Invalid input for {key}. Reason: '{value}' is not a whole number from 0 (unlimited, -1, is not supported)."),
                    )
                })?;
            match key.as_str() {
                "floatingip" => q.floating_ips = n,
                "security_group" => q.security_groups = n,
                "security_group_rule" => q.security_group_rules = n,
                other => {
                    return Err(NetError::bad(
                        "InvalidInput",
                        format!("Unrecognized attribute(s) '{other}'"),
                    ));
                }
            }
        }
        Ok(store.set_network_quota(id, q)?)
    })
    .await?;
    Ok(Json(json!({"quota": quota_body(&q)})))
}
