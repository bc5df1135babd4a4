//! The key layout under the store's prefix. Every key is text; identifiers are hyphenated UUIDs,
//! sequence numbers and subnet bases fixed-width lowercase hex so that key order is number order.
//!
//! ```text
//! <prefix>schema                                 {"version": n}
//! <prefix>tenant/<id>                            tenant
//! <prefix>net/<tenant>                           the tenant's usage, and its subnets with a free
//!                                                address (with their address bitmaps)
//! <prefix>fullnet/<tenant>/<base:08x>            one of its subnets with no free address (with its
//!                                                bitmap): kept out of `net/<tenant>`, which every
//!                                                creation rewrites
//! <prefix>block/<base:08x>                       a carved subnet (global: no two overlap)
//! <prefix>name/{tenant,user,flavor}/<name>       unique-name index -> id
//! <prefix>user/<id>                              user
//! <prefix>keypair/<user>/<name>                  a user's key pair (names are letters, digits,
//!                                                `_`, `-` and space: never a `/`)
//! <prefix>role/user/<user>/<tenant>/<role>       role assignment, by user
//! <prefix>role/tenant/<tenant>/<user>/<role>     the same, by tenant
//! <prefix>appcred/<user>/<id>                   a user's application credential
//! <prefix>appcredid/<id>                         its user (to find a credential by id alone)
//! <prefix>appcredtenant/<tenant>/<id>            its user, by project (they go with it)
//! <prefix>flavor/<id> | image/<id> | workload/<id>
//! <prefix>faccess/<flavor>/<tenant>             the tenant is on the (private) flavor's access
//!                                                list
//! <prefix>imember/<image>/<tenant>              the tenant is a member of the (shared) image
//! <prefix>ref/{flavor,image}/<id>/<workload>     "this workload uses it"
//! <prefix>ref/workload/<id>/<instance>           "this instance uses it"
//! <prefix>instance/<id>                          instance
//! <prefix>order/<tenant>/<seq:016x>              instance id, in the tenant's creation order
//! <prefix>bystate/<state>/<instance>             "this instance is in this state" (counted)
//! <prefix>stateindex                             every instance is in `bystate/` (schema 3,
//!                                                made so; not in a prefix raised from 2)
//! <prefix>created/<stamp:016x>/<instance>         "this instance was made then": every
//!                                                tenant's instances in creation order
//! <prefix>createdindex                           every instance is in `created/` (schema 4,
//!                                                made so; not in a prefix raised from 3)
//! <prefix>node/<node>/<instance>                 "this instance is on this node": its brief
//!                                                (schema 3; empty when schema 2 wrote it)
//! <prefix>cnci/<id>                              CNCI
//! <prefix>volume/<tenant>/<id>                   a tenant's volume
//! <prefix>volid/<id>                             its tenant (to find a volume by id alone)
//! <prefix>volquota/<tenant>                      the tenant's own volume quota (none: the
//!                                                caller's defaults)
//! <prefix>disabled/<node>                       a node an admin disabled: its reason and time
//! <prefix>sgroup/<tenant>/<id>                   a tenant's server group, with its members
//! <prefix>sgroupid/<id>                          its tenant (to find a group by id alone)
//! <prefix>event/<seq:016x>                       event
//! <prefix>counter/event                          the last event sequence number
//! <prefix>action/<instance>/<seq:016x>          instance action, in the instance's order
//! <prefix>gone/<seq:016x>                        instance id: its record went while it had
//!                                                actions (oldest first)
//! <prefix>counter/gone                           the last gone-instance sequence number
//! <prefix>rhost/<id>                            off-host host
//! <prefix>name/rhost/<name>                      its unique-name index -> id
//! <prefix>op/<id>                                operation (its mod revision while claimed is
//!                                                the claim's fencing token)
//! <prefix>opq/<seq:016x>                         `<op> <instance> <host>` (or `<op>`), while unfinished, in order
//! <prefix>lease/<op>                             the claim's owner and lease end, while claimed
//! <prefix>ophost/<host>/<op>                     "this unfinished operation is for this host"
//! <prefix>counter/op                             the last operation sequence number
//! <prefix>resv/<pool>/<key>                     reservation -> owner
//! <prefix>resvowner/<owner>/<pool>/<key>         the same, by owner (crash cleanup)
//! <prefix>revoked/<expires:016x>/<token>         a revoked token until it expires (its expiry
//!                                                in Unix milliseconds first, so that pruning
//!                                                is one range delete)
//! ```

use std::fmt::Display;

