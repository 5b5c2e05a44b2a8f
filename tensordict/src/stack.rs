//! Stacking tensordicts along a new leading dim: dense (one tensor per key),
//! lazy (the parts kept as they are) and maybe-dense (dense where possible).

use std::fmt::{self, Write as _};

use crate::tensor::describe;
use crate::tensordict::fmt_entry;
use crate::{Entry, KeyLike, NestedKey, NonTensor, Tensor, TensorDict, TensorDictError};

fn check_batch_sizes(parts: &[TensorDict]) -> Result<(), TensorDictError> {
    let first = parts.first().ok_or_else(|| TensorDictError::EmptyStack)?;
    for (index, td) in parts.iter().enumerate().skip(1) {
        if td.batch_size() != first.batch_size() {
            return Err(TensorDictError::StackBatchSize {
                index,
                expected: first.batch_size().to_vec(),
                found: td.batch_size().to_vec(),
            });
        }
    }
    Ok(())
}

/// Why tensordict `index` cannot be stacked densely with tensordict 0 under
/// `prefix`, if it cannot. Keys are compared in order, so the first
/// difference is reported.
fn first_difference(
    prefix: &NestedKey,
    first: &TensorDict,
    other: &TensorDict,
    index: usize,
) -> Option<TensorDictError> {
    let diff =
        |key: NestedKey, reason: String| Some(TensorDictError::StackDicts { key, index, reason });
    let mut a = first.entries().iter().peekable();
    let mut b = other.entries().iter().peekable();
    loop {
        match (a.peek(), b.peek()) {
            (None, None) => return None,
            (Some((ka, _)), Some((kb, _))) if ka < kb => {
                return diff(prefix.child(ka), "lacks this key".into())
            }
            (Some(_), None) => {
                let (ka, _) = a.next().expect("peeked");
                return diff(prefix.child(ka), "lacks this key".into());
            }
            (Some((ka, _)), Some((kb, _))) if kb < ka => {
                return diff(
                    prefix.child(kb),
                    "has this key but tensordict 0 does not".into(),
                )
            }
            (None, Some(_)) => {
                let (kb, _) = b.next().expect("peeked");
                return diff(
                    prefix.child(kb),
                    "has this key but tensordict 0 does not".into(),
                );
            }
            _ => {}
        }
        let (key, ea) = a.next().expect("peeked");
        let (_, eb) = b.next().expect("peeked");
        let key = prefix.child(key);
        match (ea, eb) {
            (Entry::Tensor(ta), Entry::Tensor(tb)) => {
                if ta.dtype() != tb.dtype() || ta.shape() != tb.shape() {
                    return diff(
                        key,
                        format!("has {} but tensordict 0 has {}", describe(tb), describe(ta)),
                    );
                }
            }
            (Entry::NonTensor(_), Entry::NonTensor(_)) => {}
            (Entry::Dict(da), Entry::Dict(db)) => {
                if da.batch_size() != db.batch_size() {
                    return diff(
                        key,
                        format!(
                            "has batch size {:?} but tensordict 0 has {:?}",
                            db.batch_size(),
                            da.batch_size()
                        ),
                    );
                }
                if let Some(err) = first_difference(&key, da, db, index) {
                    return Some(err);
                }
            }
            (ea, eb) => {
                return diff(
                    key,
                    format!("has a {} but tensordict 0 has a {}", eb.kind(), ea.kind()),
                )
            }
        }
    }
}

fn stack_checked(parts: &[&TensorDict]) -> Result<TensorDict, TensorDictError> {
    let first = parts[0];
    let mut batch = vec![parts.len()];
    batch.extend_from_slice(first.batch_size());
    let mut out = TensorDict::new(&batch);
    for (name, entry) in first.entries() {
        let stacked = match entry {
            Entry::Tensor(_) => {
                let tensors: Vec<Tensor> = parts
                    .iter()
                    .map(|td| td.entries()[name].as_tensor().expect("checked").clone())
                    .collect();
                Entry::Tensor(Tensor::stack(&tensors)?)
            }
            Entry::NonTensor(_) => Entry::NonTensor(NonTensor::Stack(
                parts
                    .iter()
                    .map(|td| td.entries()[name].as_non_tensor().expect("checked").clone())
                    .collect(),
            )),
            Entry::Dict(_) => {
                let subs: Vec<&TensorDict> = parts
                    .iter()
                    .map(|td| td.entries()[name].as_dict().expect("checked"))
                    .collect();
                Entry::Dict(stack_checked(&subs)?)
            }
        };
        out.insert_raw(name.clone(), stacked);
    }
    Ok(out)
}

