//! Security groups and their rules: the project's, with its `default` group (made on first
//! use with OpenStack's default rules: egress open for IPv4 and IPv6, ingress only from the
//! group's own ports). A new group gets Neutron's two egress rules. Neutron's answers: 201 for a
//! creation, 204 for a deletion, 409 `SecurityGroupRuleExists` for a rule the group has, 409
//! `SecurityGroupCannotRemoveDefault` / `SecurityGroupInUse` for deleting `default` or a group
//! a port is in, 409 `SecurityGroupDefaultAlreadyExists` for a group named `default`, 409
//! `OverQuota` past the project's limits. Recorded only: the compute nodes do not enforce them
//! yet (docs/api.md).

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::{
    NetError, NetResult, blocking, body_object, deleted, groups_changed, list_body, one_of,
    only_fields, opt_text, own_project, path_uuid, time,
};
use crate::api::extract::{JsonBody, PathParams};
use crate::api::{ApiState, Principal};
use store::{
    Direction, EtherType, MAX_NET_TEXT, NewSecurityGroup, NewSecurityGroupRule, RuleRemote,
    SecurityGroup, SecurityGroupChange, SecurityGroupRule, StoreError,
};

/// A rule in Neutron's shape.
pub fn rule_body(rule: &SecurityGroupRule, default_group: bool) -> Value {
    let project = rule.tenant.to_string();
    let (prefix, group) = match &rule.remote {
        RuleRemote::Any => (None, None),
        RuleRemote::Prefix(p) => (Some(p.clone()), None),
        RuleRemote::Group(g) => (None, Some(*g)),
    };
    json!({
        "id": rule.id,
        "security_group_id": rule.group,
        "direction": rule.direction.as_str(),
        "ethertype": rule.ethertype.as_str(),
        "protocol": rule.protocol,
        "port_range_min": rule.port_min,
        "port_range_max": rule.port_max,
        "remote_ip_prefix": prefix,
        "normalized_cidr": prefix,
        "remote_group_id": group,
        "remote_address_group_id": null,
        "description": rule.description,
        "project_id": project,
        "tenant_id": project,
        "belongs_to_default_sg": default_group,
        "created_at": time(rule.created),
        "updated_at": time(rule.created),
        "revision_number": 0,
    })
}

/// A group in Neutron's shape, with its rules.
pub fn group_body(group: &SecurityGroup) -> Value {
    let project = group.tenant.to_string();
    let rules: Vec<Value> = group
        .rules
        .iter()
        .map(|r| rule_body(r, group.default))
        .collect();
    json!({
        "id": group.id,
        "name": group.name,
        "description": group.description,
        "project_id": project,
        "tenant_id": project,
        "security_group_rules": rules,
        "stateful": true,
        "shared": false,
        "tags": [],
        "created_at": time(group.created),
        "updated_at": time(group.updated),
        "revision_number": group.revision,
    })
}

fn group_not_found(id: impl std::fmt::Display) -> NetError {
    NetError::not_found(
        "SecurityGroupNotFound",
        format!("Security group {id} does not exist"),
    )
}

fn rule_not_found(id: impl std::fmt::Display) -> NetError {
    NetError::not_found(
        "SecurityGroupRuleNotFound",
        format!("Security group rule {id} does not exist"),
    )
}

/// The store's refusals about groups, in Neutron's names.
fn group_error(e: StoreError) -> NetError {
    match e {
        StoreError::NotFound {
            kind: "security group",
            id,
        } => group_not_found(id),
        StoreError::NotFound {
            kind: "security group rule",
            id,
        } => rule_not_found(id),
        StoreError::Conflict(message) => {
            let kind = if message.starts_with("Default security group already exists") {
                "SecurityGroupDefaultAlreadyExists"
            } else if message.starts_with("Removing default") {
                "SecurityGroupCannotRemoveDefault"
            } else if message.starts_with("Updating default") {
                "SecurityGroupCannotUpdateDefault"
            } else if message.starts_with("Security group rule already exists") {
                "SecurityGroupRuleExists"
            } else {
                "SecurityGroupInUse"
            };
            NetError::conflict(kind, message)
        }
        other => other.into(),
    }
}

/// `GET /security-groups`.
pub async fn list(
    State(state): State<ApiState>,
    caller: Principal,
    uri: Uri,
) -> NetResult<Json<Value>> {
    let project = caller.project()?;
    let groups = blocking(&state, move |store| Ok(store.security_groups(project)?)).await?;
    let all = groups.iter().map(group_body).collect();
    list_body(&state.config.public_url, "security_groups", &uri, all)
}

