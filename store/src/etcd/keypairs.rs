//! Users' key pairs over etcd: [`KeypairStore`] for [`EtcdStore`], one record per key pair at
//! `keypair/<user>/<name>`. A creation reads the user's range, so parallel creations for one
//! user conflict and retry, and never exceed the limit.

use uuid::Uuid;

use super::identity::user_in;
use super::records::KeypairRec;
use super::{EtcdStore, decode_all, duplicate};
use crate::common::{check_keypair, check_keypair_quota, millis, now};
use crate::*;

impl KeypairStore for EtcdStore {
    fn create_keypair(&self, new: NewKeypair, limit: u32) -> Result<Keypair> {
        check_keypair(&new)?;
        let rec = KeypairRec {
            user: new.user,
            name: new.name,
            kind: new.kind.as_str().to_string(),
            public_key: new.public_key,
            fingerprint: new.fingerprint,
            created_ms: millis(now()),
        };
        self.atomically("creating a key pair", |tx| {
            user_in(tx, rec.user)?;
            let keys = tx.keys();
            let existing = tx.range(&keys.keypairs(rec.user))?;
            let key = keys.keypair(rec.user, &rec.name);
            if existing.iter().any(|kv| kv.key == key) {
                return Err(duplicate("key pair", &rec.name));
            }
            check_keypair_quota(existing.len(), limit)?;
            tx.put(&key, &rec)
        })?;
        rec.model()
    }

    fn keypair(&self, user: Uuid, name: &str) -> Result<Keypair> {
        if !Keypair::valid_name(name) {
            return Err(StoreError::not_found("key pair", name));
        }
        self.read(|tx| {
            let key = tx.keys().keypair(user, name);
            tx.get_json::<KeypairRec>(&key)?
                .ok_or_else(|| StoreError::not_found("key pair", name))
        })?
        .model()
    }

    fn keypairs(&self, user: Uuid) -> Result<Vec<Keypair>> {
        let recs: Vec<KeypairRec> =
            self.read(|tx| decode_all(&tx.range(&tx.keys().keypairs(user))?))?;
        let mut all = recs
            .iter()
            .map(KeypairRec::model)
            .collect::<Result<Vec<_>>>()?;
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(all)
    }

    fn delete_keypair(&self, user: Uuid, name: &str) -> Result<()> {
        if !Keypair::valid_name(name) {
            return Err(StoreError::not_found("key pair", name));
        }
        self.atomically("deleting a key pair", |tx| {
            let key = tx.keys().keypair(user, name);
            if tx.get(&key)?.is_none() {
                return Err(StoreError::not_found("key pair", name));
            }
            tx.delete(&key);
            Ok(())
        })
    }
}
