//! Properties of lent rows: for any batch of tensors, each row's view holds
//! that row, a gather of any rows is the batch's own gather of them, rows
//! written through their views are what the next gather copies out, and
//! rows written from another batch's are what the views then hold.

mod common;

use proptest::collection::vec;
use proptest::prelude::*;
use tensordict::{Entry, LentRows, TensorDict};

/// Whether `td` holds a non-tensor at any depth.
fn has_non_tensor(td: &TensorDict) -> bool {
    td.iter().any(|(_, entry)| match entry {
        Entry::NonTensor(_) => true,
        Entry::Dict(sub) => has_non_tensor(sub),
        Entry::Tensor(_) => false,
    })
}

/// A batch (non-empty first dim), rows to gather, and a batch of the same
/// structure whose rows are written through the views.
fn case() -> impl Strategy<Value = (TensorDict, Vec<usize>, TensorDict)> {
    common::batched_tensordict().prop_flat_map(|td| {
        let rows = td.batch_size()[0];
        let other = common::same_structure(&td);
        (Just(td), vec(0..rows, 0..6), other)
    })
}

/// Consecutive rows from the first of `picked`, as many (or to the last
/// of `rows`).
fn run_from(picked: &[usize], rows: usize) -> Vec<usize> {
    let start = picked.first().copied().unwrap_or(0);
    (start..rows).take(picked.len()).collect()
}

/// As [`case`], with which rows a mixed gather takes from the other batch
/// (and every row in order, to gather them all).
fn mixed() -> impl Strategy<Value = (TensorDict, Vec<usize>, TensorDict, Vec<bool>, Vec<bool>)> {
    case().prop_flat_map(|(td, picked, other)| {
        let (n, rows) = (picked.len(), td.batch_size()[0]);
        (
            Just(td),
            Just(picked),
            Just(other),
            vec(any::<bool>(), n),
            vec(any::<bool>(), rows),
        )
    })
}

proptest! {
    #[allow(unsafe_code)]
    #[test]
    fn views_hold_their_rows_and_gathers_copy_them((td, picked, other) in case()) {
        let Some((mut rows, mut views)) = LentRows::lend(&td) else {
            prop_assert!(has_non_tensor(&td));
            return Ok(());
        };
        prop_assert!(!has_non_tensor(&td));
        prop_assert_eq!(rows.rows(), td.batch_size()[0]);
        let check = rows.view_check();
        for (row, view) in views.iter().enumerate() {
            prop_assert_eq!(view, &td.index(row).unwrap());
            prop_assert!(rows.is_view(row, view));
            // The check apart from the batch agrees: a row's view is no
            // other row's, and a copy of it is no view.
            prop_assert!(check.is_view(row, view));
            // (Rows of no bytes all sit at offset 0: each is every row's.)
            let has_bytes = view
                .items(true, true)
                .iter()
                .any(|(_, entry)| matches!(entry, Entry::Tensor(t) if t.nbytes() > 0));
            if row + 1 < rows.rows() && has_bytes {
                prop_assert!(!check.is_view(row + 1, view) && check.is_view(row + 1, &views[row + 1]));
            }
            let copy = td.index(row).unwrap();
            if has_bytes {
                prop_assert!(!check.is_view(row, &copy) && !rows.is_view(row, &copy));
            }
        }
        // SAFETY: one thread: no view is in use during a gather.
        prop_assert_eq!(unsafe { rows.gather(&picked) }, td.gather_rows(&picked).unwrap());
        let every: Vec<usize> = (0..rows.rows()).collect();
        // SAFETY: one thread: no view is in use.
        prop_assert_eq!(unsafe { rows.gather(&every) }, td.clone());
        // A run of consecutive rows (one copy a column).
        let run = run_from(&picked, rows.rows());
        // SAFETY: one thread: no view is in use.
        prop_assert_eq!(unsafe { rows.gather(&run) }, td.gather_rows(&run).unwrap());

        // Written through the views (in place: still views), the rows are
        // the other batch's.
        for (row, view) in views.iter_mut().enumerate() {
            view.fill_from(&other.index(row).unwrap()).unwrap();
            prop_assert!(rows.is_view(row, view));
        }
        // SAFETY: one thread: no view is in use.
        prop_assert_eq!(unsafe { rows.gather(&every) }, other.clone());
        // SAFETY: one thread: no view is in use.
        prop_assert_eq!(unsafe { rows.gather(&picked) }, other.gather_rows(&picked).unwrap());
        // Written by the batch's owner from copies, the same.
        for row in 0..rows.rows() {
            // SAFETY: one thread: no view is in use.
            unsafe { rows.write_row(row, &td.index(row).unwrap()) }.unwrap();
        }
        // SAFETY: one thread: no view is in use.
        prop_assert_eq!(unsafe { rows.gather(&every) }, td.clone());
        prop_assert_eq!(&views[0], &td.index(0).unwrap());
    }
}