use uuid::Uuid;

/// The keys of one store, all under one prefix (which ends with `/`).
#[derive(Debug, Clone)]
pub(super) struct Keys {
    root: String,
}

impl Keys {
    /// The layout under `prefix` (a `/` is added if it does not end with one).
    pub(super) fn new(prefix: &str) -> Keys {
        let mut root = prefix.to_string();
        if !root.ends_with('/') {
            root.push('/');
        }
        Keys { root }
    }

    /// The prefix every key starts with.
    pub(super) fn root(&self) -> &str {
        &self.root
    }

    fn key(&self, parts: &[&dyn Display]) -> String {
        let mut key = self.root.clone();
        for (n, part) in parts.iter().enumerate() {
            if n > 0 {
                key.push('/');
            }
            key.push_str(&part.to_string());
        }
        key
    }

    pub(super) fn schema(&self) -> String {
        self.key(&[&"schema"])
    }
    pub(super) fn tenant(&self, id: Uuid) -> String {
        self.key(&[&"tenant", &id])
    }
    pub(super) fn tenants(&self) -> String {
        self.key(&[&"tenant", &""])
    }
    pub(super) fn net(&self, tenant: Uuid) -> String {
        self.key(&[&"net", &tenant])
    }
    /// A full subnet of `tenant` (its base address).
    pub(super) fn full_subnet(&self, tenant: Uuid, base: u32) -> String {
        self.key(&[&"fullnet", &tenant, &format_args!("{base:08x}")])
    }
    /// Every full subnet of `tenant`, in base order.
    pub(super) fn full_subnets(&self, tenant: Uuid) -> String {
        self.key(&[&"fullnet", &tenant, &""])
    }
    pub(super) fn block(&self, base: u32) -> String {
        self.key(&[&"block", &format_args!("{base:08x}")])
    }
    pub(super) fn blocks(&self) -> String {
        self.key(&[&"block", &""])
    }
    /// The unique-name index of `kind` (`tenant`, `user`, `flavor`).
    pub(super) fn name(&self, kind: &str, name: &str) -> String {
        self.key(&[&"name", &kind, &name])
    }
    pub(super) fn user(&self, id: Uuid) -> String {
        self.key(&[&"user", &id])
    }
    pub(super) fn users(&self) -> String {
        self.key(&[&"user", &""])
    }
    /// The key pair `name` of `user`.
    pub(super) fn keypair(&self, user: Uuid, name: &str) -> String {
        self.key(&[&"keypair", &user, &name])
    }
    /// Every key pair of `user`.
    pub(super) fn keypairs(&self, user: Uuid) -> String {
        self.key(&[&"keypair", &user, &""])
    }
    /// The tenant's networking document.
    pub(super) fn net_doc(&self, tenant: Uuid) -> String {
        self.key(&[&"netdoc", &tenant])
    }
    /// The security groups set on the port of `instance`.
    pub(super) fn port_groups(&self, tenant: Uuid, instance: Uuid) -> String {
        self.key(&[&"portsg", &tenant, &instance])
    }
    /// Every port of the tenant with groups set.
    pub(super) fn ports_groups(&self, tenant: Uuid) -> String {
        self.key(&[&"portsg", &tenant, &""])
    }
    /// A floating address in use.
    pub(super) fn floating_address(&self, address: u32) -> String {
        self.key(&[&"fipaddr", &format_args!("{address:08x}")])
    }
    /// Every floating address in use.
    pub(super) fn floating_addresses(&self) -> String {
        self.key(&[&"fipaddr", &""])
    }
    /// The application credential `id` of `user`.
    pub(super) fn app_cred(&self, user: Uuid, id: Uuid) -> String {
        self.key(&[&"appcred", &user, &id])
    }
    /// Every application credential of `user`.
    pub(super) fn app_creds(&self, user: Uuid) -> String {
        self.key(&[&"appcred", &user, &""])
    }
    /// The user of the application credential `id`.
    pub(super) fn app_cred_user(&self, id: Uuid) -> String {
        self.key(&[&"appcredid", &id])
    }
    /// The application credential `id` in `tenant` (its value: the credential's user).
    pub(super) fn tenant_app_cred(&self, tenant: Uuid, id: Uuid) -> String {
        self.key(&[&"appcredtenant", &tenant, &id])
    }
    /// Every application credential in `tenant`.
    pub(super) fn tenant_app_creds(&self, tenant: Uuid) -> String {
        self.key(&[&"appcredtenant", &tenant, &""])
    }
    pub(super) fn role_by_user(&self, user: Uuid, tenant: Uuid, role: &str) -> String {
        self.key(&[&"role", &"user", &user, &tenant, &role])
    }
    pub(super) fn roles_of_user(&self, user: Uuid) -> String {
        self.key(&[&"role", &"user", &user, &""])
    }
    pub(super) fn role_by_tenant(&self, tenant: Uuid, user: Uuid, role: &str) -> String {
        self.key(&[&"role", &"tenant", &tenant, &user, &role])
    }
    pub(super) fn roles_in_tenant(&self, tenant: Uuid) -> String {
        self.key(&[&"role", &"tenant", &tenant, &""])
    }
    pub(super) fn flavor(&self, id: Uuid) -> String {
        self.key(&[&"flavor", &id])
    }
    pub(super) fn flavors(&self) -> String {
        self.key(&[&"flavor", &""])
    }
    /// `tenant` on the access list of `flavor`.
    pub(super) fn flavor_access(&self, flavor: Uuid, tenant: Uuid) -> String {
        self.key(&[&"faccess", &flavor, &tenant])
    }
    /// The access list of `flavor`.
    pub(super) fn flavor_access_list(&self, flavor: Uuid) -> String {
        self.key(&[&"faccess", &flavor, &""])
    }
    /// The access lists of every flavor.
    pub(super) fn all_flavor_access(&self) -> String {
        self.key(&[&"faccess", &""])
    }
    pub(super) fn image(&self, id: Uuid) -> String {
        self.key(&[&"image", &id])
    }
    pub(super) fn images(&self) -> String {
        self.key(&[&"image", &""])
    }
    /// The membership of `tenant` in `image`.
    pub(super) fn image_member(&self, image: Uuid, tenant: Uuid) -> String {
        self.key(&[&"imember", &image, &tenant])
    }
    /// Every member of `image`.
    pub(super) fn image_members(&self, image: Uuid) -> String {
        self.key(&[&"imember", &image, &""])
    }
    /// Every member of every image.
    pub(super) fn all_image_members(&self) -> String {
        self.key(&[&"imember", &""])
    }
    pub(super) fn workload(&self, id: Uuid) -> String {
        self.key(&[&"workload", &id])
    }
    pub(super) fn workloads(&self) -> String {
        self.key(&[&"workload", &""])
    }
    /// "`user` (a workload or an instance) refers to `kind` `id`".
    pub(super) fn reference(&self, kind: &str, id: Uuid, user: Uuid) -> String {
        self.key(&[&"ref", &kind, &id, &user])
    }
    /// Every reference to `kind` `id`.
    pub(super) fn references(&self, kind: &str, id: Uuid) -> String {
        self.key(&[&"ref", &kind, &id, &""])
    }
    pub(super) fn instance(&self, id: Uuid) -> String {
        self.key(&[&"instance", &id])
    }
    pub(super) fn instances(&self) -> String {
        self.key(&[&"instance", &""])
    }
    pub(super) fn order(&self, tenant: Uuid, seq: u64) -> String {
        self.key(&[&"order", &tenant, &format_args!("{seq:016x}")])
    }
    pub(super) fn orders(&self, tenant: Uuid) -> String {
        self.key(&[&"order", &tenant, &""])
    }
    pub(super) fn on_node(&self, node: Uuid, instance: Uuid) -> String {
        self.key(&[&"node", &node, &instance])
    }
    pub(super) fn on_nodes(&self, node: Uuid) -> String {
        self.key(&[&"node", &node, &""])
    }
    /// The volume `id` of `tenant`.
    pub(super) fn volume(&self, tenant: Uuid, id: Uuid) -> String {
        self.key(&[&"volume", &tenant, &id])
    }
    /// Every volume of `tenant`.
    pub(super) fn tenant_volumes(&self, tenant: Uuid) -> String {
        self.key(&[&"volume", &tenant, &""])
    }
    /// Every volume.
    pub(super) fn volumes(&self) -> String {
        self.key(&[&"volume", &""])
    }
    /// The tenant of volume `id`.
    pub(super) fn volume_owner(&self, id: Uuid) -> String {
        self.key(&[&"volid", &id])
    }
    /// Server group `id` of `tenant`.
    pub(super) fn server_group(&self, tenant: Uuid, id: Uuid) -> String {
        self.key(&[&"sgroup", &tenant, &id])
    }
    /// Every server group of `tenant`.
    pub(super) fn tenant_server_groups(&self, tenant: Uuid) -> String {
        self.key(&[&"sgroup", &tenant, &""])
    }
    /// Every server group.
    pub(super) fn server_groups(&self) -> String {
        self.key(&[&"sgroup", &""])
    }
    /// The tenant of server group `id`.
    pub(super) fn server_group_owner(&self, id: Uuid) -> String {
        self.key(&[&"sgroupid", &id])
    }
    /// Node `node`'s disabled record.
    pub(super) fn disabled_node(&self, node: Uuid) -> String {
        self.key(&[&"disabled", &node])
    }
    /// A join token's record.
    pub(super) fn join_token(&self, id: Uuid) -> String {
        self.key(&[&"join-token", &id])
    }
    /// Every join token's record.
    pub(super) fn join_tokens(&self) -> String {
        self.key(&[&"join-token", &""])
    }
    /// A joined node's record.
    pub(super) fn joined_node(&self, id: Uuid) -> String {
        self.key(&[&"joined", &id])
    }
    /// Every joined node's record.
    pub(super) fn joined_nodes(&self) -> String {
        self.key(&[&"joined", &""])
    }
    /// Every disabled node's record.
    pub(super) fn disabled_nodes(&self) -> String {
        self.key(&[&"disabled", &""])
    }
    /// The own volume quota of `tenant`.
    pub(super) fn volume_quota(&self, tenant: Uuid) -> String {
        self.key(&[&"volquota", &tenant])
    }
    pub(super) fn cnci(&self, id: Uuid) -> String {
        self.key(&[&"cnci", &id])
    }
    pub(super) fn cncis(&self) -> String {
        self.key(&[&"cnci", &""])
    }
    pub(super) fn event(&self, seq: u64) -> String {
        self.key(&[&"event", &format_args!("{seq:016x}")])
    }
    pub(super) fn events(&self) -> String {
        self.key(&[&"event", &""])
    }
    pub(super) fn event_counter(&self) -> String {
        self.key(&[&"counter", &"event"])
    }
    pub(super) fn action(&self, instance: Uuid, seq: u64) -> String {
        self.key(&[&"action", &instance, &format_args!("{seq:016x}")])
    }
    pub(super) fn actions(&self, instance: Uuid) -> String {
        self.key(&[&"action", &instance, &""])
    }
    pub(super) fn gone(&self, seq: u64) -> String {
        self.key(&[&"gone", &format_args!("{seq:016x}")])
    }
    pub(super) fn gone_counter(&self) -> String {
        self.key(&[&"counter", &"gone"])
    }
    /// Instance `id` in the state named `state`: the state index, which counts them.
    pub(super) fn in_state(&self, state: &str, id: Uuid) -> String {
        self.key(&[&"bystate", &state, &id])
    }
    /// The instances in the state named `state`.
    pub(super) fn in_states(&self, state: &str) -> String {
        self.key(&[&"bystate", &state, &""])
    }
    /// Present when every instance has its key in the state index: the prefix was made by code
    /// that writes it (one raised from schema 2 has instances without).
    pub(super) fn state_index(&self) -> String {
        self.key(&[&"stateindex"])
    }
    /// Instance `id` in the creation index, at its creation stamp.
    pub(super) fn created(&self, stamp: u64, id: Uuid) -> String {
        self.key(&[&"created", &format_args!("{stamp:016x}"), &id])
    }
    /// Every instance, in creation order.
    pub(super) fn creations(&self) -> String {
        self.key(&[&"created", &""])
    }
    /// Present when every instance has its key in the creation index: the prefix was made by
    /// code that writes it (one raised from schema 3 has instances without).
    pub(super) fn created_index(&self) -> String {
        self.key(&[&"createdindex"])
    }
    pub(super) fn remote_host(&self, id: Uuid) -> String {
        self.key(&[&"rhost", &id])
    }
    pub(super) fn remote_hosts(&self) -> String {
        self.key(&[&"rhost", &""])
    }
    pub(super) fn operation(&self, id: Uuid) -> String {
        self.key(&[&"op", &id])
    }
    pub(super) fn operations(&self) -> String {
        self.key(&[&"op", &""])
    }
    pub(super) fn queued(&self, seq: u64) -> String {
        self.key(&[&"opq", &format_args!("{seq:016x}")])
    }
    pub(super) fn queue(&self) -> String {
        self.key(&[&"opq", &""])
    }
    pub(super) fn creds(&self, host: Uuid) -> String {
        self.key(&[&"creds", &host])
    }
    pub(super) fn lease(&self, op: Uuid) -> String {
        self.key(&[&"lease", &op])
    }
    pub(super) fn leases(&self) -> String {
        self.key(&[&"lease", &""])
    }
    pub(super) fn pending_on(&self, host: Uuid, op: Uuid) -> String {
        self.key(&[&"ophost", &host, &op])
    }
    pub(super) fn pending_on_host(&self, host: Uuid) -> String {
        self.key(&[&"ophost", &host, &""])
    }
    pub(super) fn op_counter(&self) -> String {
        self.key(&[&"counter", &"op"])
    }
    pub(super) fn reservation(&self, pool: &str, key: &str) -> String {
        self.key(&[&"resv", &pool, &key])
    }
    pub(super) fn reservations(&self, pool: &str) -> String {
        self.key(&[&"resv", &pool, &""])
    }
    pub(super) fn reserved_by(&self, owner: &str, pool: &str, key: &str) -> String {
        self.key(&[&"resvowner", &owner, &pool, &key])
    }
    pub(super) fn all_reserved_by(&self, owner: &str) -> String {
        self.key(&[&"resvowner", &owner, &""])
    }
    /// The revocation entry of token `id`, which expires at `expires_ms`.
    pub(super) fn revoked_token(&self, expires_ms: u64, id: &str) -> String {
        self.key(&[&"revoked", &format_args!("{expires_ms:016x}"), &id])
    }
    /// Every revocation entry.
    pub(super) fn revoked_tokens(&self) -> String {
        self.key(&[&"revoked", &""])
    }
    /// The first key after the entries of tokens expired before `now_ms`.
    pub(super) fn revoked_before(&self, now_ms: u64) -> String {
        self.key(&[&"revoked", &format_args!("{now_ms:016x}")])
    }
}

