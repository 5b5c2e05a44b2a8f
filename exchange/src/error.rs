//! The errors of the exchange, one enum per operation whose failures differ:
//! [`SchemaError`] (building, validating and checking against a schema),
//! [`SchemaDecodeError`] (a schema that travelled as bytes) and
//! [`LayoutError`] (laying slots out in a region), and those of the slot
//! layer: [`ExchangeError`] (creating or opening an exchange),
//! [`WriteError`] (writing an input, posting a command, publishing a
//! result) and [`ReadError`] (receiving, reading an input or a view).
//! Mapping a region fails with `RegionError`, beside the region.

use std::fmt;
use std::time::Duration;

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
    /// A field's flags byte that is not 0, or 1 on a field that cannot be
    /// length-prefixed.
    #[error("field flags {flags} at byte {at}: 0, or 1 on a u8 field of one dimension")]
    FieldFlags {
        /// The flags byte.
        flags: u8,
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

/// Why an exchange could not be created or opened. At open, a region that
/// another program, another version, or other schemas made is refused with
/// an error that names what differs.
#[cfg(not(loom))]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExchangeError {
    /// The schemas and slot count do not lay out.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// The region could not be created, opened or duplicated.
    #[error(transparent)]
    Region(#[from] crate::region::RegionError),
    /// A schema with a key that a received batch uses for its own
    /// bookkeeping.
    #[error(
        "the {area} schema has a key {key}, which received batches use for the slot indices; \
         rename it"
    )]
    ReservedKey {
        /// The area.
        area: Area,
        /// The key.
        key: NestedKey,
    },
    /// A region too small to hold the header.
    #[error("the region has {len} bytes, fewer than the {min} of an exchange's header")]
    TooSmall {
        /// The region's size.
        len: usize,
        /// The header's size.
        min: usize,
    },
    /// A region whose first word is not the exchange's magic: not made by
    /// `Exchange::create`, or not finished yet.
    #[error(
        "not an exchange region: magic word {found:#018x}, expected {expected:#018x} \
         (a region made by Exchange::create carries it once fully created)"
    )]
    BadMagic {
        /// The word found.
        found: u64,
        /// The magic word.
        expected: u64,
    },
    /// A region laid out by another version of this crate.
    #[error("the region has layout version {found}, but this build reads version {expected}")]
    Version {
        /// The version in the region.
        found: u32,
        /// The version this build writes and reads.
        expected: u32,
    },
    /// One of the three schemas is not the one the region was created with.
    #[error(
        "the {area} schema differs from the one the region was created with \
         (a key, dtype, shape or batch size)"
    )]
    SchemaMismatch {
        /// The first area whose schema differs (input, result, next).
        area: Area,
    },
    /// A size in the header that the schemas do not give.
    #[error("the region's {what} is {found}, but the schemas given lay out {expected}")]
    SizeMismatch {
        /// Which size: `"slot header size"`, `"slot count"`, `"slot size"`,
        /// `"region size"`, `"mapped length"`.
        what: &'static str,
        /// The size in the region.
        found: u64,
        /// The size the schemas give.
        expected: u64,
    },
    /// The layout fingerprint differs though every schema and size agrees.
    #[error("the region's layout fingerprint is {found:#018x}, but the schemas given make {expected:#018x}")]
    Fingerprint {
        /// The fingerprint in the region.
        found: u64,
        /// The fingerprint of the schemas given.
        expected: u64,
    },
}