impl TensorDict {
    /// Stacks tensordicts of identical keys, shapes and dtypes into one whose
    /// batch size is `[parts.len(), ..]`. Non-tensor values become stacks.
    ///
    /// The error names the first key and index that differ. Rows that sit
    /// side by side in one storage (as [`TensorDict::unbind`] returns them)
    /// are stacked without copying.
    pub fn stack(parts: &[TensorDict]) -> Result<TensorDict, TensorDictError> {
        check_batch_sizes(parts)?;
        let first = &parts[0];
        for (index, td) in parts.iter().enumerate().skip(1) {
            if let Some(err) = first_difference(&NestedKey::default(), first, td, index) {
                return Err(err);
            }
        }
        let refs: Vec<&TensorDict> = parts.iter().collect();
        stack_checked(&refs)
    }

    /// Keeps the parts as they are, without copying: heterogeneous keys and
    /// shapes are allowed (the batch sizes must agree).
    pub fn lazy_stack(parts: Vec<TensorDict>) -> Result<LazyStackedTensorDict, TensorDictError> {
        check_batch_sizes(&parts)?;
        Ok(LazyStackedTensorDict { parts })
    }

    /// Dense if the parts allow it, lazy otherwise.
    pub fn maybe_dense_stack(parts: Vec<TensorDict>) -> Result<StackedTensorDict, TensorDictError> {
        match TensorDict::stack(&parts) {
            Ok(dense) => Ok(StackedTensorDict::Dense(dense)),
            Err(TensorDictError::StackDicts { .. }) => {
                Ok(StackedTensorDict::Lazy(TensorDict::lazy_stack(parts)?))
            }
            Err(err) => Err(err),
        }
    }
}

/// Tensordicts stacked lazily: each part kept as it is, so heterogeneous
/// keys and shapes are allowed (TorchRL's `LazyStackedTensorDict`).
///
/// Reading a key stacks its values on demand where they agree in shape and
/// dtype, and is an error naming the key where they do not; indexing returns
/// the part itself.
///
/// ```
/// use tensordict::{DType, Tensor, TensorDict};
/// # fn main() -> Result<(), tensordict::TensorDictError> {
/// let mut cartpole = TensorDict::new(&[]);
/// cartpole.set("observation", Tensor::zeros(DType::F32, &[4]))?;
/// cartpole.set("reward", Tensor::zeros(DType::F32, &[1]))?;
/// let mut pendulum = TensorDict::new(&[]);
/// pendulum.set("observation", Tensor::zeros(DType::F32, &[3]))?;
/// pendulum.set("reward", Tensor::zeros(DType::F32, &[1]))?;
///
/// assert!(TensorDict::stack(&[cartpole.clone(), pendulum.clone()]).is_err());
/// let lazy = TensorDict::lazy_stack(vec![cartpole, pendulum])?;
/// assert_eq!(lazy.get_tensor("reward")?.shape(), &[2, 1]);   // stacked on demand
/// assert!(lazy.get_tensor("observation").is_err());          // [4] vs [3]
/// assert_eq!(lazy.index(1)?.tensor("observation")?.shape(), &[3]);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct LazyStackedTensorDict {
    parts: Vec<TensorDict>,
}

impl LazyStackedTensorDict {
    /// The parts, in order.
    pub fn parts(&self) -> &[TensorDict] {
        &self.parts
    }

    /// The parts, owned.
    pub fn into_parts(self) -> Vec<TensorDict> {
        self.parts
    }

    /// Number of parts (the size of the stack dim).
    pub fn len(&self) -> usize {
        self.parts.len()
    }

    /// True if there is no part (never, for a stack built by
    /// [`TensorDict::lazy_stack`]).
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// `[len, ..part batch size]`.
    pub fn batch_size(&self) -> Vec<usize> {
        let mut batch = vec![self.parts.len()];
        if let Some(first) = self.parts.first() {
            batch.extend_from_slice(first.batch_size());
        }
        batch
    }

