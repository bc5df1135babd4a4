//! Hosts joining the cluster (`crate::join`, `docs/deploy.md`): join tokens (admin), the join
//! itself (no login: the token is the credential), the joined hosts and their revocation
//! (admin).

use std::time::{Duration, SystemTime};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use ssntp::Role;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::api::clock::rfc3339;
use crate::api::extract::{JsonBody, PathParams, path_id};
use crate::api::{ApiError, ApiState, Principal};
use crate::join::{JOINABLE, JoinIssuer, MAX_TOKEN_TTL, parse_token};
use store::{JoinToken, JoinedNode, StoreError};

/// The issuer, or why there is none.
fn issuer(state: &ApiState) -> Result<std::sync::Arc<JoinIssuer>, ApiError> {
    state.config.joins.clone().ok_or_else(|| {
        ApiError::Conflict(
            "this controller holds no CA key (--ca-key): it cannot let hosts join".into(),
        )
    })
}

/// A join token to make.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = JoinTokenCreate)]
pub struct NewJoinToken {
    /// The roles of the joining host's certificate, comma-separated: agent, netagent or both;
    /// or controller (a second controller, when the store is etcd).
    roles: String,
    /// How long the token is accepted: `90s`, `10m`, `1h`, `7d` (default 1h, at most 7 days).
    #[serde(default)]
    ttl: Option<String>,
}

/// A join token as listed (its secret is shown once, when it is made).
#[derive(Debug, Serialize, ToSchema)]
pub struct JoinTokenView {
    id: Uuid,
    roles: String,
    #[schema(format = DateTime)]
    created: String,
    #[schema(format = DateTime)]
    expires: String,
    /// When it was used (a token is used once).
    #[schema(format = DateTime)]
    used: Option<String>,
    /// The node that used it.
    used_by: Option<Uuid>,
}

/// A new join token: `token` is shown this once.
#[derive(Debug, Serialize, ToSchema)]
pub struct JoinTokenMade {
    #[serde(flatten)]
    view: JoinTokenView,
    /// `<id>.<secret>.<ca>`, for `cumulo join --token`.
    token: String,
}

/// `{"join_tokens": [...]}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct JoinTokens {
    join_tokens: Vec<JoinTokenView>,
}

fn roles_text(bits: u32) -> String {
    Role::from_bits_truncate(bits).to_string()
}

fn token_view(t: &JoinToken) -> JoinTokenView {
    JoinTokenView {
        id: t.id,
        roles: roles_text(t.roles),
        created: rfc3339(t.created),
        expires: rfc3339(t.expires),
        used: t.used.map(|(at, _)| rfc3339(at)),
        used_by: t.used.map(|(_, by)| by),
    }
}

/// Reads a TTL: a whole number and a unit (s, m, h, d).
fn parse_ttl(text: &str) -> Result<Duration, ApiError> {
    let bad = || {
        ApiError::BadRequest(format!(
            "ttl {text:?}: a whole number and s, m, h or d (90s, 10m, 1h, 7d)"
        ))
    };
    let text = text.trim();
    let (n, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?);
    let n: u64 = n.parse().map_err(|_| bad())?;
    let secs = match unit {
        "s" => n,
        "m" => n.checked_mul(60).ok_or_else(bad)?,
        "h" => n.checked_mul(3600).ok_or_else(bad)?,
        "d" => n.checked_mul(86_400).ok_or_else(bad)?,
        _ => return Err(bad()),
    };
    let ttl = Duration::from_secs(secs);
    if ttl.is_zero() || ttl > MAX_TOKEN_TTL {
        return Err(ApiError::BadRequest(format!("ttl {text:?}: from 1s to 7d")));
    }
    Ok(ttl)
}

#[utoipa::path(
    post,
    path = "/cumulo/v1/join-tokens",
    operation_id = "create_a_join_token",
    summary = "Create a join token",
    tag = "nodes",
    request_body = NewJoinToken,
    responses((status = 201, description = "success", body = JoinTokenMade)),
)]
pub async fn create_token(
    State(state): State<ApiState>,
    caller: Principal,
    JsonBody(body): JsonBody<NewJoinToken>,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let issuer = issuer(&state)?;
    let roles: Role = body
        .roles
        .parse()
        .map_err(|e| ApiError::BadRequest(format!("roles: {e}")))?;
    if roles == Role::CONTROLLER {
        // A second controller shares the cluster's state: only through etcd.
        if issuer.shared_store().is_none() {
            return Err(ApiError::Conflict(
                "a controller joins a cluster whose store is etcd (shared by its controllers); \
                 this controller's store is its own SQLite file"
                    .into(),
            ));
        }
    } else if roles.is_empty() || !JOINABLE.contains(roles) {
        return Err(ApiError::BadRequest(format!(
            "roles: a joining host is agent, netagent or both, or a controller, not {roles}"
        )));
    }
    let ttl = parse_ttl(body.ttl.as_deref().unwrap_or("1h"))?;
    let (token, text) = issuer
        .new_token(roles, ttl, SystemTime::now())
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    let token = state
        .store(move |s| Ok(s.create_join_token(token)?))
        .await?;
    let made = JoinTokenMade {
        view: token_view(&token),
        token: text,
    };
    Ok((StatusCode::CREATED, Json(made)).into_response())
}

