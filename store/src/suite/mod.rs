//! The behaviour every [`Store`] must have, as test functions generic over a [`Fixture`], one
//! module per concern (`identity`, `app_creds`, `keypairs`, `catalog`, `image_members`,
//! `instances`, `launches`, `subnets`, `volumes`, `events`, `actions`, `queue`, `server_groups`,
//! and `guarantees` for what holds across them); an implementation runs them all with
//! `crate::store_suite!(MyFixture);` in its test module.
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

pub(crate) mod actions;
pub(crate) mod app_creds;
pub(crate) mod catalog;
pub(crate) mod events;
pub(crate) mod guarantees;
pub(crate) mod identity;
pub(crate) mod image_members;
pub(crate) mod instances;
pub(crate) mod keypairs;
pub(crate) mod launches;
pub(crate) mod networking;
pub(crate) mod nodes;
pub(crate) mod queue;
pub(crate) mod server_groups;
pub(crate) mod subnets;
pub(crate) mod volumes;

use super::*;

/// Makes stores over one fresh backing storage (a temp file, an etcd key prefix).
pub(crate) trait Fixture {
    /// The store under test.
    type S: Store + 'static;
    /// Fresh, empty storage.
    fn new() -> Self;
    /// A store over this storage; opening again after dropping sees the same data.
    fn open(&self) -> Self::S;
    /// Every byte the storage holds, as a reader of it (a backup, another etcd client) sees it.
    fn raw(&self) -> Vec<u8>;
    /// Whether the backend can run here (a test returns early, passing, when it cannot; the
    /// fixture says why).
    fn available() -> bool {
        true
    }
}

/// Runs every test of the suite against `$fixture`, one `#[test]` each, named as the test (the
/// module of its concern is not part of the name).
#[macro_export]
#[doc(hidden)]
macro_rules! store_suite {
    ($fixture:ty) => {
        $crate::store_suite!(@tests $fixture;
            identity: tenant_crud, user_and_role_crud, revoked_tokens_are_listed_until_they_expire,
                a_password_change_or_a_role_removal_ends_the_users_tokens;
            app_creds: users_and_projects_keep_keystones_fields, app_credential_crud,
                parallel_app_credential_creates_respect_the_limit,
                many_credentials_go_with_their_user_and_project;
            catalog: catalog_crud, ephemeral_workloads_are_kept_as_such,
                uploaded_images_go_from_queued_to_active,
                private_flavors_are_seen_by_their_access_list,
                flavor_extra_specs_are_set_and_removed;
            image_members: images_are_shared_with_their_members,
                members_go_with_their_image_and_their_tenant;
            instances: instance_crud, parallel_creates_respect_the_quota, vcpu_and_memory_quotas,
                ten_thousand_instances_page_quickly, a_fault_is_kept_while_in_error,
                an_instance_moves_to_a_workload_of_its_size, a_resize_changes_the_size_within_the_quota,
                metadata_and_lock_are_kept_and_bounded, reservation_ids_are_kept_and_bounded,
                briefs_and_counts_match_the_records, a_batch_keeps_each_write_on_its_own,
                pages_go_past_a_run_of_deleted_instances;
            subnets: addresses_are_allocated_and_reused, small_subnets_get_distinct_keys,
                subnets_run_out, cnci_lifecycle, full_subnets_are_listed_and_keep_their_cnci;
            keypairs: keypair_crud, parallel_keypair_creates_respect_the_limit,
                an_instance_keeps_its_key;
            volumes: volume_crud, volume_quotas_count_volumes_and_gigabytes,
                volume_changes_expect_a_status_grow_and_set_the_node_once,
                an_attached_volume_is_not_deleted_nor_its_tenant,
                parallel_volume_creates_respect_the_limits,
                a_tenants_own_volume_quota_replaces_the_defaults,
                volume_quotas_are_per_tenant_and_go_with_the_tenant,
                parallel_volume_creates_respect_the_tenants_own_quota;
            networking: security_group_crud, network_quotas_bound_groups_rules_and_floating_ips,
                ports_keep_their_groups_until_the_instance_goes,
                a_page_of_servers_reads_its_own_networking,
                a_large_page_of_a_new_tenants_servers_makes_its_default_group,
                floating_ips_are_unique_per_pool_and_follow_their_port;
            events: events_are_scoped, recent_events_are_the_newest_in_order;
            nodes: nodes_are_disabled_and_enabled_again,
                join_tokens_are_used_once_and_joined_nodes_revoked;
            server_groups: server_groups_hold_members_until_they_go;
            actions: actions_are_recorded_and_finished,
                actions_are_bounded_and_outlive_the_instance,
                gone_instances_keep_their_actions_for_a_while,
                many_actions_are_recorded_and_finished_in_order,
                a_record_and_its_event_change_together,
                reported_instances_start_together,
                many_nodes_start_side_by_side,
                large_records_start_together,
                an_instance_is_made_with_its_first_action;
            launches: a_launchs_instances_are_made_in_order_up_to_the_quota,
                a_launch_of_large_records_is_made_whole;
            queue: remote_host_crud, operations_are_claimed_in_fifo_order,
                parallel_claims_take_each_operation_once,
                batch_claims_take_each_operation_once_in_instance_order,
                an_expired_claim_is_taken_over_and_the_old_token_fenced, a_renewed_claim_is_kept,
                one_operation_per_instance_at_a_time,
                fenced_writes_apply_masked_fields_and_refuse_stale_tokens,
                reports_in_a_batch_are_each_written_or_refused_on_their_own,
                launcher_keys_are_stored_sealed_only;
            guarantees: stale_versions_conflict, tenants_are_isolated, nothing_is_lost_on_reopen);
    };
    (@tests $fixture:ty; $($module:ident: $($name:ident),+);+ $(;)?) => {
        $($(
            #[test]
            fn $name() {
                if !<$fixture as $crate::suite::Fixture>::available() {
                    return;
                }
                $crate::suite::$module::$name::<$fixture>();
            }
        )+)+
    };
}

