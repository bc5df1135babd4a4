//! `cumulo node ...`: the nodes, the tokens hosts join with, and a joined host's removal
//! (drain, then revoke).

use std::time::Duration;

use serde_json::{Value, json};

use super::{CommandError, Output};
use crate::args::{NodeCmd, TokenCmd};
use crate::client::{ClientError, Connection};
use crate::routes::{self, item, items};

/// `cumulo node ...`.
pub fn node(conn: &Connection, cmd: NodeCmd, o: &mut Output<'_>) -> Result<(), CommandError> {
    let columns = &[
        ("ID", "id"),
        ("HOSTNAME", "hostname"),
        ("STATUS", "status"),
        ("COMPUTE", "compute"),
        ("NETWORK", "network"),
        ("INSTANCES", "instances"),
        ("VCPUS FREE", "vcpus_available"),
        ("MEM FREE (MiB)", "mem_available_mb"),
    ];
    match cmd {
        NodeCmd::List => o.table(&conn.get(routes::NODES)?, columns),
        NodeCmd::Token(TokenCmd::Create { roles, ttl }) => {
            let made = conn.post(routes::JOIN_TOKENS, &json!({"roles": roles, "ttl": ttl}))?;
            let token = made["token"].as_str().unwrap_or_default().to_string();
            let text = format!(
                "join token {} for {}, until {} (shown once):\n{token}\n\non the new host (the token in the environment, not on the command line, which others can see):\n  CUMULO_JOIN_TOKEN={token} cumulo join --to {}",
                made["id"].as_str().unwrap_or_default(),
                made["roles"].as_str().unwrap_or_default(),
                made["expires"].as_str().unwrap_or_default(),
                conn.base()
            );
            o.done(&text, made);
        }
        NodeCmd::Token(TokenCmd::List) => o.table(
            &conn.get(routes::JOIN_TOKENS)?,
            &[
                ("ID", "id"),
                ("ROLES", "roles"),
                ("EXPIRES", "expires"),
                ("USED", "used"),
                ("USED BY", "used_by"),
            ],
        ),
        NodeCmd::Token(TokenCmd::Delete { id }) => {
            conn.delete(&format!("{}/{id}", routes::JOIN_TOKENS))?;
            o.done(&format!("join token {id} deleted"), Value::Null);
        }
        NodeCmd::Joined => o.table(
            &conn.get(routes::JOINED_NODES)?,
            &[
                ("ID", "id"),
                ("HOSTNAME", "hostname"),
                ("ROLES", "roles"),
                ("JOINED", "joined"),
                ("REVOKED", "revoked"),
            ],
        ),
        NodeCmd::Remove {
            id,
            force,
            drain_timeout,
        } => remove(conn, &id, force, drain_timeout, o)?,
        NodeCmd::Show { id } => o.object(conn.get(&format!("{}/{id}", routes::NODES))?),
        NodeCmd::Evacuate { id } => {
            let answer = conn.post(&format!("{}/{id}/evacuate", routes::NODES), &json!({}))?;
            o.done(&format!("node {id}: evacuation requested"), answer);
        }
        NodeCmd::Restore { id } => {
            let answer = conn.post(&format!("{}/{id}/restore", routes::NODES), &json!({}))?;
            o.done(&format!("node {id}: restore requested"), answer);
        }
    }
    Ok(())
}

