//! `Composite`, the spec of a tensordict: a batch shape and a spec per key,
//! nested composites for nested keys.

use std::collections::BTreeMap;

use tensordict::{KeyLike, NestedKey, Shape};

use crate::{SpecError, TensorSpec};

/// The spec of a tensordict (TorchRL's `Composite`): a batch shape and a
/// spec per key, kept sorted. Every entry's shape starts with the batch
/// shape; nested keys live in nested composites.
///
/// ```
/// use specs::{Composite, TensorSpec};
/// use tensordict::DType;
/// # fn main() -> Result<(), specs::SpecError> {
/// let spec = Composite::new(&[])
///     .with("observation", TensorSpec::unbounded(&[3], DType::F32))?
///     .with(("next", "reward"), TensorSpec::unbounded(&[1], DType::F32))?;
/// assert!(spec.contains(("next", "reward")));
/// assert_eq!(spec.keys(true, true).len(), 2);
/// assert!(spec.spec("reward").is_err()); // the error lists the keys present
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Composite {
    shape: Shape,
    entries: BTreeMap<String, TensorSpec>,
}

/// An error unless the key has parts and none is empty.
fn check_key(key: &impl KeyLike) -> Result<(), SpecError> {
    let parts = key.key_parts();
    if parts.is_empty() || parts.iter().any(|p| p.is_empty()) {
        Err(SpecError::InvalidKey { key: key.to_key() })
    } else {
        Ok(())
    }
}

impl Composite {
    /// An empty composite with this batch shape.
    pub fn new(shape: &[usize]) -> Composite {
        Composite {
            shape: shape.into(),
            entries: BTreeMap::new(),
        }
    }

    /// A composite from a shape and entries known to fit it (crate code
    /// that keeps the invariant: every entry's shape starts with `shape`).
    pub(crate) fn from_parts(shape: Shape, entries: BTreeMap<String, TensorSpec>) -> Composite {
        Composite { shape, entries }
    }

