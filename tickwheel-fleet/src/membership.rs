//! Member registration under a lease: `P m/<hex(name)>` → `<boot_id> <active|leaving>`.
//!
//! The key is created by a transaction that requires `create_revision == 0`: a second live
//! process with the same name finds the key and is refused ([`Error::NameTaken`]), never
//! merged (Gazette warns that two processes sharing a member key duplicate allocations; Oban
//! #862 shows reused node names orphaning work).

use etcd_client::{Client, Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse};

use crate::Error;
use crate::keys::Keys;

/// A live member as read from etcd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveMember {
    /// Its name.
    pub name: String,
    /// Its boot id.
    pub boot: String,
    /// Whether it is leaving (handing its queues away; takes no new ones).
    pub leaving: bool,
}

fn value(boot: &str, leaving: bool) -> String {
    format!("{boot} {}", if leaving { "leaving" } else { "active" })
}

/// Creates the member key of `name` under `lease`. One round trip.
///
/// # Errors
/// [`Error::NameTaken`] with the holder's boot if the key exists; [`Error::Etcd`].
pub async fn register(
    client: &mut Client,
    keys: &Keys,
    name: &str,
    boot: &str,
    lease: i64,
) -> Result<(), Error> {
    let key = keys.member(name);
    let txn = Txn::new()
        .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
        .and_then([TxnOp::put(
            key.clone(),
            value(boot, false),
            Some(PutOptions::new().with_lease(lease)),
        )])
        .or_else([TxnOp::get(key, None)]);
    let resp = client.txn(txn).await?;
    if resp.succeeded() {
        return Ok(());
    }
    let holder = resp
        .op_responses()
        .into_iter()
        .find_map(|r| match r {
            TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.value().to_vec()),
            _ => None,
        })
        .unwrap_or_default();
    let holder = String::from_utf8_lossy(&holder);
    Err(Error::NameTaken {
        name: name.to_owned(),
        holder_boot: holder.split(' ').next().unwrap_or("").to_owned(),
    })
}

/// Marks this member as leaving (same lease), if its key still holds `boot`.
///
/// # Errors
/// [`Error::Etcd`].
pub async fn mark_leaving(
    client: &mut Client,
    keys: &Keys,
    name: &str,
    boot: &str,
    lease: i64,
) -> Result<(), Error> {
    let key = keys.member(name);
    let txn = Txn::new()
        .when([Compare::value(
            key.clone(),
            CompareOp::Equal,
            value(boot, false),
        )])
        .and_then([TxnOp::put(
            key,
            value(boot, true),
            Some(PutOptions::new().with_lease(lease)),
        )]);
    client.txn(txn).await?;
    Ok(())
}

/// Every registered member, sorted by name. One range read: O(members).
///
/// # Errors
/// [`Error::Etcd`].
pub async fn list(client: &mut Client, keys: &Keys) -> Result<Vec<LiveMember>, Error> {
    let resp = client
        .get(keys.members(), Some(GetOptions::new().with_prefix()))
        .await?;
    let mut out = Vec::new();
    for kv in resp.kvs() {
        let Some(name) = keys
            .decode("m/", kv.key())
            .and_then(|n| String::from_utf8(n).ok())
        else {
            continue;
        };
        let v = String::from_utf8_lossy(kv.value());
        let mut parts = v.split(' ');
        let boot = parts.next().unwrap_or("").to_owned();
        let leaving = parts.next() == Some("leaving");
        out.push(LiveMember {
            name,
            boot,
            leaving,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}
