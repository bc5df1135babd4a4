//! One instance's page: its details, fault, action log and console log, all live, with the
//! actions its state allows.

use std::fmt::Write;

use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;
use uuid::Uuid;

use super::call::{Api, Failed};
use super::html::{esc, live_detail, notice};
use super::instances::{address, buttons, names, node_names};
use super::session::Session;

/// Console lines an instance's page shows.
const CONSOLE_LINES: u32 = 40;

/// `GET /ui/instances/{id}`: one instance's page.
pub(super) async fn show(session: Session, Path(id): Path<String>) -> Response {
    let who = match session.who().await {
        Ok(who) => who,
        Err(failed) => return session.failed(failed),
    };
    let Ok(id) = Uuid::parse_str(&id) else {
        return session.failed(Failed {
            status: StatusCode::NOT_FOUND,
            message: format!("{id:?} is not an instance's id."),
        });
    };
    let detail = match detail_part(&session.api(), id, &session.csrf).await {
        Ok(Some(detail)) => detail,
        Ok(None) => {
            return session.failed(Failed {
                status: StatusCode::NOT_FOUND,
                message: format!("There is no instance {id}."),
            });
        }
        Err(failed) => return session.failed(failed),
    };
    let body = live_detail(
        ("/ui/instances", "All instances"),
        &format!("/ui/instances/{id}"),
        "instance",
        &detail,
    );
    session.page(&who, "Instance", "/ui/instances", &body)
}

/// `GET /ui/instances/{id}/live`: the instance's page's live part.
pub(super) async fn detail(session: Session, Path(id): Path<String>) -> Response {
    let Ok(id) = Uuid::parse_str(&id) else {
        return session.html(StatusCode::NOT_FOUND, notice(true, "No such instance."));
    };
    match detail_part(&session.api(), id, &session.csrf).await {
        Ok(Some(html)) => session.html(StatusCode::OK, html),
        Ok(None) => session.html(
            StatusCode::OK,
            notice(false, "This instance is gone (deleted)."),
        ),
        Err(failed) => session.live_failed(failed),
    }
}

/// An instance's details, fault, actions, action log and console log (`None`: there is no
/// such instance, or no longer).
async fn detail_part(api: &Api, id: Uuid, csrf: &str) -> Result<Option<String>, Failed> {
    let server = match api.get(&format!("/compute/v2.1/servers/{id}")).await {
        Ok(body) => body["server"].clone(),
        Err(failed) if failed.status == StatusCode::NOT_FOUND => return Ok(None),
        Err(failed) => return Err(failed),
    };
    let flavors = names(api, "/compute/v2.1/flavors", "flavors", "name").await?;
    let images = names(api, "/image/v2/images", "images", "name").await?;
    let name = server["name"].as_str().unwrap_or("");
    let status = server["status"].as_str().unwrap_or("?");
    let text = |v: &Value| v.as_str().unwrap_or("").to_string();
    let flavor = text(&server["flavor"]["id"]);
    let image = text(&server["image"]["id"]);
    let mut rows = vec![
        ("Name", esc(name)),
        ("ID", esc(&id.to_string())),
        (
            "State",
            format!(
                "<span class=\"state {}\" id=\"state\">{}</span>",
                esc(&status.to_ascii_lowercase()),
                esc(status)
            ),
        ),
        ("Address", esc(&address(&server))),
        (
            "Flavor",
            esc(flavors.get(&flavor).map_or(flavor.as_str(), String::as_str)),
        ),
        (
            "Image",
            esc(images.get(&image).map_or(image.as_str(), String::as_str)),
        ),
        (
            "Key pair",
            esc(server["key_name"].as_str().unwrap_or("none")),
        ),
        ("Created", esc(&text(&server["created"]))),
        ("Changed", esc(&text(&server["updated"]))),
    ];
    if let Some(host) = server["OS-EXT-SRV-ATTR:host"].as_str() {
        let nodes = node_names(api).await;
        rows.insert(
            4,
            ("Node", esc(nodes.get(host).map_or(host, String::as_str))),
        );
    }
    let mut out = String::from("<dl class=\"details\">");
    for (k, v) in rows {
        let _ = write!(out, "<div><dt>{k}</dt><dd>{v}</dd></div>");
    }
    out.push_str("</dl>");
    if server["fault"].is_object() {
        let _ = write!(
            out,
            "<section class=\"fault\" aria-labelledby=\"h-fault\"><h2 id=\"h-fault\">Fault</h2>\
             <p role=\"alert\">{message}</p><p class=\"note\">{details} at {created}</p></section>",
            message = esc(&text(&server["fault"]["message"])),
            details = esc(server["fault"]["details"].as_str().unwrap_or("failed")),
            created = esc(&text(&server["fault"]["created"])),
        );
    }
    out.push_str(&buttons(
        &id.to_string(),
        name,
        status,
        csrf,
        &format!("/ui/instances/{id}"),
    ));
    out.push_str(&action_log(api, id).await?);
    out.push_str("<section aria-labelledby=\"h-console\"><h2 id=\"h-console\">Console log</h2>");
    match api
        .get(&format!(
            "/cumulo/v1/instances/{id}/console?lines={CONSOLE_LINES}"
        ))
        .await
    {
        Ok(body) => {
            let _ = write!(
                out,
                "<pre class=\"console\" tabindex=\"0\" aria-label=\"console log\">{}</pre>",
                esc(body["output"].as_str().unwrap_or(""))
            );
        }
        Err(failed) if failed.logged_out() => return Err(failed),
        Err(failed) => out.push_str(&notice(false, &failed.message)),
    }
    out.push_str("</section>");
    Ok(Some(out))
}

/// The instance's action log, newest first.
async fn action_log(api: &Api, id: Uuid) -> Result<String, Failed> {
    let body = api
        .get(&format!("/compute/v2.1/servers/{id}/os-instance-actions"))
        .await?;
    let actions = body["instanceActions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut out =
        String::from("<section aria-labelledby=\"h-actions\"><h2 id=\"h-actions\">Actions</h2>");
    if actions.is_empty() {
        out.push_str(&notice(false, "No action recorded."));
    } else {
        out.push_str(
            "<table><thead><tr><th scope=\"col\">Action</th><th scope=\"col\">Started</th>\
             <th scope=\"col\">Result</th><th scope=\"col\">Request</th></tr></thead><tbody>",
        );
        for a in &actions {
            let text = |v: &Value| esc(v.as_str().unwrap_or(""));
            let _ = write!(
                out,
                "<tr><td>{}</td><td><time>{}</time></td><td>{}</td><td><code>{}</code></td></tr>",
                text(&a["action"]),
                text(&a["start_time"]),
                esc(a["message"].as_str().unwrap_or("ok")),
                text(&a["request_id"]),
            );
        }
        out.push_str("</tbody></table>");
    }
    out.push_str("</section>");
    Ok(out)
}