    /// The batch shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of root entries (nested composites count as one).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if there is no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The root entries, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &TensorSpec)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    fn available(&self) -> Vec<String> {
        self.entries.keys().cloned().collect()
    }

    /// Sets the spec at `key`, creating composites (with this shape) on its
    /// path. An error naming the key if the key is empty, if a part of its
    /// path is not a composite, or if the spec's shape does not start with
    /// the shape of the composite it goes into; on an error nothing is
    /// changed (no composite is created on the path).
    pub fn set(&mut self, key: impl KeyLike, spec: TensorSpec) -> Result<(), SpecError> {
        check_key(&key)?;
        let parts = key.key_parts();
        let Some((leaf, path)) = parts.split_last() else {
            return Err(SpecError::InvalidKey { key: key.to_key() });
        };
        // Everything is checked before anything is created: the composites
        // on the path that exist, then the shape of the one the spec goes
        // into (composites created on the path get the shape of the last
        // one that exists).
        let mut node: &Composite = self;
        for (depth, part) in path.iter().enumerate() {
            match node.entries.get(*part) {
                Some(TensorSpec::Composite(c)) => node = c,
                Some(other) => {
                    return Err(SpecError::WrongKind {
                        key: NestedKey::new(parts.iter().take(depth + 1).copied()),
                        expected: "composite",
                        found: other.kind(),
                    })
                }
                None => break,
            }
        }
        let shape = spec.shape();
        if !shape.starts_with(&node.shape) {
            return Err(SpecError::ShapePrefix {
                key: key.to_key(),
                shape: shape.to_vec(),
                composite: node.shape.to_vec(),
            });
        }
        let mut node = self;
        for (depth, part) in path.iter().enumerate() {
            let shape = node.shape.clone();
            let entry = node
                .entries
                .entry((*part).to_owned())
                .or_insert_with(|| TensorSpec::Composite(Composite::new(&shape)));
            node = match entry {
                TensorSpec::Composite(c) => c,
                // Checked above; kept as an error rather than a panic.
                other => {
                    return Err(SpecError::WrongKind {
                        key: NestedKey::new(parts.iter().take(depth + 1).copied()),
                        expected: "composite",
                        found: other.kind(),
                    })
                }
            };
        }
        node.entries.insert((*leaf).to_owned(), spec);
        Ok(())
    }

    /// [`Composite::set`] in builder form.
    pub fn with(mut self, key: impl KeyLike, spec: TensorSpec) -> Result<Composite, SpecError> {
        self.set(key, spec)?;
        Ok(self)
    }

    /// The spec at `key`, if any.
    pub fn get(&self, key: impl KeyLike) -> Option<&TensorSpec> {
        let parts = key.key_parts();
        let (leaf, path) = parts.split_last()?;
        let mut node = self;
        for part in path {
            node = node.entries.get(*part)?.as_composite()?;
        }
        node.entries.get(*leaf)
    }

    /// The spec at `key`; an error naming the key and listing the keys
    /// present where the lookup failed.
    pub fn spec(&self, key: impl KeyLike) -> Result<&TensorSpec, SpecError> {
        check_key(&key)?;
        let parts = key.key_parts();
        let Some((leaf, path)) = parts.split_last() else {
            return Err(SpecError::InvalidKey { key: key.to_key() });
        };
        let mut node = self;
        let not_found = |node: &Composite| SpecError::KeyNotFound {
            key: key.to_key(),
            available: node.available(),
        };
        for (depth, part) in path.iter().enumerate() {
            node = match node.entries.get(*part) {
                Some(TensorSpec::Composite(c)) => c,
                Some(other) => {
                    return Err(SpecError::WrongKind {
                        key: NestedKey::new(parts.iter().take(depth + 1).copied()),
                        expected: "composite",
                        found: other.kind(),
                    })
                }
                None => return Err(not_found(node)),
            };
        }
        node.entries.get(*leaf).ok_or_else(|| not_found(node))
    }

    /// Removes and returns the spec at `key`, if any.
    pub fn remove(&mut self, key: impl KeyLike) -> Option<TensorSpec> {
        let parts = key.key_parts();
        let (leaf, path) = parts.split_last()?;
        let mut node = self;
        for part in path {
            node = node.entries.get_mut(*part)?.as_composite_mut()?;
        }
        node.entries.remove(*leaf)
    }

    /// True if there is a spec at `key`.
    pub fn contains(&self, key: impl KeyLike) -> bool {
        self.get(key).is_some()
    }

    /// The keys, sorted. With `include_nested`, the keys inside nested
    /// composites too (depth first); with `leaves_only`, no key of a
    /// composite itself (as [`tensordict::TensorDict::keys`]).
    pub fn keys(&self, include_nested: bool, leaves_only: bool) -> Vec<NestedKey> {
        let mut out = Vec::new();
        self.collect(&NestedKey::default(), include_nested, leaves_only, &mut out);
        out.into_iter().map(|(k, _)| k).collect()
    }

    /// Every leaf spec (nested ones included, composites excluded) with its
    /// key, sorted by key.
    pub fn leaves(&self) -> Vec<(NestedKey, &TensorSpec)> {
        let mut out = Vec::new();
        self.collect(&NestedKey::default(), true, true, &mut out);
        out
    }

    fn collect<'a>(
        &'a self,
        prefix: &NestedKey,
        include_nested: bool,
        leaves_only: bool,
        out: &mut Vec<(NestedKey, &'a TensorSpec)>,
    ) {
        for (name, spec) in &self.entries {
            let key = prefix.child(name);
            match spec {
                TensorSpec::Composite(c) => {
                    if !leaves_only {
                        out.push((key.clone(), spec));
                    }
                    if include_nested {
                        c.collect(&key, include_nested, leaves_only, out);
                    }
                }
                _ => out.push((key, spec)),
            }
        }
    }

    /// Merges `other` into this composite: its leaves replace (or add to)
    /// these, nested composites are merged key by key. An error (and nothing
    /// changed) if a spec of `other` does not fit the shape of the composite
    /// it goes into, or if a composite of `other` meets a leaf here.
    pub fn update(&mut self, other: &Composite) -> Result<(), SpecError> {
        let mut staged = self.clone();
        for (key, spec) in other.keys(true, false).iter().zip(other.all_specs()) {
            match spec {
                // Merged: created (empty) if absent, then its entries are set.
                TensorSpec::Composite(c) => match staged.get(key) {
                    Some(TensorSpec::Composite(_)) => {}
                    Some(leaf) => {
                        return Err(SpecError::WrongKind {
                            key: key.clone(),
                            expected: "composite",
                            found: leaf.kind(),
                        })
                    }
                    None => staged.set(key, TensorSpec::Composite(Composite::new(c.shape())))?,
                },
                leaf => staged.set(key, leaf.clone())?,
            }
        }
        *self = staged;
        Ok(())
    }

    /// The specs in the order of `keys(true, false)`.
    fn all_specs(&self) -> Vec<&TensorSpec> {
        let mut out = Vec::new();
        self.collect(&NestedKey::default(), true, false, &mut out);
        out.into_iter().map(|(_, s)| s).collect()
    }

    /// The shape and the entries, owned, for crate code.
    pub(crate) fn into_parts(self) -> (Shape, BTreeMap<String, TensorSpec>) {
        (self.shape, self.entries)
    }

    /// The entries, for crate code.
    pub(crate) fn entries(&self) -> &BTreeMap<String, TensorSpec> {
        &self.entries
    }
}

