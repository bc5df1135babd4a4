//! The native API's JSON shapes of the store's records (one function per record; the OpenAPI
//! document describes the same shapes in `openapi.rs`).

use serde_json::{Value, json};

use crate::api::clock::rfc3339;
use crate::api::image::disk_format;
use crate::cluster::{Node, Trace};
use store::{
    ActionResult, Cnci, CnciState, Event, EventKind, Flavor, Image, Instance, InstanceAction,
    InstanceState, Quota, RemoteHost, Role, RoleAssignment, Tenant, Usage, User, Workload,
};

/// A quota's limits (`null`: unlimited).
pub fn quota(q: &Quota) -> Value {
    json!({"instances": q.instances, "vcpus": q.vcpus, "memory_mb": q.memory_mb})
}

/// A tenant.
pub fn tenant(t: &Tenant) -> Value {
    json!({
        "id": t.id,
        "name": t.name,
        "quota": quota(&t.quota),
        "subnet_prefix": t.subnet_prefix,
        "created": rfc3339(t.created),
    })
}

/// A tenant's limits and what it uses.
pub fn quota_usage(tenant: &Tenant, usage: &Usage) -> Value {
    json!({
        "tenant": tenant.id,
        "limits": quota(&tenant.quota),
        "usage": {"instances": usage.instances, "vcpus": usage.vcpus, "memory_mb": usage.memory_mb},
    })
}

/// A role's name.
pub fn role_name(role: Role) -> &'static str {
    match role {
        Role::Admin => "admin",
        Role::Member => "member",
    }
}

/// A user (never its password hash).
pub fn user(u: &User) -> Value {
    json!({"id": u.id, "name": u.name, "created": rfc3339(u.created)})
}

/// A role assignment.
pub fn assignment(a: &RoleAssignment) -> Value {
    json!({"user": a.user, "tenant": a.tenant, "role": role_name(a.role)})
}

/// A flavor.
pub fn flavor(f: &Flavor) -> Value {
    json!({"id": f.id, "name": f.name, "vcpus": f.vcpus, "memory_mb": f.memory_mb, "disk_gb": f.disk_gb})
}

/// An image.
pub fn image(i: &Image) -> Value {
    json!({
        "id": i.id,
        "name": i.name,
        "kind": disk_format(i.kind),
        "reference": i.reference,
        "tenant": i.owner,
        "public": i.owner.is_none(),
        "created": rfc3339(i.created),
    })
}

/// A workload.
pub fn workload(w: &Workload) -> Value {
    json!({
        "id": w.id,
        "name": w.name,
        "tenant": w.owner,
        "public": w.owner.is_none(),
        "flavor": w.flavor,
        "image": w.image,
        "user_data": w.user_data,
        "ephemeral": w.ephemeral,
    })
}

/// An instance.
pub fn instance(i: &Instance) -> Value {
    let error = match &i.state {
        InstanceState::Error(reason) => Some(reason.as_str()),
        _ => None,
    };
    json!({
        "id": i.id,
        "tenant": i.tenant,
        "workload": i.workload,
        "name": i.name,
        "state": i.state.name(),
        "error": error,
        "vcpus": i.vcpus,
        "memory_mb": i.memory_mb,
        "node": i.node,
        "ip": i.ip.to_string(),
        "mac": i.mac.to_string(),
        "subnet": i.subnet.to_string(),
        "cnci": i.cnci,
        "fault": crate::engine::fault::shown(i).map(|f| json!({
            "reason": f.reason,
            "message": f.message,
            "created": rfc3339(f.created),
        })),
        "created": rfc3339(i.created),
        "updated": rfc3339(i.updated),
    })
}

/// An instance action, with its events (`result`: `success`, `error`, or `null` while
/// unfinished).
pub fn instance_action(a: &InstanceAction) -> Value {
    let events: Vec<Value> = a
        .events
        .iter()
        .map(|e| {
            json!({
                "name": e.name,
                "start": rfc3339(e.start),
                "finish": e.finish.map(rfc3339),
                "result": e.result.map(|r| match r {
                    ActionResult::Success => "success",
                    ActionResult::Error => "error",
                }),
                "detail": e.detail,
            })
        })
        .collect();
    json!({
        "request_id": a.request_id,
        "instance": a.instance,
        "tenant": a.tenant,
        "action": a.action,
        "user": a.user,
        "project": a.project,
        "start": rfc3339(a.start),
        "updated": rfc3339(a.updated),
        "message": a.message,
        "events": events,
    })
}

/// A CNCI.
pub fn cnci(c: &Cnci) -> Value {
    let state = match c.state {
        CnciState::Pending => "pending",
        CnciState::Active => "active",
        CnciState::Exited => "exited",
        CnciState::Failed => "failed",
    };
    json!({
        "id": c.id,
        "tenant": c.tenant,
        "subnet": c.subnet,
        "cidr": c.cidr.to_string(),
        "state": state,
        "ip": c.ip.map(|ip| ip.to_string()),
        "node": c.node,
        "created": rfc3339(c.created),
        "updated": rfc3339(c.updated),
    })
}

/// An event.
pub fn event(e: &Event) -> Value {
    let kind = match e.kind {
        EventKind::Info => "info",
        EventKind::Warning => "warning",
        EventKind::Error => "error",
    };
    json!({"seq": e.seq, "time": rfc3339(e.time), "tenant": e.tenant, "kind": kind, "message": e.message})
}

/// A node.
pub fn node(n: &Node) -> Value {
    json!({
        "id": n.id,
        "compute": n.kinds.compute,
        "network": n.kinds.network,
        "status": n.status.as_str(),
        "hostname": n.hostname,
        "mem_total_mb": n.mem_total_mb,
        "mem_available_mb": n.mem_available_mb,
        "disk_total_mb": n.disk_total_mb,
        "disk_available_mb": n.disk_available_mb,
        "vcpus_total": n.vcpus_total,
        "vcpus_available": n.vcpus_available,
        "load": n.load,
        "instances": n.instances,
        "ips": n.ips.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "connected": rfc3339(n.connected),
        "last_stats": n.last_stats.map(rfc3339),
    })
}

/// An off-host host (its launcher runs beside the controller).
pub fn remote_host(h: &RemoteHost) -> Value {
    json!({
        "id": h.id,
        "name": h.name,
        // What the node list's columns show for it.
        "hostname": h.name,
        "status": "off-host",
        "launcher_on_host": false,
        "libvirt_uri": h.libvirt_uri,
        "created": rfc3339(h.created),
    })
}

/// A trace.
pub fn trace(t: &Trace) -> Value {
    let hops: Vec<Value> = t
        .hops
        .iter()
        .map(|h| json!({"uuid": h.uuid, "role": h.role, "tx_ns": h.tx_ns, "rx_ns": h.rx_ns}))
        .collect();
    json!({"label": t.label, "frame": t.frame, "total_ns": t.total_ns, "hops": hops})
}
