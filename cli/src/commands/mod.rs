//! The user commands: each is a request or two to the native API, shown as a table (or JSON).

use std::io::Write;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::args::{
    CnciCmd, EventsArgs, FlavorCmd, ImageCmd, InstanceCmd, Login, TenantCmd, TraceCmd, WorkloadCmd,
};
use crate::client::{ClientError, Connection, Credentials};
use crate::routes::{self, item, items};

mod nodes;
pub use nodes::node;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The API said no, or could not be reached.
    #[error("{0}")]
    Client(#[from] ClientError),
    /// Bad input, or a wait that ran out.
    #[error("{0}")]
    Other(String),
}

/// Logs in with the flags and environment.
pub fn connect(login: &Login) -> Result<Connection, CommandError> {
    let need = |v: &Option<String>, what: &str| {
        v.clone().ok_or_else(|| {
            CommandError::Other(format!(
                "no {what}: set CUMULO_{} or pass --{} (cumulo up prints the exports)",
                what.to_uppercase(),
                what
            ))
        })
    };
    Ok(Connection::login(&Credentials {
        url: need(&login.controller, "controller")?,
        username: need(&login.username, "username")?,
        password: need(&login.password, "password")?,
        project: need(&login.project, "project")?,
        ca_cert: login.ca_cert.clone(),
    })?)
}

/// How a command's answer is shown.
pub struct Output<'a> {
    /// Where.
    pub out: &'a mut dyn Write,
    /// JSON instead of tables.
    pub json: bool,
}

