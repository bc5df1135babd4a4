//! The query of a server listing (`GET /servers`, `/servers/detail`), as Nova reads it at 2.1.
//!
//! Filters: `name` (a regular expression searched in the name, as Nova's), `status` (an unknown
//! one matches nothing, as Nova's before 2.38), `flavor` and `image` (ids), `changes-since`
//! (ISO 8601; servers changed at or after it; 400 "Invalid filter field: changes-since." for a
//! bad date), and for admins `host` (the node's id, what `OS-EXT-SRV-ATTR:host` shows),
//! `all_tenants` and, with it, `tenant_id` / `project_id`. Filters that are not an admin's are
//! ignored for members, as Nova drops them. Sorting: `sort_key` (`created_at`, `updated_at`,
//! `display_name`, `uuid`, `vm_state`, `host`, `node`, `launched_at`, `project_id`; others 400)
//! and `sort_dir` (`asc`, `desc`, the default); without them, creation order. `limit` (0: an
//! empty list; at most 1,000) and `marker` page through the result.
//!
//! Without filters or sorting, a page is read from the store as it is kept (by creation); with
//! them, the scope's servers are read whole (at most [`MAX_SCAN`]), filtered, sorted, then
//! paged.

use regex::{Regex, RegexBuilder};
use serde::Deserialize;
use std::time::SystemTime;
use uuid::Uuid;

use super::status::nova_state;
use crate::api::clock::parse_time;
use crate::api::{ApiError, Principal};
use store::{Instance, InstanceFilter, InstanceState, Page, Scope, Workload};

/// Most servers a filtered or sorted listing reads.
pub const MAX_SCAN: usize = 200_000;
/// Most bytes of a `name` filter's compiled expression.
const REGEX_SIZE: usize = 256 * 1024;

/// The servers of `scope` that `filter` and `keep` pass, read whole in creation order: at most
/// [`MAX_SCAN`] (a 400 that says to narrow the question past it).
pub fn scan(
    store: &dyn store::Store,
    scope: Scope,
    filter: InstanceFilter,
    mut keep: impl FnMut(&Instance) -> bool,
) -> Result<Vec<Instance>, ApiError> {
    let mut all = Vec::new();
    let mut marker = None;
    loop {
        let page = Page {
            marker,
            limit: Page::MAX_LIMIT,
        };
        let read = store.instances(scope, filter, page)?;
        all.extend(read.items.into_iter().filter(|i| keep(i)));
        if all.len() > MAX_SCAN {
            return Err(ApiError::BadRequest(format!(
                "over {MAX_SCAN} servers match: narrow the question (one project, one host)"
            )));
        }
        match read.next {
            Some(next) => marker = Some(next),
            None => return Ok(all),
        }
    }
}

/// The query of a server listing.
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize)]
pub struct ServerQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) flavor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) image: Option<String>,
    #[serde(
        rename = "changes-since",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub(super) changes_since: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) host: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) all_tenants: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) tenant_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) project_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) sort_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) sort_dir: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) limit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) marker: Option<String>,
}

fn truthy(flag: &Option<String>) -> bool {
    match flag.as_deref() {
        None => false,
        Some(v) => !matches!(
            v.to_ascii_lowercase().as_str(),
            "0" | "false" | "f" | "no" | "off"
        ),
    }
}

/// What a listing sorts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SortKey {
    Created,
    Updated,
    Name,
    Id,
    VmState,
    Node,
    Project,
}

/// A listing's query, checked.
#[derive(Debug)]
pub struct Listing {
    /// Whose servers.
    pub scope: Scope,
    /// What the store filters.
    pub filter: InstanceFilter,
    /// The page size (0: none).
    pub limit: u32,
    /// Where the page starts.
    pub marker: Option<Uuid>,
    name: Option<Regex>,
    status: Option<String>,
    flavor: Option<Uuid>,
    image: Option<Uuid>,
    since: Option<SystemTime>,
    project: Option<Uuid>,
    sort: Option<(SortKey, bool)>,
}

fn id_filter(what: &str, text: &Option<String>) -> Result<Option<Uuid>, ApiError> {
    match text.as_deref() {
        None => Ok(None),
        // A reference that is a URL ends in the id.
        Some(t) => {
            let last = t.trim_end_matches('/').rsplit('/').next().unwrap_or("");
            Uuid::parse_str(last).map(Some).map_err(|_| {
                ApiError::BadRequest(format!("Invalid filter field: {what}: {t} is not an id."))
            })
        }
    }
}