/// `GET /security-groups/{id}`.
pub async fn show(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> NetResult<Json<Value>> {
    let project = caller.project()?;
    let id = path_uuid("SecurityGroupNotFound", "Security group", &id)?;
    let group = one_of(
        &state,
        move |store| store.security_groups(project),
        move |g: &SecurityGroup| g.id == id,
        group_not_found(id),
    )
    .await?;
    Ok(Json(json!({"security_group": group_body(&group)})))
}

/// `POST /security-groups` (201).
pub async fn create(
    State(state): State<ApiState>,
    caller: Principal,
    JsonBody(body): JsonBody<Value>,
) -> NetResult<(StatusCode, Json<Value>)> {
    let project = caller.project()?;
    let group = body_object(body, "security_group")?;
    own_project(&group, project)?;
    if group
        .get("stateful")
        .is_some_and(|s| s != &Value::Bool(true))
    {
        return Err(NetError::invalid(
            "stateless security groups are not supported",
        ));
    }
    let new = NewSecurityGroup {
        tenant: project,
        name: opt_text(&group, "name", MAX_NET_TEXT)?.unwrap_or_default(),
        description: opt_text(&group, "description", MAX_NET_TEXT)?.unwrap_or_default(),
    };
    let made = blocking(&state, move |store| {
        store.create_security_group(new).map_err(group_error)
    })
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({"security_group": group_body(&made)})),
    ))
}

/// `PUT /security-groups/{id}`: `name` and `description`.
pub async fn update(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody<Value>,
) -> NetResult<Json<Value>> {
    let project = caller.project()?;
    let id = path_uuid("SecurityGroupNotFound", "Security group", &id)?;
    let group = body_object(body, "security_group")?;
    only_fields(&group, &["name", "description"])?;
    let change = SecurityGroupChange {
        name: opt_text(&group, "name", MAX_NET_TEXT)?,
        description: opt_text(&group, "description", MAX_NET_TEXT)?,
    };
    let changed = blocking(&state, move |store| {
        store
            .update_security_group(project, id, change)
            .map_err(group_error)
    })
    .await?;
    Ok(Json(json!({"security_group": group_body(&changed)})))
}

/// `DELETE /security-groups/{id}` (204).
pub async fn delete(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> NetResult<StatusCode> {
    let project = caller.project()?;
    let id = path_uuid("SecurityGroupNotFound", "Security group", &id)?;
    deleted(&state, move |store| {
        store
            .delete_security_group(project, id)
            .map_err(group_error)
    })
    .await
}

/// Every rule of the project's groups, with whether its group is `default`.
async fn all_rules(state: &ApiState, project: Uuid) -> NetResult<Vec<Value>> {
    let groups = blocking(state, move |store| Ok(store.security_groups(project)?)).await?;
    Ok(groups
        .iter()
        .flat_map(|g| g.rules.iter().map(|r| rule_body(r, g.default)))
        .collect())
}

/// `GET /security-group-rules`.
pub async fn list_rules(
    State(state): State<ApiState>,
    caller: Principal,
    uri: Uri,
) -> NetResult<Json<Value>> {
    let project = caller.project()?;
    let all = all_rules(&state, project).await?;
    list_body(&state.config.public_url, "security_group_rules", &uri, all)
}

/// `GET /security-group-rules/{id}`.
pub async fn show_rule(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> NetResult<Json<Value>> {
    let project = caller.project()?;
    let wanted = path_uuid("SecurityGroupRuleNotFound", "Security group rule", &id)?;
    all_rules(&state, project)
        .await?
        .into_iter()
        .find(|r| r["id"] == wanted.to_string())
        .map(|r| Json(json!({"security_group_rule": r})))
        .ok_or_else(|| rule_not_found(id))
}

/// A port bound or ICMP type/code: a whole number 0..=65535, or null.
fn port_field(rule: &Map<String, Value>, key: &str) -> NetResult<Option<u16>> {
    let bad = |v: &Value| {
        NetError::bad(
            "InvalidInput",
            format!("Invalid input for {key}. Reason: '{v}' is not a valid port number."),
        )
    };
    match rule.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v @ Value::Number(n)) => n
            .as_u64()
            .and_then(|n| u16::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| bad(v)),
        Some(v @ Value::String(s)) => s.parse::<u16>().map(Some).map_err(|_| bad(v)),
        Some(v) => Err(bad(v)),
    }
}

