//! The nodes an admin disabled, over etcd: [`NodeStore`] for [`EtcdStore`], a record per node
//! at `disabled/<node>`. Disabling reads the whole range, so parallel ones conflict and retry
//! and never pass the bound.

use std::time::SystemTime;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{EtcdStore, decode_all};
use crate::common::{
    check_disabled_count, check_disabled_reason, check_join_token, check_join_token_count,
    check_joined_node, from_millis, millis, now,
};
use crate::*;

/// A disabled node.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct DisabledRec {
    node: Uuid,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    since_ms: i64,
}

impl DisabledRec {
    fn model(&self) -> DisabledNode {
        DisabledNode {
            node: self.node,
            reason: self.reason.clone(),
            since: from_millis(self.since_ms),
        }
    }
}

/// A join token.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct TokenRec {
    id: Uuid,
    secret_hash: String,
    roles: u32,
    created_ms: i64,
    expires_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    used_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    used_by: Option<Uuid>,
}

impl TokenRec {
    fn of(t: &JoinToken) -> TokenRec {
        TokenRec {
            id: t.id,
            secret_hash: STANDARD.encode(t.secret_hash),
            roles: t.roles,
            created_ms: millis(t.created),
            expires_ms: millis(t.expires),
            used_ms: t.used.map(|(at, _)| millis(at)),
            used_by: t.used.map(|(_, by)| by),
        }
    }

    fn model(&self) -> Result<JoinToken> {
        let hash = STANDARD
            .decode(&self.secret_hash)
            .ok()
            .and_then(|h| <[u8; 32]>::try_from(h).ok())
            .ok_or_else(|| StoreError::Backend(format!("join token {}: bad hash", self.id)))?;
        Ok(JoinToken {
            id: self.id,
            secret_hash: hash,
            roles: self.roles,
            created: from_millis(self.created_ms),
            expires: from_millis(self.expires_ms),
            used: self
                .used_ms
                .zip(self.used_by)
                .map(|(at, by)| (from_millis(at), by)),
        })
    }
}

/// A joined node.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct JoinedRec {
    id: Uuid,
    hostname: String,
    roles: u32,
    serial: String,
    not_after_ms: i64,
    joined_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    revoked_ms: Option<i64>,
}

impl JoinedRec {
    fn of(n: &JoinedNode) -> JoinedRec {
        JoinedRec {
            id: n.id,
            hostname: n.hostname.clone(),
            roles: n.roles,
            serial: STANDARD.encode(&n.serial),
            not_after_ms: millis(n.not_after),
            joined_ms: millis(n.joined),
            revoked_ms: n.revoked.map(millis),
        }
    }

    fn model(&self) -> Result<JoinedNode> {
        Ok(JoinedNode {
            id: self.id,
            hostname: self.hostname.clone(),
            roles: self.roles,
            serial: STANDARD
                .decode(&self.serial)
                .map_err(|_| StoreError::Backend(format!("joined node {}: bad serial", self.id)))?,
            not_after: from_millis(self.not_after_ms),
            joined: from_millis(self.joined_ms),
            revoked: self.revoked_ms.map(from_millis),
        })
    }
}

impl NodeStore for EtcdStore {
    fn create_join_token(&self, new: JoinToken) -> Result<JoinToken> {
        let rec = TokenRec::of(&new);
        self.atomically("making a join token", |tx| {
            let keys = tx.keys();
            let all: Vec<TokenRec> = decode_all(&tx.range(&keys.join_tokens())?)?;
            let expired: Vec<Uuid> = all
                .iter()
                .filter(|t| t.expires_ms <= rec.created_ms)
                .map(|t| t.id)
                .collect();
            if all.iter().any(|t| t.id == rec.id) {
                return Err(StoreError::Conflict(format!(
                    "join token {} already exists",
                    rec.id
                )));
            }
            check_join_token_count(all.len() - expired.len())?;
            for id in expired {
                tx.delete(&keys.join_token(id));
            }
            tx.put(&keys.join_token(rec.id), &rec)
        })?;
        rec.model()
    }

