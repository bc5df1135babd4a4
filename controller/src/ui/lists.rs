//! The pages that list one kind of thing: images, flavors, networks and CNCIs, tenants and
//! their quotas (admins), the event log (live), and the frame traces (admins) drawn as
//! waterfalls of their hops.

use std::fmt::Write;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;

use super::call::{Api, Failed};
use super::html::{esc, notice, usage};
use super::session::Session;

/// How many events the event page shows.
const EVENTS: u32 = 200;
/// How many tenants' quota use the tenants page reads at most.
const TENANTS: usize = 200;

/// A table: its caption, its column heads, its rows of cells (HTML, escaped by the caller);
/// the first cell of a row is its header.
fn table(caption: &str, heads: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = format!("<table><caption>{}</caption><thead><tr>", esc(caption));
    for h in heads {
        let _ = write!(out, "<th scope=\"col\">{}</th>", esc(h));
    }
    out.push_str("</tr></thead><tbody>");
    for row in rows {
        out.push_str("<tr>");
        for (i, cell) in row.iter().enumerate() {
            if i == 0 {
                let _ = write!(out, "<th scope=\"row\">{cell}</th>");
            } else {
                let _ = write!(out, "<td>{cell}</td>");
            }
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
    out
}

/// `v` as escaped text (strings as they are, numbers and booleans written, null empty).
fn cell(v: &Value) -> String {
    match v {
        Value::String(s) => esc(s),
        Value::Null => String::new(),
        Value::Bool(true) => "yes".into(),
        Value::Bool(false) => "no".into(),
        other => esc(&other.to_string()),
    }
}

/// The items under `key` of `body`.
fn items<'a>(body: &'a Value, key: &str) -> &'a [Value] {
    body[key].as_array().map_or(&[], Vec::as_slice)
}

/// A whole page whose body `part` makes; live (re-fetched at `live`) if given.
async fn page_of<F, Fut>(
    session: Session,
    title: &str,
    here: &str,
    live: Option<&str>,
    part: F,
) -> Response
where
    F: FnOnce(Api) -> Fut,
    Fut: std::future::Future<Output = Result<String, Failed>>,
{
    let who = match session.who().await {
        Ok(who) => who,
        Err(failed) => return session.failed(failed),
    };
    let body = match part(session.api()).await {
        Ok(body) => body,
        Err(failed) => return session.failed(failed),
    };
    let body = match live {
        Some(url) => format!("<div data-live=\"{url}\" id=\"live\">{body}</div>"),
        None => body,
    };
    session.page(&who, title, here, &body)
}

/// `GET /ui/images`.
pub(super) async fn images(session: Session) -> Response {
    page_of(session, "Images", "/ui/images", None, |api| async move {
        let body = api.get("/image/v2/images").await?;
        let rows: Vec<Vec<String>> = items(&body, "images")
            .iter()
            .map(|i| {
                vec![
                    cell(&i["name"]),
                    cell(&i["status"]),
                    cell(&i["visibility"]),
                    cell(&i["disk_format"]),
                    i["size"].as_u64().map_or(String::new(), |b| {
                        format!("{:.1} MiB", b as f64 / 1048576.0)
                    }),
                    cell(&i["created_at"]),
                    cell(&i["id"]),
                ]
            })
            .collect();
        if rows.is_empty() {
            return Ok(notice(false, "No image."));
        }
        Ok(table(
            &format!("{} image(s)", rows.len()),
            &[
                "Name",
                "Status",
                "Visibility",
                "Format",
                "Size",
                "Created",
                "ID",
            ],
            &rows,
        ))
    })
    .await
}

/// `GET /ui/flavors`.
pub(super) async fn flavors(session: Session) -> Response {
    page_of(session, "Flavors", "/ui/flavors", None, |api| async move {
        let body = api.get("/compute/v2.1/flavors/detail").await?;
        let rows: Vec<Vec<String>> = items(&body, "flavors")
            .iter()
            .map(|f| {
                vec![
                    cell(&f["name"]),
                    cell(&f["vcpus"]),
                    format!("{} MiB", cell(&f["ram"])),
                    format!("{} GiB", cell(&f["disk"])),
                    cell(&f["os-flavor-access:is_public"]),
                    cell(&f["id"]),
                ]
            })
            .collect();
        if rows.is_empty() {
            return Ok(notice(false, "No flavor."));
        }
        Ok(table(
            &format!("{} flavor(s)", rows.len()),
            &["Name", "vCPUs", "Memory", "Disk", "Public", "ID"],
            &rows,
        ))
    })
    .await
}

