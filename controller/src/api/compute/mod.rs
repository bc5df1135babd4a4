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
use serde_json::{Value, json};

use super::error::{Dialect, renderer};
use super::table::{Body, Family, RouteTable, os, own};
use super::{ApiError, ApiState, Principal};
use store::Store;

/// The base path.
pub const BASE: &str = "/compute/v2.1";
/// The one microversion implemented.
const VERSION: &str = "2.1";

/// The compute routes, with Nova's error shape and microversion headers.
pub fn routes() -> Router<ApiState> {
    table()
        .router()
        .layer(middleware::from_fn(microversion))
        .layer(middleware::map_response(nova_errors))
}

/// The compute routes, one line each, as they are served and documented (`api/table.rs`).
#[rustfmt::skip]
pub(crate) fn table() -> RouteTable {
    let t = RouteTable::new(Family::Compute);
    t.get("/compute", versions, os("List All Major Versions", 200).public())
        .get("/compute/", versions, os("List All Major Versions", 200).public())
        .get(BASE, version, os("Show Details of Specific API Version", 200).public())
        .get("/compute/v2.1/", version, os("Show Details of Specific API Version", 200).public())
        .get("/compute/v2.1/flavors", flavors::list, os("List Flavors", 200).errors(&[400]))
        .post("/compute/v2.1/flavors", flavors::create, os("Create Flavor", 200).errors(&[409]))
        .get("/compute/v2.1/flavors/detail", flavors::detail, os("List Flavors With Details", 200).errors(&[400]))
        .get("/compute/v2.1/flavors/{id}", flavors::show, os("Show Flavor Details", 200))
        .delete("/compute/v2.1/flavors/{id}", flavors::delete, os("Delete Flavor", 202).errors(&[409]))
        .get("/compute/v2.1/flavors/{id}/os-extra_specs", flavor_specs::list, os("List Extra Specs For A Flavor", 200))
        .post("/compute/v2.1/flavors/{id}/os-extra_specs", flavor_specs::create, os("Create Extra Specs For A Flavor", 200))
        .get("/compute/v2.1/flavors/{id}/os-extra_specs/{key}", flavor_specs::show, os("Show An Extra Spec For A Flavor", 200))
        .put("/compute/v2.1/flavors/{id}/os-extra_specs/{key}", flavor_specs::update, os("Update An Extra Spec For A Flavor", 200))
        .delete("/compute/v2.1/flavors/{id}/os-extra_specs/{key}", flavor_specs::delete, os("Delete An Extra Spec For A Flavor", 200).answer(Body::Empty))
        .get("/compute/v2.1/flavors/{id}/os-flavor-access", flavor_access::list, os("List Flavor Access Information For Given Flavor", 200))
        .post("/compute/v2.1/flavors/{id}/action", flavor_access::action, own("Flavor access actions", 200).actions(FLAVOR_ACTIONS).errors(&[409]))
        .get("/compute/v2.1/limits", limits, os("Show Rate And Absolute Limits", 200))
        .get("/compute/v2.1/os-quota-sets/{project}", quotas::show, os("Show A Quota", 200))
        .put("/compute/v2.1/os-quota-sets/{project}", quotas::update, os("Update Quotas", 200))
        .get("/compute/v2.1/os-quota-sets/{project}/detail", quotas::detail, os("Show The Detail of Quota", 200))
        .get("/compute/v2.1/os-quota-sets/{project}/defaults", quotas::defaults, os("List Default Quotas For Tenant", 200))
        .get("/compute/v2.1/servers", servers::list, os("List Servers", 200).errors(&[400]))
        .post("/compute/v2.1/servers", launch::create, os("Create Server", 202).errors(&[409, 503]))
        .get("/compute/v2.1/servers/detail", servers::detail, os("List Servers Detailed", 200).errors(&[400]))
        .get("/compute/v2.1/servers/{id}", servers::show, os("Show Server Details", 200))
        .put("/compute/v2.1/servers/{id}", server_update::update, os("Update Server", 200))
        .delete("/compute/v2.1/servers/{id}", launch::delete, os("Delete Server", 204).errors(&[409, 503]))
        .post("/compute/v2.1/servers/{id}/action", server_action::action, own("Server actions", 202).also(&[200, 204]).actions(SERVER_ACTIONS).errors(&[409, 503]))
        .get("/compute/v2.1/servers/{id}/os-instance-actions", actions::list, os("List Actions For Server", 200))
        .get("/compute/v2.1/servers/{id}/os-instance-actions/{request_id}", actions::show, os("Show Server Action Details", 200))
        .get("/compute/v2.1/servers/{id}/os-volume_attachments", volume_attachments::list, os("List volume attachments for an instance", 200))
        .post("/compute/v2.1/servers/{id}/os-volume_attachments", volume_attachments::attach, os("Attach a volume to an instance", 200).errors(&[409, 503]))
        .get("/compute/v2.1/servers/{id}/os-volume_attachments/{volume}", volume_attachments::show, os("Show a detail of a volume attachment", 200))
        .delete("/compute/v2.1/servers/{id}/os-volume_attachments/{volume}", volume_attachments::detach, os("Detach a volume from an instance", 202).errors(&[400, 409, 503]))
        .get("/compute/v2.1/servers/{id}/metadata", server_metadata::list, os("List All Metadata", 200))
        .post("/compute/v2.1/servers/{id}/metadata", server_metadata::merge, os("Create or Update Metadata Items", 200).errors(&[409]))
        .put("/compute/v2.1/servers/{id}/metadata", server_metadata::replace, os("Replace Metadata Items", 200).errors(&[409]))
        .get("/compute/v2.1/servers/{id}/metadata/{key}", server_metadata::show, os("Show Metadata Item Details", 200))
        .put("/compute/v2.1/servers/{id}/metadata/{key}", server_metadata::set, os("Create Or Update Metadata Item", 200).errors(&[409]))
        .delete("/compute/v2.1/servers/{id}/metadata/{key}", server_metadata::delete, os("Delete Metadata Item", 204).errors(&[409]))
        .get("/compute/v2.1/servers/{id}/ips", server_update::ips, os("List IPs", 200))
        .get("/compute/v2.1/servers/{id}/ips/{network}", server_update::ips_of, os("Show IP Details", 200))
        .get("/compute/v2.1/os-availability-zone", hosts::zones, os("Get Availability Zone Information", 200))
        .get("/compute/v2.1/os-availability-zone/detail", hosts::zones_detail, os("Get Detailed Availability Zone Information", 200))
        .get("/compute/v2.1/os-hypervisors", hypervisors::list, os("List Hypervisors", 200))
        .get("/compute/v2.1/os-hypervisors/detail", hypervisors::list_detail, os("List Hypervisors Details", 200))
        .get("/compute/v2.1/os-hypervisors/statistics", hypervisors::statistics, os("Show Hypervisor Statistics (DEPRECATED)", 200))
        .get("/compute/v2.1/os-hypervisors/{id}", hypervisors::show, os("Show Hypervisor Details", 200))
        .get("/compute/v2.1/os-hypervisors/{id}/uptime", hypervisors::uptime, os("Show Hypervisor Uptime (DEPRECATED)", 200))
        .get("/compute/v2.1/os-hypervisors/{id}/search", hypervisors::search, os("Search Hypervisor (DEPRECATED)", 200))
        .get("/compute/v2.1/os-hypervisors/{id}/servers", hypervisors::servers, os("List Hypervisor Servers (DEPRECATED)", 200))
        .get("/compute/v2.1/os-aggregates", hypervisors::aggregates, os("List Aggregates", 200))
        .get("/compute/v2.1/os-services", services::list, os("List Compute Services", 200))
        .put("/compute/v2.1/os-services/{action}", services::update, own("Disable or enable a compute service", 200).actions(SERVICE_ACTIONS))
        .get("/compute/v2.1/os-hosts", hosts::list, os("List Hosts (DEPRECATED)", 200))
        .get("/compute/v2.1/os-hosts/{host}", hosts::show, os("Show Host Details (DEPRECATED)", 200))
        .put("/compute/v2.1/os-hosts/{host}", hosts::update, os("Update Host status (DEPRECATED)", 200))
        .get("/compute/v2.1/os-simple-tenant-usage", usage::list, os("List Tenant Usage Statistics For All Tenants", 200).errors(&[400]))
        .get("/compute/v2.1/os-simple-tenant-usage/{project}", usage::show, os("Show Usage Statistics For Tenant", 200).errors(&[400]))
        .get("/compute/v2.1/os-migrations", usage::migrations, os("List Migrations", 200))
        .get("/compute/v2.1/os-server-groups", server_groups::list, os("List Server Groups", 200).errors(&[400]))
        .post("/compute/v2.1/os-server-groups", server_groups::create, os("Create Server Group", 200).errors(&[400]))
        .get("/compute/v2.1/os-server-groups/{id}", server_groups::show, os("Show Server Group Details", 200))
        .delete("/compute/v2.1/os-server-groups/{id}", server_groups::delete, os("Delete Server Group", 204))
        .get("/compute/v2.1/os-quota-class-sets/{class}", quotas::class_show, os("Show the quota for Quota Class", 200))
        .put("/compute/v2.1/os-quota-class-sets/{class}", quotas::class_update, os("Create or Update Quotas for Quota Class", 200))
        .get("/compute/v2.1/os-keypairs", keypairs::list, os("List Keypairs", 200))
        .post("/compute/v2.1/os-keypairs", keypairs::create, os("Create Or Import Keypair", 200).errors(&[409]))
        .get("/compute/v2.1/os-keypairs/{name}", keypairs::show, os("Show Keypair Details", 200))
        .delete("/compute/v2.1/os-keypairs/{name}", keypairs::delete, os("Delete Keypair", 202))
}

