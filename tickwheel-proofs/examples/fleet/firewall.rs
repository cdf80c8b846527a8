//! Network partitions on one machine with nftables: each member process runs under a user id
//! of its own, and a rule in a table of this run's own (`meta skuid UID tcp dport PORT drop`,
//! on the output hook) drops what that member sends to a server's port: its connections time
//! out while the others pass. Healing deletes the rule (by its handle). The table is deleted
//! when the guard drops, on failure too; no other rule of the machine is touched.

use std::io;
use std::process::{Command, Stdio};

/// This run's nftables table.
#[derive(Debug)]
pub struct Firewall {
    table: String,
}

/// A rule in force; `Firewall::heal` deletes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule(u64);

/// Why partitions cannot be made here, if they cannot: they need root and `nft`.
pub fn unavailable() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("nftables rules need root (run as root, as CI does)".into());
    }
    match Command::new("nft")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
    {
        Ok(s) if s.success() => None,
        _ => Some("nft is not installed (apt-get install nftables)".into()),
    }
}

fn nft(args: &[&str]) -> io::Result<String> {
    let out = Command::new("nft").args(args).output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "nft {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl Firewall {
    /// Creates table `tickwheel_fleet_<pid>` (family `inet`) with an output chain that accepts
    /// by default.
    ///
    /// # Errors
    /// If `nft` fails (not root, not installed, the table exists).
    pub fn new() -> io::Result<Firewall> {
        let table = format!("tickwheel_fleet_{}", std::process::id());
        nft(&["add", "table", "inet", &table])?;
        let fw = Firewall { table };
        nft(&[
            "add",
            "chain",
            "inet",
            &fw.table,
            "out",
            "{ type filter hook output priority 0; policy accept; }",
        ])?;
        Ok(fw)
    }

    /// Drops every packet that `uid`'s processes send to TCP port `port` (`loss`: only that
    /// share of them, in percent, by `numgen random`).
    ///
    /// # Errors
    /// If `nft` fails or prints no handle.
    pub fn cut(&self, uid: u32, port: u16, loss: Option<u8>) -> io::Result<Rule> {
        let (uid, port) = (uid.to_string(), port.to_string());
        let mut rule = vec!["meta", "skuid", &uid, "tcp", "dport", &port];
        let share;
        if let Some(p) = loss {
            share = p.to_string();
            rule.extend(["numgen", "random", "mod", "100", "<", &share]);
        }
        rule.push("drop");
        let mut args = vec![
            "--echo",
            "--handle",
            "add",
            "rule",
            "inet",
            &self.table,
            "out",
        ];
        args.extend(rule);
        let echoed = nft(&args)?;
        echoed
            .split("# handle ")
            .nth(1)
            .and_then(|h| h.split_whitespace().next())
            .and_then(|h| h.parse().ok())
            .map(Rule)
            .ok_or_else(|| io::Error::other(format!("nft printed no handle: {echoed}")))
    }

    /// Deletes `rule`: the link is whole again.
    ///
    /// # Errors
    /// If `nft` fails.
    pub fn heal(&self, rule: Rule) -> io::Result<()> {
        let handle = rule.0.to_string();
        nft(&[
            "delete",
            "rule",
            "inet",
            &self.table,
            "out",
            "handle",
            &handle,
        ])
        .map(drop)
    }
}

impl Drop for Firewall {
    fn drop(&mut self) {
        if let Err(e) = nft(&["delete", "table", "inet", &self.table]) {
            say!("fleet: cannot delete nftables table {}: {e}", self.table);
        }
    }
}