/// `GET /ui/networks`: the Networking API's networks and subnets, and the CNCIs.
pub(super) async fn networks(session: Session) -> Response {
    page_of(
        session,
        "Networks and CNCIs",
        "/ui/networks",
        Some("/ui/networks/live"),
        networks_part,
    )
    .await
}

/// `GET /ui/networks/live`.
pub(super) async fn networks_live(session: Session) -> Response {
    match networks_part(session.api()).await {
        Ok(html) => session.html(StatusCode::OK, html),
        Err(failed) => session.live_failed(failed),
    }
}

async fn networks_part(api: Api) -> Result<String, Failed> {
    let nets = api.get("/network/v2.0/networks").await?;
    let subnets = api.get("/network/v2.0/subnets").await?;
    let cncis = api.get("/cumulo/v1/cncis").await?;
    let mut out =
        String::from("<section aria-labelledby=\"h-nets\"><h2 id=\"h-nets\">Networks</h2>");
    let rows: Vec<Vec<String>> = items(&nets, "networks")
        .iter()
        .map(|n| {
            vec![
                cell(&n["name"]),
                cell(&n["status"]),
                cell(&n["router:external"]),
                cell(&n["shared"]),
                items(n, "subnets").len().to_string(),
                cell(&n["id"]),
            ]
        })
        .collect();
    out.push_str(&table(
        &format!("{} network(s)", rows.len()),
        &["Name", "Status", "External", "Shared", "Subnets", "ID"],
        &rows,
    ));
    let rows: Vec<Vec<String>> = items(&subnets, "subnets")
        .iter()
        .map(|s| {
            vec![
                cell(&s["name"]),
                cell(&s["cidr"]),
                cell(&s["gateway_ip"]),
                cell(&s["network_id"]),
            ]
        })
        .collect();
    out.push_str(&table(
        &format!("{} subnet(s)", rows.len()),
        &["Subnet", "CIDR", "Gateway", "Network"],
        &rows,
    ));
    out.push_str("</section><section aria-labelledby=\"h-cncis\"><h2 id=\"h-cncis\">CNCIs</h2>");
    let rows: Vec<Vec<String>> = items(&cncis, "cncis")
        .iter()
        .map(|c| {
            vec![
                cell(&c["cidr"]),
                format!(
                    "<span class=\"state {s}\">{s}</span>",
                    s = cell(&c["state"])
                ),
                cell(&c["ip"]),
                cell(&c["node"]),
                cell(&c["tenant"]),
                cell(&c["updated"]),
            ]
        })
        .collect();
    if rows.is_empty() {
        out.push_str(&notice(
            false,
            "No CNCI: tenant networks are off, or no instance needs one yet.",
        ));
    } else {
        out.push_str(&table(
            &format!("{} CNCI(s)", rows.len()),
            &["Subnet", "State", "Address", "Node", "Tenant", "Changed"],
            &rows,
        ));
    }
    out.push_str("</section>");
    Ok(out)
}

/// `GET /ui/tenants` (admins): every tenant with its quota use.
pub(super) async fn tenants(session: Session) -> Response {
    page_of(
        session,
        "Tenants and quotas",
        "/ui/tenants",
        None,
        |api| async move {
            let body = api.get("/cumulo/v1/tenants").await?;
            let tenants = items(&body, "tenants");
            let mut rows = Vec::new();
            for t in tenants.iter().take(TENANTS) {
                let id = t["id"].as_str().unwrap_or("");
                let name = t["name"].as_str().unwrap_or("");
                let q = api.get(&format!("/cumulo/v1/tenants/{id}/quota")).await?;
                let used = |what: &str, unit: &str| {
                    let n = q["usage"][what].as_u64().unwrap_or(0);
                    match q["limits"][what].as_u64() {
                        Some(limit) => usage(&format!("{what} of {name}"), n, limit, unit),
                        None => format!("{n} {unit} (no limit)"),
                    }
                };
                rows.push(vec![
                    esc(name),
                    used("instances", ""),
                    used("vcpus", ""),
                    used("memory_mb", "MiB"),
                    format!("/{}", cell(&t["subnet_prefix"])),
                    cell(&t["created"]),
                    esc(id),
                ]);
            }
            let mut out = table(
                &format!("{} tenant(s)", tenants.len()),
                &[
                    "Tenant",
                    "Instances",
                    "vCPUs",
                    "Memory",
                    "Subnets",
                    "Created",
                    "ID",
                ],
                &rows,
            );
            if tenants.len() > TENANTS {
                out.push_str(&notice(false, &format!("The first {TENANTS} are shown.")));
            }
            Ok(out)
        },
    )
    .await
}