/// The API reference's names of the actions of `POST /servers/{id}/action`.
const SERVER_ACTIONS: &[&str] = &[
    "Start Server (os-start Action)",
    "Stop Server (os-stop Action)",
    "Reboot Server (reboot Action)",
    "Pause Server (pause Action)",
    "Unpause Server (unpause Action)",
    "Suspend Server (suspend Action)",
    "Resume Suspended Server (resume Action)",
    "Rebuild Server (rebuild Action)",
    "Resize Server (resize Action)",
    "Confirm Resized Server (confirmResize Action)",
    "Revert Resized Server (revertResize Action)",
    "Lock Server (lock Action)",
    "Unlock Server (unlock Action)",
    "Reset Server State (os-resetState Action)",
    "Force-Delete Server (forceDelete Action)",
    "Show Console Output (os-getConsoleOutput Action)",
    "Create Image (createImage Action)",
];

/// The API reference's names of the actions of `POST /flavors/{id}/action`.
const FLAVOR_ACTIONS: &[&str] = &[
    "Add Flavor Access To Tenant (addTenantAccess Action)",
    "Remove Flavor Access From Tenant (removeTenantAccess Action)",
];

/// The API reference's names of `PUT /os-services/{action}` (`disable`, `disable-log-reason`,
/// `enable`).
const SERVICE_ACTIONS: &[&str] = &[
    "Disable Scheduling For A Compute Service",
    "Disable Scheduling For A Compute Service and Log Disabled Reason",
    "Enable Scheduling For A Compute Service",
];

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
    let (tenant, usage, network, network_used, groups) = state
        .store(move |store: &dyn Store| {
            Ok((
                store.tenant(project)?,
                store.usage(project)?,
                store.network_quota(project)?,
                store.network_usage(project)?,
                store.server_groups(store::Scope::Tenant(project))?.len(),
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
        "maxServerGroups": store::ServerGroup::MAX_PER_TENANT,
        "maxServerGroupMembers": store::ServerGroup::MAX_MEMBERS,
        "maxTotalFloatingIps": network.floating_ips,
        "maxSecurityGroups": network.security_groups,
        "maxSecurityGroupRules": network.security_group_rules,
        "totalInstancesUsed": usage.instances,
        "totalCoresUsed": usage.vcpus,
        "totalRAMUsed": usage.memory_mb,
        "totalServerGroupsUsed": groups,
        "totalFloatingIpsUsed": network_used.floating_ips,
        "totalSecurityGroupsUsed": network_used.security_groups,
    }}});
    Ok(Json(body).into_response())
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
