//! The overview: the nodes' use of CPU, memory and disk (admins), the instances by state, the
//! tenants' quota use and the recent events, refreshed live.

use std::fmt::Write;

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;

use super::call::{Api, Failed};
use super::html::{esc, notice, usage};
use super::session::Session;

/// How many tenants' quota use the overview shows at most.
const TENANTS_SHOWN: usize = 20;
/// How many recent events the overview shows.
const EVENTS_SHOWN: u32 = 10;

/// `GET /ui/`: the overview.
pub(super) async fn page(session: Session) -> Response {
    let who = match session.who().await {
        Ok(who) => who,
        Err(failed) => return session.failed(failed),
    };
    let live = match parts(&session.api()).await {
        Ok(live) => live,
        Err(failed) => return session.failed(failed),
    };
    let body = format!("<div data-live=\"/ui/overview/live\">{live}</div>");
    session.page(&who, "Overview", "/ui/", &body)
}

/// `GET /ui/overview/live`: the overview's live part.
pub(super) async fn live(session: Session) -> Response {
    match parts(&session.api()).await {
        Ok(html) => session.html(StatusCode::OK, html),
        Err(failed) => session.live_failed(failed),
    }
}

/// The overview's sections.
async fn parts(api: &Api) -> Result<String, Failed> {
    let mut out = String::new();
    out.push_str("<div class=\"grid\">");
    out.push_str(&nodes(api).await?);
    out.push_str(&states(api).await?);
    out.push_str(&quotas(api).await?);
    out.push_str(&events(api).await?);
    out.push_str("</div>");
    Ok(out)
}

fn number(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// The nodes with their use, or why they are not shown.
async fn nodes(api: &Api) -> Result<String, Failed> {
    let mut out =
        String::from("<section aria-labelledby=\"h-nodes\"><h2 id=\"h-nodes\">Nodes</h2>");
    match api.get("/cumulo/v1/nodes").await {
        Ok(body) => {
            let nodes = body["nodes"].as_array().cloned().unwrap_or_default();
            if nodes.is_empty() {
                out.push_str(&notice(false, "No node is connected."));
            } else {
                out.push_str(
                    "<table><thead><tr><th scope=\"col\">Node</th><th scope=\"col\">State</th>\
                     <th scope=\"col\">CPU</th><th scope=\"col\">Memory</th><th scope=\"col\">Disk</th>\
                     <th scope=\"col\">Instances</th></tr></thead><tbody>",
                );
                for n in &nodes {
                    let name = n["hostname"].as_str().unwrap_or("?");
                    let status = n["status"].as_str().unwrap_or("?");
                    if status == "off-host" {
                        let _ = write!(
                            out,
                            "<tr><th scope=\"row\">{}</th><td>off-host</td><td colspan=\"4\">its launcher runs beside the controller</td></tr>",
                            esc(name)
                        );
                        continue;
                    }
                    let [cpu, mem, disk] = super::nodes::use_cells(n, name);
                    let _ = write!(
                        out,
                        "<tr><th scope=\"row\">{name}</th><td>{status}</td><td>{cpu}</td><td>{mem}</td><td>{disk}</td><td>{count}</td></tr>",
                        name = esc(name),
                        status = esc(status),
                        count = number(&n["instances"]),
                    );
                }
                out.push_str("</tbody></table>");
            }
        }
        Err(failed) if failed.status == StatusCode::FORBIDDEN => {
            out.push_str(&notice(false, "The nodes are shown to admins."));
        }
        Err(failed) => return Err(failed),
    }
    out.push_str("</section>");
    Ok(out)
}

/// How many instances are in each state.
async fn states(api: &Api) -> Result<String, Failed> {
    let body = api.get("/cumulo/v1/instance-counts").await?;
    let mut out = String::from(
        "<section aria-labelledby=\"h-states\"><h2 id=\"h-states\">Instances</h2><dl class=\"counts\">",
    );
    let _ = write!(
        out,
        "<div><dt>all</dt><dd id=\"count-all\">{}</dd></div>",
        number(&body["total"])
    );
    if let Some(counts) = body["counts"].as_object() {
        for (state, n) in counts {
            let _ = write!(
                out,
                "<div><dt>{s}</dt><dd id=\"count-{s}\">{n}</dd></div>",
                s = esc(state),
                n = number(n)
            );
        }
    }
    out.push_str("</dl><p><a href=\"/ui/instances\">All instances</a></p></section>");
    Ok(out)
}

/// The tenants' quota use (an admin: the first [`TENANTS_SHOWN`]; others: their own).
async fn quotas(api: &Api) -> Result<String, Failed> {
    let body = api.get("/cumulo/v1/tenants").await?;
    let tenants = body["tenants"].as_array().cloned().unwrap_or_default();
    let mut out = String::from(
        "<section aria-labelledby=\"h-quota\"><h2 id=\"h-quota\">Quota use</h2>\
         <table><thead><tr><th scope=\"col\">Tenant</th><th scope=\"col\">Instances</th>\
         <th scope=\"col\">vCPUs</th><th scope=\"col\">Memory</th></tr></thead><tbody>",
    );
    for t in tenants.iter().take(TENANTS_SHOWN) {
        let (Some(id), Some(name)) = (t["id"].as_str(), t["name"].as_str()) else {
            continue;
        };
        let q = api.get(&format!("/cumulo/v1/tenants/{id}/quota")).await?;
        let cell = |what: &str, unit: &str| {
            let used = number(&q["usage"][what]);
            let limit = q["limits"][what].as_u64();
            match limit {
                Some(limit) => usage(&format!("{what} of {name}"), used, limit, unit),
                None => format!("{used} {unit} (no limit)"),
            }
        };
        let _ = write!(
            out,
            "<tr><th scope=\"row\">{}</th><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(name),
            cell("instances", ""),
            cell("vcpus", ""),
            cell("memory_mb", "MiB"),
        );
    }
    out.push_str("</tbody></table>");
    if tenants.len() > TENANTS_SHOWN {
        out.push_str(&notice(
            false,
            &format!("{TENANTS_SHOWN} of {} tenants shown.", tenants.len()),
        ));
    }
    out.push_str("</section>");
    Ok(out)
}

/// The most recent events, newest first.
async fn events(api: &Api) -> Result<String, Failed> {
    let body = api
        .get(&format!("/cumulo/v1/events?last={EVENTS_SHOWN}"))
        .await?;
    let events = body["events"].as_array().cloned().unwrap_or_default();
    let mut out = String::from(
        "<section aria-labelledby=\"h-events\"><h2 id=\"h-events\">Recent events</h2>",
    );
    if events.is_empty() {
        out.push_str(&notice(false, "No events."));
    } else {
        out.push_str("<ol class=\"events\" reversed>");
        for e in events.iter().rev() {
            let kind = e["kind"].as_str().unwrap_or("info");
            let _ = write!(
                out,
                "<li class=\"{kind}\"><time>{time}</time> <span class=\"kind\">{kind}</span> {message}</li>",
                kind = esc(kind),
                time = esc(e["time"].as_str().unwrap_or("")),
                message = esc(e["message"].as_str().unwrap_or("")),
            );
        }
        out.push_str("</ol>");
    }
    out.push_str("</section>");
    Ok(out)
}
