//! The errors of the exchange, one enum per operation whose failures differ:
//! [`SchemaError`] (building, validating and checking against a schema),
//! [`SchemaDecodeError`] (a schema that travelled as bytes) and
//! [`LayoutError`] (laying slots out in a region).
//!
//! Writing, reading and mapping a region fail in other ways again; their
//! enums live beside these, one per operation, as the modules that need them
//! arrive.

use std::fmt;

use tensordict::{DType, NestedKey};

use crate::layout::Area;

/// Why a schema could not be built from a template, why envs' templates do
/// not agree, or why a tensordict does not fit a schema. Each message names
/// the key, and the env where envs are compared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    /// A leaf that is not a tensor (a string, an `env_index`, a non-tensor
    /// stack): shared memory holds fixed-shape tensors only.
    #[error(
        "{}key {key} holds a {kind}, not a tensor: the shared-memory exchange \
         carries fixed-shape tensors only; use the queue exchange for non-tensor data",
        EnvPrefix(*.env)
    )]
    NonTensorLeaf {
        /// The key of the leaf.
        key: NestedKey,
        /// What it holds (`"non-tensor value"`).
        kind: &'static str,
        /// The env whose template holds it, when envs are validated.
        env: Option<usize>,
    },
    /// No template to validate.
    #[error("no env templates: the shared-memory schema needs at least one env")]
    NoEnvs,
    /// An env whose batch size differs from env 0's.
    #[error("env {env}: batch size {batch_size:?} but env 0 has {expected:?}")]
    EnvBatchSize {
        /// The env.
        env: usize,
        /// Its batch size.
        batch_size: Vec<usize>,
        /// Env 0's batch size.
        expected: Vec<usize>,
    },
    /// An env whose sub-dict has another batch size than env 0's.
    #[error("env {env}: sub-dict {key} has batch size {batch_size:?} but env 0 has {expected:?}")]
    EnvSubDictBatchSize {
        /// The env.
        env: usize,
        /// The sub-dict's key.
        key: NestedKey,
        /// Its batch size in this env.
        batch_size: Vec<usize>,
        /// Its batch size in env 0.
        expected: Vec<usize>,
    },
    /// A key that env 0 has and another env lacks.
    #[error("env {env}: key {key} is missing, but env 0 has it")]
    EnvMissingKey {
        /// The env.
        env: usize,
        /// The key.
        key: NestedKey,
    },
    /// A key that an env has and env 0 lacks.
    #[error("env {env}: key {key} is not in env 0")]
    EnvExtraKey {
        /// The env.
        env: usize,
        /// The key.
        key: NestedKey,
    },
    /// A tensor whose shape differs from env 0's.
    #[error("env {env}: key {key} has shape {shape:?} but env 0 has {expected:?}")]
    EnvShape {
        /// The env.
        env: usize,
        /// The key.
        key: NestedKey,
        /// Its shape in this env.
        shape: Vec<usize>,
        /// Its shape in env 0.
        expected: Vec<usize>,
    },
    /// A tensor whose dtype differs from env 0's.
    #[error("env {env}: key {key} has dtype {dtype} but env 0 has {expected}")]
    EnvDType {
        /// The env.
        env: usize,
        /// The key.
        key: NestedKey,
        /// Its dtype in this env.
        dtype: DType,
        /// Its dtype in env 0.
        expected: DType,
    },
    /// Keys of a tensordict to write that the schema does not have.
    #[error(
        "{} not in the shared-memory schema; use the queue exchange for dynamic data",
        KeysAre(.keys)
    )]
    UnknownKeys {
        /// Every such key, in order.
        keys: Vec<NestedKey>,
    },
    /// Keys of the schema that a tensordict to write lacks.
    #[error(
        "{} missing from the tensordict; the shared-memory schema needs every one of its keys",
        KeysAre(.keys)
    )]
    MissingKeys {
        /// Every such key, in order.
        keys: Vec<NestedKey>,
    },
    /// A tensordict to write whose batch size is not the schema's.
    #[error("the tensordict has batch size {batch_size:?} but the shared-memory schema has {expected:?}")]
    BatchSize {
        /// The tensordict's batch size.
        batch_size: Vec<usize>,
        /// The schema's.
        expected: Vec<usize>,
    },
    /// A tensor to write whose shape is not the schema's.
    #[error("key {key} has shape {shape:?} but the shared-memory schema has {expected:?}")]
    Shape {
        /// The key.
        key: NestedKey,
        /// The tensor's shape.
        shape: Vec<usize>,
        /// The schema's.
        expected: Vec<usize>,
    },
    /// A tensor to write whose dtype is not the schema's.
    #[error("key {key} has dtype {dtype} but the shared-memory schema has {expected}")]
    DType {
        /// The key.
        key: NestedKey,
        /// The tensor's dtype.
        dtype: DType,
        /// The schema's.
        expected: DType,
    },
    /// A key with no part or with an empty part.
    #[error("key {key} is not valid: a key needs at least one part and no empty part")]
    InvalidKey {
        /// The key.
        key: NestedKey,
    },
    /// A key given twice.
    #[error("key {key} appears twice in the schema")]
    DuplicateKey {
        /// The key.
        key: NestedKey,
    },
    /// A key that is both a tensor and a sub-dict (another key is nested
    /// under it).
    #[error("key {key} is both a tensor and a sub-dict")]
    KeyConflict {
        /// The key.
        key: NestedKey,
    },
    /// An entry whose leading dims are not the batch size of the tensordict
    /// that holds it (for a sub-dict, its shape is its batch size).
    #[error(
        "entry {key} has shape {shape:?}, whose leading dims are not the batch size \
         {batch_size:?} of the tensordict that holds it"
    )]
    LeadingDims {
        /// The key.
        key: NestedKey,
        /// The entry's shape.
        shape: Vec<usize>,
        /// The batch size it must start with.
        batch_size: Vec<usize>,
    },
    /// A field whose size in bytes overflows `usize`.
    #[error("key {key}: shape {shape:?} of {dtype} is too large")]
    FieldTooLarge {
        /// The key.
        key: NestedKey,
        /// The dtype.
        dtype: DType,
        /// The shape.
        shape: Vec<usize>,
    },
    /// Fields whose sizes add up to more than `usize` holds.
    #[error("the {fields} fields of the schema add up to more bytes than usize holds")]
    SchemaTooLarge {
        /// The number of fields.
        fields: usize,
    },
}

