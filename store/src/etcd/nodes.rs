//! The nodes an admin disabled, over etcd: [`NodeStore`] for [`EtcdStore`], a record per node
//! at `disabled/<node>`. Disabling reads the whole range, so parallel ones conflict and retry
//! and never pass the bound.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{EtcdStore, decode_all};
use crate::common::{check_disabled_count, check_disabled_reason, from_millis, millis, now};
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

impl NodeStore for EtcdStore {
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