fn tenant_with(store: &dyn Store, name: &str, quota: Quota, prefix: u8) -> Tenant {
    store
        .create_tenant(NewTenant {
            name: name.into(),
            quota,
            subnet_prefix: prefix,
        })
        .unwrap()
}

/// A tenant with a private workload of 1 vCPU and 512 MiB; returns both.
pub(crate) fn tenant_and_workload(
    store: &dyn Store,
    name: &str,
    quota: Quota,
    prefix: u8,
) -> (Tenant, Workload) {
    let tenant = tenant_with(store, name, quota, prefix);
    let flavor = match store
        .flavors(Scope::All)
        .unwrap()
        .into_iter()
        .find(|f| f.name == "small")
    {
        Some(f) => f,
        None => store
            .create_flavor(NewFlavor {
                name: "small".into(),
                vcpus: 1,
                memory_mb: 512,
                disk_gb: 10,
                is_public: true,
            })
            .unwrap(),
    };
    let image = store
        .create_image(NewImage {
            owner: Some(tenant.id),
            name: "debian".into(),
            kind: ImageKind::Qcow2,
            reference: "images/debian.qcow2".into(),
        })
        .unwrap();
    let workload = store
        .create_workload(NewWorkload {
            owner: Some(tenant.id),
            name: "web".into(),
            flavor: flavor.id,
            image: image.id,
            user_data: "#cloud-config\n".into(),
            ephemeral: false,
        })
        .unwrap();
    (tenant, workload)
}

/// The most metadata an instance may hold, in its largest JSON encoding: keys of four-byte
/// characters, values of control characters (six bytes each in JSON).
pub(crate) fn largest_metadata() -> Metadata {
    (0..Instance::MAX_METADATA)
        .map(|k| {
            let key = format!(
                "{k:03}{}",
                "\u{1d11e}".repeat(Instance::MAX_METADATA_TEXT - 3)
            );
            (key, "\u{1}".repeat(Instance::MAX_METADATA_TEXT))
        })
        .collect()
}

/// `count` instances of `workload` made in `tenant` one after another, named `vm0`, `vm1`...
pub(crate) fn instances_made(
    store: &dyn Store,
    tenant: &Tenant,
    workload: &Workload,
    count: usize,
) -> Vec<Instance> {
    (0..count)
        .map(|n| {
            store
                .create_instance(new_instance(tenant, workload, &format!("vm{n}")))
                .unwrap()
        })
        .collect()
}

/// `i` placed on `node` in `state` (a change at its version, which must be current).
pub(crate) fn placed(
    store: &dyn Store,
    i: &Instance,
    node: Uuid,
    state: InstanceState,
) -> Instance {
    let change = InstanceChange {
        state: Some(state),
        node: Some(Some(node)),
        ..InstanceChange::default()
    };
    store
        .update_instance(Scope::All, i.id, i.version, change)
        .unwrap()
}

pub(crate) fn new_instance(tenant: &Tenant, workload: &Workload, name: &str) -> NewInstance {
    NewInstance {
        tenant: tenant.id,
        workload: workload.id,
        name: name.into(),
        key: None,
        metadata: Default::default(),
        user: None,
        reservation: None,
        zone: None,
    }
}

/// What `threads` threads return, each running `work` with its number, in thread order.
fn in_parallel<T: Send>(threads: usize, work: impl Fn(usize) -> Vec<T> + Sync) -> Vec<T> {
    std::thread::scope(|s| {
        let work = &work;
        let handles: Vec<_> = (0..threads).map(|n| s.spawn(move || work(n))).collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    })
}

fn is_not_found<T: std::fmt::Debug>(r: Result<T>) -> bool {
    matches!(r, Err(StoreError::NotFound { .. }))
}