impl SchemaError {
    /// The same error, attributed to `env` where it names no env yet.
    pub(crate) fn in_env(self, env: usize) -> SchemaError {
        match self {
            SchemaError::NonTensorLeaf {
                key,
                kind,
                env: None,
            } => SchemaError::NonTensorLeaf {
                key,
                kind,
                env: Some(env),
            },
            other => other,
        }
    }
}

/// `"env 3: "` when an env is known, nothing otherwise.
struct EnvPrefix(Option<usize>);

impl fmt::Display for EnvPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(env) => write!(f, "env {env}: "),
            None => Ok(()),
        }
    }
}

/// `key "a" is` for one key, `keys ["a", "b"] are` for several.
struct KeysAre<'a>(&'a [NestedKey]);

impl fmt::Display for KeysAre<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            [one] => write!(f, "key {one} is"),
            keys => write!(f, "keys {keys:?} are"),
        }
    }
}

/// Why bytes could not be decoded into a schema. `at` is the byte offset of
/// the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaDecodeError {
    /// The bytes do not start with the schema magic.
    #[error("not a schema: bad magic bytes")]
    BadMagic,
    /// A format version this decoder does not read.
    #[error("unsupported schema version {found} (this decoder reads version {expected})")]
    UnsupportedVersion {
        /// The version in the bytes.
        found: u8,
        /// The version this decoder reads.
        expected: u8,
    },
    /// The bytes end before what they announce.
    #[error("truncated schema: {what} at byte {at} needs {needed} bytes but {remaining} remain")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Offset.
        at: usize,
        /// Bytes needed.
        needed: usize,
        /// Bytes left.
        remaining: usize,
    },
    /// A dtype tag that no dtype has.
    #[error("unknown dtype tag {tag} at byte {at}")]
    UnknownDType {
        /// The tag.
        tag: u8,
        /// Offset.
        at: usize,
    },
    /// A key part that is not UTF-8.
    #[error("invalid UTF-8 in a key part at byte {at}")]
    InvalidUtf8 {
        /// Offset.
        at: usize,
    },
    /// A key with more parts than a decoder accepts.
    #[error("key at byte {at} has {parts} parts; a schema key has at most {max}")]
    KeyTooDeep {
        /// Its number of parts.
        parts: usize,
        /// The limit.
        max: usize,
        /// Offset.
        at: usize,
    },
    /// A dimension that does not fit this machine's `usize` (only on
    /// targets narrower than 64 bits).
    #[error("dimension {dim} at byte {at} does not fit in usize")]
    DimTooLarge {
        /// The dimension.
        dim: u64,
        /// Offset.
        at: usize,
    },
    /// Bytes after the end of the schema.
    #[error("{count} trailing bytes after the schema")]
    TrailingBytes {
        /// How many.
        count: usize,
    },
    /// Well-formed bytes that describe an invalid schema.
    #[error("the decoded schema is invalid: {0}")]
    Invalid(#[from] SchemaError),
}