/// The first key after every key that starts with `prefix` (etcd's range end for a prefix).
pub(super) fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte was 0xff: the range runs to the end of the key space.
    vec![0]
}

/// The text after `prefix` in `key`, if `key` starts with it.
pub(super) fn suffix<'k>(key: &'k str, prefix: &str) -> Option<&'k str> {
    key.strip_prefix(prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sit_under_the_prefix_in_number_order() {
        let keys = Keys::new("/cumulo");
        assert_eq!(keys.root(), "/cumulo/");
        assert_eq!(keys.schema(), "/cumulo/schema");
        assert!(keys.event(9) < keys.event(10));
        assert!(keys.block(0xac10_ff00) < keys.block(0xac11_0000));
        let t = Uuid::nil();
        assert_eq!(
            keys.order(t, 255),
            format!("/cumulo/order/{t}/00000000000000ff")
        );
        assert!(keys.order(t, 1).starts_with(&keys.orders(t)));
        assert_eq!(keys.name("user", "a/b"), "/cumulo/name/user/a/b");
        let v = Uuid::max();
        assert_eq!(keys.volume(t, v), format!("/cumulo/volume/{t}/{v}"));
        assert!(keys.volume(t, v).starts_with(&keys.tenant_volumes(t)));
        assert!(keys.tenant_volumes(t).starts_with(&keys.volumes()));
        assert!(!keys.volume_owner(v).starts_with(&keys.volumes()));
        assert_eq!(keys.volume_quota(t), format!("/cumulo/volquota/{t}"));
        assert!(!keys.volume_quota(t).starts_with(&keys.volumes()));
        assert_eq!(keys.image_member(t, v), format!("/cumulo/imember/{t}/{v}"));
        assert!(keys.image_member(t, v).starts_with(&keys.image_members(t)));
        assert!(keys.image_members(t).starts_with(&keys.all_image_members()));
        assert!(!keys.image(t).starts_with(&keys.all_image_members()));
        assert_eq!(keys.flavor_access(t, v), format!("/cumulo/faccess/{t}/{v}"));
        assert!(
            keys.flavor_access(t, v)
                .starts_with(&keys.flavor_access_list(t))
        );
        assert!(
            keys.flavor_access_list(t)
                .starts_with(&keys.all_flavor_access())
        );
        assert!(!keys.flavor(t).starts_with(&keys.all_flavor_access()));
        assert!(!keys.flavor_access(t, v).starts_with(&keys.flavors()));
    }

    #[test]
    fn a_prefix_range_ends_after_its_last_key() {
        assert_eq!(prefix_end("/a/"), b"/a0".to_vec());
        assert_eq!(prefix_end("ab\u{7f}"), b"ab\x80".to_vec());
        assert_eq!(suffix("/a/b", "/a/"), Some("b"));
    }
}