/// Why an input, a command or a result could not be written to a slot.
/// Nothing was written to the slot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// A slot index past the last slot.
    #[error("slot {slot} is out of range: the exchange has {slots} slots")]
    SlotOutOfRange {
        /// The slot.
        slot: usize,
        /// The number of slots.
        slots: usize,
    },
    /// A tensordict that does not fit the area's schema: a key the schema
    /// lacks, a dtype, a shape or a batch size. Keys of the schema may be
    /// left out: the slot records which were written.
    #[error("slot {slot}, {area} area: {source}")]
    Schema {
        /// The slot.
        slot: usize,
        /// The area written.
        area: Area,
        /// What does not fit.
        source: SchemaError,
    },
    /// A batch of inputs whose columns do not fit the input schema, or a
    /// row past its last (see `Exchange::input_rows`).
    #[error("input rows: {reason}")]
    InputRows {
        /// What does not fit.
        reason: String,
    },
    /// A command (or an input for it) while the previous command has not
    /// been taken by the worker.
    #[error("slot {slot}: command {pending} is still pending; the worker has not taken it yet")]
    CommandPending {
        /// The slot.
        slot: usize,
        /// The command not yet taken.
        pending: u32,
    },
    /// A command value that the command word reserves for its own states.
    #[error("command {command} is reserved: commands start at {first}")]
    ReservedCommand {
        /// The value given.
        command: u32,
        /// The smallest command (`FIRST_COMMAND`).
        first: u32,
    },
}

/// Why a receive, an input read or a view read returned nothing. A receive
/// that fails marks nothing taken: its results stay for the next call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// `min_get` of 0.
    #[error("min_get must be at least 1, got {min_get}")]
    MinGet {
        /// The value given.
        min_get: usize,
    },
    /// `max_get` below `min_get`.
    #[error("max_get must be at least min_get, got min_get={min_get} and max_get={max_get}")]
    MaxGet {
        /// `min_get`.
        min_get: usize,
        /// `max_get`.
        max_get: usize,
    },
    /// A `min_get` that the slots can never reach.
    #[error("min_get {min_get} is more than the {slots} slots of the exchange")]
    MinGetAboveSlots {
        /// `min_get`.
        min_get: usize,
        /// The number of slots.
        slots: usize,
    },
    /// The deadline passed with fewer than `min_get` results ready.
    #[error(
        "timed out after {timeout:?}: {ready} results ready, min_get is {min_get}{}; \
         nothing was taken",
        BusySuffix(*.busy)
    )]
    Timeout {
        /// The timeout of the call.
        timeout: Duration,
        /// Results ready at the deadline.
        ready: usize,
        /// `min_get`.
        min_get: usize,
        /// Slots whose writer was mid-write at the deadline.
        busy: usize,
    },
    /// The deadline passed before a slot's result was published.
    #[error("slot {slot}: no new result within {timeout:?}")]
    SlotTimeout {
        /// The slot.
        slot: usize,
        /// The timeout of the call.
        timeout: Duration,
    },
    /// A slot index past the last slot.
    #[error("slot {slot} is out of range: the exchange has {slots} slots")]
    SlotOutOfRange {
        /// The slot.
        slot: usize,
        /// The number of slots.
        slots: usize,
    },
    /// The slot's writer was mid-write at the deadline (still writing, or
    /// dead while writing): its result cannot be read consistently.
    #[error(
        "slot {slot}: its writer was mid-write at the deadline (or died writing); nothing was read"
    )]
    Busy {
        /// The slot.
        slot: usize,
    },
    /// A view of a result whose slot was written again since the receive:
    /// its bytes are another result's now.
    #[error(
        "slot {slot} was written again since it was received (clock {seen}, now {now}): \
         the view is stale"
    )]
    Stale {
        /// The slot.
        slot: usize,
        /// The clock of the result received.
        seen: u64,
        /// The clock now (odd while a write is under way).
        now: u64,
    },
    /// Columns to read results into that do not fit the area's fields
    /// (see `Exchange::columns` and `Exchange::read_rows`).
    #[error("{area} area: cannot read into these columns: {reason}")]
    Columns {
        /// The area.
        area: Area,
        /// What does not fit.
        reason: String,
    },
    /// A tensordict to read an input into that does not have the input
    /// schema's keys, dtypes and shapes (build it with `Schema::zeros`).
    #[error("slot {slot}, {area} area: cannot read into this tensordict: {source}")]
    Schema {
        /// The slot.
        slot: usize,
        /// The area read.
        area: Area,
        /// What does not fit.
        source: SchemaError,
    },
}

/// `", 2 slots mid-write"`, or nothing.
struct BusySuffix(usize);

impl fmt::Display for BusySuffix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            0 => Ok(()),
            1 => f.write_str(", 1 slot mid-write"),
            n => write!(f, ", {n} slots mid-write"),
        }
    }
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
