//! `cumulo instance ...`: the instances, looked up by name or UUID, their actions, and waiting
//! for them to run.

use std::io::Write;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{CommandError, Output, named, one_named, read_user_data, resolve};
use crate::args::InstanceCmd;
use crate::client::{ClientError, Connection};
use crate::routes::{self, item, items};

/// Instances per page when looking one up by name (the API's largest page).
const INSTANCE_PAGE: u32 = 1000;

/// Resolves an instance's name or UUID, through every page of the instance listing.
fn instance_id(conn: &Connection, name_or_id: &str) -> Result<String, CommandError> {
    if uuid::Uuid::parse_str(name_or_id).is_ok() {
        return Ok(name_or_id.to_string());
    }
    let mut matches = Vec::new();
    let mut marker: Option<String> = None;
    loop {
        let mut path = format!("{}?limit={INSTANCE_PAGE}", routes::INSTANCES);
        if let Some(marker) = &marker {
            path.push_str(&format!("&marker={marker}"));
        }
        let page = conn.get(&path)?;
        matches.extend(named(&page, name_or_id));
        match page["next"].as_str() {
            Some(next) if marker.as_deref() != Some(next) => marker = Some(next.to_string()),
            _ => break,
        }
    }
    one_named(name_or_id, matches)
}

const INSTANCE_COLUMNS: &[(&str, &str)] = &[
    ("ID", "id"),
    ("NAME", "name"),
    ("STATE", "state"),
    ("IP", "ip"),
    ("NODE", "node"),
];

/// The instance columns, and the floating IP `instance create --floating-ip` gave each.
const INSTANCE_FIP_COLUMNS: &[(&str, &str)] = &[
    ("ID", "id"),
    ("NAME", "name"),
    ("STATE", "state"),
    ("IP", "ip"),
    ("FLOATING IP", "floating_ip"),
    ("NODE", "node"),
];

/// The id of the cluster's external network (`router:external`), whose pool floating IPs come
/// from.
fn external_network(conn: &Connection) -> Result<String, CommandError> {
    let networks = conn.get(routes::NETWORKS)?;
    networks["networks"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|n| n["router:external"] == true)
        .and_then(|n| n["id"].as_str().map(str::to_string))
        .ok_or_else(|| {
            CommandError::Other("the cluster has no external network for floating IPs".into())
        })
}

/// Allocates a floating IP from `network` associated with `instance`'s port: its address.
fn floating_ip_for(
    conn: &Connection,
    network: &str,
    instance: &str,
) -> Result<String, CommandError> {
    let made = conn.post(
        routes::FLOATING_IPS,
        &json!({"floatingip": {"floating_network_id": network, "port_id": instance}}),
    )?;
    made["floatingip"]["floating_ip_address"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| {
            CommandError::Other(format!(
                "the floating IP for instance {instance} has no address: {made}"
            ))
        })
}

const ACTION_COLUMNS: &[(&str, &str)] = &[
    ("REQUEST ID", "request_id"),
    ("ACTION", "action"),
    ("START", "start"),
    ("RESULT", "result"),
    ("USER", "user"),
    ("DETAIL", "detail"),
];

/// The error of an instance that ended in `error` while a command waited for it.
fn failed_error(instance: &Value, id: &str) -> CommandError {
    let name = instance["name"].as_str().unwrap_or_default();
    let why = routes::fault_text(instance).unwrap_or_else(|| "no reason given".into());
    CommandError::Other(format!("instance {id} ({name}) failed to start: {why}"))
}

/// Polls until every instance of `ids` is active; the first one in `error`, or back to
/// `exited` with a fault (a start its node could not do), ends the wait with its fault.
fn wait_active(conn: &Connection, ids: &[String]) -> Result<(), CommandError> {
    let mut out = std::io::stderr();
    wait(&mut out, "active", Duration::from_secs(300), || {
        let mut all = true;
        for id in ids {
            let instance = item(conn.get(&routes::instance(id))?);
            match instance["state"].as_str().unwrap_or_default() {
                "error" => return Err(failed_error(&instance, id)),
                "exited" if !instance["fault"].is_null() => {
                    return Err(failed_error(&instance, id));
                }
                state => all &= state == "active",
            }
        }
        Ok(all)
    })
}

