//! Test support for the tickwheel workspace (not published).
//!
//! - [`child`]: signals by PID ([`send_signal`]), the test binary run again as a child.
//! - [`example`]: builds an example of a workspace package once per test process and runs
//!   it; [`example::installed`] skips a test outside CI when a program it needs is missing.
//! - [`lines::read_complete`]: a line log read back after a kill, its torn last line left out.
//! - [`memory::peak_rss`]: the process's peak resident memory (Linux).
//! - `servers` feature: [`redis::RedisServer`] and [`etcd::EtcdServer`], child processes in a
//!   temporary directory on free loopback ports, ready once healthy, stopped by PID (never by
//!   name) on drop; [`ServerError`] carries the tail of the server's log.
//!   [`proof::run_in_temp_dir`]: a proof program's run directory and exit status.
//! - `cli` feature: [`cli::CheckedArgs`], clap parsing plus checks, exiting 2 as clap does.
//! - `pki` feature: [`pki::Pki`], a CA and certificates for `127.0.0.1` made at run time.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "servers")]
pub mod etcd;
/// Prints a line (`format!` arguments) on standard error in one write, so that the lines of
/// a parent and its children, which share the stream, never interleave within a line. A
/// failed write is ignored.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let line = format!("{}\n", format_args!($($arg)*));
        let _ = std::io::stderr().write_all(line.as_bytes());
    }};
}

pub mod child;
#[cfg(feature = "cli")]
pub mod cli;
pub mod example;
pub mod lines;
pub mod memory;
#[cfg(feature = "pki")]
pub mod pki;
#[cfg(feature = "servers")]
mod process;
#[cfg(feature = "servers")]
pub mod proof;
#[cfg(feature = "servers")]
pub mod redis;

#[cfg(feature = "servers")]
pub use child::send_signal;
#[cfg(feature = "servers")]
pub use process::{Server, ServerError, TlsFiles, skip_if_missing};
