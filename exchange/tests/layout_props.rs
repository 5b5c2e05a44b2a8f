//! Layouts: exact offsets for CartPole- and Atari-like schemas, one test per
//! error with its message, and properties over random schemas (fields
//! inside the region, disjoint, aligned; slots, areas and headers aligned
//! and disjoint).

use std::ops::Range;

use exchange::{
    Area, Field, Layout, LayoutError, Schema, CACHE_LINE, FIELD_ALIGN, MAX_AREA_FIELDS, MAX_SLOTS,
    SLOTS_OFFSET, SLOT_HEADER_SIZE,
};
use proptest::prelude::*;
use tensordict::{DType, NestedKey};

fn schema(fields: &[(&[&str], DType, &[usize])]) -> Schema {
    Schema::new(
        &[],
        fields
            .iter()
            .map(|&(key, dtype, shape)| {
                Field::new(NestedKey::new(key.iter().copied()), dtype, shape)
            })
            .collect::<Result<_, _>>()
            .unwrap(),
    )
    .unwrap()
}

/// The input, result and next schemas of a CartPole-like env.
fn cartpole() -> (Schema, Schema, Schema) {
    let input = schema(&[(&["action"], DType::I64, &[1])]);
    let result = schema(&[
        (&["observation"], DType::F32, &[4]),
        (&["reward"], DType::F32, &[1]),
        (&["done"], DType::Bool, &[1]),
        (&["terminated"], DType::Bool, &[1]),
        (&["truncated"], DType::Bool, &[1]),
    ]);
    let next = schema(&[
        (&["observation"], DType::F32, &[4]),
        (&["done"], DType::Bool, &[1]),
        (&["terminated"], DType::Bool, &[1]),
        (&["truncated"], DType::Bool, &[1]),
    ]);
    (input, result, next)
}

#[test]
fn cartpole_offsets() {
    let (input, result, next) = cartpole();
    let layout = Layout::new(&input, &result, &next, 4).unwrap();
    // Slot: header 128, input 64 (action at 0), result 64 (done 0,
    // observation 8, reward 24, terminated 32, truncated 40), next 64 (done
    // 0, observation 8, terminated 24, truncated 32).
    assert_eq!(layout.slots(), 4);
    assert_eq!(layout.slot_size(), 128 + 64 + 64 + 64);
    assert_eq!(layout.total_size(), 128 + 4 * 320);
    assert_eq!(layout.area_size(Area::Input), 64);
    assert_eq!(layout.area_size(Area::Result), 64);
    assert_eq!(layout.area_size(Area::Next), 64);
    assert_eq!(layout.field_offsets(Area::Input), &[0]);
    assert_eq!(layout.field_offsets(Area::Result), &[0, 8, 24, 32, 40]);
    assert_eq!(layout.field_offsets(Area::Next), &[0, 8, 24, 32]);
    assert_eq!(layout.slot_offset(0), 128);
    assert_eq!(layout.slot_offset(2), 128 + 640);
    assert_eq!(layout.slot_header_range(2), 768..896);
    assert_eq!(layout.area_offset(2, Area::Input), 896);
    assert_eq!(layout.area_offset(2, Area::Result), 960);
    assert_eq!(layout.area_offset(2, Area::Next), 1024);
    let observation = result.position("observation").unwrap();
    assert_eq!(observation, 1);
    assert_eq!(layout.field_offset(2, Area::Result, observation), 968);
    assert_eq!(layout.field_range(2, Area::Result, observation), 968..984);
    assert_eq!(layout.field_range(3, Area::Next, 3), 1088 + 288..1088 + 289);
    assert_eq!(layout.field_range(0, Area::Input, 0), 256..264);
    assert_eq!(layout.schema(Area::Result), &result);
}

#[test]
fn atari_offsets() {
    let input = schema(&[(&["action"], DType::I64, &[1])]);
    let result = schema(&[
        (&["observation"], DType::U8, &[84, 84, 4]),
        (&["reward"], DType::F32, &[1]),
        (&["done"], DType::Bool, &[1]),
        (&["terminated"], DType::Bool, &[1]),
        (&["truncated"], DType::Bool, &[1]),
    ]);
    let layout = Layout::new(&input, &result, &Schema::empty(&[]), 16).unwrap();
    // done 0, observation 8..28232, reward 28232, terminated 28240,
    // truncated 28248; 28249 bytes padded to 28288.
    assert_eq!(
        layout.field_offsets(Area::Result),
        &[0, 8, 28232, 28240, 28248]
    );
    assert_eq!(layout.area_size(Area::Result), 28288);
    assert_eq!(layout.area_size(Area::Next), 0);
    assert_eq!(layout.slot_size(), 128 + 64 + 28288);
    assert_eq!(layout.total_size(), 128 + 16 * 28480);
    assert_eq!(layout.area_offset(5, Area::Result), 128 + 5 * 28480 + 192);
    // An empty area sits at the end of the slot, with nothing in it.
    assert_eq!(layout.area_offset(5, Area::Next), layout.slot_offset(6));
    assert_eq!(
        layout.field_range(15, Area::Result, 1),
        128 + 15 * 28480 + 192 + 8..128 + 15 * 28480 + 192 + 8 + 28224
    );
}