/// `cumulo node remove`: a joined host drained (its ephemeral instances active elsewhere), then
/// its certificate revoked; refused while instances that live on it remain, unless forced.
fn remove(
    conn: &Connection,
    id: &str,
    force: bool,
    drain_timeout: u64,
    o: &mut Output<'_>,
) -> Result<(), CommandError> {
    // Only a host that joined with a token.
    let joined = conn.get(routes::JOINED_NODES)?;
    if !routes::items(&joined).iter().any(|n| n["id"] == id) {
        return Err(CommandError::Other(format!(
            "node {id} did not join with a token (cumulo node joined lists those): nothing done"
        )));
    }
    // Instances that live there (their disks are the host's) go with it: refused unless
    // forced, before anything is done.
    let staying = instances_that_stay(conn, id)?;
    if !staying.is_empty() && !force {
        return Err(CommandError::Other(format!(
            "node {id} holds {} instance(s) that live on it (not ephemeral): {}; delete \
             them first, or --force to remove the host with them: nothing done",
            staying.len(),
            staying.join(", ")
        )));
    }
    // The drain: an evacuation moves its ephemeral instances elsewhere (a node no longer
    // connected, 503, had them moved when it was lost). Each must be active on another
    // node (or gone) before the host is revoked.
    let moving: Vec<String> = instances_on(conn, id)?
        .iter()
        .filter(|i| !staying.contains(&instance_label(i)))
        .filter_map(|i| i["id"].as_str().map(str::to_string))
        .collect();
    match conn.post(&format!("{}/{id}/evacuate", routes::NODES), &json!({})) {
        Ok(_)
        | Err(ClientError::Api {
            status: 404 | 409 | 503,
            ..
        }) => {}
        Err(e) => return Err(e.into()),
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(drain_timeout);
    loop {
        let mut waiting = Vec::new();
        for instance in &moving {
            match conn.get(&routes::instance(instance)) {
                Ok(shown) => {
                    let shown = item(shown);
                    let elsewhere = shown["node"].as_str().is_some_and(|n| n != id);
                    if !(elsewhere && shown["state"] == "active") {
                        waiting.push(instance_label(&shown));
                    }
                }
                Err(ClientError::Api { status: 404, .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if waiting.is_empty() {
            break;
        }
        if std::time::Instant::now() >= deadline {
            return Err(CommandError::Other(format!(
                "node {id} did not drain within {drain_timeout} s ({} not active \
                 elsewhere yet: {}); it stays in maintenance, its certificate is not revoked",
                waiting.len(),
                waiting.join(", ")
            )));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let answer = conn.post(&format!("{}/{id}/revoke", routes::NODES), &json!({}))?;
    o.done(&format!("node {id}: drained, certificate revoked"), answer);
    Ok(())
}

/// The instances the store places on `node` (every tenant's: an admin's listing), page by page.
fn instances_on(conn: &Connection, node: &str) -> Result<Vec<Value>, CommandError> {
    let mut all = Vec::new();
    let mut marker: Option<String> = None;
    loop {
        let path = match &marker {
            Some(m) => format!("{}?node={node}&limit=1000&marker={m}", routes::INSTANCES),
            None => format!("{}?node={node}&limit=1000", routes::INSTANCES),
        };
        let page = conn
            .get(&path)
            .map_err(|e| CommandError::Other(format!("node {node}: listing its instances: {e}")))?;
        all.extend(items(&page));
        marker = page["next"].as_str().map(str::to_string);
        if marker.is_none() {
            return Ok(all);
        }
    }
}

/// How an instance is named in messages: `name (id)`.
fn instance_label(instance: &Value) -> String {
    format!(
        "{} ({})",
        instance["name"].as_str().unwrap_or_default(),
        instance["id"].as_str().unwrap_or_default()
    )
}

/// The instances on `node` whose workload is not ephemeral: they live there (an evacuation
/// leaves them, stopped).
fn instances_that_stay(conn: &Connection, node: &str) -> Result<Vec<String>, CommandError> {
    let mut ephemeral: std::collections::HashMap<String, bool> = Default::default();
    let mut staying = Vec::new();
    for instance in instances_on(conn, node)? {
        let workload = instance["workload"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let is_ephemeral = match ephemeral.get(&workload) {
            Some(e) => *e,
            None => {
                let e = match conn.get(&format!("{}/{workload}", routes::WORKLOADS)) {
                    Ok(shown) => routes::item(shown)["ephemeral"].as_bool().unwrap_or(false),
                    // A workload deleted since: its instances are not known to be ephemeral.
                    Err(ClientError::Api { status: 404, .. }) => false,
                    Err(e) => return Err(e.into()),
                };
                ephemeral.insert(workload, e);
                e
            }
        };
        if !is_ephemeral {
            staying.push(instance_label(&instance));
        }
    }
    Ok(staying)
}