#[cfg(test)]
mod tests {
    use tensordict::DType;

    use super::*;

    fn obs() -> TensorSpec {
        TensorSpec::unbounded(&[3], DType::F32)
    }

    fn sample() -> Composite {
        Composite::new(&[])
            .with("observation", obs())
            .unwrap()
            .with(
                "action",
                TensorSpec::bounded(&[1], DType::F32, -2.0, 2.0).unwrap(),
            )
            .unwrap()
            .with(("next", "reward"), TensorSpec::unbounded(&[1], DType::F32))
            .unwrap()
            .with(
                ("next", "done"),
                TensorSpec::categorical(&[1], DType::Bool, 2).unwrap(),
            )
            .unwrap()
    }

    #[test]
    fn set_get_remove_contains() {
        let mut spec = sample();
        assert_eq!(spec.len(), 3);
        assert!(!spec.is_empty());
        assert!(spec.contains(("next", "done")));
        assert_eq!(spec.get("observation"), Some(&obs()));
        assert_eq!(spec.spec(("next", "reward")).unwrap().kind(), "unbounded");
        assert_eq!(
            spec.get("next")
                .and_then(TensorSpec::as_composite)
                .map(Composite::shape),
            Some(&[] as &[usize])
        );
        assert!(spec.get(("observation", "x")).is_none());
        assert_eq!(
            spec.remove(("next", "done")).map(|s| s.kind()),
            Some("categorical")
        );
        assert!(spec.remove(("next", "done")).is_none());
        assert!(spec.remove(("observation", "x")).is_none());
        assert!(!spec.contains(("next", "done")));
        assert!(Composite::default().is_empty());
    }

