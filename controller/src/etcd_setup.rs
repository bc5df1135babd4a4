//! `cumulo-controller etcd-setup`: etcd's users and roles for a cluster's key prefix, and
//! authentication enabled ([`store::etcd::auth::setup_auth`]; `docs/etcd-store.md`). Run once
//! when the cluster is set up, again (as etcd user `root`) to add users; every step is idempotent.

use clap::Parser;
use store::StoreLocation;
use store::etcd::EtcdOptions;
use store::etcd::auth::{AuthPlan, controller_role, launcher_role, setup_auth};

/// cumulo-controller etcd-setup: makes etcd user `root`, the controller and launcher roles on the
/// store's prefix and the users given (etcd users are client-certificate CNs), then enables
/// etcd's authentication. Connect with the certificate of user `root` once authentication is on.
#[derive(Debug, Parser)]
#[command(
    name = "cumulo-controller etcd-setup",
    version,
    args_override_self = true
)]
pub struct EtcdSetupArgs {
    /// The store: `etcd://host:port[,host:port...][/prefix]`.
    #[arg(long, env = "CUMULO_CONTROLLER_STORE")]
    pub store: String,
    /// How etcd is reached (TLS: the certificate of etcd user `root`).
    #[command(flatten)]
    pub etcd: store::EtcdArgs,
    /// etcd users (certificate CNs) of controllers: read and write on the whole prefix.
    #[arg(long, value_delimiter = ',')]
    pub controller_user: Vec<String>,
    /// etcd users (certificate CNs) of off-host launcher replicas: only the ranges they need.
    #[arg(long, value_delimiter = ',')]
    pub launcher_user: Vec<String>,
}

/// Whether the command line asks for `etcd-setup`.
pub fn wanted(args: &[String]) -> bool {
    args.get(1).is_some_and(|a| a == "etcd-setup")
}

/// Runs the set-up; says what was done.
pub fn run(args: &EtcdSetupArgs) -> Result<String, String> {
    let StoreLocation::Etcd { endpoints, prefix } =
        StoreLocation::parse(&args.store).map_err(|e| e.to_string())?
    else {
        return Err(format!("--store {}: not an etcd:// store", args.store));
    };
    let transport = args
        .etcd
        .transport(&args.store)
        .map_err(|e| e.to_string())?
        .ok_or("an etcd store needs its TLS flags")?;
    let plan = AuthPlan {
        prefix: prefix.clone(),
        controllers: args.controller_user.clone(),
        launchers: args.launcher_user.clone(),
    };
    setup_auth(&endpoints, &transport, &plan, &EtcdOptions::default())
        .map_err(|e| e.to_string())?;
    Ok(format!(
        "etcd at {}: authentication on; role {} for [{}], role {} for [{}]",
        endpoints.join(","),
        controller_role(&prefix),
        plan.controllers.join(", "),
        launcher_role(&prefix),
        plan.launchers.join(", ")
    ))
}
