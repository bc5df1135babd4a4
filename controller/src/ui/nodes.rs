//! The nodes (admins): their state, roles and use, their figures over the last hour as small
//! plots (`GET /cumulo/v1/nodes/{id}/history`, kept in memory by the controller), and
//! evacuate / restore.

use std::fmt::Write;

use axum::body::Bytes;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};
use uuid::Uuid;

use super::call::{Api, Failed};
use super::html::{Flash, csrf_field, esc, live_detail, notice, plot, usage};
use super::session::{Fields, Session};

/// How many nodes of the list get a plot of their last hour (each costs a request).
const SPARKLINES: usize = 50;

fn number(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// `GET /ui/nodes`: every node, live.
pub(super) async fn list(session: Session) -> Response {
    let who = match session.who().await {
        Ok(who) => who,
        Err(failed) => return session.failed(failed),
    };
    let table = match table_part(&session.api(), &session.csrf).await {
        Ok(table) => table,
        Err(failed) => return session.failed(failed),
    };
    let body = format!("<div data-live=\"/ui/nodes/live\" id=\"nodes\">{table}</div>");
    session.page(&who, "Nodes", "/ui/nodes", &body)
}

/// `GET /ui/nodes/live`: the nodes' table.
pub(super) async fn table(session: Session) -> Response {
    match table_part(&session.api(), &session.csrf).await {
        Ok(html) => session.html(StatusCode::OK, html),
        Err(failed) => session.live_failed(failed),
    }
}

/// The buttons a node in `status` offers.
fn buttons(id: &str, name: &str, status: &str, csrf: &str, back: &str) -> String {
    let (action, label) = match status {
        "off-host" => return String::new(),
        "maintenance" => ("restore", "Restore"),
        _ => ("evacuate", "Evacuate"),
    };
    format!(
        "<form method=\"post\" action=\"/ui/nodes/{id}/{action}\" data-confirm=\"{label} {name}?\">{csrf}\
         <input type=\"hidden\" name=\"back\" value=\"{back}\">\
         <button type=\"submit\" aria-label=\"{label} {name}\">{label}</button></form>",
        id = esc(id),
        name = esc(name),
        csrf = csrf_field(csrf),
        back = esc(back),
    )
}

/// A node's vCPUs, memory and disk, each used of total as a bar.
pub(super) fn use_cells(n: &Value, name: &str) -> [String; 3] {
    let used = |total: &str, free: &str| number(&n[total]).saturating_sub(number(&n[free]));
    [
        usage(
            &format!("vCPUs used on {name}"),
            used("vcpus_total", "vcpus_available"),
            number(&n["vcpus_total"]),
            "vCPUs",
        ),
        usage(
            &format!("memory used on {name}"),
            used("mem_total_mb", "mem_available_mb"),
            number(&n["mem_total_mb"]),
            "MiB",
        ),
        usage(
            &format!("disk used on {name}"),
            used("disk_total_mb", "disk_available_mb"),
            number(&n["disk_total_mb"]),
            "MiB",
        ),
    ]
}

/// The roles of a node, in words.
fn roles(n: &Value) -> &'static str {
    match (n["compute"] == true, n["network"] == true) {
        (true, true) => "compute, network",
        (true, false) => "compute",
        (false, true) => "network",
        (false, false) => "",
    }
}