    fn join_tokens(&self) -> Result<Vec<JoinToken>> {
        let recs: Vec<TokenRec> =
            self.read(|tx| decode_all(&tx.range(&tx.keys().join_tokens())?))?;
        let mut all = recs
            .iter()
            .map(TokenRec::model)
            .collect::<Result<Vec<_>>>()?;
        all.sort_by_key(|t| (t.expires, t.id));
        Ok(all)
    }

    fn delete_join_token(&self, id: Uuid) -> Result<()> {
        self.atomically("deleting a join token", |tx| {
            let key = tx.keys().join_token(id);
            if tx.get(&key)?.is_none() {
                return Err(StoreError::not_found("join token", id));
            }
            tx.delete(&key);
            Ok(())
        })
    }

    fn redeem_join_token(
        &self,
        id: Uuid,
        secret_hash: &[u8; 32],
        now: SystemTime,
        node: JoinedNode,
    ) -> Result<JoinedNode> {
        let rec = JoinedRec::of(&node);
        self.atomically("using a join token", |tx| {
            let keys = tx.keys();
            let mut token: TokenRec = tx
                .get_json(&keys.join_token(id))?
                .ok_or_else(|| StoreError::not_found("join token", id))?;
            check_join_token(&token.model()?, secret_hash, now)?;
            let nodes = tx.range(&keys.joined_nodes())?;
            let key = keys.joined_node(node.id);
            if nodes.iter().any(|kv| kv.key == key) {
                return Err(StoreError::Conflict(format!(
                    "node {} joined already",
                    node.id
                )));
            }
            check_joined_node(&node, nodes.len())?;
            token.used_ms = Some(millis(now));
            token.used_by = Some(node.id);
            tx.put(&keys.join_token(id), &token)?;
            tx.put(&key, &rec)
        })?;
        rec.model()
    }

    fn joined_nodes(&self) -> Result<Vec<JoinedNode>> {
        let recs: Vec<JoinedRec> =
            self.read(|tx| decode_all(&tx.range(&tx.keys().joined_nodes())?))?;
        let mut all = recs
            .iter()
            .map(JoinedRec::model)
            .collect::<Result<Vec<_>>>()?;
        all.sort_by_key(|n| n.id);
        Ok(all)
    }

    fn revoke_joined_node(&self, id: Uuid, at: SystemTime) -> Result<JoinedNode> {
        let rec = self.atomically("revoking a joined node", |tx| {
            let key = tx.keys().joined_node(id);
            let mut rec: JoinedRec = tx
                .get_json(&key)?
                .ok_or_else(|| StoreError::not_found("joined node", id))?;
            if rec.revoked_ms.is_none() {
                rec.revoked_ms = Some(millis(at));
                tx.put(&key, &rec)?;
            }
            Ok(rec)
        })?;
        rec.model()
    }

    fn disable_node(&self, node: Uuid, reason: Option<String>) -> Result<DisabledNode> {
        check_disabled_reason(&reason)?;
        let rec = DisabledRec {
            node,
            reason,
            since_ms: millis(now()),
        };
        self.atomically("disabling a node", |tx| {
            let keys = tx.keys();
            let all = tx.range(&keys.disabled_nodes())?;
            let key = keys.disabled_node(node);
            if !all.iter().any(|kv| kv.key == key) {
                check_disabled_count(all.len())?;
            }
            tx.put(&key, &rec)
        })?;
        Ok(rec.model())
    }

    fn enable_node(&self, node: Uuid) -> Result<bool> {
        self.atomically("enabling a node", |tx| {
            let key = tx.keys().disabled_node(node);
            if tx.get(&key)?.is_none() {
                return Ok(false);
            }
            tx.delete(&key);
            Ok(true)
        })
    }

    fn disabled_nodes(&self) -> Result<Vec<DisabledNode>> {
        let recs: Vec<DisabledRec> =
            self.read(|tx| decode_all(&tx.range(&tx.keys().disabled_nodes())?))?;
        let mut all: Vec<DisabledNode> = recs.iter().map(DisabledRec::model).collect();
        all.sort_by_key(|d| d.node);
        Ok(all)
    }
}
