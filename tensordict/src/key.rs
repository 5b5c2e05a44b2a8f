//! `NestedKey`, the path to an entry of a tensordict (`"observation"`,
//! `("next", "reward")`), and `KeyLike`, what lookups accept without
//! allocating.

use std::fmt;
use std::sync::Arc;

use smallvec::SmallVec;

/// The parts of a key borrowed for a lookup; no heap allocation for keys of
/// up to four parts.
pub type KeyParts<'a> = SmallVec<[&'a str; 4]>;

/// An owned path to an entry: one part for a root entry (`"observation"`),
/// more for nested ones (`("next", "reward")`).
///
/// ```
/// use tensordict::NestedKey;
/// let key = NestedKey::from(("next", "reward"));
/// assert_eq!(key.parts(), ["next", "reward"]);
/// assert_eq!(key.to_string(), r#"("next", "reward")"#);
/// assert_eq!(NestedKey::from("observation").to_string(), r#""observation""#);
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct NestedKey(Vec<String>);

impl NestedKey {
    /// A key from its parts.
    pub fn new<I, S>(parts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        NestedKey(parts.into_iter().map(Into::into).collect())
    }

    /// The parts, outermost first.
    pub fn parts(&self) -> &[String] {
        &self.0
    }

    /// Number of parts.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True for the empty key (which no entry has).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// This key with `part` appended.
    pub fn child(&self, part: &str) -> NestedKey {
        let mut parts = self.0.clone();
        parts.push(part.to_owned());
        NestedKey(parts)
    }

    /// The last part (the leaf name), if any.
    pub fn last(&self) -> Option<&str> {
        self.0.last().map(String::as_str)
    }

    /// True for a key that names something: at least one part, none empty.
    pub fn is_valid(&self) -> bool {
        !self.0.is_empty() && self.0.iter().all(|part| !part.is_empty())
    }
}

impl fmt::Display for NestedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.as_slice() {
            [one] => write!(f, "{one:?}"),
            parts => {
                f.write_str("(")?;
                for (i, part) in parts.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{part:?}")?;
                }
                f.write_str(")")
            }
        }
    }
}

impl fmt::Debug for NestedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Anything that names an entry: `&str`, `String`, tuples and arrays of
/// `&str`, slices, and [`NestedKey`]. Lookups take `impl KeyLike` and borrow
/// its parts without allocating.
pub trait KeyLike {
    /// The parts of the key, outermost first.
    fn key_parts(&self) -> KeyParts<'_>;

    /// The key itself when it has a single part (a plain `&str` or
    /// `String`): lookups then skip building its parts, which is most of
    /// the cost of an env writing its outputs by name on every step.
    fn single(&self) -> Option<&str> {
        None
    }

    /// The key as a shared name when it is one (an `Arc<str>`): a
    /// [`TensorDict::set`](crate::TensorDict::set) of it stores that name
    /// rather than a new copy (a key set on every batch, allocated once).
    fn shared(&self) -> Option<Arc<str>> {
        None
    }

    /// An owned copy of the key.
    fn to_key(&self) -> NestedKey {
        NestedKey::new(self.key_parts())
    }
}

impl KeyLike for str {
    fn key_parts(&self) -> KeyParts<'_> {
        smallvec::smallvec![self]
    }

    #[inline]
    fn single(&self) -> Option<&str> {
        Some(self)
    }
}

impl KeyLike for Arc<str> {
    fn key_parts(&self) -> KeyParts<'_> {
        smallvec::smallvec![&**self]
    }

    #[inline]
    fn single(&self) -> Option<&str> {
        Some(self)
    }

    #[inline]
    fn shared(&self) -> Option<Arc<str>> {
        Some(Arc::clone(self))
    }
}

impl KeyLike for String {
    fn key_parts(&self) -> KeyParts<'_> {
        smallvec::smallvec![self.as_str()]
    }

    #[inline]
    fn single(&self) -> Option<&str> {
        Some(self)
    }
}