/// Polls `done` every 200 ms for at most `within`, showing dots.
fn wait(
    out: &mut dyn Write,
    what: &str,
    within: Duration,
    mut done: impl FnMut() -> Result<bool, CommandError>,
) -> Result<(), CommandError> {
    let start = Instant::now();
    let _ = write!(out, "waiting for {what} ");
    loop {
        let finished = done().inspect_err(|_| {
            let _ = writeln!(out);
        })?;
        if finished {
            let _ = writeln!(out, " done ({:.1} s)", start.elapsed().as_secs_f64());
            return Ok(());
        }
        if start.elapsed() >= within {
            let _ = writeln!(out);
            return Err(CommandError::Other(format!(
                "{what}: not done after {within:?}"
            )));
        }
        let _ = write!(out, ".");
        let _ = out.flush();
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `cumulo instance ...`.
pub fn instance(
    conn: &Connection,
    cmd: InstanceCmd,
    o: &mut Output<'_>,
) -> Result<(), CommandError> {
    match cmd {
        InstanceCmd::List => o.table(&conn.get(routes::INSTANCES)?, INSTANCE_COLUMNS),
        InstanceCmd::Show { id } => {
            let id = instance_id(conn, &id)?;
            let mut shown = item(conn.get(&routes::instance(&id))?);
            if !o.json
                && let Some(text) =
                    routes::fault_text(&shown).filter(|_| shown["fault"].is_object())
            {
                let at = shown["fault"]["created"].as_str().unwrap_or_default();
                shown["fault"] = Value::String(format!("{text} ({at})"));
            }
            o.object(shown);
        }
        InstanceCmd::Create {
            workload,
            name,
            count,
            wait: until_active,
            floating_ip,
            trace,
        } => {
            let workload = resolve(conn, routes::WORKLOADS, &workload)?;
            let body = json!({"workload": workload, "name": name, "count": count});
            let headers: Vec<(&str, &str)> = trace
                .as_deref()
                .map(|label| ("X-Cumulo-Trace", label))
                .into_iter()
                .collect();
            let made = conn
                .request_with("POST", routes::INSTANCES, Some(&body), &headers)?
                .unwrap_or(Value::Null);
            let ids: Vec<String> = items(&made)
                .iter()
                .filter_map(|i| i["id"].as_str().map(str::to_string))
                .collect();
            let mut shown = if until_active {
                wait_active(conn, &ids)?;
                let mut now = Vec::new();
                for id in &ids {
                    now.push(item(conn.get(&routes::instance(id))?));
                }
                now
            } else {
                items(&made)
            };
            if floating_ip {
                let network = external_network(conn)?;
                for instance in &mut shown {
                    let id = instance["id"].as_str().unwrap_or_default().to_string();
                    instance["floating_ip"] = json!(floating_ip_for(conn, &network, &id)?);
                }
                o.table(&Value::Array(shown), INSTANCE_FIP_COLUMNS);
            } else {
                o.table(&Value::Array(shown), INSTANCE_COLUMNS);
            }
        }
        InstanceCmd::Delete {
            id,
            wait: wait_gone,
        } => {
            let id = instance_id(conn, &id)?;
            conn.delete(&routes::instance(&id))?;
            if wait_gone {
                let mut out = std::io::stderr();
                wait(&mut out, "deleted", Duration::from_secs(300), || match conn
                    .get(&routes::instance(&id))
                {
                    Err(ClientError::Api { status: 404, .. }) => Ok(true),
                    Err(e) => Err(e.into()),
                    Ok(_) => Ok(false),
                })?;
            }
            o.done(&format!("instance {id} deleted"), json!({"deleted": id}));
        }
        InstanceCmd::Stop {
            id,
            wait: until_exited,
        } => {
            let id = instance_id(conn, &id)?;
            action(conn, &id, "stop", o)?;
            if until_exited {
                let mut out = std::io::stderr();
                wait(&mut out, "exited", Duration::from_secs(300), || {
                    let instance = item(conn.get(&routes::instance(&id))?);
                    match instance["state"].as_str().unwrap_or_default() {
                        "error" => Err(CommandError::Other(format!(
                            "instance {id} is in error: {}",
                            routes::fault_text(&instance).unwrap_or_default()
                        ))),
                        state => Ok(state == "exited"),
                    }
                })?;
            }
        }
        InstanceCmd::Start { id, wait } => {
            let id = instance_id(conn, &id)?;
            if wait {
                conn.post(&routes::instance_action(&id, "start"), &json!({}))?;
                wait_active(conn, std::slice::from_ref(&id))?;
                let now = item(conn.get(&routes::instance(&id))?);
                o.table(&Value::Array(vec![now]), INSTANCE_COLUMNS);
            } else {
                action(conn, &id, "start", o)?;
            }
        }
        InstanceCmd::Restart { id, hard } => {
            let verb = if hard { "reboot-hard" } else { "restart" };
            action(conn, &instance_id(conn, &id)?, verb, o)?;
        }
        InstanceCmd::Pause { id } => action(conn, &instance_id(conn, &id)?, "pause", o)?,
        InstanceCmd::Unpause { id } => action(conn, &instance_id(conn, &id)?, "unpause", o)?,
        InstanceCmd::Suspend { id } => action(conn, &instance_id(conn, &id)?, "suspend", o)?,
        InstanceCmd::Resume { id } => action(conn, &instance_id(conn, &id)?, "resume", o)?,
        InstanceCmd::Rebuild {
            id,
            image,
            user_data,
        } => {
            let id = instance_id(conn, &id)?;
            let mut body = json!({});
            if let Some(image) = image {
                body["image"] = json!(resolve(conn, routes::IMAGES, &image)?);
            }
            if let Some(path) = user_data {
                body["user_data"] = json!(read_user_data(&path)?);
            }
            let answer = conn.post(&routes::instance_action(&id, "rebuild"), &body)?;
            o.done(&format!("instance {id}: rebuild requested"), answer);
        }
        InstanceCmd::Resize {
            id,
            flavor,
            confirm,
            revert,
        } => {
            let id = instance_id(conn, &id)?;
            match flavor {
                Some(flavor) => {
                    let body = json!({"flavor": resolve(conn, routes::FLAVORS, &flavor)?});
                    let answer = conn.post(&routes::instance_action(&id, "resize"), &body)?;
                    o.done(
                        &format!("instance {id}: resized (confirm or revert it)"),
                        answer,
                    );
                }
                None if confirm => action(conn, &id, "confirm-resize", o)?,
                None if revert => action(conn, &id, "revert-resize", o)?,
                None => {
                    return Err(CommandError::Other(
                        "resize needs --flavor, --confirm or --revert".into(),
                    ));
                }
            }
        }
        InstanceCmd::Actions { id } => {
            let id = instance_id(conn, &id)?;
            let answer = conn.get(&routes::instance_actions(&id))?;
            if o.json {
                o.table(&answer, &[]);
            } else {
                let rows: Vec<Value> = items(&answer).iter().map(routes::action_row).collect();
                o.table(&Value::Array(rows), ACTION_COLUMNS);
            }
        }
        InstanceCmd::Console { id, lines } => {
            let id = instance_id(conn, &id)?;
            let answer = conn.get(&routes::instance_console(&id, lines))?;
            if o.json {
                o.table(&answer, &[]);
            } else {
                let _ = write!(o.out, "{}", answer["output"].as_str().unwrap_or_default());
            }
        }
    }
    Ok(())
}

fn action(
    conn: &Connection,
    id: &str,
    action: &str,
    o: &mut Output<'_>,
) -> Result<(), CommandError> {
    let answer = conn.post(&routes::instance_action(id, action), &json!({}))?;
    o.done(&format!("instance {id}: {action} requested"), answer);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_reads_as_one_line() {
        let failed = json!({"state": "error", "error": "launch_failure",
            "fault": {"reason": "launch_failure", "message": "QEMU could not open /x: Permission denied",
                      "created": "2026-12-01T15:23:31Z"}});
        assert_eq!(
            routes::fault_text(&failed).as_deref(),
            Some("launch_failure: QEMU could not open /x: Permission denied")
        );
        // A controller without faults: the error's reason.
        let older = json!({"state": "error", "error": "image_failure"});
        assert_eq!(routes::fault_text(&older).as_deref(), Some("image_failure"));
        assert_eq!(
            routes::fault_text(&json!({"state": "active", "fault": null, "error": null})),
            None
        );
        let e = failed_error(&json!({"name": "web", "fault": failed["fault"]}), "u1");
        assert_eq!(
            e.to_string(),
            "instance u1 (web) failed to start: launch_failure: QEMU could not open /x: Permission denied"
        );
    }
}