/// `GET /ui/events`: the newest events, live.
pub(super) async fn events(session: Session) -> Response {
    page_of(
        session,
        "Events",
        "/ui/events",
        Some("/ui/events/live"),
        events_part,
    )
    .await
}

/// `GET /ui/events/live`.
pub(super) async fn events_live(session: Session) -> Response {
    match events_part(session.api()).await {
        Ok(html) => session.html(StatusCode::OK, html),
        Err(failed) => session.live_failed(failed),
    }
}

async fn events_part(api: Api) -> Result<String, Failed> {
    let body = api.get(&format!("/cumulo/v1/events?last={EVENTS}")).await?;
    let rows: Vec<Vec<String>> = items(&body, "events")
        .iter()
        .rev()
        .map(|e| {
            let kind = e["kind"].as_str().unwrap_or("info");
            vec![
                format!("<time>{}</time>", cell(&e["time"])),
                format!("<span class=\"kind {k}\">{k}</span>", k = esc(kind)),
                cell(&e["message"]),
                cell(&e["tenant"]),
            ]
        })
        .collect();
    if rows.is_empty() {
        return Ok(notice(false, "No events."));
    }
    Ok(table(
        &format!("The newest {} event(s), newest first", rows.len()),
        &["Time", "Kind", "Event", "Tenant"],
        &rows,
    ))
}

/// `GET /ui/traces` (admins): each frame trace as a waterfall of its hops.
pub(super) async fn traces(session: Session) -> Response {
    page_of(session, "Traces", "/ui/traces", None, |api| async move {
        let body = api.get("/cumulo/v1/traces").await?;
        let traces = items(&body, "traces");
        if traces.is_empty() {
            return Ok(notice(false, "No trace has been collected."));
        }
        let mut out = String::new();
        for t in traces.iter().rev() {
            out.push_str(&waterfall(t));
        }
        Ok(out)
    })
    .await
}

/// One trace: its hops as bars from when each was sent to when the next endpoint received it,
/// then the final consumer's work until it was done, on one time axis from the first send.
fn waterfall(t: &Value) -> String {
    let hops = items(t, "hops");
    let start = hops
        .iter()
        .filter_map(|h| h["tx_ns"].as_u64())
        .min()
        .unwrap_or(0);
    let done = start.saturating_add(t["total_ns"].as_u64().unwrap_or(0));
    let last_rx = hops
        .iter()
        .flat_map(|h| [h["tx_ns"].as_u64(), h["rx_ns"].as_u64()])
        .flatten()
        .max()
        .unwrap_or(start);
    let end = done.max(last_rx).max(start.saturating_add(1));
    let span = (end - start) as f64;
    let (width, row) = (600.0, 22.0);
    let label = t["label"].as_str().unwrap_or("");
    let mut bars = String::new();
    let mut rows = Vec::new();
    let mut bar = |i: usize, from: u64, to: u64| {
        let x = (from - start) as f64 / span * width;
        let w = ((to - from) as f64 / span * width).max(2.0);
        let y = i as f64 * row + 3.0;
        let _ = write!(
            bars,
            "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{:.1}\" fill=\"currentColor\"/>",
            row - 6.0
        );
    };
    for (i, h) in hops.iter().enumerate() {
        let tx = h["tx_ns"].as_u64().unwrap_or(start).max(start);
        let rx = h["rx_ns"].as_u64().filter(|&r| r >= tx).unwrap_or(tx);
        bar(i, tx, rx);
        rows.push(vec![
            cell(&h["role"]),
            cell(&h["uuid"]),
            format!("{:.3} ms", (tx - start) as f64 / 1e6),
            format!("{:.3} ms", (rx - tx) as f64 / 1e6),
        ]);
    }
    if done > last_rx {
        bar(hops.len(), last_rx, done);
        rows.push(vec![
            "the final consumer".into(),
            String::new(),
            format!("{:.3} ms", (last_rx - start) as f64 / 1e6),
            format!("{:.3} ms (its work)", (done - last_rx) as f64 / 1e6),
        ]);
    }
    let height = row * rows.len().max(1) as f64;
    format!(
        "<section class=\"trace\"><h2>{label} <span class=\"note\">{frame}, {total:.3} ms</span></h2>\
         <svg class=\"waterfall\" viewBox=\"0 0 {width} {height}\" width=\"{width}\" height=\"{height}\" \
         role=\"img\" aria-label=\"the hops of trace {label} over time\">{bars}</svg>{table}</section>",
        label = esc(label),
        frame = cell(&t["frame"]),
        total = (end - start) as f64 / 1e6,
        table = table(
            "Hops",
            &["Sender", "UUID", "Sent at", "Until received"],
            &rows
        ),
    )
}
