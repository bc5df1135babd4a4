//! What a server create says of its networks and access addresses, checked as Nova checks them
//! (400 for what cannot be honoured, never dropped in silence).
//!
//! - `networks`: absent, `"auto"`, or a list naming the project's network (the Networking API's
//!   `private-<cidr>`, by `uuid`): every server here has one port, on its project's tenant
//!   network, so a list must name that network, once (a project that has grown a second network
//!   may name none: its servers go where there is room). `"none"`, a `port`, a `fixed_ip`, another
//!   project's or an unknown network, the external network `public`, or two networks are 400s
//!   (Nova's "Network X could not be found." for an unknown one).
//! - `accessIPv4` / `accessIPv6`: an address that is not one is Nova's schema 400; a well-formed
//!   one is a 400 too, as in `PUT /servers/{id}`: access addresses are not kept here.
//! - `availability_zone`: a zone some compute node is in (a node's zone is its agent's
//!   `--zone`, `nova` by default); Nova's 400 `The requested availability zone is not
//!   available` otherwise. Nova's `zone:host` and `zone:host:node` forms (admins forcing a host)
//!   are a 400: use the zone alone.

use std::net::{Ipv4Addr, Ipv6Addr};

use serde_json::Value;
use uuid::Uuid;

use crate::api::ApiError;
use crate::api::network::networks::EXTERNAL_NETWORK;
use store::{InstanceStore, Scope};

/// The networks a create names (`uuid`s), checked for their shape; empty: none named.
pub fn parse_networks(networks: Option<&Value>) -> Result<Vec<Uuid>, ApiError> {
    let bad = |why: String| {
        ApiError::BadRequest(format!("Invalid input for field/attribute networks. {why}"))
    };
    let list = match networks {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(s)) if s == "auto" => return Ok(Vec::new()),
        Some(Value::String(s)) if s == "none" => {
            return Err(bad(
                "'none': every server here has a port on its project's network".into(),
            ));
        }
        Some(Value::Array(list)) => list,
        Some(other) => {
            return Err(bad(format!(
                "Value: {other}. It is not a list, 'auto' or 'none'"
            )));
        }
    };
    let mut ids = Vec::new();
    for network in list {
        let object = network
            .as_object()
            .ok_or_else(|| bad(format!("Value: {network}. Each network is an object")))?;
        for key in object.keys() {
            match key.as_str() {
                "uuid" => {}
                "port" | "fixed_ip" | "tag" => {
                    return Err(bad(format!(
                        "'{key}' is not served: a server's port is made with it, on its project's network"
                    )));
                }
                other => {
                    return Err(bad(format!(
                        "Additional properties are not allowed ('{other}' was unexpected)"
                    )));
                }
            }
        }
        let text = object.get("uuid").and_then(Value::as_str).ok_or_else(|| {
            bad(format!(
                "Value: {network}. Each network needs a 'uuid' string"
            ))
        })?;
        let id = Uuid::parse_str(text).map_err(|_| {
            ApiError::BadRequest(format!(
                "Bad networks format: network uuid is not in proper format ({text})"
            ))
        })?;
        match ids.first() {
            None => ids.push(id),
            Some(first) if *first == id => {}
            Some(_) => {
                return Err(bad("a server here has one port: name one network".into()));
            }
        }
    }
    Ok(ids)
}

/// Refuses networks that are not the project's own (Nova's 400 "Network X could not be
/// found.").
pub fn check_networks(
    store: &dyn InstanceStore,
    tenant: Uuid,
    named: &[Uuid],
) -> Result<(), ApiError> {
    if named.is_empty() {
        return Ok(());
    }
    let own = store.subnets(Scope::Tenant(tenant))?;
    if own.len() > 1 {
        // The store puts a new port in the subnet with room: naming one could be ignored.
        return Err(ApiError::BadRequest(format!(
            "project {tenant} has {} networks and a new server goes to the one with room: name none",
            own.len()
        )));
    }
    for id in named {
        if *id == EXTERNAL_NETWORK {
            return Err(ApiError::BadRequest(format!(
                "Network {id} is the external network: servers get its addresses as floating IPs"
            )));
        }
        if !own.iter().any(|s| s.id == *id) {
            return Err(ApiError::BadRequest(format!(
                "Network {id} could not be found."
            )));
        }
    }
    Ok(())
}

