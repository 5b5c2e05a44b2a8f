//! `peek_cells`: how both backends read the results of several envs at
//! once, their cells locked in one order.

use std::ops::DerefMut;

use smallvec::SmallVec;

use crate::Output;

/// How many envs a read of several at once holds without allocating.
const INLINE_ENVS: usize = 64;

/// Reads the results of `envs` (distinct) at once, as both backends'
/// `peek_many` do: locks each env's cell (`lock_cell`) in ascending env
/// order (whatever the order of `envs`: two readers never wait on each
/// other crosswise), brings each up to date (`sync`, with the env and its
/// cell; dropped once every cell is locked, with whatever it holds), then
/// calls `read` with each env's [`Output`] (`output`), in
/// the order of `envs`, while every cell stays locked. The first env's
/// error (in the order of `envs`) is returned instead. Allocates nothing
/// for up to 64 envs.
pub fn peek_cells<G, C, E, R>(
    envs: &[usize],
    lock_cell: impl Fn(usize) -> G,
    sync: impl FnMut(usize, &mut C),
    output: impl Fn(&C) -> Result<Output<'_>, E>,
    read: impl FnOnce(&[Output<'_>]) -> R,
) -> Result<R, E>
where
    G: DerefMut<Target = C>,
    C: ?Sized,
{
    let mut sync = sync;
    let ascending = envs.windows(2).all(|pair| pair[0] < pair[1]);
    let mut guards: SmallVec<[Option<G>; INLINE_ENVS]> = SmallVec::new();
    if ascending {
        for &env in envs {
            let mut cell = lock_cell(env);
            sync(env, &mut cell);
            guards.push(Some(cell));
        }
    } else {
        let mut order: SmallVec<[usize; INLINE_ENVS]> = (0..envs.len()).collect();
        order.sort_unstable_by_key(|&j| envs[j]);
        // A repeated env would lock its cell twice: a hang. The facade never
        // asks for one; a caller that does is a bug, stopped here.
        assert!(
            order.windows(2).all(|pair| envs[pair[0]] != envs[pair[1]]),
            "peek_cells: env repeated in {envs:?}"
        );
        guards.extend(envs.iter().map(|_| None));
        for j in order {
            let mut cell = lock_cell(envs[j]);
            sync(envs[j], &mut cell);
            guards[j] = Some(cell);
        }
    }
    drop(sync);
    let mut outputs: SmallVec<[Output<'_>; INLINE_ENVS]> = SmallVec::new();
    for guard in guards.iter().flatten() {
        outputs.push(output(&**guard)?);
    }
    Ok(read(&outputs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Op;
    use std::sync::Mutex;
    use tensordict::{Tensor, TensorDict};

    fn td(value: f32) -> TensorDict {
        let mut td = TensorDict::new(&[]);
        td.set("x", Tensor::full(&[2], value)).unwrap();
        td
    }

    fn first(td: &TensorDict) -> f32 {
        td.tensor("x").unwrap().to_vec::<f32>().unwrap()[0]
    }

    /// `peek_cells` locks in ascending order, syncs each cell, hands the
    /// outputs in the caller's order, and returns the first error.
    #[test]
    fn peek_cells_reads_in_the_callers_order() {
        let cells: Vec<Mutex<(TensorDict, Option<String>)>> =
            (0..4).map(|i| Mutex::new((td(i as f32), None))).collect();
        let mut synced = Vec::new();
        let firsts = peek_cells(
            &[3, 0, 2],
            |env| cells[env].lock().unwrap(),
            |env, _cell| synced.push(env),
            |cell| match &cell.1 {
                Some(err) => Err(err.clone()),
                None => Ok(Output {
                    op: Op::Step,
                    next: &cell.0,
                    root: &cell.0,
                }),
            },
            |outputs| outputs.iter().map(|o| first(o.next)).collect::<Vec<_>>(),
        );
        assert_eq!(firsts, Ok(vec![3.0, 0.0, 2.0]));
        assert_eq!(synced, vec![0, 2, 3], "locked in ascending order");
        cells[2].lock().unwrap().1 = Some("env 2 failed".into());
        let failed = peek_cells(
            &[0, 2],
            |env| cells[env].lock().unwrap(),
            |_, _| {},
            |cell| match &cell.1 {
                Some(err) => Err(err.clone()),
                None => Ok(Output {
                    op: Op::Step,
                    next: &cell.0,
                    root: &cell.0,
                }),
            },
            |outputs| outputs.len(),
        );
        assert_eq!(failed, Err("env 2 failed".to_owned()));
    }
}
