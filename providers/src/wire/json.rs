//! Typed, borrowing views of the JSON in SSE `data:` payloads, for the stream decoders.
//!
//! A decoder declares the fields it reads as structs ([`json_object!`]) whose field types
//! are lenient: a value of an unexpected type leaves the field at its default instead of
//! failing the chunk, exactly as the former `serde_json::Value` walk read it
//! (`Value::as_str`, `as_u64`, `as_array`, `get` on a non-object…). Strings borrow from
//! the payload unless they contain escapes. Unknown keys and values of an unexpected type
//! are consumed with [`Skip`], which goes through the same parser path as
//! `serde_json::Value` (recursion limit, surrogate and number checks), so a payload is
//! accepted exactly when `serde_json::from_str::<Value>` accepts it; duplicate keys keep
//! the last value, as in a `Value` map.
//!
//! Why not `#[derive(Deserialize)]`: a derived struct skips unknown keys with
//! `IgnoredAny`, which serde_json skips without the checks `Value` applies (nesting
//! depth, lone surrogates, number range), and it rejects duplicate keys; either would
//! change which payloads fail the stream. [`json_object!`] declares the same kind of
//! struct (fields named with their keys) with a visitor that keeps those rules.

use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use std::borrow::Cow;
use std::marker::PhantomData;

/// How a field type takes each kind of JSON value. Every method defaults to "not my
/// type": the value is consumed and the field keeps its default.
pub(crate) trait Lenient<'de>: Default {
    fn null() -> Self {
        Self::default()
    }
    fn boolean(_: bool) -> Self {
        Self::default()
    }
    fn unsigned(_: u64) -> Self {
        Self::default()
    }
    fn signed(_: i64) -> Self {
        Self::default()
    }
    fn float(_: f64) -> Self {
        Self::default()
    }
    fn string(_: Cow<'de, str>) -> Self {
        Self::default()
    }
    fn map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        while map.next_entry::<Skip, Skip>()?.is_some() {}
        Ok(Self::default())
    }
    fn seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        while seq.next_element::<Skip>()?.is_some() {}
        Ok(Self::default())
    }
}

struct LenientVisitor<T>(PhantomData<T>);

impl<'de, T: Lenient<'de>> Visitor<'de> for LenientVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E>(self) -> Result<T, E> {
        Ok(T::null())
    }
    fn visit_none<E>(self) -> Result<T, E> {
        Ok(T::null())
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_bool<E>(self, v: bool) -> Result<T, E> {
        Ok(T::boolean(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<T, E> {
        Ok(T::unsigned(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<T, E> {
        Ok(T::signed(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<T, E> {
        Ok(T::float(v))
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<T, E> {
        Ok(T::string(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<T, E> {
        Ok(T::string(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E>(self, v: String) -> Result<T, E> {
        Ok(T::string(Cow::Owned(v)))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::map(map)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<T, A::Error> {
        T::seq(seq)
    }
}

pub(crate) fn lenient<'de, D: Deserializer<'de>, T: Lenient<'de>>(d: D) -> Result<T, D::Error> {
    d.deserialize_any(LenientVisitor(PhantomData))
}

/// Any JSON value, validated and dropped.
#[derive(Debug, Default)]
pub(crate) struct Skip;

impl Lenient<'_> for Skip {}

impl<'de> Deserialize<'de> for Skip {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        lenient(d)
    }
}

/// A string field (`Value::as_str`): `None` when absent or not a string.
#[derive(Debug, Default)]
pub(crate) struct Str<'a>(pub(crate) Option<Cow<'a, str>>);

impl Str<'_> {
    /// The string, if the field was one.
    pub(crate) fn get(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

impl<'de: 'a, 'a> Lenient<'de> for Str<'a> {
    fn string(s: Cow<'de, str>) -> Self {
        Self(Some(s))
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        lenient(d)
    }
}

/// A non-negative integer field (`Value::as_u64`): `None` when absent, negative, a float
/// or not a number.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct U64(pub(crate) Option<u64>);

impl Lenient<'_> for U64 {
    fn unsigned(n: u64) -> Self {
        Self(Some(n))
    }
}

impl<'de> Deserialize<'de> for U64 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        lenient(d)
    }
}

/// Whether a field holds something: `false` for `null`, `false`, and an empty string,
/// array or object (each means "nothing here", e.g. `"error": {}` beside valid output),
/// `true` for anything else.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Filled(pub(crate) bool);

impl<'de> Lenient<'de> for Filled {
    fn boolean(b: bool) -> Self {
        Self(b)
    }
    fn unsigned(_: u64) -> Self {
        Self(true)
    }
    fn signed(_: i64) -> Self {
        Self(true)
    }
    fn float(_: f64) -> Self {
        Self(true)
    }
    fn string(s: Cow<'de, str>) -> Self {
        Self(!s.is_empty())
    }
    fn map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        let mut filled = false;
        while map.next_entry::<Skip, Skip>()?.is_some() {
            filled = true;
        }
        Ok(Self(filled))
    }
    fn seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        let mut filled = false;
        while seq.next_element::<Skip>()?.is_some() {
            filled = true;
        }
        Ok(Self(filled))
    }
}

impl<'de> Deserialize<'de> for Filled {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        lenient(d)
    }
}

/// A field whose presence matters (`Value::get(..).is_some()`, `null` included).
#[derive(Debug, Default)]
pub(crate) struct Present<T>(pub(crate) Option<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Present<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::deserialize(d).map(|t| Self(Some(t)))
    }
}

/// A JSON object read into a struct declared with [`json_object!`].
pub(crate) trait Object<'de>: Default {
    /// Takes the value of `key` (known or not) from `map`, keeping it if known.
    ///
    /// # Errors
    /// The parser's, when the value is not valid JSON.
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error>;
}

/// Reads the entries of an object into `T`.
pub(crate) fn object_from<'de, T: Object<'de>, A: MapAccess<'de>>(
    mut map: A,
) -> Result<T, A::Error> {
    let mut object = T::default();
    while let Some(key) = map.next_key::<Str<'de>>()? {
        object.field(key.get().unwrap_or_default(), &mut map)?;
    }
    Ok(object)
}

/// An object field: `None` when absent or not an object.
#[derive(Debug, Default)]
pub(crate) struct Obj<T>(pub(crate) Option<T>);

impl<'de, T: Object<'de>> Lenient<'de> for Obj<T> {
    fn map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        object_from(map).map(|t| Self(Some(t)))
    }
}

impl<'de, T: Object<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        lenient(d)
    }
}

