//! The controller's API tests: real HTTP (and HTTPS) over loopback against the API served
//! in-process over an SQLite store and the fake cluster; and the real `openstack` CLI and
//! openstacksdk.
// Test code: unwrap on fixtures is the clearest failure report.
#![allow(clippy::unwrap_used)]

mod actions;
mod app_creds;
mod attachments;
mod boot_volume;
mod boot_volume_cli;
mod compute;
mod console;
mod conventions;
mod docs;
mod engine_rig;
mod etcd;
mod flavor_access;
mod flavor_specs;
mod flavors;
mod hypervisors;
mod identity;
mod identity_cli;
mod identity_password;
mod identity_scopes;
mod identity_write;
mod image_members;
mod images;
mod kernel_images;
mod keypairs;
mod limits;
mod native;
mod network;
mod openstack;
mod quotas;
mod sdk;
mod server_groups;
mod server_list;
mod server_meta;
mod server_meta_cli;
mod server_update;
mod services;
mod support;
mod tls;
mod usage;
mod volumes;
mod zones;
