//! The plumbing that every cumulo daemon shares and that is not the protocol: an endpoint's UUID
//! kept in a state directory ([`identity`]), the runtime, signals and exit status around a
//! daemon's work ([`daemon`]), durations and sizes as written on command lines ([`units`]),
//! thread priorities ([`thread`]), the configuration files of the service units ([`envfile`]), the log setup with its `--log-format` ([`logs`]) and files
//! for this user alone whatever the umask ([`private`]).
//!
//! It holds no protocol rules (those are `ssntp`'s) and no networking (`ssntp-net`'s); of ours it
//! uses only `ssntp`'s roles, UUID bindings and largest frame size.
#![forbid(unsafe_code)]

pub mod daemon;
pub mod envfile;
pub mod identity;
pub mod logs;
pub mod private;
pub mod thread;
pub mod units;

pub use daemon::run_until_signal;
pub use logs::LogFormat;
