//! The table key of an id: an encoding that keeps ids that follow each other next to each
//! other in the engine's key order. Integers are big-endian and fixed-width (signed ones
//! with the sign bit flipped), so sequential ids are appended at the end of a B-tree or a
//! memtable run instead of scattered over it (postcard's little-endian varints scatter
//! them: measured 7× fewer redb inserts per second). Strings and byte strings carry a
//! fixed-width length prefix, sequences their length, enums their variant index; so
//! every encoding is self-delimiting and two different ids never share a key. Keys are
//! never decoded: the timer's record carries the id's postcard encoding.

use serde::ser::{self, Serialize};

use crate::error::{Error, Result};

/// The key of `id`.
pub(crate) fn key<K: Serialize + ?Sized>(id: &K) -> Result<Vec<u8>> {
    let mut out = KeySerializer(Vec::with_capacity(16));
    id.serialize(&mut out)?;
    Ok(out.0)
}

struct KeySerializer(Vec<u8>);

impl ser::Error for Error {
    fn custom<M: std::fmt::Display>(msg: M) -> Self {
        Error::decode(msg)
    }
}

impl KeySerializer {
    fn put(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }

    fn len(&mut self, len: Option<usize>) -> Result<()> {
        let len =
            len.ok_or_else(|| Error::decode("an id's sequence or map must know its length"))?;
        self.put(&(len as u64).to_be_bytes());
        Ok(())
    }
}

macro_rules! unsigned {
    ($($f:ident: $t:ty),*) => {$(
        fn $f(self, v: $t) -> Result<()> {
            self.put(&v.to_be_bytes());
            Ok(())
        }
    )*};
}

macro_rules! signed {
    ($($f:ident: $t:ty => $u:ty),*) => {$(
        fn $f(self, v: $t) -> Result<()> {
            // Flipping the sign bit orders negatives before positives.
            self.put(&((v as $u) ^ (1 << (<$u>::BITS - 1))).to_be_bytes());
            Ok(())
        }
    )*};
}

impl ser::Serializer for &mut KeySerializer {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Self;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = Self;
    type SerializeMap = Self;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    unsigned!(serialize_u8: u8, serialize_u16: u16, serialize_u32: u32, serialize_u64: u64, serialize_u128: u128);
    signed!(serialize_i8: i8 => u8, serialize_i16: i16 => u16, serialize_i32: i32 => u32, serialize_i64: i64 => u64, serialize_i128: i128 => u128);

    fn serialize_bool(self, v: bool) -> Result<()> {
        self.put(&[u8::from(v)]);
        Ok(())
    }

    fn serialize_f32(self, v: f32) -> Result<()> {
        self.put(&v.to_bits().to_be_bytes());
        Ok(())
    }

    fn serialize_f64(self, v: f64) -> Result<()> {
        self.put(&v.to_bits().to_be_bytes());
        Ok(())
    }

    fn serialize_char(self, v: char) -> Result<()> {
        self.put(&u32::from(v).to_be_bytes());
        Ok(())
    }

    fn serialize_str(self, v: &str) -> Result<()> {
        self.serialize_bytes(v.as_bytes())
    }

    fn serialize_bytes(self, v: &[u8]) -> Result<()> {
        self.len(Some(v.len()))?;
        self.put(v);
        Ok(())
    }

    fn serialize_none(self) -> Result<()> {
        self.put(&[0]);
        Ok(())
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<()> {
        self.put(&[1]);
        value.serialize(self)
    }

    fn serialize_unit(self) -> Result<()> {
        Ok(())
    }

    fn serialize_unit_struct(self, _name: &'static str) -> Result<()> {
        Ok(())
    }

    fn serialize_unit_variant(
        self,
        _name: &'static str,
        index: u32,
        _variant: &'static str,
    ) -> Result<()> {
        self.put(&index.to_be_bytes());
        Ok(())
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<()> {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        index: u32,
        _variant: &'static str,
        value: &T,
    ) -> Result<()> {
        self.put(&index.to_be_bytes());
        value.serialize(self)
    }

    fn serialize_seq(self, len: Option<usize>) -> Result<Self> {
        self.len(len)?;
        Ok(self)
    }

    fn serialize_tuple(self, _len: usize) -> Result<Self> {
        Ok(self)
    }

    fn serialize_tuple_struct(self, _name: &'static str, _len: usize) -> Result<Self> {
        Ok(self)
    }

    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self> {
        self.put(&index.to_be_bytes());
        Ok(self)
    }

    fn serialize_map(self, len: Option<usize>) -> Result<Self> {
        self.len(len)?;
        Ok(self)
    }

    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<Self> {
        Ok(self)
    }

    // A struct variant is written as a tuple variant: its index, then its fields in order.
    fn serialize_struct_variant(self, _: &str, index: u32, _: &str, _: usize) -> Result<Self> {
        self.serialize_tuple_variant("", index, "", 0)
    }

    fn is_human_readable(&self) -> bool {
        false
    }
}

macro_rules! compound {
    ($($tr:ident: $f:ident $(, $key:ident)?);*) => {$(
        impl ser::$tr for &mut KeySerializer {
            type Ok = ();
            type Error = Error;
            fn $f<T: Serialize + ?Sized>(&mut self, $($key: &'static str,)? value: &T) -> Result<()> {
                $(let _ = $key;)?
                value.serialize(&mut **self)
            }
            fn end(self) -> Result<()> {
                Ok(())
            }
        }
    )*};
}

compound!(
    SerializeSeq: serialize_element;
    SerializeTuple: serialize_element;
    SerializeTupleStruct: serialize_field;
    SerializeTupleVariant: serialize_field;
    SerializeStruct: serialize_field, key;
    SerializeStructVariant: serialize_field, key
);

impl ser::SerializeMap for &mut KeySerializer {
    type Ok = ();
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<()> {
        key.serialize(&mut **self)
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        value.serialize(&mut **self)
    }
    fn end(self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::key;

    #[test]
    fn integers_keep_their_order() {
        let ids: Vec<u64> = vec![0, 1, 127, 128, 255, 256, 1 << 20, u64::MAX - 1, u64::MAX];
        let keys: Vec<Vec<u8>> = ids.iter().map(|i| key(i).expect("encodes")).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
        let signed: Vec<i32> = vec![i32::MIN, -300, -1, 0, 1, 300, i32::MAX];
        let keys: Vec<Vec<u8>> = signed.iter().map(|i| key(i).expect("encodes")).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
    }

    #[test]
    fn distinct_ids_get_distinct_keys() {
        // Self-delimiting: a pair of strings cannot collide by moving the boundary.
        let a = key(&("ab".to_string(), "c".to_string())).expect("encodes");
        let b = key(&("a".to_string(), "bc".to_string())).expect("encodes");
        assert_ne!(a, b);
        assert_ne!(
            key(&Some(0u8)).expect("encodes"),
            key(&None::<u8>).expect("encodes")
        );
        assert_ne!(
            key(&vec![1u8]).expect("encodes"),
            key(&vec![1u8, 0]).expect("encodes")
        );
        // A borrowed form encodes as the owned one.
        assert_eq!(
            key("msg-1").expect("encodes"),
            key(&"msg-1".to_string()).expect("encodes")
        );
    }
}
