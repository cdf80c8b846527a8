//! Test support for the tickwheel workspace (not published).
//!
//! - [`example`]: builds an example of a workspace package once per test process and runs
//!   it; [`example::installed`] skips a test outside CI when a program it needs is missing.
//! - `servers` feature: [`redis::RedisServer`] and [`etcd::EtcdServer`], child processes in a
//!   temporary directory on free loopback ports, ready once healthy, stopped by PID (never by
//!   name) on drop; [`ServerError`] carries the tail of the server's log.
//! - `pki` feature: [`pki::Pki`], a CA and certificates for `127.0.0.1` made at run time.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "servers")]
pub mod etcd;
pub mod example;
#[cfg(feature = "pki")]
pub mod pki;
#[cfg(feature = "servers")]
mod process;
#[cfg(feature = "servers")]
pub mod redis;

#[cfg(feature = "servers")]
pub use process::{ServerError, TlsFiles, send_signal, skip_if_missing};