    /// Part `index` itself.
    pub fn index(&self, index: usize) -> Result<&TensorDict, TensorDictError> {
        self.parts
            .get(index)
            .ok_or_else(|| TensorDictError::IndexOutOfRange {
                index,
                len: self.parts.len(),
            })
    }

    /// The keys every part has (the flags as for [`TensorDict::keys`]).
    pub fn keys(&self, include_nested: bool, leaves_only: bool) -> Vec<NestedKey> {
        let Some((first, rest)) = self.parts.split_first() else {
            return Vec::new();
        };
        first
            .keys(include_nested, leaves_only)
            .into_iter()
            .filter(|k| rest.iter().all(|p| p.contains(k)))
            .collect()
    }

    /// The keys of part `index` that not every part has.
    pub fn exclusive_keys(&self, index: usize) -> Result<Vec<NestedKey>, TensorDictError> {
        let common = self.keys(true, true);
        Ok(self
            .index(index)?
            .keys(true, true)
            .into_iter()
            .filter(|k| !common.contains(k))
            .collect())
    }

    /// True if every part has `key`.
    pub fn contains(&self, key: impl KeyLike) -> bool {
        !self.parts.is_empty() && self.parts.iter().all(|p| p.contains(&key))
    }

    fn lazy_key_error(key: &impl KeyLike, reason: String) -> TensorDictError {
        TensorDictError::LazyKey {
            key: key.to_key(),
            reason,
        }
    }

