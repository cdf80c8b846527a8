//! The etcd key layout under a prefix `P` (default `/tickwheel/`).
//!
//! | key | value | lease |
//! |---|---|---|
//! | `P m/<hex(name)>` | member record `boot_id` | the member's |
//! | `P q/<hex(queue)>` | empty: the queue catalogue | none |
//! | `P o/<hex(queue)>` | owner record `<hex(name)> <boot_id>` | the owner's |
//!
//! Names are hex-encoded (lowercase, two digits a byte), so the map from names to keys is
//! injective: a `/` or any other byte in a name cannot reach another key or another prefix.

/// Lowercase hex of `bytes`. O(len).
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    s
}

/// The bytes of a lowercase or uppercase hex string; `None` if it has an odd length or a
/// non-hex character. O(len).
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    let b = text.as_bytes();
    if !b.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    b.chunks(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

/// The keys of one fleet (one prefix).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// Keys under `prefix` (used as given: end it with `/` to keep fleets apart).
    pub fn new(prefix: impl Into<String>) -> Self {
        Keys {
            prefix: prefix.into(),
        }
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `P m/` : the prefix of every member key.
    pub fn members(&self) -> String {
        format!("{}m/", self.prefix)
    }

    /// `P m/<hex(name)>`.
    pub fn member(&self, name: &str) -> String {
        format!("{}m/{}", self.prefix, hex(name.as_bytes()))
    }

    /// `P q/` : the prefix of the queue catalogue.
    pub fn queues(&self) -> String {
        format!("{}q/", self.prefix)
    }

    /// `P q/<hex(queue)>`.
    pub fn queue(&self, queue: &[u8]) -> String {
        format!("{}q/{}", self.prefix, hex(queue))
    }

    /// `P o/` : the prefix of every owner key.
    pub fn owners(&self) -> String {
        format!("{}o/", self.prefix)
    }

    /// `P o/<hex(queue)>`.
    pub fn owner(&self, queue: &[u8]) -> String {
        format!("{}o/{}", self.prefix, hex(queue))
    }

    /// The name bytes of a key under `section` (`m/`, `q/` or `o/`); `None` if the key is
    /// not of that section or its suffix is not hex.
    pub fn decode(&self, section: &str, key: &[u8]) -> Option<Vec<u8>> {
        let key = std::str::from_utf8(key).ok()?;
        let rest = key.strip_prefix(&self.prefix)?.strip_prefix(section)?;
        unhex(rest)
    }
}

/// The owner record stored under `P o/<hex(queue)>`: `<hex(name)> <boot_id>`.
pub fn owner_value(name: &str, boot: &str) -> String {
    format!("{} {boot}", hex(name.as_bytes()))
}

/// Parses an owner record into (name, boot); `None` if malformed.
pub fn parse_owner(value: &[u8]) -> Option<(String, String)> {
    let text = std::str::from_utf8(value).ok()?;
    let (name, boot) = text.split_once(' ')?;
    let name = String::from_utf8(unhex(name)?).ok()?;
    Some((name, boot.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_is_injective() {
        let k = Keys::new("/t/");
        assert_eq!(k.member("a/b"), "/t/m/612f62");
        assert_ne!(k.queue(b"a/q/b"), k.queue(b"a"));
        assert!(!k.queue(b"x/../o/61").contains("/o/"));
        assert_eq!(
            k.decode("q/", k.queue(b"\x00/\xff").as_bytes()),
            Some(b"\x00/\xff".to_vec())
        );
        assert_eq!(k.decode("o/", k.queue(b"x").as_bytes()), None);
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("zz"), None);
    }

    #[test]
    fn owner_record_round_trips() {
        let v = owner_value("mx 1/é", "b00t");
        assert_eq!(
            parse_owner(v.as_bytes()),
            Some(("mx 1/é".into(), "b00t".into()))
        );
        assert_eq!(parse_owner(b"nothex boot"), None);
        assert_eq!(parse_owner(b"6161"), None);
    }
}