#[test]
fn a_layout_needs_slots_but_not_too_many() {
    let (input, result, next) = cartpole();
    let err = Layout::new(&input, &result, &next, 0).unwrap_err();
    assert_eq!(err, LayoutError::NoSlots);
    assert_eq!(err.to_string(), "a shared region needs at least one slot");
    assert!(Layout::new(&input, &result, &next, MAX_SLOTS).is_ok());
    let err = Layout::new(&input, &result, &next, MAX_SLOTS + 1).unwrap_err();
    assert_eq!(
        err.to_string(),
        "65537 slots asked for, but a shared region holds at most 65536"
    );
}

#[test]
fn an_area_holds_at_most_64_fields() {
    let fields = |n: usize| {
        Schema::new(
            &[],
            (0..n)
                .map(|i| Field::new(format!("f{i:02}"), DType::U8, &[]).unwrap())
                .collect(),
        )
        .unwrap()
    };
    let empty = Schema::empty(&[]);
    let layout = Layout::new(&empty, &fields(MAX_AREA_FIELDS), &empty, 1).unwrap();
    assert_eq!(layout.field_offset(0, Area::Result, 63), 256 + 63 * 8);
    let err = Layout::new(&empty, &empty, &fields(MAX_AREA_FIELDS + 1), 1).unwrap_err();
    assert_eq!(
        err,
        LayoutError::TooManyFields {
            area: Area::Next,
            fields: 65,
            max: 64
        }
    );
    assert_eq!(
        err.to_string(),
        "the next schema has 65 fields, but a slot area holds at most 64 (one bit each in the slot's keys-present mask)"
    );
}

#[test]
fn sizes_that_overflow_are_errors() {
    let empty = Schema::empty(&[]);
    let max = isize::MAX as usize;
    let huge = schema(&[(&["x"], DType::U8, &[max])]);
    let err = Layout::new(&huge, &empty, &empty, 1).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "one slot (input {max} bytes, result 0 bytes, next 0 bytes, before padding) is larger than a shared region can be ({max} bytes)"
        )
    );
    // Each area fits, their sum does not.
    let half = schema(&[(&["x"], DType::U8, &[max / 2])]);
    assert!(matches!(
        Layout::new(&half, &half, &half, 1),
        Err(LayoutError::SlotTooLarge { .. })
    ));
    let big = schema(&[(&["x"], DType::U8, &[1 << 50])]);
    let err = Layout::new(&empty, &big, &empty, 1 << 14).unwrap_err();
    let slot_size = 128 + (1usize << 50);
    assert_eq!(
        err,
        LayoutError::RegionTooLarge {
            slots: 1 << 14,
            slot_size,
            max
        }
    );
    assert_eq!(
        err.to_string(),
        format!("16384 slots of {slot_size} bytes each are larger than a shared region can be ({max} bytes)")
    );
    // Large but representable: the arithmetic allocates nothing.
    let layout = Layout::new(&empty, &big, &empty, 8).unwrap();
    assert_eq!(layout.total_size(), 128 + 8 * slot_size);
}

#[test]
#[should_panic(expected = "slot 4 is out of range for a layout of 4 slots")]
fn a_slot_out_of_range_panics() {
    let (input, result, next) = cartpole();
    Layout::new(&input, &result, &next, 4)
        .unwrap()
        .slot_offset(4);
}

#[test]
#[should_panic(expected = "field 1 is out of range for the input schema's 1 fields")]
fn a_field_out_of_range_panics() {
    let (input, result, next) = cartpole();
    Layout::new(&input, &result, &next, 4)
        .unwrap()
        .field_offset(0, Area::Input, 1);
}

#[test]
fn areas_have_names() {
    let names: Vec<String> = Area::ALL.iter().map(ToString::to_string).collect();
    assert_eq!(names, ["input", "result", "next"]);
    assert_eq!(Area::Result.name(), "result");
}

/// Random schemas: up to 12 fields with keys of one or two parts, any
/// dtype, small shapes (zero dims included).
fn arb_schema() -> impl Strategy<Value = Schema> {
    let field = (
        prop::sample::select(vec!["a", "b", "c", "obs", "reward"]),
        prop::option::of(prop::sample::select(vec!["x", "y", "z"])),
        prop::sample::select(DType::ALL.to_vec()),
        prop::collection::vec(0usize..9, 0..4),
    );
    prop::collection::vec(field, 0..12).prop_filter_map("keys that clash", |fields| {
        let fields = fields
            .into_iter()
            .map(|(outer, inner, dtype, shape)| {
                let key = match inner {
                    Some(inner) => NestedKey::from((outer, inner)),
                    None => NestedKey::from(outer),
                };
                Field::new(key, dtype, &shape).unwrap()
            })
            .collect();
        Schema::new(&[], fields).ok()
    })
}