#[utoipa::path(
    get,
    path = "/cumulo/v1/join-tokens",
    operation_id = "list_join_tokens",
    summary = "List join tokens",
    tag = "nodes",
    responses((status = 200, description = "success", body = JoinTokens)),
)]
pub async fn tokens(
    State(state): State<ApiState>,
    caller: Principal,
) -> Result<Json<JoinTokens>, ApiError> {
    caller.require_admin()?;
    let all = state.store(|s| Ok(s.join_tokens()?)).await?;
    Ok(Json(JoinTokens {
        join_tokens: all.iter().map(token_view).collect(),
    }))
}

#[utoipa::path(
    delete,
    path = "/cumulo/v1/join-tokens/{id}",
    operation_id = "delete_a_join_token",
    summary = "Delete a join token",
    tag = "nodes",
    params(("id" = Uuid, Path, description = "the object's id")),
    responses((status = 204, description = "success (no body)")),
)]
pub async fn delete_token(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<StatusCode, ApiError> {
    caller.require_admin()?;
    let id = path_id("join token", &id)?;
    state.store(move |s| Ok(s.delete_join_token(id)?)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A host's join.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JoinRequest {
    /// The join token.
    token: String,
    /// A PKCS#10 certificate signing request (PEM) for the key the host made: only its public
    /// key is used.
    csr: String,
    /// The host's name (a DNS name): its certificate names it.
    hostname: String,
    /// What the host joins as: `agent` (the default; a token for agent, netagent or both) or
    /// `controller` (a controller token). A token of the other kind is refused (400) and stays
    /// unused.
    #[serde(default)]
    role: Option<String>,
}

/// What a joined host is given.
#[derive(Debug, Serialize, ToSchema)]
pub struct Joined {
    /// Its UUID (its certificate binds it).
    node_id: Uuid,
    /// Its certificate (PEM), followed by the CA's.
    certificate: String,
    /// The cluster CA's certificate (PEM).
    ca: String,
    /// The schedulers (`host:port`) as the controller reaches them.
    schedulers: Vec<String>,
    /// The controller's node image endpoint (`host:port`, where it listens), where a node
    /// fetches uploaded images; `null` when it is off.
    #[schema(required)]
    image_server: Option<String>,
    /// For a controller: the cluster's shared store (`etcd://...`, no credentials: the host
    /// brings its own etcd client certificate); `null` for a node.
    #[schema(required)]
    store: Option<String>,
    /// For a controller: the cluster's tenant network mode (`none` or `cnci`); `null` for a
    /// node.
    #[schema(required)]
    tenant_network: Option<String>,
}

/// The cluster CA, for a joining host to check against its token before it sends it.
#[derive(Debug, Serialize, ToSchema)]
pub struct JoinCa {
    /// The CA's certificate (PEM).
    ca: String,
}

#[utoipa::path(
    get,
    path = "/cumulo/v1/join/ca",
    operation_id = "the_cluster_ca_for_joining_hosts",
    summary = "The cluster CA, for joining hosts",
    tag = "nodes",
    responses((status = 200, description = "success", body = JoinCa)),
    security(()),
)]
pub async fn ca(State(state): State<ApiState>) -> Result<Json<JoinCa>, ApiError> {
    let issuer = issuer(&state)?;
    Ok(Json(JoinCa {
        ca: issuer.ca_pem().to_string(),
    }))
}

/// Every token problem is the same 401 to the caller (the log says which).
fn refused(why: &str) -> ApiError {
    tracing::warn!("join refused: {why}");
    ApiError::Unauthorized("the join token is not valid (unknown, used, expired or wrong)".into())
}

