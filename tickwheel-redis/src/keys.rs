//! The Redis keys of a queue.
//!
//! A queue name is user data (a destination domain, any bytes). It is encoded as lowercase
//! hex, which is injective and never contains `{`, `}`, `:` or a control byte, and put inside
//! the hash tag: `PREFIX:{HEX}:owner`, `PREFIX:{HEX}:data`, `PREFIX:{HEX}:fenced`. All three
//! keys of a queue hash to one Redis Cluster slot, so each step's script can touch them all,
//! and no two queues share a key.

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "tickwheel";

/// Why a key prefix was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid key prefix {prefix:?}: 1 to 64 printable ASCII characters, no `{{`, `}}` or space"
)]
pub struct PrefixError {
    /// The refused prefix.
    pub prefix: String,
}

/// Checks a key prefix: 1 to 64 printable ASCII characters without `{`, `}` or space (a brace
/// would move the hash tag; the prefix is not encoded because an operator reads it).
///
/// # Errors
/// [`PrefixError`] otherwise.
///
/// # Example
/// ```
/// use tickwheel_redis::keys::validate_prefix;
/// assert!(validate_prefix("tickwheel").is_ok());
/// assert!(validate_prefix("a{b").is_err());
/// ```
pub fn validate_prefix(prefix: &str) -> Result<(), PrefixError> {
    let ok = !prefix.is_empty()
        && prefix.len() <= 64
        && prefix
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'{' && b != b'}');
    if ok {
        Ok(())
    } else {
        Err(PrefixError {
            prefix: prefix.to_owned(),
        })
    }
}

/// The three keys of one queue, in the order the scripts take them (`KEYS[1..3]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueKeys {
    /// `PREFIX:{HEX}:owner`, a hash: the owner record.
    pub owner: String,
    /// `PREFIX:{HEX}:data`, a hash: chunk index (decimal) to chunk bytes.
    pub data: String,
    /// `PREFIX:{HEX}:fenced`, a hash: epoch (decimal) to the number of that epoch's chunks that
    /// another member took.
    pub fenced: String,
}

impl QueueKeys {
    /// The keys of `queue` under `prefix` (which [`validate_prefix`] accepted). O(name length).
    ///
    /// # Example
    /// ```
    /// use tickwheel_redis::keys::QueueKeys;
    /// let k = QueueKeys::new("tickwheel", b"example.com");
    /// assert_eq!(k.owner, "tickwheel:{6578616d706c652e636f6d}:owner");
    /// ```
    pub fn new(prefix: &str, queue: &[u8]) -> Self {
        let key = in_slot(prefix, queue);
        QueueKeys {
            owner: key("owner"),
            data: key("data"),
            fenced: key("fenced"),
        }
    }
}

/// The keys of one queue's journal of live timers ([`crate::journal`]), under the queue's hash
/// tag like [`QueueKeys`], so a journal script touches one Redis Cluster slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalKeys {
    /// `PREFIX:{HEX}:jm`, a hash: `n` (live records), `level` and `split` (the linear
    /// hashing state that maps an id to its bucket). Absent when the journal is empty.
    pub meta: String,
    /// `PREFIX:{HEX}:j:`, the prefix of the bucket keys: bucket `i` is this followed by `i` in
    /// decimal, a hash of id bytes to record bytes (`PREFIX:{HEX}:j:0`, `:j:1`, ...).
    pub bucket_prefix: String,
}

impl JournalKeys {
    /// The journal keys of `queue` under `prefix` (which [`validate_prefix`] accepted).
    /// O(name length).
    ///
    /// # Example
    /// ```
    /// use tickwheel_redis::keys::JournalKeys;
    /// let k = JournalKeys::new("tickwheel", b"q");
    /// assert_eq!(k.meta, "tickwheel:{71}:jm");
    /// assert_eq!(k.bucket(3), "tickwheel:{71}:j:3");
    /// ```
    pub fn new(prefix: &str, queue: &[u8]) -> Self {
        let key = in_slot(prefix, queue);
        JournalKeys {
            meta: key("jm"),
            bucket_prefix: key("j:"),
        }
    }