async fn table_part(api: &Api, csrf: &str) -> Result<String, Failed> {
    let body = api.get("/cumulo/v1/nodes").await?;
    let nodes = body["nodes"].as_array().cloned().unwrap_or_default();
    if nodes.is_empty() {
        return Ok(notice(false, "No node is connected."));
    }
    let mut out = format!(
        "<table><caption>{} node(s)</caption><thead><tr><th scope=\"col\">Node</th>\
         <th scope=\"col\">State</th><th scope=\"col\">Roles</th><th scope=\"col\">vCPUs</th>\
         <th scope=\"col\">Memory</th><th scope=\"col\">Disk</th><th scope=\"col\">Load</th>\
         <th scope=\"col\">Instances</th><th scope=\"col\">Last hour</th>\
         <th scope=\"col\">Actions</th></tr></thead><tbody>",
        nodes.len()
    );
    let mut plotted = 0;
    for n in &nodes {
        let id = n["id"].as_str().unwrap_or("");
        let name = n["hostname"].as_str().unwrap_or("");
        let name = if name.is_empty() { id } else { name };
        let status = n["status"].as_str().unwrap_or("?");
        if status == "off-host" {
            let _ = write!(
                out,
                "<tr><th scope=\"row\">{}</th><td>off-host</td><td colspan=\"8\">{}</td></tr>",
                esc(name),
                esc(n["libvirt_uri"].as_str().unwrap_or(""))
            );
            continue;
        }
        let [cpu, mem, disk] = use_cells(n, name);
        // One history request a node: the first [`SPARKLINES`] nodes get their plot.
        let samples = if plotted < SPARKLINES {
            plotted += 1;
            let history = api.get(&format!("/cumulo/v1/nodes/{id}/history")).await?;
            history["samples"].as_array().cloned().unwrap_or_default()
        } else {
            Vec::new()
        };
        let _ = write!(
            out,
            "<tr><th scope=\"row\"><a href=\"/ui/nodes/{id}\">{name}</a></th><td>{status}</td>\
             <td>{roles}</td><td>{cpu}</td><td>{mem}</td><td>{disk}</td><td>{load:.2}</td>\
             <td>{count}</td><td>{spark}</td><td>{buttons}</td></tr>",
            id = esc(id),
            name = esc(name),
            status = esc(status),
            roles = roles(n),
            cpu = cpu,
            mem = mem,
            disk = disk,
            load = number(&n["load"]) as f64 / 100.0,
            count = number(&n["instances"]),
            spark = sparkline(
                &samples,
                &format!("vCPUs used on {name}"),
                "vcpus_used",
                "vcpus_total"
            ),
            buttons = buttons(id, name, status, csrf, "/ui/nodes"),
        );
    }
    out.push_str("</tbody></table>");
    Ok(out)
}

/// The points of `field` over the last hour: (seconds before the newest sample, value).
fn series(samples: &[Value], field: &str) -> Vec<(f64, f64)> {
    let times: Vec<Option<time::OffsetDateTime>> = samples
        .iter()
        .map(|s| {
            time::OffsetDateTime::parse(
                s["time"].as_str().unwrap_or(""),
                &time::format_description::well_known::Rfc3339,
            )
            .ok()
        })
        .collect();
    let Some(newest) = times.iter().flatten().max().copied() else {
        return Vec::new();
    };
    samples
        .iter()
        .zip(&times)
        .filter_map(|(s, t)| {
            let age = (newest - (*t)?).as_seconds_f64();
            Some((age, number(&s[field]) as f64))
        })
        .collect()
}

/// A small plot of `field` against `total` (the largest `total` seen) over the last hour.
fn sparkline(samples: &[Value], label: &str, field: &str, total: &str) -> String {
    let points = series(samples, field);
    let max = samples.iter().map(|s| number(&s[total])).max().unwrap_or(0) as f64;
    plot(label, &points, max, 120, 28)
}

/// `GET /ui/nodes/{id}`: one node, with its plots.
pub(super) async fn show(session: Session, Path(id): Path<String>) -> Response {
    let who = match session.who().await {
        Ok(who) => who,
        Err(failed) => return session.failed(failed),
    };
    let Ok(id) = Uuid::parse_str(&id) else {
        return session.failed(Failed {
            status: StatusCode::NOT_FOUND,
            message: format!("{id:?} is not a node's id."),
        });
    };
    let detail = match detail_part(&session.api(), id, &session.csrf).await {
        Ok(detail) => detail,
        Err(failed) => return session.failed(failed),
    };
    let body = live_detail(
        ("/ui/nodes", "All nodes"),
        &format!("/ui/nodes/{id}"),
        "node",
        &detail,
    );
    session.page(&who, "Node", "/ui/nodes", &body)
}