impl KeyLike for NestedKey {
    fn key_parts(&self) -> KeyParts<'_> {
        self.0.iter().map(String::as_str).collect()
    }

    #[inline]
    fn single(&self) -> Option<&str> {
        match self.0.as_slice() {
            [only] => Some(only),
            _ => None,
        }
    }
}

impl KeyLike for (&str, &str) {
    fn key_parts(&self) -> KeyParts<'_> {
        smallvec::smallvec![self.0, self.1]
    }
}

impl KeyLike for (&str, &str, &str) {
    fn key_parts(&self) -> KeyParts<'_> {
        smallvec::smallvec![self.0, self.1, self.2]
    }
}

impl KeyLike for [&str] {
    fn key_parts(&self) -> KeyParts<'_> {
        self.iter().copied().collect()
    }
}

impl<const N: usize> KeyLike for [&str; N] {
    fn key_parts(&self) -> KeyParts<'_> {
        self.iter().copied().collect()
    }
}

impl KeyLike for [String] {
    fn key_parts(&self) -> KeyParts<'_> {
        self.iter().map(String::as_str).collect()
    }
}

impl<T: KeyLike + ?Sized> KeyLike for &T {
    fn key_parts(&self) -> KeyParts<'_> {
        (**self).key_parts()
    }

    #[inline]
    fn single(&self) -> Option<&str> {
        (**self).single()
    }

    #[inline]
    fn shared(&self) -> Option<Arc<str>> {
        (**self).shared()
    }
}

impl From<&str> for NestedKey {
    fn from(key: &str) -> Self {
        NestedKey(vec![key.to_owned()])
    }
}

impl From<String> for NestedKey {
    fn from(key: String) -> Self {
        NestedKey(vec![key])
    }
}

impl From<(&str, &str)> for NestedKey {
    fn from(key: (&str, &str)) -> Self {
        NestedKey::new([key.0, key.1])
    }
}

impl From<(&str, &str, &str)> for NestedKey {
    fn from(key: (&str, &str, &str)) -> Self {
        NestedKey::new([key.0, key.1, key.2])
    }
}

impl<const N: usize> From<[&str; N]> for NestedKey {
    fn from(key: [&str; N]) -> Self {
        NestedKey::new(key)
    }
}

impl From<Vec<String>> for NestedKey {
    fn from(parts: Vec<String>) -> Self {
        NestedKey(parts)
    }
}

impl From<&NestedKey> for NestedKey {
    fn from(key: &NestedKey) -> Self {
        key.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_like_parts_agree_with_owned_keys() {
        let owned = NestedKey::from(("next", "obs"));
        assert_eq!(owned.key_parts().as_slice(), ["next", "obs"]);
        assert_eq!(("next", "obs").to_key(), owned);
        assert_eq!(["next", "obs"].to_key(), owned);
        assert_eq!("obs".to_key(), NestedKey::from("obs"));
        assert_eq!(owned.child("x").len(), 3);
        assert_eq!(owned.last(), Some("obs"));
    }

    #[test]
    fn validity() {
        assert!(NestedKey::from("a").is_valid());
        assert!(!NestedKey::default().is_valid());
        assert!(!NestedKey::from(("a", "")).is_valid());
    }

    /// `single` is the one part of a one-part key, and `None` for any
    /// other, whatever the key's type: lookups rely on it.
    #[test]
    fn single_is_the_only_part() {
        let one = NestedKey::from("a");
        let two = NestedKey::from(("a", "b"));
        assert_eq!("a".single(), Some("a"));
        assert_eq!(String::from("a").single(), Some("a"));
        assert_eq!(one.single(), Some("a"));
        assert_eq!(KeyLike::single(&&one), Some("a"));
        assert_eq!(two.single(), None);
        assert_eq!(("a", "b").single(), None);
        assert_eq!(["a"].single(), None, "arrays take the general path");
        for key in [&one, &two] {
            assert_eq!(
                key.single().is_some(),
                key.key_parts().len() == 1 && key.single() == Some(key.key_parts()[0])
            );
        }
    }
}
