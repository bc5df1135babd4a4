//! The OpenStack Compute v2.1 subset at `/compute/v2.1`: version documents, flavors (with their
//! extra specs and the access lists of private ones), servers
//! (list, show, create, delete, stop/start/reboot, their instance actions, their volume
//! attachments), the user's key pairs (`os-keypairs`) and limits. Errors in Nova's shape.
//!
//! Microversions: this server implements the 2.1 base only. Requests may name `2.1`, `2.0` or
//! `latest` (in `OpenStack-API-Version: compute X` or `X-OpenStack-Nova-API-Version: X`);
//! anything newer is refused with 406, as Nova refuses versions past its maximum. Every answer
//! names the version used.

mod actions;
mod bdm;
mod change;
mod console;
mod create_checks;
mod flavor_access;
mod flavor_specs;
mod flavors;
mod hosts;
mod hypervisors;
mod keypairs;
mod launch;
mod lock;
mod quotas;
mod rebuild;
mod resize;
mod server_action;
mod server_groups;
mod server_metadata;
mod server_query;
mod server_update;
mod servers;
mod services;
mod snapshot;
mod sshkey;
mod status;
mod usage;
mod volume_attachments;

pub(crate) use flavors::seen_by as flavor_scope;
pub(crate) use launch::{headroom, is_implicit};
pub(crate) use lock::unlocked;
pub(crate) use rebuild::target_workload as rebuild_target;
pub(crate) use resize::target_workload as resize_target;

use axum::Json;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use serde_json::{Value, json};

use super::error::{Dialect, renderer};
use super::{ApiError, ApiState, Principal};
use store::Store;

/// The base path.
pub const BASE: &str = "/compute/v2.1";
/// The one microversion implemented.
const VERSION: &str = "2.1";