impl Listing {
    /// Checks `query` for `caller`.
    pub fn new(caller: &Principal, query: &ServerQuery) -> Result<Listing, ApiError> {
        let admin = caller.is_admin();
        let all = truthy(&query.all_tenants);
        let scope = caller.project_scope(all)?;
        let limit = match query.limit.as_deref() {
            None => Page::MAX_LIMIT,
            Some(text) => text
                .parse::<u32>()
                .map_err(|_| ApiError::BadRequest("limit must be a whole number".into()))?
                .min(Page::MAX_LIMIT),
        };
        let marker = match query.marker.as_deref() {
            None => None,
            Some(text) => Some(
                Uuid::parse_str(text)
                    .map_err(|_| ApiError::BadRequest(format!("marker [{text}] not found")))?,
            ),
        };
        let name = match query.name.as_deref() {
            None => None,
            Some(pattern) => Some(
                RegexBuilder::new(pattern)
                    .size_limit(REGEX_SIZE)
                    .build()
                    .map_err(|e| {
                        ApiError::BadRequest(format!(
                            "Invalid filter field: name: not a regular expression ({e})"
                        ))
                    })?,
            ),
        };
        let since = match query.changes_since.as_deref() {
            None => None,
            Some(text) => Some(parse_time(text).ok_or_else(|| {
                ApiError::BadRequest("Invalid filter field: changes-since.".into())
            })?),
        };
        // Admins' filters; members' are dropped, as Nova drops them.
        let mut filter = InstanceFilter::default();
        let mut project = None;
        if admin {
            filter.node = id_filter("host", &query.host)?;
            if all {
                project = id_filter("tenant_id", &query.tenant_id)?
                    .or(id_filter("project_id", &query.project_id)?);
            }
        }
        let sort = match (query.sort_key.as_deref(), query.sort_dir.as_deref()) {
            (None, None) => None,
            (key, dir) => {
                let key = match key.unwrap_or("created_at") {
                    "created_at" | "launched_at" => SortKey::Created,
                    "updated_at" => SortKey::Updated,
                    "display_name" | "hostname" => SortKey::Name,
                    "uuid" => SortKey::Id,
                    "vm_state" => SortKey::VmState,
                    "host" | "node" => SortKey::Node,
                    "project_id" => SortKey::Project,
                    other => {
                        return Err(ApiError::BadRequest(format!(
                            "Invalid sort_key {other}: created_at, updated_at, launched_at, display_name, hostname, uuid, vm_state, host, node or project_id"
                        )));
                    }
                };
                let descending = match dir.unwrap_or("desc") {
                    "desc" => true,
                    "asc" => false,
                    other => {
                        return Err(ApiError::BadRequest(format!(
                            "Invalid sort_dir {other}: asc or desc"
                        )));
                    }
                };
                Some((key, descending))
            }
        };
        Ok(Listing {
            scope,
            filter,
            limit,
            marker,
            name,
            status: query.status.clone(),
            flavor: id_filter("flavor", &query.flavor)?,
            image: id_filter("image", &query.image)?,
            since,
            project,
            sort,
        })
    }

    /// Whether the listing filters or sorts beyond what a store page gives.
    pub fn scans(&self) -> bool {
        self.name.is_some()
            || self.status.is_some()
            || self.flavor.is_some()
            || self.image.is_some()
            || self.since.is_some()
            || self.project.is_some()
            || self.sort.is_some()
    }

    /// Whether `instance` (of `workload`) passes the filters.
    pub fn keeps(&self, instance: &Instance, workload: Option<&Workload>) -> bool {
        instance.state != InstanceState::Deleted
            && self
                .name
                .as_ref()
                .is_none_or(|n| n.is_match(&instance.name))
            && self
                .status
                .as_ref()
                .is_none_or(|s| s.eq_ignore_ascii_case(nova_state(&instance.state).0))
            && self
                .flavor
                .is_none_or(|f| workload.is_some_and(|w| w.flavor == f))
            && self
                .image
                .is_none_or(|i| workload.is_some_and(|w| w.image == i))
            && self.since.is_none_or(|t| instance.updated >= t)
            && self.project.is_none_or(|p| instance.tenant == p)
    }

    /// Sorts `instances` (read in creation order) as asked.
    pub fn sort(&self, instances: &mut [Instance]) {
        let Some((key, descending)) = self.sort else {
            return;
        };
        instances.sort_by(|a, b| {
            let order = match key {
                SortKey::Created => a.created.cmp(&b.created),
                SortKey::Updated => a.updated.cmp(&b.updated),
                SortKey::Name => a.name.cmp(&b.name),
                SortKey::Id => a.id.cmp(&b.id),
                SortKey::VmState => nova_state(&a.state).1.cmp(nova_state(&b.state).1),
                SortKey::Node => a.node.cmp(&b.node),
                SortKey::Project => a.tenant.cmp(&b.tenant),
            };
            if descending { order.reverse() } else { order }
        });
    }

    /// The page of `sorted` after the marker: its servers, and the last one's id when more
    /// follow.
    pub fn page(&self, sorted: Vec<Instance>) -> Result<(Vec<Instance>, Option<Uuid>), ApiError> {
        let start = match self.marker {
            None => 0,
            Some(m) => {
                sorted
                    .iter()
                    .position(|i| i.id == m)
                    .ok_or_else(|| ApiError::BadRequest(format!("marker [{m}] not found")))?
                    + 1
            }
        };
        let limit = self.limit as usize;
        let mut rest: Vec<Instance> = sorted.into_iter().skip(start).collect();
        let more = rest.len() > limit;
        rest.truncate(limit);
        let next = if more {
            rest.last().map(|i| i.id)
        } else {
            None
        };
        Ok((rest, next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_since_takes_iso_8601_times() {
        let at =
            |s| parse_time(s).map(|t| t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs());
        assert_eq!(at("2026-12-03T10:00:00Z"), Some(1_796_292_000));
        assert_eq!(at("2026-12-03T10:00:00"), Some(1_796_292_000));
        assert_eq!(at("2026-12-03T10:00:00.123456"), Some(1_796_292_000));
        assert_eq!(at("2026-12-03T11:00:00+01:00"), Some(1_796_292_000));
        assert_eq!(at("2026-12-03"), Some(1_796_256_000));
        assert_eq!(at("2999-01-01T00:00:00Z"), Some(32_472_144_000));
        for bad in [
            "",
            "yesterday",
            "2026-13-03",
            "2026-12-03T25:00:00Z",
            "1969-01-01",
        ] {
            assert_eq!(at(bad), None, "{bad}");
        }
    }
}
