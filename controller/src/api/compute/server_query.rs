//! The query of a server listing (`GET /servers`, `/servers/detail`), as Nova reads it at 2.1.
//!
//! Filters: `name` (a regular expression searched in the name, as Nova's), `status` (an unknown
//! one matches nothing, as Nova's before 2.38), `flavor` and `image` (ids), `changes-since`
//! (ISO 8601; servers changed at or after it; 400 "Invalid filter field: changes-since." for a
//! bad date), `reservation_id` (the servers of one create, exactly), and for admins `host` (the node's id, what `OS-EXT-SRV-ATTR:host` shows),
//! `all_tenants` and, with it, `tenant_id` / `project_id`. Filters that are not an admin's are
//! ignored for members, as Nova drops them. Sorting: `sort_key` (`created_at`, `updated_at`,
//! `display_name`, `uuid`, `vm_state`, `host`, `node`, `launched_at`, `project_id`; others 400)
//! and `sort_dir` (`asc`, `desc`; others 400), each repeatable: the n-th direction goes with the
//! n-th key, as Nova pairs them (`process_sort_params`): a key without a direction takes the
//! first direction given, or `desc` when none is; more directions than keys is a 400; at most
//! [`MAX_SORT_KEYS`] keys (400 past it). Ties are broken by `created_at`, then `uuid`, in the
//! first direction, as Nova adds them. Without either parameter, creation order. `limit` (0: an
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
    pub(super) reservation_id: Option<String>,
    /// Every `sort_key`, in order (read apart: a query string repeats them).
    #[serde(skip)]
    pub(super) sort_keys: Vec<String>,
    /// Every `sort_dir`, in order.
    #[serde(skip)]
    pub(super) sort_dirs: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) limit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) marker: Option<String>,
}

/// Most sort keys a listing takes.
pub const MAX_SORT_KEYS: usize = 16;

impl ServerQuery {
    /// Reads a query string: `sort_key` and `sort_dir` may repeat, any other parameter at most
    /// once (a 400 otherwise, as before).
    pub fn parse(query: &str) -> Result<ServerQuery, ApiError> {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query)
            .map_err(|e| ApiError::BadRequest(format!("bad query string: {e}")))?;
        let (mut keys, mut dirs) = (Vec::new(), Vec::new());
        let mut rest = Vec::with_capacity(pairs.len());
        for (name, value) in pairs {
            match name.as_str() {
                "sort_key" => keys.push(value.trim().to_string()),
                "sort_dir" => dirs.push(value.trim().to_string()),
                _ => rest.push((name, value)),
            }
            if keys.len() > MAX_SORT_KEYS || dirs.len() > MAX_SORT_KEYS {
                return Err(ApiError::BadRequest(format!(
                    "at most {MAX_SORT_KEYS} sort keys and directions"
                )));
            }
        }
        let encoded = serde_urlencoded::to_string(&rest)
            .map_err(|e| ApiError::BadRequest(format!("bad query string: {e}")))?;
        let mut parsed: ServerQuery = serde_urlencoded::from_str(&encoded)
            .map_err(|e| ApiError::BadRequest(format!("bad query string: {e}")))?;
        parsed.sort_keys = keys;
        parsed.sort_dirs = dirs;
        Ok(parsed)
    }

    /// The query string that asks the same (the next page's link), `None` if it cannot be
    /// written.
    pub fn encode(&self) -> Option<String> {
        let mut encoded = serde_urlencoded::to_string(self).ok()?;
        let sorting: Vec<(&str, &str)> = self
            .sort_keys
            .iter()
            .map(|k| ("sort_key", k.as_str()))
            .chain(self.sort_dirs.iter().map(|d| ("sort_dir", d.as_str())))
            .collect();
        if !sorting.is_empty() {
            let more = serde_urlencoded::to_string(&sorting).ok()?;
            if !encoded.is_empty() {
                encoded.push('&');
            }
            encoded.push_str(&more);
        }
        Some(encoded)
    }
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for ServerQuery {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, ApiError> {
        ServerQuery::parse(parts.uri.query().unwrap_or(""))
    }
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
    reservation: Option<String>,
    /// The sort keys, each with whether it is descending; empty: creation order.
    sort: Vec<(SortKey, bool)>,
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

/// A sort key by its name in the query.
fn sort_key(name: &str) -> Result<SortKey, ApiError> {
    Ok(match name {
        "created_at" | "launched_at" => SortKey::Created,
        "updated_at" => SortKey::Updated,
        "display_name" | "hostname" => SortKey::Name,
        "uuid" => SortKey::Id,
        "vm_state" => SortKey::VmState,
        "host" | "node" => SortKey::Node,
        "project_id" => SortKey::Project,
        other => {
            return Err(ApiError::BadRequest(format!(
                "Invalid sort_key {other}: created_at, updated_at, launched_at, display_name, \
                 hostname, uuid, vm_state, host, node or project_id"
            )));
        }
    })
}

/// The sort keys `keys` with the directions `dirs`, paired as Nova pairs them (see the module's
/// documentation), with Nova's tie-breakers; empty when neither is given.
fn sorting(keys: &[String], dirs: &[String]) -> Result<Vec<(SortKey, bool)>, ApiError> {
    if keys.is_empty() && dirs.is_empty() {
        return Ok(Vec::new());
    }
    let descending = dirs
        .iter()
        .map(|dir| match dir.as_str() {
            "desc" => Ok(true),
            "asc" => Ok(false),
            other => Err(ApiError::BadRequest(format!(
                "Invalid sort_dir {other}: asc or desc"
            ))),
        })
        .collect::<Result<Vec<bool>, _>>()?;
    // Nova's default key when only directions are given.
    let keys: Vec<&str> = if keys.is_empty() {
        vec!["created_at"]
    } else {
        keys.iter().map(String::as_str).collect()
    };
    if descending.len() > keys.len() {
        return Err(ApiError::BadRequest(
            "Sort direction size exceeds sort key size".into(),
        ));
    }
    let first = descending.first().copied().unwrap_or(true);
    let mut sort = Vec::with_capacity(keys.len() + 2);
    for (n, name) in keys.iter().enumerate() {
        sort.push((sort_key(name)?, descending.get(n).copied().unwrap_or(first)));
    }
    for tie in [SortKey::Created, SortKey::Id] {
        if !sort.iter().any(|&(k, _)| k == tie) {
            sort.push((tie, first));
        }
    }
    Ok(sort)
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
        let sort = sorting(&query.sort_keys, &query.sort_dirs)?;
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
            reservation: query.reservation_id.clone(),
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
            || self.reservation.is_some()
            || !self.sort.is_empty()
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
            && self
                .reservation
                .as_ref()
                .is_none_or(|r| instance.reservation.as_ref() == Some(r))
    }

    /// Sorts `instances` (read in creation order) as asked.
    pub fn sort(&self, instances: &mut [Instance]) {
        if self.sort.is_empty() {
            return;
        }
        instances.sort_by(|a, b| {
            self.sort
                .iter()
                .map(|&(key, descending)| {
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
                })
                .find(|o| o.is_ne())
                .unwrap_or(std::cmp::Ordering::Equal)
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
