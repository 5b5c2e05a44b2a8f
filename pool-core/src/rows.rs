//! `Rows`: where a backend leaves each env's result, chosen by the pool
//! from its stack mode and passed to each backend's `start`.

/// Where a pool's backend leaves each env's result for the caller: what
/// the pool chooses for its stack mode, not an option of its user.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Rows {
    /// In the env's own buffers only.
    #[default]
    PerEnv,
    /// Also in the env's row of a batch of all envs (EnvPool's state
    /// buffer), when every env's results have one layout, so that a
    /// receive of many results copies nothing more: what a dense stack
    /// wants.
    Batch,
}