#[utoipa::path(
    post,
    path = "/cumulo/v1/join",
    operation_id = "join_a_host",
    summary = "Join a host with a join token",
    tag = "nodes",
    request_body = JoinRequest,
    responses(
        (status = 201, description = "success", body = Joined),
        (status = 401, description = "the join token is not valid"),
    ),
    security(()),
)]
pub async fn join(
    State(state): State<ApiState>,
    JsonBody(body): JsonBody<JoinRequest>,
) -> Result<Response, ApiError> {
    let issuer = issuer(&state)?;
    let parts = parse_token(&body.token).map_err(|e| refused(&e.to_string()))?;
    issuer
        .check_ca(&parts)
        .map_err(|e| refused(&e.to_string()))?;
    let now = SystemTime::now();
    let node_id = Uuid::new_v4();
    let (token, issuer2) = (parts.clone(), issuer.clone());
    let (cert, node) = state
        .store(move |s| {
            // The token's roles, before the certificate is made; the use is one transaction.
            let known = s
                .join_tokens()?
                .into_iter()
                .find(|t| t.id == token.id)
                .ok_or_else(|| refused("unknown token"))?;
            // The secret, before anything is made for the caller (the store checks all of it
            // again when the token is used, in one transaction).
            let same = known
                .secret_hash
                .iter()
                .zip(&token.secret_hash)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0;
            if !same || known.used.is_some() || now >= known.expires {
                return Err(refused("wrong secret, used or expired"));
            }
            let roles = Role::from_bits_truncate(known.roles);
            // The kind of host the caller means to set up, before anything is made.
            let controller = roles.contains(Role::CONTROLLER);
            match (body.role.as_deref().unwrap_or("agent"), controller) {
                ("agent", false) | ("controller", true) => {}
                (asked @ ("agent" | "controller"), _) => {
                    return Err(ApiError::BadRequest(format!(
                        "this token lets a host join as {}, not as {asked}: nothing was done",
                        if controller { "controller" } else { "agent" }
                    )));
                }
                (other, _) => {
                    return Err(ApiError::BadRequest(format!(
                        "role: agent or controller, not {other:?}"
                    )));
                }
            }
            let (cert, node) = issuer2
                .issue(&body.csr, &body.hostname, roles, node_id, now)
                .map_err(|e| ApiError::BadRequest(e.to_string()))?;
            match s.redeem_join_token(token.id, &token.secret_hash, now, node) {
                Ok(node) => Ok((cert, node)),
                Err(StoreError::NotFound { .. }) => Err(refused("unknown token")),
                Err(StoreError::Invalid(why) | StoreError::Conflict(why)) => Err(refused(&why)),
                Err(e) => Err(e.into()),
            }
        })
        .await?;
    tracing::info!(node = %node.id, hostname = %node.hostname, roles = %roles_text(node.roles), "a host joined");
    let controller = Role::from_bits_truncate(node.roles).contains(Role::CONTROLLER);
    let joined = Joined {
        node_id: node.id,
        certificate: cert,
        ca: issuer.ca_pem().to_string(),
        schedulers: issuer.schedulers().to_vec(),
        image_server: issuer.image_server().map(str::to_string),
        store: controller
            .then(|| issuer.shared_store().map(str::to_string))
            .flatten(),
        tenant_network: controller.then(|| issuer.tenant_network().to_string()),
    };
    Ok((StatusCode::CREATED, Json(joined)).into_response())
}

/// A joined host.
#[derive(Debug, Serialize, ToSchema)]
pub struct JoinedNodeView {
    id: Uuid,
    hostname: String,
    roles: String,
    /// Its certificate's serial number (hex).
    serial: String,
    #[schema(format = DateTime)]
    joined: String,
    #[schema(format = DateTime)]
    not_after: String,
    /// When its certificate was revoked.
    #[schema(format = DateTime)]
    revoked: Option<String>,
}

/// `{"joined_nodes": [...]}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct JoinedNodes {
    joined_nodes: Vec<JoinedNodeView>,
}

fn joined_view(n: &JoinedNode) -> JoinedNodeView {
    JoinedNodeView {
        id: n.id,
        hostname: n.hostname.clone(),
        roles: roles_text(n.roles),
        serial: hex::encode(&n.serial),
        joined: rfc3339(n.joined),
        not_after: rfc3339(n.not_after),
        revoked: n.revoked.map(rfc3339),
    }
}

#[utoipa::path(
    get,
    path = "/cumulo/v1/joined-nodes",
    operation_id = "list_joined_hosts",
    summary = "List the hosts that joined with a token",
    tag = "nodes",
    responses((status = 200, description = "success", body = JoinedNodes)),
)]
pub async fn joined_nodes(
    State(state): State<ApiState>,
    caller: Principal,
) -> Result<Json<JoinedNodes>, ApiError> {
    caller.require_admin()?;
    let all = state.store(|s| Ok(s.joined_nodes()?)).await?;
    Ok(Json(JoinedNodes {
        joined_nodes: all.iter().map(joined_view).collect(),
    }))
}

#[utoipa::path(
    post,
    path = "/cumulo/v1/nodes/{id}/revoke",
    operation_id = "revoke_a_joined_hosts_certificate",
    summary = "Revoke a joined host's certificate",
    tag = "nodes",
    params(("id" = Uuid, Path, description = "the object's id")),
    responses((status = 200, description = "success", body = JoinedNodeView)),
)]
pub async fn revoke(
    State(state): State<ApiState>,
    caller: Principal,
    PathParams(id): PathParams<String>,
) -> Result<Json<JoinedNodeView>, ApiError> {
    caller.require_admin()?;
    let id = path_id("node", &id)?;
    let issuer = issuer(&state)?;
    let node = state
        .store(move |s| {
            let now = SystemTime::now();
            let node = match s.revoke_joined_node(id, now) {
                Err(StoreError::NotFound { .. }) => {
                    return Err(StoreError::not_found("joined node", id).into());
                }
                other => other?,
            };
            issuer
                .write_crl(&s.joined_nodes()?, now)
                .map_err(|e| ApiError::Internal(e.to_string()))?;
            Ok(node)
        })
        .await?;
    tracing::info!(node = %node.id, hostname = %node.hostname, "a joined host's certificate is revoked");
    Ok(Json(joined_view(&node)))
}