    #[test]
    fn set_checks_the_shape_prefix_and_the_path() {
        let mut spec = Composite::new(&[4]);
        let err = spec.set(("next", "obs"), obs()).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"spec at key ("next", "obs") has shape [3], which does not start with the composite's shape [4]"#
        );
        spec.set("obs", TensorSpec::unbounded(&[4, 3], DType::F32))
            .unwrap();
        let err = spec
            .set(("obs", "x"), TensorSpec::unbounded(&[4], DType::F32))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"spec at key "obs" is unbounded, not composite"#
        );
        assert_eq!(
            spec.set("", obs()).unwrap_err().to_string(),
            r#"invalid key "": keys are non-empty and no part is empty"#
        );
        assert!(matches!(
            spec.set(("a", ""), obs()),
            Err(SpecError::InvalidKey { .. })
        ));
        // A nested composite with a longer shape checks against its own.
        spec.set("sub", Composite::new(&[4, 2]).into()).unwrap();
        assert!(spec
            .set(("sub", "x"), TensorSpec::unbounded(&[4], DType::F32))
            .is_err());
        spec.set(("sub", "x"), TensorSpec::unbounded(&[4, 2], DType::F32))
            .unwrap();
    }

    #[test]
    fn a_failed_set_changes_nothing() {
        // The shape prefix fails after the path: no "next" is left behind.
        let mut spec = Composite::new(&[4]);
        let before = spec.clone();
        let err = spec.set(("next", "obs"), obs()).unwrap_err();
        assert!(matches!(err, SpecError::ShapePrefix { .. }), "{err:?}");
        assert_eq!(spec, before);
        assert!(!spec.contains("next"));
        // Deeper, below an existing composite with a longer shape.
        spec.set("sub", Composite::new(&[4, 2]).into()).unwrap();
        let before = spec.clone();
        let err = spec
            .set(("sub", "a", "b"), TensorSpec::unbounded(&[4], DType::F32))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"spec at key ("sub", "a", "b") has shape [4], which does not start with the composite's shape [4, 2]"#
        );
        assert_eq!(spec, before);
        // A leaf on the path, below a part that would be created: nothing
        // is created either.
        spec.set("leaf", TensorSpec::unbounded(&[4], DType::F32))
            .unwrap();
        let before = spec.clone();
        assert!(matches!(
            spec.set(("leaf", "x", "y"), TensorSpec::unbounded(&[4], DType::F32)),
            Err(SpecError::WrongKind { .. })
        ));
        assert_eq!(spec, before);
        // And a set that succeeds creates the path with the right shape.
        spec.set(
            ("sub", "a", "b"),
            TensorSpec::unbounded(&[4, 2], DType::F32),
        )
        .unwrap();
        assert_eq!(
            spec.get(("sub", "a"))
                .map(TensorSpec::shape)
                .unwrap()
                .as_slice(),
            &[4, 2]
        );
    }

    #[test]
    fn spec_lists_the_keys_present() {
        let spec = sample();
        assert_eq!(
            spec.spec("reward").unwrap_err().to_string(),
            r#"key "reward" not found; keys present: [action, next, observation]"#
        );
        assert_eq!(
            spec.spec(("next", "truncated")).unwrap_err().to_string(),
            r#"key ("next", "truncated") not found; keys present: [done, reward]"#
        );
        assert_eq!(
            spec.spec(("nope", "x")).unwrap_err().to_string(),
            r#"key ("nope", "x") not found; keys present: [action, next, observation]"#
        );
        assert!(matches!(
            spec.spec(("action", "x")),
            Err(SpecError::WrongKind { .. })
        ));
        assert!(matches!(
            spec.spec(NestedKey::default()),
            Err(SpecError::InvalidKey { .. })
        ));
    }

    #[test]
    fn keys_and_leaves_are_sorted() {
        let spec = sample();
        let keys: Vec<String> = spec
            .keys(true, false)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            keys,
            [
                r#""action""#,
                r#""next""#,
                r#"("next", "done")"#,
                r#"("next", "reward")"#,
                r#""observation""#
            ]
        );
        assert_eq!(spec.keys(true, true).len(), 4);
        assert_eq!(spec.keys(false, false).len(), 3);
        assert_eq!(spec.keys(false, true).len(), 2);
        let leaves: Vec<NestedKey> = spec.leaves().into_iter().map(|(k, _)| k).collect();
        assert_eq!(leaves, spec.keys(true, true));
        assert_eq!(spec.iter().count(), 3);
    }

    #[test]
    fn update_merges_nested_composites() {
        let mut spec = sample();
        let other = Composite::new(&[])
            .with(
                ("next", "truncated"),
                TensorSpec::binary(&[1], DType::Bool).unwrap(),
            )
            .unwrap()
            .with("observation", TensorSpec::unbounded(&[4], DType::F32))
            .unwrap()
            .with("info", Composite::new(&[]).into())
            .unwrap();
        spec.update(&other).unwrap();
        assert!(spec.contains(("next", "done")));
        assert!(spec.contains(("next", "truncated")));
        assert!(spec.contains("info"));
        assert_eq!(spec.get("observation").unwrap().shape().as_slice(), &[4]);

        let before = spec.clone();
        let bad = Composite::new(&[])
            .with(("observation", "x"), obs())
            .unwrap();
        assert!(matches!(
            spec.update(&bad),
            Err(SpecError::WrongKind { .. })
        ));
        assert_eq!(spec, before);
        let mut batched = Composite::new(&[2]);
        assert!(matches!(
            batched.update(&sample()),
            Err(SpecError::ShapePrefix { .. })
        ));
    }
}
