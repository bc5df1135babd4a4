//! The instances: a table (filtered by name, status and node, sorted, paged by marker through
//! the Compute API, so that 10,000 instances page as fast as 10), the create form, the actions,
//! and each instance's page with its details, fault, action log and console log, all live.

use std::collections::HashMap;
use std::fmt::Write;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery};
use axum::http::StatusCode;
use axum::response::Response;
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use uuid::Uuid;

use super::call::{Api, Failed, encode};
use super::html::{Flash, csrf_field, esc, notice};
use super::session::{Fields, Session};

/// Rows per page of the table.
const PAGE: usize = 50;
/// Nova's statuses a user may filter by.
const STATUSES: [&str; 8] = [
    "ACTIVE",
    "BUILD",
    "SHUTOFF",
    "PAUSED",
    "SUSPENDED",
    "ERROR",
    "REBUILD",
    "VERIFY_RESIZE",
];
/// Sort choices beside creation, the default: (the form's value, its label, Nova's
/// `sort_key`).
const SORTS: [(&str, &str, &str); 4] = [
    ("name", "name", "display_name"),
    ("status", "state", "vm_state"),
    ("node", "node", "host"),
    ("updated", "last change", "updated_at"),
];

/// The table's query: filters, sort, and the page (a marker and its number).
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
pub(super) struct ListQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    node: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sort: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dir: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    marker: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    page: Option<u32>,
}

impl ListQuery {
    /// The query of a page's URL, each field on its own: one that is malformed is left out,
    /// the others kept.
    fn parse(raw: Option<String>) -> ListQuery {
        let pairs: Vec<(String, String)> = raw
            .and_then(|r| serde_urlencoded::from_str(&r).ok())
            .unwrap_or_default();
        let field = |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        ListQuery {
            name: field("name"),
            status: field("status"),
            node: field("node"),
            sort: field("sort"),
            dir: field("dir"),
            marker: field("marker"),
            page: field("page").and_then(|p| p.parse().ok()),
        }
    }

    /// This query as a URL's query string.
    fn query(&self) -> String {
        serde_urlencoded::to_string(self).unwrap_or_default()
    }

    /// The Compute API's listing for this query: one more than a page (to know whether there is
    /// a next one), every tenant's for an admin (`all_tenants`, which the API ignores for
    /// others).
    fn compute_path(&self) -> String {
        let mut path = format!(
            "/compute/v2.1/servers/detail?limit={}&all_tenants=1",
            PAGE + 1
        );
        if let Some(name) = &self.name {
            let _ = write!(path, "&name={}", encode(&regex::escape(name)));
        }
        if let Some(status) = &self.status {
            let _ = write!(path, "&status={}", encode(status));
        }
        if let Some(node) = &self.node {
            let _ = write!(path, "&host={}", encode(node));
        }
        let key = self
            .sort
            .as_ref()
            .and_then(|sort| SORTS.iter().find(|(v, _, _)| v == sort))
            .map(|(_, _, key)| *key);
        let desc = self.dir.as_deref() == Some("desc");
        // Creation order ascending is the listing's own: no sort (and no scan) asked for.
        match (key, desc) {
            (Some(key), _) => {
                let dir = if desc { "desc" } else { "asc" };
                let _ = write!(path, "&sort_key={key}&sort_dir={dir}");
            }
            (None, true) => path.push_str("&sort_key=created_at&sort_dir=desc"),
            (None, false) => {}
        }
        if let Some(marker) = &self.marker {
            let _ = write!(path, "&marker={}", encode(marker));
        }
        path
    }
}

/// `GET /ui/instances`: the filters, the table, and the create form.
pub(super) async fn list(session: Session, RawQuery(raw): RawQuery) -> Response {
    let who = match session.who().await {
        Ok(who) => who,
        Err(failed) => return session.failed(failed),
    };
    let q = ListQuery::parse(raw);
    let api = session.api();
    let table = match table_part(&api, &q, &session.csrf).await {
        Ok(table) => table,
        Err(failed) => return session.failed(failed),
    };
    let create = match create_form(&api, &session.csrf).await {
        Ok(form) => form,
        Err(failed) => return session.failed(failed),
    };
    let nodes = if who.admin {
        node_names(&api).await
    } else {
        HashMap::new()
    };
    let body = format!(
        "{filters}<div data-live=\"/ui/instances/live?{query}\" id=\"instances\">{table}</div>{create}",
        filters = filters(&q, &nodes),
        query = esc(&q.query()),
    );
    session.page(&who, "Instances", "/ui/instances", &body)
}

