//! The request path (parent to worker): an action written into a slot's
//! input area with the keys it has, then a command posted into the slot's
//! command word (`futex::command`), which the worker waits on, takes, and
//! answers after copying the input out.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::fields::{fields_of, fill_field};
use super::{Exchange, FIRST_COMMAND, SPIN};
use crate::error::{ReadError, WriteError};
use crate::futex::command;
use crate::layout::{slot_header, Area};
use crate::stats::now_ns;
use tensordict::TensorDict;

impl Exchange {
    /// The command not yet taken in `slot`'s word, if any (a peek: it
    /// stays to be taken).
    ///
    /// # Panics
    /// If `slot` is not below [`Exchange::slots`].
    pub fn pending_command(&self, slot: usize) -> Option<u32> {
        // Relaxed: only this side posts; it sees its own post or the
        // worker's take, and orders nothing by it.
        let word = self.shared.command(slot).load(Ordering::Relaxed);
        (word >= FIRST_COMMAND).then_some(word)
    }

    /// Writes an action into `slot`'s input area (parent side), before
    /// [`Exchange::post`]. `td` has the input schema's batch size and, at
    /// each key it has, the schema's dtype and shape; keys of the schema it
    /// lacks are left as they were (the slot records which were written).
    ///
    /// An error names the slot and the key: a key outside the schema (such
    /// data needs the queue exchange), a dtype, a shape; or a command still
    /// pending, whose worker may read the input at any moment. Write only
    /// once the previous command's result was received: the worker reads
    /// its input between taking the command and publishing.
    pub fn write_input(&self, slot: usize, td: &TensorDict) -> Result<(), WriteError> {
        self.check_write_slot(slot)?;
        let schema = self.shared.layout.schema(Area::Input);
        let fields = fields_of(schema, td).map_err(|source| WriteError::Schema {
            slot,
            area: Area::Input,
            source,
        })?;
        if let Some(pending) = self.pending_command(slot) {
            return Err(WriteError::CommandPending { slot, pending });
        }
        // Relaxed: published with the input by the Release exchange in
        // `command::post`.
        self.shared
            .word64(slot, slot_header::INPUT_KEYS_OFFSET)
            .store(fields.mask(schema.len()), Ordering::Relaxed);
        self.write_fields(slot, Area::Input, &fields);
        Ok(())
    }

    /// Posts `command` (at least [`FIRST_COMMAND`]) to `slot`'s worker and
    /// wakes it if it sleeps; stamps the send time in the slot header and
    /// ends the slot's lease in the statistics. An error if the previous
    /// command was not taken yet.
    pub fn post(&self, slot: usize, command: u32) -> Result<(), WriteError> {
        self.post_at(slot, command, now_ns())
    }

    /// [`Exchange::post`] with the send time given (`sent_ns`, of
    /// [`now_ns`]'s clock), for a parent that posts a command to many slots
    /// at once: it reads the clock once per send, not once per slot.
    pub fn post_at(&self, slot: usize, command: u32, sent_ns: u64) -> Result<(), WriteError> {
        self.check_write_slot(slot)?;
        if command < FIRST_COMMAND {
            return Err(WriteError::ReservedCommand {
                command,
                first: FIRST_COMMAND,
            });
        }
        if let Some(pending) = self.pending_command(slot) {
            return Err(WriteError::CommandPending { slot, pending });
        }
        // Relaxed: published by the Release exchange in `command::post`.
        self.shared
            .word64(slot, slot_header::SENT_NS_OFFSET)
            .store(sent_ns, Ordering::Relaxed);
        command::post(self.shared.command(slot), command)
            .map_err(|pending| WriteError::CommandPending { slot, pending })?;
        self.lock_stats().record_action(slot, sent_ns);
        Ok(())
    }

    /// Takes `slot`'s next command (worker side): spins briefly, then sleeps
    /// until one is posted; `Ok(None)` once `deadline` passes first.
    pub fn wait_command(
        &self,
        slot: usize,
        deadline: Option<Instant>,
    ) -> Result<Option<u32>, ReadError> {
        self.check_read_slot(slot)?;
        Ok(command::wait_command(
            self.shared.command(slot),
            deadline,
            SPIN,
        ))
    }

    /// Takes `slot`'s pending command without waiting (worker side): for a
    /// worker whose threads share its slots and sleep on a [`crate::Bells`]
    /// doorbell instead of each slot's word. Several threads may race for
    /// one command: exactly one gets it.
    pub fn try_take_command(&self, slot: usize) -> Result<Option<u32>, ReadError> {
        self.check_read_slot(slot)?;
        Ok(command::take(self.shared.command(slot)))
    }

    /// Copies `slot`'s input into `out` (worker side, after taking the
    /// command): the keys written with it; the others keep their values.
    /// `out` has every key of the input schema with its dtype and shape:
    /// build it once with [`Schema::zeros`](crate::Schema::zeros). A written
    /// key that `out` lacks, or holds with another dtype or shape, is a
    /// [`ReadError::Schema`] error (the keys before it were copied).
    pub fn read_input(&self, slot: usize, out: &mut TensorDict) -> Result<(), ReadError> {
        self.check_read_slot(slot)?;
        let shared = &*self.shared;
        let schema = shared.layout.schema(Area::Input);
        // Relaxed: ordered after the parent's store by the Acquire swap
        // that took the command (`command::take`).
        let mask = shared
            .word64(slot, slot_header::INPUT_KEYS_OFFSET)
            .load(Ordering::Relaxed);
        // Each written field looked up once: checked, then loaded.
        for (i, field) in schema.fields().iter().enumerate() {
            if mask & (1 << i) == 0 {
                continue;
            }
            fill_field(schema, field, out, |bytes| {
                let offset = shared.layout.field_offset(slot, Area::Input, i);
                if field.is_sized() {
                    shared.load(offset, bytes);
                } else {
                    shared.load_field(offset, bytes);
                }
            })
            .map_err(|source| ReadError::Schema {
                slot,
                area: Area::Input,
                source,
            })?;
        }
        Ok(())
    }
}