/// Why slots could not be laid out in a region.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LayoutError {
    /// A region of zero slots.
    #[error("a shared region needs at least one slot")]
    NoSlots,
    /// More slots than a region holds.
    #[error("{slots} slots asked for, but a shared region holds at most {max}")]
    TooManySlots {
        /// The number asked for.
        slots: usize,
        /// The limit (`MAX_SLOTS`).
        max: usize,
    },
    /// An area with more fields than its keys-present bitmask has bits.
    #[error(
        "the {area} schema has {fields} fields, but a slot area holds at most {max} \
         (one bit each in the slot's keys-present mask)"
    )]
    TooManyFields {
        /// The area.
        area: Area,
        /// Its number of fields.
        fields: usize,
        /// The limit (`MAX_AREA_FIELDS`).
        max: usize,
    },
    /// One slot larger than a mapping can be.
    #[error(
        "one slot (input {input} bytes, result {result} bytes, next {next} bytes, \
         before padding) is larger than a shared region can be ({max} bytes)"
    )]
    SlotTooLarge {
        /// Bytes of the input schema.
        input: usize,
        /// Bytes of the result schema.
        result: usize,
        /// Bytes of the next schema.
        next: usize,
        /// The largest region (`isize::MAX`).
        max: usize,
    },
    /// All slots together larger than a mapping can be.
    #[error(
        "{slots} slots of {slot_size} bytes each are larger than a shared region can be \
         ({max} bytes)"
    )]
    RegionTooLarge {
        /// The number of slots.
        slots: usize,
        /// The size of one slot with its header and padding.
        slot_size: usize,
        /// The largest region (`isize::MAX`).
        max: usize,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_lists_read_well_for_one_and_for_several() {
        let one = SchemaError::UnknownKeys {
            keys: vec![NestedKey::from("x")],
        };
        assert_eq!(
            one.to_string(),
            r#"key "x" is not in the shared-memory schema; use the queue exchange for dynamic data"#
        );
        let two = SchemaError::MissingKeys {
            keys: vec![NestedKey::from("x"), NestedKey::from(("next", "y"))],
        };
        assert_eq!(
            two.to_string(),
            r#"keys ["x", ("next", "y")] are missing from the tensordict; the shared-memory schema needs every one of its keys"#
        );
    }

    #[test]
    fn in_env_names_the_env_of_a_non_tensor_leaf_only() {
        let err = SchemaError::NonTensorLeaf {
            key: NestedKey::from("name"),
            kind: "non-tensor value",
            env: None,
        }
        .in_env(2);
        assert!(err
            .to_string()
            .starts_with(r#"env 2: key "name" holds a non-tensor value"#));
        assert_eq!(SchemaError::NoEnvs.in_env(1), SchemaError::NoEnvs);
    }

    #[test]
    fn errors_that_inputs_cannot_reach_on_this_target_still_read_well() {
        // `DimTooLarge` needs a usize narrower than 64 bits.
        let err = SchemaDecodeError::DimTooLarge {
            dim: u64::MAX,
            at: 9,
        };
        assert_eq!(
            err.to_string(),
            "dimension 18446744073709551615 at byte 9 does not fit in usize"
        );
    }
}