/// `GET /ui/instances/live`: the table alone.
pub(super) async fn table(session: Session, RawQuery(raw): RawQuery) -> Response {
    let q = ListQuery::parse(raw);
    match table_part(&session.api(), &q, &session.csrf).await {
        Ok(html) => session.html(StatusCode::OK, html),
        Err(failed) => session.live_failed(failed),
    }
}

fn filters(q: &ListQuery, nodes: &HashMap<String, String>) -> String {
    let mut status = String::from("<option value=\"\">any</option>");
    for s in STATUSES {
        let selected = if q.status.as_deref() == Some(s) {
            " selected"
        } else {
            ""
        };
        let _ = write!(status, "<option{selected}>{s}</option>");
    }
    let mut sort = String::from("<option value=\"\">creation</option>");
    for (value, label, _) in SORTS {
        if value == "node" && nodes.is_empty() {
            continue;
        }
        let selected = if q.sort.as_deref() == Some(value) {
            " selected"
        } else {
            ""
        };
        let _ = write!(sort, "<option value=\"{value}\"{selected}>{label}</option>");
    }
    let desc = if q.dir.as_deref() == Some("desc") {
        " selected"
    } else {
        ""
    };
    let node = if nodes.is_empty() {
        String::new()
    } else {
        let mut options = String::from("<option value=\"\">any</option>");
        let mut sorted: Vec<_> = nodes.iter().collect();
        sorted.sort_by(|a, b| a.1.cmp(b.1));
        for (id, name) in sorted {
            let selected = if q.node.as_deref() == Some(id.as_str()) {
                " selected"
            } else {
                ""
            };
            let _ = write!(
                options,
                "<option value=\"{}\"{selected}>{}</option>",
                esc(id),
                esc(name)
            );
        }
        format!(
            "<label for=\"f-node\">Node</label><select id=\"f-node\" name=\"node\">{options}</select>"
        )
    };
    format!(
        "<form method=\"get\" action=\"/ui/instances\" class=\"filters\" role=\"search\" aria-label=\"Filter instances\">\
         <label for=\"f-name\">Name contains</label>\
         <input id=\"f-name\" name=\"name\" value=\"{name}\">\
         <label for=\"f-status\">State</label><select id=\"f-status\" name=\"status\">{status}</select>\
         {node}\
         <label for=\"f-sort\">Sort by</label><select id=\"f-sort\" name=\"sort\">{sort}</select>\
         <label for=\"f-dir\">Order</label><select id=\"f-dir\" name=\"dir\">\
         <option value=\"asc\">ascending</option><option value=\"desc\"{desc}>descending</option></select>\
         <button type=\"submit\">Show</button></form>",
        name = esc(q.name.as_deref().unwrap_or("")),
    )
}

/// The id → host name of the nodes (an admin's; empty when refused).
pub(super) async fn node_names(api: &Api) -> HashMap<String, String> {
    names(api, "/cumulo/v1/nodes", "nodes", "hostname")
        .await
        .unwrap_or_default()
}