proptest! {
    /// A mixed gather takes each row from the batch its flag names: the
    /// same as the rows gathered one by one.
    #[allow(unsafe_code)]
    #[test]
    fn a_mixed_gather_takes_each_row_from_its_batch(
        (td, picked, other, instead, all_instead) in mixed()
    ) {
        let (Some((mut mine, _views)), Some((theirs, _other_views))) =
            (LentRows::lend(&td), LentRows::lend(&other))
        else {
            return Ok(());
        };
        let map = mine.leaves_in(&theirs).expect("one structure");
        let every: Vec<usize> = (0..mine.rows()).collect();
        let run = run_from(&picked, mine.rows());
        let run_instead = instead[..run.len()].to_vec();
        for (rows, flags) in [(&picked, &instead), (&every, &all_instead), (&run, &run_instead)] {
            // SAFETY: one thread: no view is in use during a gather.
            let out = unsafe { mine.gather_or(rows, flags, &theirs, &map) };
            prop_assert_eq!(out.batch_size()[0], rows.len());
            for (j, (&row, &from_other)) in rows.iter().zip(flags.iter()).enumerate() {
                let source = if from_other { &other } else { &td };
                prop_assert_eq!(out.index(j).unwrap(), source.index(row).unwrap());
            }
        }
        // A batch lacking a key of this one maps nowhere.
        let mut fewer = TensorDict::new(td.batch_size());
        if let Some((key, entry)) = td.items(true, true).into_iter().nth(1) {
            fewer.set(&key, entry.clone()).unwrap();
            if let Some((smaller, _)) = LentRows::lend(&fewer) {
                prop_assert!(mine.leaves_in(&smaller).is_none());
                prop_assert!(smaller.leaves_in(&mine).is_some());
            }
        }
    }
}

proptest! {
    /// Rows written from another batch (any of its rows, each into any
    /// row, or all in order) are that batch's rows, as the views see them
    /// and as a gather copies them out; the rows not written keep theirs.
    #[allow(unsafe_code)]
    #[test]
    fn rows_written_from_a_batch_are_its_rows((td, picked, other) in case()) {
        let Some((mut rows, views)) = LentRows::lend(&td) else {
            return Ok(());
        };
        let n = rows.rows();
        // Row `picked[j]` of `other` into row `(j * 7 + 3) % n`, the first
        // write of each row kept (later picks of a written row skipped).
        let mut picks: Vec<(usize, Option<usize>)> = Vec::new();
        for (j, &from) in picked.iter().enumerate() {
            let row = (j * 7 + 3) % n;
            if picks.iter().all(|&(r, _)| r != row) {
                picks.push((row, Some(from)));
            }
        }
        // SAFETY: one thread: no view is in use.
        unsafe { rows.write_rows_from(&other, &picks) }.unwrap();
        for (row, view) in views.iter().enumerate() {
            let expected = match picks.iter().find(|&&(r, _)| r == row) {
                Some(&(_, Some(from))) => other.index(from).unwrap(),
                _ => td.index(row).unwrap(),
            };
            prop_assert_eq!(view, &expected);
        }
        let every: Vec<(usize, Option<usize>)> = (0..n).map(|row| (row, Some(row))).collect();
        // SAFETY: one thread: no view is in use.
        unsafe { rows.write_rows_from(&other, &every) }.unwrap();
        let all: Vec<usize> = (0..n).collect();
        // SAFETY: one thread: no view is in use.
        prop_assert_eq!(unsafe { rows.gather(&all) }, other.clone());
        // One row given whole.
        // SAFETY: one thread: no view is in use.
        unsafe { rows.write_rows_from(&td.index(0).unwrap(), &[(n - 1, None)]) }.unwrap();
        prop_assert_eq!(&views[n - 1], &td.index(0).unwrap());
    }
}
