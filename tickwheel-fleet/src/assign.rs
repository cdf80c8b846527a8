//! Placement by rendezvous hashing and the owner-key transactions.
//!
//! The desired owner of queue `q` among live members is the one with the largest
//! `xxh3_64(name ‖ 0 ‖ q)` (highest random weight: Thaler & Ravishankar, "Using name-based
//! mappings to increase hit rates", 1998): a join or leave moves only the queues whose
//! maximum changes. xxh3 is fixed across processes and builds (std's `DefaultHasher` is keyed
//! per process).
//!
//! Owner keys `P o/<hex(q)>` are created by a transaction requiring `create_revision == 0`
//! and moved by one requiring `mod_revision == <the holder's token>`; the revision of the
//! write is the new **fencing token**. etcd revisions rise globally, so every new owner's token
//! is larger than its predecessor's.

use std::collections::HashMap;

use etcd_client::{Client, Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use xxhash_rust::xxh3::xxh3_64;

use crate::Error;
use crate::keys::{Keys, owner_value, parse_owner};

/// The rendezvous weight of `member` for `queue`. O(name + queue).
pub fn weight(member: &str, queue: &[u8]) -> u64 {
    let mut buf = Vec::with_capacity(member.len() + 1 + queue.len());
    buf.extend_from_slice(member.as_bytes());
    buf.push(0);
    buf.extend_from_slice(queue);
    xxh3_64(&buf)
}

/// The desired owner of `queue` among `members` (ties: the larger name); `None` if empty.
/// O(members).
pub fn desired<'a>(members: impl IntoIterator<Item = &'a str>, queue: &[u8]) -> Option<&'a str> {
    members
        .into_iter()
        .max_by(|a, b| weight(a, queue).cmp(&weight(b, queue)).then(a.cmp(b)))
}

/// An owner key as read from etcd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerKey {
    /// The owner's name.
    pub name: String,
    /// The owner's boot id.
    pub boot: String,
    /// The key's `mod_revision`: the owner's fencing token.
    pub token: u64,
}

fn rev(r: i64) -> u64 {
    u64::try_from(r).unwrap_or(0)
}

/// Every owner key: queue bytes → owner. One range read: O(queues).
///
/// # Errors
/// [`Error::Etcd`]; [`Error::Malformed`] for a value that is no owner record.
pub async fn owners(client: &mut Client, keys: &Keys) -> Result<HashMap<Vec<u8>, OwnerKey>, Error> {
    let resp = client
        .get(keys.owners(), Some(GetOptions::new().with_prefix()))
        .await?;
    let mut out = HashMap::new();
    for kv in resp.kvs() {
        let Some(queue) = keys.decode("o/", kv.key()) else {
            continue;
        };
        let Some((name, boot)) = parse_owner(kv.value()) else {
            return Err(Error::Malformed {
                key: String::from_utf8_lossy(kv.key()).into_owned(),
                reason: "not an owner record".into(),
            });
        };
        out.insert(
            queue,
            OwnerKey {
                name,
                boot,
                token: rev(kv.mod_revision()),
            },
        );
    }
    Ok(out)
}

/// Every queue of the catalogue (queue bytes), sorted. One range read: O(queues).
///
/// # Errors
/// [`Error::Etcd`].
pub async fn catalogue(client: &mut Client, keys: &Keys) -> Result<Vec<Vec<u8>>, Error> {
    let resp = client
        .get(
            keys.queues(),
            Some(GetOptions::new().with_prefix().with_keys_only()),
        )
        .await?;
    let mut out: Vec<Vec<u8>> = resp
        .kvs()
        .iter()
        .filter_map(|kv| keys.decode("q/", kv.key()))
        .collect();
    out.sort();
    Ok(out)
}

/// Adds queues to the catalogue (plain puts, idempotent). One round trip a queue.
///
/// # Errors
/// [`Error::Etcd`].
pub async fn register_queue(client: &mut Client, keys: &Keys, queue: &[u8]) -> Result<(), Error> {
    client.put(keys.queue(queue), "", None).await?;
    Ok(())
}

/// Creates the owner key of `queue` for (`name`, `boot`) under `lease` if there is none.
/// Returns the new token, or `None` if the key exists.
///
/// # Errors
/// [`Error::Etcd`].
pub async fn create_owner(
    client: &mut Client,
    keys: &Keys,
    queue: &[u8],
    name: &str,
    boot: &str,
    lease: i64,
) -> Result<Option<u64>, Error> {
    let key = keys.owner(queue);
    let absent = Compare::create_revision(key.clone(), CompareOp::Equal, 0);
    put_owner_if(client, key, absent, name, boot, lease).await
}

/// Moves the owner key of `queue` to (`name`, `boot`, `lease`) if its token is still `from`.
/// Returns the new token, or `None` if the key changed or vanished.
///
/// # Errors
/// [`Error::Etcd`].
pub async fn move_owner(
    client: &mut Client,
    keys: &Keys,
    queue: &[u8],
    from: u64,
    name: &str,
    boot: &str,
    lease: i64,
) -> Result<Option<u64>, Error> {
    let key = keys.owner(queue);
    let from = i64::try_from(from).unwrap_or(i64::MAX);
    let unchanged = Compare::mod_revision(key.clone(), CompareOp::Equal, from);
    put_owner_if(client, key, unchanged, name, boot, lease).await
}

/// Puts (`name`, `boot`) under `lease` at the owner key `key` if `when` holds. Returns the
/// new token, or `None` if `when` did not hold.
async fn put_owner_if(
    client: &mut Client,
    key: String,
    when: Compare,
    name: &str,
    boot: &str,
    lease: i64,
) -> Result<Option<u64>, Error> {
    let txn = Txn::new().when([when]).and_then([TxnOp::put(
        key,
        owner_value(name, boot),
        Some(PutOptions::new().with_lease(lease)),
    )]);
    let resp = client.txn(txn).await?;
    Ok(resp
        .succeeded()
        .then(|| resp.header().map(|h| rev(h.revision())))
        .flatten())
}

/// Deletes the owner key of `queue` if its token is still `token`. Returns whether it did.
///
/// # Errors
/// [`Error::Etcd`].
pub async fn release_owner(
    client: &mut Client,
    keys: &Keys,
    queue: &[u8],
    token: u64,
) -> Result<bool, Error> {
    let key = keys.owner(queue);
    let token = i64::try_from(token).unwrap_or(i64::MAX);
    let txn = Txn::new()
        .when([Compare::mod_revision(key.clone(), CompareOp::Equal, token)])
        .and_then([TxnOp::delete(key, None)]);
    Ok(client.txn(txn).await?.succeeded())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendezvous_moves_only_what_the_joiner_wins() {
        let before = ["a", "b", "c"];
        let after = ["a", "b", "c", "d"];
        let mut moved = 0;
        for i in 0..1000u32 {
            let q = i.to_be_bytes();
            let (x, y) = (desired(before, &q), desired(after, &q));
            if x != y {
                assert_eq!(y, Some("d"), "a queue moved to a member that did not join");
                moved += 1;
            }
        }
        // About a quarter moves; each member gets a share.
        assert!((150..350).contains(&moved), "{moved}");
        assert_eq!(desired(Vec::<&str>::new(), b"q"), None);
    }

    #[test]
    fn weights_are_fixed_across_builds() {
        // xxh3_64 of "a\0q": a change of hash function would move every queue of a live
        // fleet during a rolling upgrade.
        assert_eq!(weight("a", b"q"), xxh3_64(b"a\0q"));
        assert_ne!(weight("ab", b"q"), weight("a", b"bq"));
    }
}