fn uuid_field(rule: &Map<String, Value>, key: &str) -> NetResult<Option<Uuid>> {
    match rule.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Uuid::parse_str(s).map(Some).map_err(|_| {
            NetError::bad(
                "InvalidInput",
                format!("Invalid input for {key}. Reason: '{s}' is not a valid UUID."),
            )
        }),
        Some(v) => Err(NetError::bad(
            "InvalidInput",
            format!("Invalid input for {key}. Reason: '{v}' is not a valid UUID."),
        )),
    }
}

/// A rule create's body, checked as Neutron checks it.
fn new_rule(rule: &Map<String, Value>) -> NetResult<NewSecurityGroupRule> {
    let group = uuid_field(rule, "security_group_id")?.ok_or_else(|| {
        NetError::invalid(
            "Failed to parse request. Required attribute 'security_group_id' not specified",
        )
    })?;
    let direction = match rule.get("direction").and_then(Value::as_str) {
        Some("ingress") => Direction::Ingress,
        Some("egress") => Direction::Egress,
        Some(other) => {
            return Err(NetError::bad(
                "InvalidInput",
                format!(
                    "Invalid input for direction. Reason: '{other}' is not in ['ingress', 'egress']."
                ),
            ));
        }
        None => {
            return Err(NetError::invalid(
                "Failed to parse request. Required attribute 'direction' not specified",
            ));
        }
    };
    let ethertype = match rule.get("ethertype") {
        None | Some(Value::Null) => EtherType::IPv4,
        Some(Value::String(s)) if s.eq_ignore_ascii_case("ipv4") => EtherType::IPv4,
        Some(Value::String(s)) if s.eq_ignore_ascii_case("ipv6") => EtherType::IPv6,
        Some(other) => {
            return Err(NetError::bad(
                "SecurityGroupRuleInvalidEtherType",
                format!(
                    "Security group rule for ethertype '{other}' not supported. Allowed values are ['IPv4', 'IPv6']."
                ),
            ));
        }
    };
    let protocol = match rule.get("protocol") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() || s.eq_ignore_ascii_case("any") => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        Some(other) => {
            return Err(NetError::bad(
                "SecurityGroupRuleInvalidProtocol",
                format!("Security group rule protocol {other} not supported."),
            ));
        }
    };
    let prefix = match rule.get("remote_ip_prefix") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            return Err(NetError::bad(
                "InvalidInput",
                format!(
                    "Invalid input for remote_ip_prefix. Reason: '{other}' is not a valid IP subnet."
                ),
            ));
        }
    };
    let remote = match (prefix, uuid_field(rule, "remote_group_id")?) {
        (Some(_), Some(_)) => {
            return Err(NetError::bad(
                "SecurityGroupRemoteGroupAndRemoteIpPrefix",
                "Only remote_ip_prefix or remote_group_id may be provided.",
            ));
        }
        (Some(p), None) => RuleRemote::Prefix(p),
        (None, Some(g)) => RuleRemote::Group(g),
        (None, None) => RuleRemote::Any,
    };
    Ok(NewSecurityGroupRule {
        group,
        direction,
        ethertype,
        protocol,
        port_min: port_field(rule, "port_range_min")?,
        port_max: port_field(rule, "port_range_max")?,
        remote,
        description: opt_text(rule, "description", MAX_NET_TEXT)?.unwrap_or_default(),
    })
}

/// `POST /security-group-rules` (201).
pub async fn create_rule(
    State(state): State<ApiState>,
    caller: Principal,
    JsonBody(body): JsonBody<Value>,
) -> NetResult<(StatusCode, Json<Value>)> {
    let project = caller.project()?;
    let rule = body_object(body, "security_group_rule")?;
    own_project(&rule, project)?;
    let new = new_rule(&rule)?;
    let made = blocking(&state, move |store| {
        let rule = store
            .create_security_group_rule(project, new)
            .map_err(group_error)?;
        let default = store
            .security_groups(project)?
            .iter()
            .any(|g| g.default && g.id == rule.group);
        Ok(rule_body(&rule, default))
    })
    .await?;
    groups_changed(&state, project).await;
    Ok((
        StatusCode::CREATED,
        Json(json!({"security_group_rule": made})),
    ))
}

/// `DELETE /security-group-rules/{id}` (204).
pub async fn delete_rule(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> NetResult<StatusCode> {
    let project = caller.project()?;
    let id = path_uuid("SecurityGroupRuleNotFound", "Security group rule", &id)?;
    let status = deleted(&state, move |store| {
        store
            .delete_security_group_rule(project, id)
            .map_err(group_error)
    })
    .await?;
    groups_changed(&state, project).await;
    Ok(status)
}