fn disjoint(a: &Range<usize>, b: &Range<usize>) -> bool {
    a.is_empty() || b.is_empty() || a.end <= b.start || b.end <= a.start
}

proptest! {
    #[test]
    fn layouts_keep_every_field_inside_aligned_and_apart(
        input in arb_schema(),
        result in arb_schema(),
        next in arb_schema(),
        slots in 1usize..9,
    ) {
        let layout = Layout::new(&input, &result, &next, slots).unwrap();
        let total = layout.total_size();
        prop_assert_eq!(total, SLOTS_OFFSET + slots * layout.slot_size());
        prop_assert_eq!(layout.slot_size() % CACHE_LINE, 0);

        // Headers: the region's, then one per slot, in order and apart.
        let mut headers: Vec<Range<usize>> = Vec::new();
        headers.push(0..SLOTS_OFFSET);
        let mut fields = Vec::new();
        for slot in 0..slots {
            let start = layout.slot_offset(slot);
            prop_assert_eq!(start % CACHE_LINE, 0);
            prop_assert_eq!(layout.slot_header_range(slot), start..start + SLOT_HEADER_SIZE);
            headers.push(layout.slot_header_range(slot));
            let slot_range = start..start + layout.slot_size();
            prop_assert!(slot_range.end <= total);
            for area in Area::ALL {
                let area_start = layout.area_offset(slot, area);
                let area_range = area_start..area_start + layout.area_size(area);
                prop_assert_eq!(area_start % CACHE_LINE, 0);
                prop_assert_eq!(layout.area_size(area) % CACHE_LINE, 0);
                prop_assert!(area_range.start >= start + SLOT_HEADER_SIZE);
                prop_assert!(area_range.end <= slot_range.end);
                for (i, field) in layout.schema(area).fields().iter().enumerate() {
                    let range = layout.field_range(slot, area, i);
                    prop_assert_eq!(range.start, layout.field_offset(slot, area, i));
                    prop_assert_eq!(range.len(), field.nbytes());
                    prop_assert_eq!(range.start % field.dtype().size(), 0);
                    prop_assert_eq!(range.start % FIELD_ALIGN, 0);
                    prop_assert!(range.start >= area_range.start);
                    prop_assert!(range.end <= area_range.end);
                    prop_assert!(range.end <= total);
                    // A field's padding to the next 8-byte boundary is its
                    // own (copied as whole words): inside the area, and
                    // apart from every other field and header below.
                    let padded = range.start..range.end.div_ceil(FIELD_ALIGN) * FIELD_ALIGN;
                    prop_assert!(padded.end <= area_range.end);
                    fields.push(padded);
                }
            }
        }
        for (i, a) in headers.iter().enumerate() {
            for b in &headers[i + 1..] {
                prop_assert!(disjoint(a, b), "headers {:?} and {:?} overlap", a, b);
            }
            for f in &fields {
                prop_assert!(disjoint(a, f), "field {:?} overlaps header {:?}", f, a);
            }
        }
        for (i, a) in fields.iter().enumerate() {
            for b in &fields[i + 1..] {
                prop_assert!(disjoint(a, b), "fields {:?} and {:?} overlap", a, b);
            }
        }
        // Areas of one slot are consecutive: input, result, next.
        prop_assert_eq!(
            layout.area_offset(0, Area::Result),
            layout.area_offset(0, Area::Input) + layout.area_size(Area::Input)
        );
        prop_assert_eq!(
            layout.area_offset(0, Area::Next),
            layout.area_offset(0, Area::Result) + layout.area_size(Area::Result)
        );
    }

    #[test]
    fn the_fingerprint_follows_the_schemas(
        input in arb_schema(),
        result in arb_schema(),
        slots in 1usize..9,
    ) {
        let empty = Schema::empty(&[]);
        let a = Layout::new(&input, &result, &empty, slots).unwrap();
        let b = Layout::new(
            &Schema::decode(&input.encode()).unwrap(),
            &Schema::decode(&result.encode()).unwrap(),
            &empty,
            slots,
        )
        .unwrap();
        prop_assert_eq!(a.fingerprint(), b.fingerprint());
        prop_assert_eq!(&a, &b);
        let c = Layout::new(&input, &result, &empty, slots + 1).unwrap();
        prop_assert_ne!(a.fingerprint(), c.fingerprint());
    }
}