    /// The key of bucket `index`. O(1).
    pub fn bucket(&self, index: u64) -> String {
        format!("{}{index}", self.bucket_prefix)
    }
}

/// Makes the keys `PREFIX:{TAG}:name` of `queue`: one hash tag, so one Redis Cluster slot.
fn in_slot(prefix: &str, queue: &[u8]) -> impl Fn(&str) -> String {
    let head = format!("{prefix}:{{{}}}:", tag(queue));
    move |name| format!("{head}{name}")
}

/// The hash tag of a queue: the lowercase hex of its name, or `_` for the empty name (an empty
/// tag `{}` would make Redis Cluster hash each whole key apart; `_` is never hex, so this stays
/// injective).
pub fn tag(queue: &[u8]) -> String {
    if queue.is_empty() {
        "_".to_owned()
    } else {
        hex(queue)
    }
}

/// Lowercase hex of `bytes` (two characters per byte; empty for an empty name).
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// What Redis Cluster hashes: the text between the first `{` and the next `}` if non-empty.
    fn hash_tag(key: &str) -> &str {
        if let Some(open) = key.find('{')
            && let Some(len) = key[open + 1..].find('}')
            && len > 0
        {
            return &key[open + 1..open + 1 + len];
        }
        key
    }

    #[test]
    fn hostile_names_keep_their_own_hash_tag_and_distinct_keys() {
        let names: Vec<&[u8]> = vec![
            b"a}",
            b"{a",
            b"a\nb",
            b"\x00\xff",
            b"",
            b"{",
            b"}",
            b"{}",
            b"a:{b}:owner",
            b"example.com",
            // Naive concatenation `prefix:name:owner` would give equal keys for these two
            // ("x:y" + ":owner" vs "x" + ":y:owner" ...).
            b"x:y",
            b"x",
        ];
        let mut seen = HashSet::new();
        for name in &names {
            let k = QueueKeys::new(DEFAULT_PREFIX, name);
            let tag = tag(name);
            let j = JournalKeys::new(DEFAULT_PREFIX, name);
            let b = j.bucket(7);
            for key in [&k.owner, &k.data, &k.fenced, &j.meta, &b] {
                assert_eq!(hash_tag(key), tag);
                assert!(key.bytes().all(|b| b.is_ascii_graphic()), "{key:?}");
                assert!(seen.insert(key.clone()), "duplicate key {key:?}");
            }
        }
    }

    #[test]
    fn naive_collision_is_avoided() {
        // `a:b` + `:owner` and `a` + `:b:owner` collide without an encoding.
        assert_ne!(
            QueueKeys::new("p", b"a:b").owner,
            QueueKeys::new("p", b"a")
                .owner
                .replace(":owner", ":b:owner")
        );
        assert_ne!(QueueKeys::new("p", b"a:b"), QueueKeys::new("p", b"a"));
    }

    proptest::proptest! {
        #[test]
        fn encoding_is_injective(a: Vec<u8>, b: Vec<u8>) {
            proptest::prop_assume!(a != b);
            proptest::prop_assert_ne!(hex(&a), hex(&b));
            proptest::prop_assert_ne!(QueueKeys::new("p", &a).owner, QueueKeys::new("p", &b).owner);
            let k = QueueKeys::new("p", &a);
            let bad = |c: char| c == '{' || c == '}' || c == ':';
            proptest::prop_assert!(!hex(&a).contains(bad));
            proptest::prop_assert_eq!(k.owner.matches('{').count(), 1);
        }
    }

    #[test]
    fn prefixes() {
        for bad in ["", "a{", "}", "a b", "a\n", &"x".repeat(65)] {
            assert!(validate_prefix(bad).is_err(), "{bad:?}");
        }
        for good in ["tickwheel", "app:v1", "x"] {
            assert!(validate_prefix(good).is_ok());
        }
    }
}