impl Output<'_> {
    /// A listing as a table of `columns` (header, key; `a.b` reaches into objects).
    pub fn table(&mut self, answer: &Value, columns: &[(&str, &str)]) {
        if self.json {
            let _ = writeln!(self.out, "{}", pretty(answer));
            return;
        }
        let rows: Vec<Vec<String>> = items(answer)
            .iter()
            .map(|o| columns.iter().map(|(_, key)| cell(o, key)).collect())
            .collect();
        let widths: Vec<usize> = columns
            .iter()
            .enumerate()
            .map(|(i, (header, _))| {
                rows.iter()
                    .map(|r| r[i].chars().count())
                    .chain([header.len()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |cells: Vec<String>| {
            cells
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_string()
        };
        let _ = writeln!(
            self.out,
            "{}",
            line(columns.iter().map(|(h, _)| h.to_string()).collect())
        );
        for row in rows {
            let _ = writeln!(self.out, "{}", line(row));
        }
    }

    /// One object as `key: value` lines.
    pub fn object(&mut self, answer: Value) {
        let object = item(answer);
        if self.json {
            let _ = writeln!(self.out, "{}", pretty(&object));
            return;
        }
        match &object {
            Value::Object(map) => {
                let width = map.keys().map(String::len).max().unwrap_or(0);
                for (k, v) in map {
                    let _ = writeln!(self.out, "{k:<width$}  {}", text(v));
                }
            }
            other => {
                let _ = writeln!(self.out, "{}", text(other));
            }
        }
    }

    /// A one-line confirmation (or `{"ok": true, ...}` in JSON).
    pub fn done(&mut self, message: &str, details: Value) {
        if self.json {
            let _ = writeln!(self.out, "{}", pretty(&details));
        } else {
            let _ = writeln!(self.out, "{message}");
        }
    }
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn cell(object: &Value, key: &str) -> String {
    let mut v = object;
    for part in key.split('.') {
        v = &v[part];
    }
    text(v)
}

/// Resolves a name or UUID among a listing's objects.
fn resolve(conn: &Connection, list: &str, name_or_id: &str) -> Result<String, CommandError> {
    if uuid::Uuid::parse_str(name_or_id).is_ok() {
        return Ok(name_or_id.to_string());
    }
    let listing = conn.get(list)?;
    one_named(name_or_id, named(&listing, name_or_id))
}

/// The ids of a listing's objects named `name`.
fn named(listing: &Value, name: &str) -> Vec<String> {
    items(listing)
        .into_iter()
        .filter(|o| o["name"].as_str() == Some(name))
        .filter_map(|o| o["id"].as_str().map(str::to_string))
        .collect()
}

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

/// The one id of the objects named `name_or_id`.
fn one_named(name_or_id: &str, matches: Vec<String>) -> Result<String, CommandError> {
    match matches.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(CommandError::Other(format!("no {name_or_id:?} found"))),
        _ => Err(CommandError::Other(format!(
            "{} objects are named {name_or_id:?}: give the UUID",
            matches.len()
        ))),
    }
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

/// A file of cloud-init user data, as text.
fn read_user_data(path: &std::path::Path) -> Result<String, CommandError> {
    std::fs::read_to_string(path)
        .map_err(|e| CommandError::Other(format!("{}: {e}", path.display())))
}

/// `cumulo workload ...`.
pub fn workload(
    conn: &Connection,
    cmd: WorkloadCmd,
    o: &mut Output<'_>,
) -> Result<(), CommandError> {
    let columns = &[
        ("ID", "id"),
        ("NAME", "name"),
        ("FLAVOR", "flavor"),
        ("IMAGE", "image"),
    ];
    match cmd {
        WorkloadCmd::List => o.table(&conn.get(routes::WORKLOADS)?, columns),
        WorkloadCmd::Show { id } => {
            let id = resolve(conn, routes::WORKLOADS, &id)?;
            o.object(conn.get(&format!("{}/{id}", routes::WORKLOADS))?);
        }
        WorkloadCmd::Create {
            name,
            flavor,
            image,
            user_data,
            public,
            ephemeral,
        } => {
            let user_data = match user_data {
                Some(path) => read_user_data(&path)?,
                None => String::new(),
            };
            let body = json!({
                "name": name,
                "flavor": resolve(conn, routes::FLAVORS, &flavor)?,
                "image": resolve(conn, routes::IMAGES, &image)?,
                "user_data": user_data,
                "public": public,
                "ephemeral": ephemeral,
            });
            o.object(conn.post(routes::WORKLOADS, &body)?);
        }
        WorkloadCmd::Delete { id } => {
            let id = resolve(conn, routes::WORKLOADS, &id)?;
            conn.delete(&format!("{}/{id}", routes::WORKLOADS))?;
            o.done(&format!("workload {id} deleted"), json!({"deleted": id}));
        }
    }
    Ok(())
}

/// `cumulo flavor ...`.
pub fn flavor(conn: &Connection, cmd: FlavorCmd, o: &mut Output<'_>) -> Result<(), CommandError> {
    let columns = &[
        ("ID", "id"),
        ("NAME", "name"),
        ("VCPUS", "vcpus"),
        ("RAM (MiB)", "memory_mb"),
        ("DISK (GiB)", "disk_gb"),
    ];
    match cmd {
        FlavorCmd::List => o.table(&conn.get(routes::FLAVORS)?, columns),
        FlavorCmd::Create {
            name,
            vcpus,
            ram,
            disk,
        } => o.object(conn.post(
            routes::FLAVORS,
            &json!({"name": name, "vcpus": vcpus, "memory_mb": ram, "disk_gb": disk}),
        )?),
        FlavorCmd::Delete { id } => {
            let id = resolve(conn, routes::FLAVORS, &id)?;
            conn.delete(&format!("{}/{id}", routes::FLAVORS))?;
            o.done(&format!("flavor {id} deleted"), json!({"deleted": id}));
        }
    }
    Ok(())
}

/// `cumulo image ...`.
pub fn image(conn: &Connection, cmd: ImageCmd, o: &mut Output<'_>) -> Result<(), CommandError> {
    let columns = &[
        ("ID", "id"),
        ("NAME", "name"),
        ("KIND", "kind"),
        ("REFERENCE", "reference"),
    ];
    match cmd {
        ImageCmd::List => o.table(&conn.get(routes::IMAGES)?, columns),
        ImageCmd::Show { id } => {
            let id = resolve(conn, routes::IMAGES, &id)?;
            o.object(conn.get(&format!("{}/{id}", routes::IMAGES))?);
        }
        ImageCmd::Create {
            name,
            kind,
            reference,
            public,
        } => o.object(conn.post(
            routes::IMAGES,
            &json!({"name": name, "kind": kind, "reference": reference, "public": public}),
        )?),
        ImageCmd::Delete { id } => {
            let id = resolve(conn, routes::IMAGES, &id)?;
            conn.delete(&format!("{}/{id}", routes::IMAGES))?;
            o.done(&format!("image {id} deleted"), json!({"deleted": id}));
        }
    }
    Ok(())
}

/// `cumulo tenant ...`.
pub fn tenant(conn: &Connection, cmd: TenantCmd, o: &mut Output<'_>) -> Result<(), CommandError> {
    let columns = &[("ID", "id"), ("NAME", "name")];
    match cmd {
        TenantCmd::List => o.table(&conn.get(routes::TENANTS)?, columns),
        TenantCmd::Show { id } => {
            let id = resolve(conn, routes::TENANTS, &id)?;
            o.object(conn.get(&format!("{}/{id}", routes::TENANTS))?);
        }
        TenantCmd::Create {
            name,
            instances,
            vcpus,
            ram,
        } => o.object(conn.post(
            routes::TENANTS,
            &json!({"name": name, "quota": quota_body(instances, vcpus, ram)}),
        )?),
        TenantCmd::Delete { id } => {
            let id = resolve(conn, routes::TENANTS, &id)?;
            conn.delete(&format!("{}/{id}", routes::TENANTS))?;
            o.done(&format!("tenant {id} deleted"), json!({"deleted": id}));
        }
        TenantCmd::Quota {
            id,
            instances,
            vcpus,
            ram,
        } => {
            let id = resolve(conn, routes::TENANTS, &id)?;
            if instances.is_some() || vcpus.is_some() || ram.is_some() {
                conn.put(&routes::quota(&id), &quota_body(instances, vcpus, ram))?;
            }
            o.object(conn.get(&routes::quota(&id))?);
        }
    }
    Ok(())
}

fn quota_body(instances: Option<u32>, vcpus: Option<u32>, ram: Option<u64>) -> Value {
    routes::present(&[
        ("instances", instances.map(Value::from)),
        ("vcpus", vcpus.map(Value::from)),
        ("memory_mb", ram.map(Value::from)),
    ])
}

/// `cumulo cnci list`.
pub fn cnci(conn: &Connection, cmd: CnciCmd, o: &mut Output<'_>) -> Result<(), CommandError> {
    match cmd {
        CnciCmd::List => o.table(
            &conn.get(routes::CNCIS)?,
            &[
                ("ID", "id"),
                ("TENANT", "tenant"),
                ("SUBNET", "cidr"),
                ("STATE", "state"),
                ("IP", "ip"),
                ("NODE", "node"),
            ],
        ),
    }
    Ok(())
}

/// `cumulo events`.
pub fn events(conn: &Connection, args: EventsArgs, o: &mut Output<'_>) -> Result<(), CommandError> {
    if args.clear {
        conn.delete(routes::EVENTS)?;
        o.done("events cleared", json!({"cleared": true}));
        return Ok(());
    }
    let path = match args.after {
        Some(after) => format!("{}?after={after}", routes::EVENTS),
        None => routes::EVENTS.to_string(),
    };
    o.table(
        &conn.get(&path)?,
        &[
            ("SEQ", "seq"),
            ("TIME", "time"),
            ("KIND", "kind"),
            ("MESSAGE", "message"),
        ],
    );
    Ok(())
}

/// A trace, hop by hop: when each sender sent (from the first send) and how long until the next
/// endpoint received it, then when the final consumer was done.
fn trace_text(t: &Value) -> String {
    // What peers wrote reaches the terminal without its control characters.
    let text = |v: &Value| -> String { text(v).chars().filter(|c| !c.is_control()).collect() };
    let ms = |ns: u64| ns as f64 / 1e6;
    let hops = items(&t["hops"]);
    let start = hops
        .iter()
        .filter_map(|h| h["tx_ns"].as_u64())
        .min()
        .unwrap_or(0);
    let total = t["total_ns"].as_u64().unwrap_or(0);
    let mut out = format!(
        "label  {}\nframe  {}\ntotal  {:.3} ms\n\n{:<4} {:<12} {:<36} {:>12} {:>16}\n",
        text(&t["label"]),
        text(&t["frame"]),
        ms(total),
        "HOP",
        "SENDER",
        "UUID",
        "SENT AT",
        "UNTIL RECEIVED"
    );
    for (i, h) in hops.iter().enumerate() {
        let tx = h["tx_ns"].as_u64().unwrap_or(start);
        let rx = h["rx_ns"].as_u64().unwrap_or(0).max(tx);
        out.push_str(&format!(
            "{:<4} {:<12} {:<36} {:>9.3} ms {:>13.3} ms\n",
            i + 1,
            text(&h["role"]),
            text(&h["uuid"]),
            ms(tx - start),
            ms(rx - tx)
        ));
    }
    out.push_str(&format!(
        "{:<4} {:<49} {:>9.3} ms  (the final consumer done)\n",
        "",
        "",
        ms(total)
    ));
    out
}

/// `cumulo trace`: the recent traces, or one (`show LABEL`).
pub fn trace(
    conn: &Connection,
    cmd: Option<TraceCmd>,
    o: &mut Output<'_>,
) -> Result<(), CommandError> {
    let traces = conn.get(routes::TRACES)?;
    match cmd.unwrap_or(TraceCmd::List) {
        TraceCmd::List => o.table(
            &traces,
            &[
                ("LABEL", "label"),
                ("FRAME", "frame"),
                ("TOTAL (ns)", "total_ns"),
            ],
        ),
        TraceCmd::Show { label } => {
            let found = items(&traces)
                .into_iter()
                .rev()
                .find(|t| t["label"] == label.as_str())
                .ok_or_else(|| {
                    CommandError::Other(format!(
                        "no trace labelled {label:?} (`cumulo trace` lists them)"
                    ))
                })?;
            if o.json {
                let _ = writeln!(o.out, "{}", pretty(&found));
            } else {
                let _ = write!(o.out, "{}", trace_text(&found));
            }
        }
    }
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