/// The compute routes, with Nova's error shape and microversion headers.
pub fn routes() -> Router<ApiState> {
    let api = Router::new()
        .route("/compute", get(versions))
        .route("/compute/", get(versions))
        .route(BASE, get(version))
        .route("/compute/v2.1/", get(version))
        .route(
            "/compute/v2.1/flavors",
            get(flavors::list).post(flavors::create),
        )
        .route("/compute/v2.1/flavors/detail", get(flavors::detail))
        .route(
            "/compute/v2.1/flavors/{id}",
            get(flavors::show).delete(flavors::delete),
        )
        .route(
            "/compute/v2.1/flavors/{id}/os-extra_specs",
            get(flavor_specs::list).post(flavor_specs::create),
        )
        .route(
            "/compute/v2.1/flavors/{id}/os-extra_specs/{key}",
            get(flavor_specs::show)
                .put(flavor_specs::update)
                .delete(flavor_specs::delete),
        )
        .route(
            "/compute/v2.1/flavors/{id}/os-flavor-access",
            get(flavor_access::list),
        )
        .route(
            "/compute/v2.1/flavors/{id}/action",
            post(flavor_access::action),
        )
        .route("/compute/v2.1/limits", get(limits))
        .route(
            "/compute/v2.1/os-quota-sets/{project}",
            get(quotas::show).put(quotas::update),
        )
        .route(
            "/compute/v2.1/os-quota-sets/{project}/detail",
            get(quotas::detail),
        )
        .route(
            "/compute/v2.1/os-quota-sets/{project}/defaults",
            get(quotas::defaults),
        )
        .route(
            "/compute/v2.1/servers",
            get(servers::list).post(launch::create),
        )
        .route("/compute/v2.1/servers/detail", get(servers::detail))
        .route(
            "/compute/v2.1/servers/{id}",
            get(servers::show)
                .put(server_update::update)
                .delete(launch::delete),
        )
        .route(
            "/compute/v2.1/servers/{id}/action",
            post(server_action::action),
        )
        .route(
            "/compute/v2.1/servers/{id}/os-instance-actions",
            get(actions::list),
        )
        .route(
            "/compute/v2.1/servers/{id}/os-instance-actions/{request_id}",
            get(actions::show),
        )
        .route(
            "/compute/v2.1/servers/{id}/os-volume_attachments",
            get(volume_attachments::list).post(volume_attachments::attach),
        )
        .route(
            "/compute/v2.1/servers/{id}/os-volume_attachments/{volume}",
            get(volume_attachments::show).delete(volume_attachments::detach),
        )
        .route(
            "/compute/v2.1/servers/{id}/metadata",
            get(server_metadata::list)
                .post(server_metadata::merge)
                .put(server_metadata::replace),
        )
        .route(
            "/compute/v2.1/servers/{id}/metadata/{key}",
            get(server_metadata::show)
                .put(server_metadata::set)
                .delete(server_metadata::delete),
        )
        .route("/compute/v2.1/servers/{id}/ips", get(server_update::ips))
        .route(
            "/compute/v2.1/servers/{id}/ips/{network}",
            get(server_update::ips_of),
        )
        .route("/compute/v2.1/os-availability-zone", get(zones))
        .route(
            "/compute/v2.1/os-availability-zone/detail",
            get(hosts::zones_detail),
        )
        .route("/compute/v2.1/os-hypervisors", get(hypervisors::list))
        .route(
            "/compute/v2.1/os-hypervisors/detail",
            get(hypervisors::list_detail),
        )
        .route(
            "/compute/v2.1/os-hypervisors/statistics",
            get(hypervisors::statistics),
        )
        .route("/compute/v2.1/os-hypervisors/{id}", get(hypervisors::show))
        .route(
            "/compute/v2.1/os-hypervisors/{id}/uptime",
            get(hypervisors::uptime),
        )
        .route("/compute/v2.1/os-aggregates", get(hypervisors::aggregates))
        .route("/compute/v2.1/os-services", get(services::list))
        .route("/compute/v2.1/os-services/{action}", put(services::update))
        .route("/compute/v2.1/os-hosts", get(hosts::list))
        .route("/compute/v2.1/os-simple-tenant-usage", get(usage::list))
        .route(
            "/compute/v2.1/os-simple-tenant-usage/{project}",
            get(usage::show),
        )
        .route("/compute/v2.1/os-migrations", get(usage::migrations))
        .route(
            "/compute/v2.1/os-server-groups",
            get(server_groups::list).post(server_groups::create),
        )
        .route(
            "/compute/v2.1/os-server-groups/{id}",
            get(server_groups::show).delete(server_groups::delete),
        )
        .route(
            "/compute/v2.1/os-quota-class-sets/{class}",
            get(quotas::class_show).put(quotas::class_update),
        )
        .route(
            "/compute/v2.1/os-hosts/{host}",
            get(hosts::show).put(hosts::update),
        )
        .route(
            "/compute/v2.1/os-hypervisors/{id}/search",
            get(hypervisors::search),
        )
        .route(
            "/compute/v2.1/os-hypervisors/{id}/servers",
            get(hypervisors::servers),
        )
        .route(
            "/compute/v2.1/os-keypairs",
            get(keypairs::list).post(keypairs::create),
        )
        .route(
            "/compute/v2.1/os-keypairs/{name}",
            get(keypairs::show).delete(keypairs::delete),
        );
    api.layer(middleware::from_fn(microversion))
        .layer(middleware::map_response(nova_errors))
}

async fn nova_errors(response: Response) -> Response {
    renderer(Dialect::Nova)(response)
}

fn version_body(base: &str) -> Value {
    json!({
        "id": "v2.1",
        "status": "CURRENT",
        "version": VERSION,
        "min_version": VERSION,
        "updated": "2013-07-23T11:33:21Z",
        "links": [{"rel": "self", "href": format!("{base}{BASE}/")}],
        "media-types": [{
            "base": "application/json",
            "type": "application/vnd.openstack.compute+json;version=2.1",
        }],
    })
}

async fn versions(State(state): State<ApiState>) -> Json<Value> {
    Json(json!({"versions": [version_body(&state.config.public_url)]}))
}

async fn version(State(state): State<ApiState>) -> Json<Value> {
    Json(json!({"version": version_body(&state.config.public_url)}))
}

/// The microversion a request asks for, if any (`None`: the base version).
fn requested_version(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    if let Some(value) = headers.get("openstack-api-version") {
        let text = value
            .to_str()
            .map_err(|_| ApiError::BadRequest("bad OpenStack-API-Version header".into()))?;
        // "compute 2.1" (several services may be listed, comma-separated).
        for item in text.split(',') {
            let mut words = item.split_whitespace();
            if words
                .next()
                .is_some_and(|s| s.eq_ignore_ascii_case("compute"))
            {
                return Ok(words.next().map(str::to_string));
            }
        }
    }
    if let Some(value) = headers.get("x-openstack-nova-api-version") {
        let text = value
            .to_str()
            .map_err(|_| ApiError::BadRequest("bad X-OpenStack-Nova-API-Version header".into()))?;
        return Ok(Some(text.trim().to_string()));
    }
    Ok(None)
}