/// Refuses access addresses: a malformed one as Nova's schema does, a good one because they are
/// not kept.
pub fn check_access_ips(v4: Option<&Value>, v6: Option<&Value>) -> Result<(), ApiError> {
    for (field, value, v4) in [("accessIPv4", v4, true), ("accessIPv6", v6, false)] {
        let text = match value {
            None | Some(Value::Null) => continue,
            Some(Value::String(s)) if s.is_empty() => continue,
            Some(Value::String(s)) => s,
            Some(other) => {
                return Err(ApiError::BadRequest(format!(
                    "Invalid input for field/attribute {field}. Value: {other}. {other} is not of type 'string'"
                )));
            }
        };
        let well_formed = if v4 {
            text.parse::<Ipv4Addr>().is_ok()
        } else {
            text.parse::<Ipv6Addr>().is_ok()
        };
        if !well_formed {
            let kind = if v4 { "ipv4" } else { "ipv6" };
            return Err(ApiError::BadRequest(format!(
                "Invalid input for field/attribute {field}. Value: {text}. '{text}' is not a '{kind}'"
            )));
        }
        return Err(ApiError::BadRequest(format!(
            "{field}: access addresses are not kept by this server"
        )));
    }
    Ok(())
}

/// The zone a create asks for (`availability_zone`), checked for its shape; `None`: any.
pub fn parse_zone(zone: Option<&Value>) -> Result<Option<String>, ApiError> {
    let bad = |why: String| {
        ApiError::BadRequest(format!(
            "Invalid input for field/attribute availability_zone. {why}"
        ))
    };
    let text = match zone {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(text)) => text,
        Some(other) => return Err(bad(format!("Value: {other}. It is not a string"))),
    };
    if text.contains(':') {
        return Err(bad(format!(
            "Value: {text}. Forcing a host (zone:host) is not supported here: name the zone alone"
        )));
    }
    if !ssntp::payload::valid_zone(text) {
        return Err(ApiError::BadRequest(
            "The requested availability zone is not available".into(),
        ));
    }
    Ok(Some(text.clone()))
}

/// Checks that some compute node of `nodes` is in `zone`: Nova's 400 otherwise.
pub fn check_zone(nodes: &[crate::cluster::Node], zone: &str) -> Result<(), ApiError> {
    if nodes.iter().any(|n| n.kinds.compute && n.zone == zone) {
        Ok(())
    } else {
        Err(ApiError::BadRequest(
            "The requested availability zone is not available".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn networks_and_access_addresses_are_checked() {
        let id = Uuid::new_v4();
        assert_eq!(parse_networks(None).unwrap(), Vec::<Uuid>::new());
        assert_eq!(
            parse_networks(Some(&json!("auto"))).unwrap(),
            Vec::<Uuid>::new()
        );
        assert_eq!(
            parse_networks(Some(
                &json!([{"uuid": id.to_string()}, {"uuid": id.to_string()}])
            ))
            .unwrap(),
            vec![id]
        );
        for bad in [
            json!("none"),
            json!(5),
            json!([5]),
            json!([{"port": id.to_string()}]),
            json!([{"uuid": id.to_string(), "fixed_ip": "10.0.0.5"}]),
            json!([{"uuid": "net"}]),
            json!([{"uuid": id.to_string()}, {"uuid": Uuid::new_v4().to_string()}]),
        ] {
            assert_eq!(
                parse_networks(Some(&bad)).unwrap_err().status().as_u16(),
                400,
                "{bad}"
            );
        }
        assert!(check_access_ips(Some(&json!("")), None).is_ok());
        for (v4, v6) in [
            (Some(json!("1.2.3")), None),
            (Some(json!("1.2.3.4")), None),
            (None, Some(json!("1.2.3.4"))),
            (None, Some(json!("fe80::1"))),
            (Some(json!(5)), None),
        ] {
            assert!(
                check_access_ips(v4.as_ref(), v6.as_ref()).is_err(),
                "{v4:?} {v6:?}"
            );
        }
    }
}
