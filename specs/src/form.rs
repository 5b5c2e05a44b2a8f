//! The form of a spec's value (kinds, dtypes and shapes, no data): whether
//! [`Composite::try_zero`] would succeed, found without making the value.

use tensordict::{DType, NestedKey};

use crate::{Composite, SpecError, StackedSpec, TensorSpec};

/// What [`TensorSpec::zero`] makes, without its data: what stacking the
/// values of a [`StackedSpec`]'s parts depends on.
#[derive(Clone, Debug, PartialEq)]
enum Form {
    /// A tensor of this dtype and shape.
    Tensor(DType, Vec<usize>),
    /// A non-tensor value (stacks of them always stack).
    NonTensor,
    /// A tensordict of this batch size, with these entries (sorted by key,
    /// as a tensordict keeps them).
    Dict(Vec<usize>, Vec<(String, Form)>),
}

impl Form {
    /// The form of `n` such values stacked along a new leading dim.
    fn stacked(self, n: usize) -> Form {
        match self {
            Form::Tensor(dtype, shape) => Form::Tensor(dtype, prepend(n, &shape)),
            Form::NonTensor => Form::NonTensor,
            Form::Dict(batch, entries) => Form::Dict(
                prepend(n, &batch),
                entries
                    .into_iter()
                    .map(|(key, form)| (key, form.stacked(n)))
                    .collect(),
            ),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Form::Tensor(..) => "tensor",
            Form::NonTensor => "non-tensor",
            Form::Dict(..) => "tensordict",
        }
    }
}

fn prepend(n: usize, dims: &[usize]) -> Vec<usize> {
    std::iter::once(n).chain(dims.iter().copied()).collect()
}

fn form(spec: &TensorSpec, key: &NestedKey) -> Result<Form, SpecError> {
    Ok(match spec {
        TensorSpec::NonTensor(_) => Form::NonTensor,
        TensorSpec::Composite(c) => composite_form(c, key)?,
        TensorSpec::Stacked(s) => stacked_form(s, key)?,
        leaf => Form::Tensor(leaf.dtype().unwrap_or(DType::F32), leaf.shape().to_vec()),
    })
}

fn composite_form(c: &Composite, key: &NestedKey) -> Result<Form, SpecError> {
    let mut entries = c
        .iter()
        .map(|(name, spec)| Ok((name.to_owned(), form(spec, &key.child(name))?)))
        .collect::<Result<Vec<_>, SpecError>>()?;
    entries.sort_by(|(a, _), (b, _)| a.cmp(b));
    Ok(Form::Dict(c.shape().to_vec(), entries))
}

/// As `stack_values` in `sample.rs`: the parts' values must be of one
/// kind; tensors of one dtype and shape; tensordicts of one batch size and
/// the same entries (what `TensorDict::stack` requires).
fn stacked_form(s: &StackedSpec, key: &NestedKey) -> Result<Form, SpecError> {
    let ragged = |reason: String| SpecError::Ragged {
        key: key.clone(),
        reason,
    };
    let forms = s
        .parts()
        .iter()
        .map(|part| form(part, key))
        .collect::<Result<Vec<_>, _>>()?;
    let Some(first) = forms.first() else {
        return Err(ragged("the stack has no part".into()));
    };
    for (index, other) in forms.iter().enumerate().skip(1) {
        if other.kind() != first.kind() {
            return Err(ragged(format!(
                "env {index} gives a {} but env 0 gives a {}",
                other.kind(),
                first.kind()
            )));
        }
        match (first, other) {
            (Form::NonTensor, _) => {}
            (Form::Tensor(d0, s0), Form::Tensor(d, s)) if (d0, s0) != (d, s) => {
                return Err(ragged(format!(
                    "env {index} gives shape {s:?} and dtype {d} but env 0 gives shape {s0:?} and dtype {d0}"
                )));
            }
            (Form::Dict(b0, _), Form::Dict(b, _)) if b0 != b => {
                return Err(ragged(format!(
                    "env {index} gives batch size {b:?} but env 0 gives {b0:?}"
                )));
            }
            _ if other != first => {
                return Err(ragged(format!(
                    "env {index} gives a tensordict whose entries differ from env 0's"
                )));
            }
            _ => {}
        }
    }
    Ok(first.clone().stacked(forms.len()))
}

impl Composite {
    /// An error exactly when [`Composite::try_zero`] would return one (a
    /// value too large to make, a ragged stack), without making the value:
    /// for checking specs that came from bytes, whose zeros may be far
    /// larger than the bytes.
    pub fn check_zero(&self) -> Result<(), SpecError> {
        let key = NestedKey::default();
        self.value_bytes(&key)?;
        composite_form(self, &key).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use tensordict::{DType, Tensor};

    use crate::{Composite, StackedSpec, TensorSpec};

    fn agree(c: &Composite) {
        assert_eq!(
            c.check_zero().is_ok(),
            c.try_zero().is_ok(),
            "check_zero and try_zero disagree on {c:?}: {:?} vs {:?}",
            c.check_zero(),
            c.try_zero().map(|_| ())
        );
    }

    #[test]
    fn check_zero_agrees_with_try_zero() {
        let leaf = |shape: &[usize]| TensorSpec::unbounded(shape, DType::F32);
        let env = |obs: &[usize]| {
            Composite::new(&[])
                .with("obs", leaf(obs))
                .unwrap()
                .with("text", TensorSpec::non_tensor(&[]))
                .unwrap()
        };
        let bounds = TensorSpec::bounded_tensors(
            Tensor::from_vec(&[2], vec![0.0f32, 1.0]).unwrap(),
            Tensor::from_vec(&[2], vec![1.0f32, 2.0]).unwrap(),
        )
        .unwrap();
        let stacks: Vec<TensorSpec> = vec![
            TensorSpec::lazy_stack(vec![env(&[3]).into(), env(&[3]).into()]).unwrap(),
            TensorSpec::lazy_stack(vec![env(&[3]).into(), env(&[4]).into()]).unwrap(),
            StackedSpec::new(vec![leaf(&[2]), leaf(&[2])])
                .unwrap()
                .into(),
            StackedSpec::new(vec![leaf(&[2]), bounds.clone()])
                .unwrap()
                .into(),
            StackedSpec::new(vec![leaf(&[2]), TensorSpec::unbounded(&[2], DType::I64)])
                .unwrap()
                .into(),
            StackedSpec::new(vec![leaf(&[]), TensorSpec::non_tensor(&[])])
                .unwrap()
                .into(),
            StackedSpec::new(vec![
                TensorSpec::non_tensor(&[2]),
                TensorSpec::non_tensor(&[]),
            ])
            .unwrap()
            .into(),
            StackedSpec::new(vec![
                Composite::new(&[2]).into(),
                Composite::new(&[3]).into(),
            ])
            .unwrap()
            .into(),
            StackedSpec::new(vec![
                env(&[1]).with("extra", leaf(&[])).unwrap().into(),
                env(&[1]).into(),
            ])
            .unwrap()
            .into(),
            TensorSpec::lazy_stack(vec![
                StackedSpec::new(vec![leaf(&[2]), leaf(&[2])])
                    .unwrap()
                    .into(),
                StackedSpec::new(vec![leaf(&[2]), leaf(&[2])])
                    .unwrap()
                    .into(),
            ])
            .unwrap(),
            TensorSpec::unbounded(&[1 << 40], DType::F64),
        ];
        for (i, stack) in stacks.into_iter().enumerate() {
            agree(
                &Composite::new(&[])
                    .with(format!("s{i}").as_str(), stack)
                    .unwrap(),
            );
        }
        agree(&env(&[5]));
    }
}