/// `GET /ui/nodes/{id}/live`: the node's page's live part.
pub(super) async fn detail(session: Session, Path(id): Path<String>) -> Response {
    let Ok(id) = Uuid::parse_str(&id) else {
        return session.html(StatusCode::NOT_FOUND, notice(true, "No such node."));
    };
    match detail_part(&session.api(), id, &session.csrf).await {
        Ok(html) => session.html(StatusCode::OK, html),
        Err(failed) => session.live_failed(failed),
    }
}

async fn detail_part(api: &Api, id: Uuid, csrf: &str) -> Result<String, Failed> {
    let n = api.get(&format!("/cumulo/v1/nodes/{id}")).await?;
    let name = n["hostname"].as_str().unwrap_or("");
    let status = n["status"].as_str().unwrap_or("?");
    let mut out = String::from("<dl class=\"details\">");
    let ips: Vec<&str> = n["ips"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    for (k, v) in [
        ("Host name", name.to_string()),
        ("ID", id.to_string()),
        ("State", status.to_string()),
        ("Roles", roles(&n).to_string()),
        ("Addresses", ips.join(", ")),
        (
            "Connected",
            n["connected"].as_str().unwrap_or("").to_string(),
        ),
        (
            "Last STATS",
            n["last_stats"].as_str().unwrap_or("none yet").to_string(),
        ),
    ] {
        let _ = write!(out, "<div><dt>{k}</dt><dd>{}</dd></div>", esc(&v));
    }
    out.push_str("</dl>");
    out.push_str(&buttons(
        &id.to_string(),
        name,
        status,
        csrf,
        &format!("/ui/nodes/{id}"),
    ));
    if status == "off-host" {
        return Ok(out);
    }
    let history = api.get(&format!("/cumulo/v1/nodes/{id}/history")).await?;
    let samples = history["samples"].as_array().cloned().unwrap_or_default();
    out.push_str(
        "<section aria-labelledby=\"h-hour\"><h2 id=\"h-hour\">The last hour</h2><div class=\"plots\">",
    );
    if samples.is_empty() {
        out.push_str(&notice(
            false,
            "No figures yet: they come with the node's STATS.",
        ));
    }
    let max_of = |field: &str| samples.iter().map(|s| number(&s[field])).max().unwrap_or(0) as f64;
    for (title, field, max) in [
        ("vCPUs used", "vcpus_used", max_of("vcpus_total")),
        ("Memory used, MiB", "mem_used_mb", max_of("mem_total_mb")),
        ("Load × 100", "load", max_of("load").max(100.0)),
        ("Instances", "instances", max_of("instances").max(1.0)),
    ] {
        if samples.is_empty() {
            break;
        }
        let points = series(&samples, field);
        let now = points.last().map_or(0.0, |p| p.1);
        let _ = write!(
            out,
            "<figure><figcaption>{title}: {now} now (of {max})</figcaption>{}</figure>",
            plot(
                &format!("{title} on {name} over the last hour"),
                &points,
                max,
                360,
                80
            )
        );
    }
    out.push_str("</div></section>");
    Ok(out)
}

/// `POST /ui/nodes/{id}/{action}`: evacuate or restore.
pub(super) async fn act(
    session: Session,
    Path((id, action)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let form = Fields::parse(&body);
    if let Err(refused) = session.check(&form) {
        return *refused;
    }
    let back = super::instances::back_of(&form, "/ui/nodes");
    let flash = |error: bool, text: String| Some(Flash { error, text });
    let Ok(id) = Uuid::parse_str(&id) else {
        return session.redirect(&back, flash(true, format!("{id:?} is not a node's id.")));
    };
    if action != "evacuate" && action != "restore" {
        return session.redirect(
            &back,
            flash(true, format!("There is no action {action:?}.")),
        );
    }
    let answer = session
        .api()
        .post(&format!("/cumulo/v1/nodes/{id}/{action}"), json!({}))
        .await;
    let message = match answer {
        Ok(_) => flash(false, format!("Asked the node to {action}.")),
        Err(failed) if failed.logged_out() => return session.to_login(),
        Err(failed) => flash(
            true,
            format!("Could not {action} the node: {}", failed.message),
        ),
    };
    session.redirect(&back, message)
}