/// The id → `field` of a list's items (`{"<key>": [{"id", "<field>"}]}`).
pub(super) async fn names(
    api: &Api,
    path: &str,
    key: &str,
    field: &str,
) -> Result<HashMap<String, String>, Failed> {
    let body = api.get(path).await?;
    Ok(body[key]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|i| {
                    Some((
                        i["id"].as_str()?.to_string(),
                        i[field].as_str()?.to_string(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default())
}

/// The fixed address of a server.
pub(super) fn address(server: &Value) -> String {
    server["addresses"]
        .as_object()
        .into_iter()
        .flat_map(|nets| nets.values())
        .filter_map(Value::as_array)
        .flatten()
        .filter_map(|a| a["addr"].as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The actions a server in `status` offers: (path segment, label).
fn actions_for(status: &str) -> &'static [(&'static str, &'static str)] {
    match status {
        "ACTIVE" => &[
            ("stop", "Stop"),
            ("reboot", "Reboot"),
            ("reboot-hard", "Hard reboot"),
            ("pause", "Pause"),
            ("suspend", "Suspend"),
            ("delete", "Delete"),
        ],
        "VERIFY_RESIZE" => &[
            ("confirm-resize", "Confirm resize"),
            ("revert-resize", "Revert resize"),
            ("delete", "Delete"),
        ],
        "SHUTOFF" => &[("start", "Start"), ("delete", "Delete")],
        "PAUSED" => &[("unpause", "Unpause"), ("delete", "Delete")],
        "SUSPENDED" => &[("resume", "Resume"), ("delete", "Delete")],
        _ => &[("delete", "Delete")],
    }
}

/// The buttons of a server's actions, each its own form, returning to `back`.
pub(super) fn buttons(id: &str, name: &str, status: &str, csrf: &str, back: &str) -> String {
    let mut out = String::from("<div class=\"actions\">");
    for (action, label) in actions_for(status) {
        let confirm = if *action == "delete" {
            format!(" data-confirm=\"Delete {}?\"", esc(name))
        } else {
            String::new()
        };
        let _ = write!(
            out,
            "<form method=\"post\" action=\"/ui/instances/{id}/{action}\"{confirm}>{csrf}\
             <input type=\"hidden\" name=\"back\" value=\"{back}\">\
             <button type=\"submit\" aria-label=\"{label} {name}\">{label}</button></form>",
            id = esc(id),
            csrf = csrf_field(csrf),
            back = esc(back),
            name = esc(name),
        );
    }
    out.push_str("</div>");
    out
}

/// The table of one page of instances, with its pager.
async fn table_part(api: &Api, q: &ListQuery, csrf: &str) -> Result<String, Failed> {
    let body = match api.get(&q.compute_path()).await {
        Ok(body) => body,
        // The page's first instance no longer passes the filters (or is gone).
        Err(failed) if failed.status == StatusCode::BAD_REQUEST && q.marker.is_some() => {
            let first = ListQuery {
                marker: None,
                page: None,
                ..q.clone()
            };
            return Ok(format!(
                "{}<p><a href=\"/ui/instances?{}\">Back to the first page</a></p>",
                notice(false, &failed.message),
                esc(&first.query())
            ));
        }
        Err(failed) => return Err(failed),
    };
    let mut servers = body["servers"].as_array().cloned().unwrap_or_default();
    let more = servers.len() > PAGE;
    servers.truncate(PAGE);
    let admin_view = servers
        .first()
        .is_some_and(|s| s.get("OS-EXT-SRV-ATTR:host").is_some());
    let nodes = if admin_view {
        node_names(api).await
    } else {
        HashMap::new()
    };
    let flavors = names(api, "/compute/v2.1/flavors", "flavors", "name").await?;
    let back = format!("/ui/instances?{}", q.query());
    let mut out = String::new();
    if servers.is_empty() {
        out.push_str(&notice(false, "No instance matches."));
    } else {
        let node_head = if admin_view {
            "<th scope=\"col\">Node</th>"
        } else {
            ""
        };
        let _ = write!(
            out,
            "<table class=\"instances\"><caption>Page {page}: {n} instance(s)</caption><thead><tr>\
             <th scope=\"col\">Name</th><th scope=\"col\">State</th>{node_head}\
             <th scope=\"col\">Address</th><th scope=\"col\">Flavor</th>\
             <th scope=\"col\">Created</th><th scope=\"col\">Actions</th></tr></thead><tbody>",
            page = q.page.unwrap_or(1),
            n = servers.len(),
        );
        for s in &servers {
            let id = s["id"].as_str().unwrap_or("");
            let name = s["name"].as_str().unwrap_or("");
            let status = s["status"].as_str().unwrap_or("?");
            let node = if admin_view {
                let host = s["OS-EXT-SRV-ATTR:host"].as_str().unwrap_or("");
                let shown = nodes.get(host).map_or(host, String::as_str);
                format!("<td>{}</td>", esc(shown))
            } else {
                String::new()
            };
            let flavor = s["flavor"]["id"]
                .as_str()
                .map(|f| flavors.get(f).map_or(f, String::as_str))
                .unwrap_or("");
            let _ = write!(
                out,
                "<tr data-id=\"{id}\"><th scope=\"row\"><a href=\"/ui/instances/{id}\">{name}</a></th>\
                 <td class=\"state {class}\">{status}</td>{node}<td>{ip}</td><td>{flavor}</td>\
                 <td><time>{created}</time></td><td>{buttons}</td></tr>",
                id = esc(id),
                name = esc(name),
                class = esc(&status.to_ascii_lowercase()),
                status = esc(status),
                ip = esc(&address(s)),
                flavor = esc(flavor),
                created = esc(s["created"].as_str().unwrap_or("")),
                buttons = buttons(id, name, status, csrf, &back),
            );
        }
        out.push_str("</tbody></table>");
    }
    let mut pager = String::new();
    if q.marker.is_some() {
        let first = ListQuery {
            marker: None,
            page: None,
            ..q.clone()
        };
        let _ = write!(
            pager,
            "<a href=\"/ui/instances?{}\">First page</a>",
            esc(&first.query())
        );
    }
    if more && let Some(last) = servers.last().and_then(|s| s["id"].as_str()) {
        let next = ListQuery {
            marker: Some(last.to_string()),
            page: Some(q.page.unwrap_or(1).saturating_add(1)),
            ..q.clone()
        };
        let _ = write!(
            pager,
            " <a href=\"/ui/instances?{}\" rel=\"next\">Next page</a>",
            esc(&next.query())
        );
    }
    if !pager.is_empty() {
        let _ = write!(
            out,
            "<nav class=\"pager\" aria-label=\"Pages\">{pager}</nav>"
        );
    }
    Ok(out)
}

/// The create form: flavors, images and key pairs to choose from.
async fn create_form(api: &Api, csrf: &str) -> Result<String, Failed> {
    let flavors = api.get("/compute/v2.1/flavors").await?;
    let images = api.get("/image/v2/images").await?;
    let keys = api.get("/compute/v2.1/os-keypairs").await?;
    let mut flavor_options = String::new();
    for f in flavors["flavors"].as_array().into_iter().flatten() {
        let (Some(id), Some(name)) = (f["id"].as_str(), f["name"].as_str()) else {
            continue;
        };
        let _ = write!(
            flavor_options,
            "<option value=\"{}\">{}</option>",
            esc(id),
            esc(name)
        );
    }
    let mut image_options = String::new();
    for i in images["images"].as_array().into_iter().flatten() {
        if i["status"].as_str() != Some("active") {
            continue;
        }
        let (Some(id), Some(name)) = (i["id"].as_str(), i["name"].as_str()) else {
            continue;
        };
        let _ = write!(
            image_options,
            "<option value=\"{}\">{}</option>",
            esc(id),
            esc(name)
        );
    }
    let mut key_options = String::from("<option value=\"\">none</option>");
    for k in keys["keypairs"].as_array().into_iter().flatten() {
        if let Some(name) = k["keypair"]["name"].as_str() {
            let _ = write!(key_options, "<option>{}</option>", esc(name));
        }
    }
    Ok(format!(
        "<section aria-labelledby=\"h-create\"><h2 id=\"h-create\">Create instances</h2>\
         <form method=\"post\" action=\"/ui/instances\" class=\"create\">{csrf}\
         <label for=\"c-name\">Name</label><input id=\"c-name\" name=\"name\" required maxlength=\"255\">\
         <label for=\"c-flavor\">Flavor</label><select id=\"c-flavor\" name=\"flavor\" required>{flavor_options}</select>\
         <label for=\"c-image\">Image</label><select id=\"c-image\" name=\"image\" required>{image_options}</select>\
         <label for=\"c-count\">How many</label><input id=\"c-count\" name=\"count\" type=\"number\" min=\"1\" max=\"1000\" value=\"1\" required>\
         <label for=\"c-key\">Key pair</label><select id=\"c-key\" name=\"key\">{key_options}</select>\
         <label for=\"c-userdata\">User data</label><textarea id=\"c-userdata\" name=\"user_data\" rows=\"4\" spellcheck=\"false\"></textarea>\
         <label for=\"c-trace\">Trace label</label><input id=\"c-trace\" name=\"trace\" maxlength=\"48\" placeholder=\"none: not traced\">\
         <button type=\"submit\">Create</button></form></section>",
        csrf = csrf_field(csrf),
    ))
}

/// `POST /ui/instances`: `POST /servers` with the form's choices.
pub(super) async fn create(session: Session, body: Bytes) -> Response {
    let form = Fields::parse(&body);
    if let Err(refused) = session.check(&form) {
        return *refused;
    }
    let name = form.text("name").unwrap_or("");
    let count: u32 = match form.text("count").unwrap_or("1").parse() {
        Ok(n) if n >= 1 => n,
        _ => {
            return session.redirect(
                "/ui/instances",
                Some(Flash {
                    error: true,
                    text: "How many: a whole number from 1.".into(),
                }),
            );
        }
    };
    let mut server = json!({
        "name": name,
        "flavorRef": form.text("flavor").unwrap_or(""),
        "imageRef": form.text("image").unwrap_or(""),
        "min_count": count,
        "max_count": count,
    });
    if let Some(key) = form.text("key") {
        server["key_name"] = json!(key);
    }
    if let Some(data) = form.get("user_data").filter(|d| !d.trim().is_empty()) {
        server["user_data"] = json!(base64::engine::general_purpose::STANDARD.encode(data));
    }
    let headers: Vec<(&'static str, String)> = form
        .text("trace")
        .map(|label| ("x-cumulo-trace", label.to_string()))
        .into_iter()
        .collect();
    let flash = match session
        .api()
        .call(
            axum::http::Method::POST,
            "/compute/v2.1/servers",
            Some(json!({ "server": server })),
            &headers,
        )
        .await
    {
        Ok(_) => Flash {
            error: false,
            text: if count == 1 {
                format!("Creating the instance {name}.")
            } else {
                format!("Creating {count} instances named {name}.")
            },
        },
        Err(failed) if failed.logged_out() => return session.to_login(),
        Err(failed) => Flash {
            error: true,
            text: format!("The instance was not created: {}", failed.message),
        },
    };
    session.redirect("/ui/instances", Some(flash))
}

/// An action in words, before "the instance".
fn verb(action: &str) -> &str {
    match action {
        "reboot-hard" => "hard reboot",
        "confirm-resize" => "confirm the resize of",
        "revert-resize" => "revert the resize of",
        other => other,
    }
}

/// Where a form returns to: its `back` field if that is a dashboard page, else `default`.
pub(super) fn back_of(form: &Fields, default: &str) -> String {
    form.get("back")
        .filter(|b| {
            b.starts_with("/ui/")
                && !b.contains("//")
                && !b.contains("/..")
                && b.bytes().all(|c| c.is_ascii_graphic() && c != b'\\')
        })
        .unwrap_or(default)
        .to_string()
}

/// `POST /ui/instances/{id}/{action}`: start, stop, reboot (soft or hard), pause, unpause,
/// suspend, resume, confirm or revert a resize, or delete, through the Compute API.
pub(super) async fn act(
    session: Session,
    Path((id, action)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let form = Fields::parse(&body);
    if let Err(refused) = session.check(&form) {
        return *refused;
    }
    let back = back_of(&form, "/ui/instances");
    let Ok(id) = Uuid::parse_str(&id) else {
        return session.redirect(
            &back,
            Some(Flash {
                error: true,
                text: format!("{id:?} is not an instance's id."),
            }),
        );
    };
    let body = match action.as_str() {
        "start" => json!({"os-start": null}),
        "stop" => json!({"os-stop": null}),
        "reboot" => json!({"reboot": {"type": "SOFT"}}),
        "reboot-hard" => json!({"reboot": {"type": "HARD"}}),
        "confirm-resize" => json!({"confirmResize": null}),
        "revert-resize" => json!({"revertResize": null}),
        "pause" => json!({"pause": null}),
        "unpause" => json!({"unpause": null}),
        "suspend" => json!({"suspend": null}),
        "resume" => json!({"resume": null}),
        "delete" => Value::Null,
        other => {
            return session.redirect(
                &back,
                Some(Flash {
                    error: true,
                    text: format!("There is no action {other:?}."),
                }),
            );
        }
    };
    let api = session.api();
    let result = if body.is_null() {
        api.delete(&format!("/compute/v2.1/servers/{id}")).await
    } else {
        api.post(&format!("/compute/v2.1/servers/{id}/action"), body)
            .await
            .map(|_| ())
    };
    let flash = match result {
        Ok(()) => Flash {
            error: false,
            text: format!("Asked to {} the instance.", verb(&action)),
        },
        Err(failed) if failed.logged_out() => return session.to_login(),
        Err(failed) => Flash {
            error: true,
            text: format!(
                "Could not {} the instance: {}",
                verb(&action),
                failed.message
            ),
        },
    };
    // A deleted instance's page is gone: back to the list.
    let to = if action == "delete" && back.starts_with(&format!("/ui/instances/{id}")) {
        "/ui/instances".to_string()
    } else {
        back
    };
    session.redirect(&to, Some(flash))
}
