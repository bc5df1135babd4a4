//! The user commands: each is a request or two to the native API, shown as a table (or JSON).

use std::io::Write;

use serde_json::{Value, json};

use crate::args::{
    CnciCmd, EventsArgs, FlavorCmd, ImageCmd, Login, TenantCmd, TraceCmd, WorkloadCmd,
};
use crate::client::{ClientError, Connection, Credentials};
use crate::routes::{self, item, items};

mod instances;
mod nodes;
pub use instances::instance;
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