    /// The tensors at `key` stacked densely; an error naming the key if a
    /// part lacks it or their shapes or dtypes differ.
    pub fn get_tensor(&self, key: impl KeyLike) -> Result<Tensor, TensorDictError> {
        let tensors = self
            .parts
            .iter()
            .enumerate()
            .map(|(i, p)| {
                p.tensor(&key)
                    .cloned()
                    .map_err(|err| Self::lazy_key_error(&key, format!("part {i}: {err}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Tensor::stack(&tensors).map_err(|err| Self::lazy_key_error(&key, err.to_string()))
    }

    /// The non-tensor values at `key` as a stack.
    pub fn get_non_tensor(&self, key: impl KeyLike) -> Result<NonTensor, TensorDictError> {
        self.parts
            .iter()
            .enumerate()
            .map(|(i, p)| {
                p.non_tensor(&key)
                    .cloned()
                    .map_err(|err| Self::lazy_key_error(&key, format!("part {i}: {err}")))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|items| NonTensor::Stack(items.into()))
    }

    /// The sub-dicts at `key`, stacked lazily.
    pub fn get_dict(&self, key: impl KeyLike) -> Result<LazyStackedTensorDict, TensorDictError> {
        let parts = self
            .parts
            .iter()
            .enumerate()
            .map(|(i, p)| {
                p.dict(&key)
                    .cloned()
                    .map_err(|err| Self::lazy_key_error(&key, format!("part {i}: {err}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        TensorDict::lazy_stack(parts)
    }

    /// The parts stacked densely; an error naming the first key and index
    /// that differ.
    pub fn to_dense(&self) -> Result<TensorDict, TensorDictError> {
        TensorDict::stack(&self.parts)
    }

    fn fmt_indented(&self, out: &mut String, indent: usize) {
        let pad = " ".repeat(indent);
        out.push_str("LazyStackedTensorDict(\n");
        let _ = write!(out, "{pad}    fields={{");
        let mut first = true;
        for key in self.keys(false, false) {
            let name = key.last().unwrap_or_default();
            out.push_str(if first { "\n" } else { ",\n" });
            first = false;
            let _ = write!(out, "{pad}        {name}: ");
            if let Ok(t) = self.get_tensor(&key) {
                fmt_entry(out, &Entry::Tensor(t), indent + 8);
            } else if let Ok(v) = self.get_non_tensor(&key) {
                fmt_entry(out, &Entry::NonTensor(v), indent + 8);
            } else if let Ok(d) = self.get_dict(&key) {
                d.fmt_indented(out, indent + 8);
            } else {
                out.push_str("<heterogeneous>");
            }
        }
        let _ = write!(out, "}},\n{pad}    exclusive_fields={{");
        let mut first = true;
        for (i, _) in self.parts.iter().enumerate() {
            let exclusive = self.exclusive_keys(i).unwrap_or_default();
            if exclusive.is_empty() {
                continue;
            }
            out.push_str(if first { "\n" } else { ",\n" });
            first = false;
            let names: Vec<String> = exclusive.iter().map(ToString::to_string).collect();
            let _ = write!(out, "{pad}        {i} -> {}", names.join(", "));
        }
        let _ = write!(
            out,
            "}},\n{pad}    batch_size={:?},\n{pad}    stack_dim=0)",
            self.batch_size()
        );
    }
}

impl fmt::Display for LazyStackedTensorDict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        self.fmt_indented(&mut out, 0);
        f.write_str(&out)
    }
}

/// The result of [`TensorDict::maybe_dense_stack`]: dense when the parts
/// allow it, lazy otherwise.
#[derive(Clone, Debug, PartialEq)]
pub enum StackedTensorDict {
    /// One tensordict with a leading stack dim.
    Dense(TensorDict),
    /// The parts kept as they are.
    Lazy(LazyStackedTensorDict),
}

impl StackedTensorDict {
    /// `[len, ..part batch size]`.
    pub fn batch_size(&self) -> Vec<usize> {
        match self {
            StackedTensorDict::Dense(td) => td.batch_size().to_vec(),
            StackedTensorDict::Lazy(lazy) => lazy.batch_size(),
        }
    }

    /// Size of the stack dim.
    pub fn len(&self) -> usize {
        self.batch_size().first().copied().unwrap_or(0)
    }

    /// True if the stack has no part.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The dense tensordict: the dense variant as it is, the lazy one
    /// stacked densely (an error naming the first key and index that differ).
    pub fn into_dense(self) -> Result<TensorDict, TensorDictError> {
        match self {
            StackedTensorDict::Dense(td) => Ok(td),
            StackedTensorDict::Lazy(lazy) => lazy.to_dense(),
        }
    }

    /// True for the dense variant.
    pub fn is_dense(&self) -> bool {
        matches!(self, StackedTensorDict::Dense(_))
    }

    /// The tensor at `key` across the stack (a copy-free view when dense).
    pub fn get_tensor(&self, key: impl KeyLike) -> Result<Tensor, TensorDictError> {
        match self {
            StackedTensorDict::Dense(td) => td.tensor(key).cloned(),
            StackedTensorDict::Lazy(lazy) => lazy.get_tensor(key),
        }
    }

    /// The non-tensor value at `key` across the stack.
    pub fn get_non_tensor(&self, key: impl KeyLike) -> Result<NonTensor, TensorDictError> {
        match self {
            StackedTensorDict::Dense(td) => td.non_tensor(key).cloned(),
            StackedTensorDict::Lazy(lazy) => lazy.get_non_tensor(key),
        }
    }

    /// Element `index` of the stack.
    pub fn index(&self, index: usize) -> Result<TensorDict, TensorDictError> {
        match self {
            StackedTensorDict::Dense(td) => td.index(index),
            StackedTensorDict::Lazy(lazy) => lazy.index(index).cloned(),
        }
    }

    /// Every element of the stack.
    pub fn unbind(&self) -> Result<Vec<TensorDict>, TensorDictError> {
        match self {
            StackedTensorDict::Dense(td) => td.unbind(),
            StackedTensorDict::Lazy(lazy) => Ok(lazy.parts().to_vec()),
        }
    }
}

impl fmt::Display for StackedTensorDict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StackedTensorDict::Dense(td) => fmt::Display::fmt(td, f),
            StackedTensorDict::Lazy(lazy) => fmt::Display::fmt(lazy, f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    fn env_td(obs_dim: usize, index: i64) -> TensorDict {
        let mut td = TensorDict::new(&[]);
        td.set("observation", Tensor::full(&[obs_dim], index as f32))
            .unwrap();
        td.set(("next", "reward"), Tensor::full(&[1], 1.0f32))
            .unwrap();
        td.set("env_index", NonTensor::Int(index)).unwrap();
        td
    }

    #[test]
    fn dense_stack_builds_the_batch_dim() {
        let parts = vec![env_td(4, 0), env_td(4, 1), env_td(4, 2)];
        let td = TensorDict::stack(&parts).unwrap();
        assert_eq!(td.batch_size(), &[3]);
        assert_eq!(td.tensor("observation").unwrap().shape(), &[3, 4]);
        assert_eq!(td.dict("next").unwrap().batch_size(), &[3]);
        assert_eq!(
            td.non_tensor("env_index").unwrap().as_int_vec(),
            Some(vec![0, 1, 2])
        );
        assert_eq!(td.unbind().unwrap(), parts);
    }

    #[test]
    fn restacking_unbound_rows_copies_nothing() {
        let td = TensorDict::stack(&[env_td(4, 0), env_td(4, 1)]).unwrap();
        let again = TensorDict::stack(&td.unbind().unwrap()).unwrap();
        assert!(again
            .tensor("observation")
            .unwrap()
            .shares_storage(td.tensor("observation").unwrap()));
        assert_eq!(again, td);
    }

    #[test]
    fn dense_stack_errors_name_key_and_index() {
        let err = TensorDict::stack(&[env_td(4, 0), env_td(4, 1), env_td(3, 2)]).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"cannot stack densely: at key "observation", tensordict 2 has shape [3] and dtype f32 but tensordict 0 has shape [4] and dtype f32"#
        );
        let mut missing = env_td(4, 1);
        missing.remove(("next", "reward"));
        let err = TensorDict::stack(&[env_td(4, 0), missing]).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"cannot stack densely: at key ("next", "reward"), tensordict 1 lacks this key"#
        );
        let mut extra = env_td(4, 1);
        extra.set("zzz", Tensor::scalar(1u8)).unwrap();
        let err = TensorDict::stack(&[env_td(4, 0), extra]).unwrap_err();
        assert!(err
            .to_string()
            .contains("has this key but tensordict 0 does not"));
        let mut kind = env_td(4, 1);
        kind.set("env_index", Tensor::scalar(1i64)).unwrap();
        assert!(TensorDict::stack(&[env_td(4, 0), kind]).is_err());
        assert_eq!(TensorDict::stack(&[]), Err(TensorDictError::EmptyStack));
        let batched = TensorDict::new(&[2]);
        assert!(matches!(
            TensorDict::stack(&[TensorDict::new(&[]), batched]),
            Err(TensorDictError::StackBatchSize { index: 1, .. })
        ));
    }

    #[test]
    fn lazy_stack_keeps_parts_and_stacks_on_demand() {
        let mut other = env_td(3, 1);
        other.set("extra", Tensor::scalar(1u8)).unwrap();
        let lazy = TensorDict::lazy_stack(vec![env_td(4, 0), other]).unwrap();
        assert_eq!(lazy.batch_size(), vec![2]);
        assert_eq!(
            lazy.get_tensor(("next", "reward")).unwrap().shape(),
            &[2, 1]
        );
        let err = lazy.get_tensor("observation").unwrap_err();
        assert!(err
            .to_string()
            .starts_with(r#"lazy stack: key "observation" cannot be stacked"#));
        assert!(lazy.get_tensor("extra").is_err());
        assert_eq!(
            lazy.get_non_tensor("env_index").unwrap().as_int_vec(),
            Some(vec![0, 1])
        );
        assert_eq!(lazy.get_dict("next").unwrap().len(), 2);
        assert_eq!(
            lazy.exclusive_keys(1).unwrap(),
            vec![NestedKey::from("extra")]
        );
        assert!(!lazy.contains("extra"));
        assert_eq!(
            lazy.index(1)
                .unwrap()
                .tensor("observation")
                .unwrap()
                .shape(),
            &[3]
        );
        assert!(lazy.index(2).is_err());
        assert!(lazy.to_dense().is_err());
        let shown = lazy.to_string();
        assert!(shown.contains("observation: <heterogeneous>"), "{shown}");
        assert!(shown.contains("1 -> \"extra\""), "{shown}");
    }

    #[test]
    fn maybe_dense_picks_dense_when_it_can() {
        let dense = TensorDict::maybe_dense_stack(vec![env_td(4, 0), env_td(4, 1)]).unwrap();
        assert!(dense.is_dense());
        assert_eq!(dense.get_tensor("observation").unwrap().shape(), &[2, 4]);
        let lazy = TensorDict::maybe_dense_stack(vec![env_td(4, 0), env_td(3, 1)]).unwrap();
        assert!(!lazy.is_dense());
        assert_eq!(lazy.len(), 2);
        assert_eq!(lazy.index(1).unwrap(), env_td(3, 1));
        assert_eq!(lazy.unbind().unwrap().len(), 2);
        assert!(TensorDict::maybe_dense_stack(vec![]).is_err());
        let _ = DType::F32;
    }
}