/// Checks a requested microversion against the one implemented.
fn check_version(requested: Option<&str>) -> Result<(), ApiError> {
    let Some(text) = requested else {
        return Ok(());
    };
    if text.eq_ignore_ascii_case("latest") {
        return Ok(());
    }
    let parsed = text
        .split_once('.')
        .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)));
    match parsed {
        Some((2, 0 | 1)) => Ok(()),
        Some(_) => Err(ApiError::NotAcceptable(format!(
            "Version {text} is not supported by the API. Minimum is {VERSION} and maximum is {VERSION}."
        ))),
        None => Err(ApiError::BadRequest(format!(
            "Invalid format for API version: {text}"
        ))),
    }
}

async fn microversion(request: Request, next: Next) -> Response {
    let checked = requested_version(request.headers())
        .and_then(|requested| check_version(requested.as_deref()));
    let mut response = match checked {
        Ok(()) => next.run(request).await,
        Err(error) => error.render(Dialect::Nova),
    };
    let headers = response.headers_mut();
    headers.insert(
        "openstack-api-version",
        HeaderValue::from_static("compute 2.1"),
    );
    headers.insert(
        "x-openstack-nova-api-version",
        HeaderValue::from_static(VERSION),
    );
    headers.insert(
        "vary",
        HeaderValue::from_static("OpenStack-API-Version, X-OpenStack-Nova-API-Version"),
    );
    response
}

/// `-1` for an unlimited figure, as Nova writes it.
fn limit_of<T: Into<u64>>(limit: Option<T>) -> i64 {
    limit
        .map(|l| i64::try_from(l.into()).unwrap_or(i64::MAX))
        .unwrap_or(-1)
}

/// `GET /limits`: the project's quota and usage.
async fn limits(State(state): State<ApiState>, caller: Principal) -> Result<Response, ApiError> {
    let project = caller.project()?;
    let (tenant, usage, network, network_used) = state
        .store(move |store: &dyn Store| {
            Ok((
                store.tenant(project)?,
                store.usage(project)?,
                store.network_quota(project)?,
                store.network_usage(project)?,
            ))
        })
        .await?;
    let body = json!({"limits": {"rate": [], "absolute": {
        "maxTotalInstances": limit_of(tenant.quota.instances),
        "maxTotalCores": limit_of(tenant.quota.vcpus),
        "maxTotalRAMSize": limit_of(tenant.quota.memory_mb),
        "maxServerMeta": 128,
        "maxImageMeta": 128,
        "maxPersonality": 5,
        "maxPersonalitySize": 10240,
        "maxTotalKeypairs": keypairs::MAX_KEYPAIRS,
        "maxServerGroups": 10,
        "maxServerGroupMembers": 10,
        "maxTotalFloatingIps": network.floating_ips,
        "maxSecurityGroups": network.security_groups,
        "maxSecurityGroupRules": network.security_group_rules,
        "totalInstancesUsed": usage.instances,
        "totalCoresUsed": usage.vcpus,
        "totalRAMUsed": usage.memory_mb,
        "totalServerGroupsUsed": 0,
        "totalFloatingIpsUsed": network_used.floating_ips,
        "totalSecurityGroupsUsed": network_used.security_groups,
    }}});
    Ok(Json(body).into_response())
}

async fn zones(_caller: Principal) -> Json<Value> {
    Json(json!({"availabilityZoneInfo": [
        {"zoneName": "nova", "zoneState": {"available": true}, "hosts": null}
    ]}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn microversions() {
        for ok in [
            None,
            Some("2.1"),
            Some("2.0"),
            Some("latest"),
            Some("LATEST"),
        ] {
            assert!(check_version(ok).is_ok(), "{ok:?}");
        }
        assert_eq!(
            check_version(Some("2.79")).unwrap_err().status().as_u16(),
            406
        );
        assert_eq!(
            check_version(Some("two")).unwrap_err().status().as_u16(),
            400
        );
        let mut headers = HeaderMap::new();
        headers.insert(
            "openstack-api-version",
            HeaderValue::from_static("image 2.5, compute 2.60"),
        );
        assert_eq!(
            requested_version(&headers).unwrap().as_deref(),
            Some("2.60")
        );
    }
}