/// An array field (`Value::as_array`, absent or not an array reads as empty). The first
/// element is held inline: the usual one-element array costs no allocation.
#[derive(Debug)]
pub(crate) struct Arr<T> {
    first: Option<T>,
    rest: Vec<T>,
}

impl<T> Default for Arr<T> {
    fn default() -> Self {
        Self {
            first: None,
            rest: Vec::new(),
        }
    }
}

impl<T> IntoIterator for Arr<T> {
    type Item = T;
    type IntoIter = std::iter::Chain<std::option::IntoIter<T>, std::vec::IntoIter<T>>;

    fn into_iter(self) -> Self::IntoIter {
        self.first.into_iter().chain(self.rest)
    }
}

impl<'de, T: Deserialize<'de>> Lenient<'de> for Arr<T> {
    fn seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        let first = seq.next_element()?;
        let mut rest = Vec::new();
        while let Some(item) = seq.next_element()? {
            rest.push(item);
        }
        Ok(Self { first, rest })
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Arr<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        lenient(d)
    }
}

/// Tool-call arguments as OpenAI protocols send them: a string kept verbatim, `null` as
/// empty, any other value as its compact JSON text (keys sorted, as a `Value` prints).
#[derive(Debug, Default)]
pub(crate) struct Args(pub(crate) String);

impl<'de> Lenient<'de> for Args {
    fn boolean(b: bool) -> Self {
        Self(Value::Bool(b).to_string())
    }
    fn unsigned(n: u64) -> Self {
        Self(Value::from(n).to_string())
    }
    fn signed(n: i64) -> Self {
        Self(Value::from(n).to_string())
    }
    fn float(f: f64) -> Self {
        Self(Value::from(f).to_string())
    }
    fn string(s: Cow<'de, str>) -> Self {
        Self(s.into_owned())
    }
    fn map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        Value::deserialize(MapAccessDeserializer::new(map)).map(|v| Self(v.to_string()))
    }
    fn seq<A: SeqAccess<'de>>(seq: A) -> Result<Self, A::Error> {
        Value::deserialize(SeqAccessDeserializer::new(seq)).map(|v| Self(v.to_string()))
    }
}

impl<'de> Deserialize<'de> for Args {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        lenient(d)
    }
}

/// Declares a struct read from a JSON object: each field with the key it comes from;
/// other keys are skipped, a repeated key keeps its last value.
macro_rules! json_object {
    ($(#[$meta:meta])* $name:ident $(<$lt:lifetime>)? {
        $($(#[$fmeta:meta])* $field:ident: $ty:ty = $key:literal,)*
    }) => {
        $(#[$meta])*
        #[derive(Debug, Default)]
        pub(crate) struct $name $(<$lt>)? {
            $($(#[$fmeta])* pub(crate) $field: $ty,)*
        }

        impl<'de $(, $lt)?> $crate::wire::json::Object<'de> for $name $(<$lt>)?
        where $('de: $lt)?
        {
            fn field<A: serde::de::MapAccess<'de>>(
                &mut self,
                key: &str,
                map: &mut A,
            ) -> Result<(), A::Error> {
                match key {
                    $($key => self.$field = map.next_value()?,)*
                    _ => {
                        map.next_value::<$crate::wire::json::Skip>()?;
                    }
                }
                Ok(())
            }
        }
    };
}
pub(crate) use json_object;
