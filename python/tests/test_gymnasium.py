"""``rlpool.gymnasium``: differential tests against Gymnasium's own vector
envs (the same env functions, seeds and actions give the same results step
for step, dtypes included), its state errors, and what rlpool adds (typed
errors naming the env, ``send``/``recv``, ``make_vec`` on the Rust envs).

Gymnasium's ``SyncVectorEnv`` is the reference where it behaves as its
``AsyncVectorEnv`` does (it is much faster to start); ``AsyncVectorEnv``
itself is the reference in a few tests.
"""

from __future__ import annotations

import functools
import multiprocessing
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium
import numpy as np
import pytest
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium_envs import Countdown, Failing, Labeled, Nested, Spoken
from helpers import CONFIGS, Config

import rlpool
import rlpool._pyenv
from rlpool.gymnasium import AsyncVectorEnv, SpaceMismatch, WaitTimeout, make_vec

MODES = (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED)
SHM = CONFIGS[2]
THREADS = CONFIGS[0]

VecFactory = Callable[..., AsyncVectorEnv]


@pytest.fixture
def vecs() -> Iterator[VecFactory]:
    """Builds our vector envs on a configuration (``config=``, default
    threads), two envs per worker process; every one is closed when the
    test ends."""
    made: list[Any] = []

    def make(env_fns: list[Any], config: Config = THREADS, **kwargs: Any) -> AsyncVectorEnv:
        options: dict[str, Any] = {"backend": config.backend, "exchange": config.exchange}
        if config.procs:
            options["envs_per_worker"] = 2
        options.update(kwargs)
        env = AsyncVectorEnv(env_fns, **options)
        made.append(env)
        return env

    try:
        yield make
    finally:
        for env in made:
            env.close(terminate=True)


def assert_same(mine: Any, ref: Any, where: str = "result") -> None:
    """Equal values, structures (dicts by key, tuples) and array dtypes."""
    if isinstance(ref, dict):
        assert isinstance(mine, dict), f"{where}: {type(mine).__name__}, not a dict"
        assert sorted(mine) == sorted(ref), f"{where}: keys {sorted(mine)} != {sorted(ref)}"
        for key in ref:
            assert_same(mine[key], ref[key], f"{where}[{key!r}]")
    elif isinstance(ref, tuple):
        assert isinstance(mine, tuple), f"{where}: {type(mine).__name__}, not a tuple"
        assert len(mine) == len(ref), f"{where}: {len(mine)} items, not {len(ref)}"
        for i, (m, r) in enumerate(zip(mine, ref)):
            assert_same(m, r, f"{where}[{i}]")
    elif isinstance(ref, np.ndarray):
        assert isinstance(mine, np.ndarray), f"{where}: {type(mine).__name__}, not an array"
        assert (mine.dtype, mine.shape) == (ref.dtype, ref.shape), (
            f"{where}: {mine.dtype}{mine.shape} != {ref.dtype}{ref.shape}"
        )
        if ref.dtype == object:
            for index in np.ndindex(ref.shape):
                assert_same(mine[index], ref[index], f"{where}[{index}]")
        else:
            np.testing.assert_array_equal(mine, ref, err_msg=where)
    else:
        assert mine == ref, f"{where}: {mine!r} != {ref!r}"


def countdowns(n: int, **kwargs: Any) -> list[Callable[[], Countdown]]:
    return [functools.partial(Countdown, **kwargs)] * n


def run_side_by_side(mine: Any, ref: Any, steps: int, mode: AutoresetMode) -> int:
    """Resets and steps both with the same seeds and actions, comparing
    every result; with autoreset disabled, ends episodes by partial resets
    with seeds and options. Returns how many episodes ended."""
    ref.action_space.seed(3)
    assert_same(mine.reset(seed=7), ref.reset(seed=7), "reset")
    ended = 0
    for t in range(steps):
        actions = ref.action_space.sample()
        got, want = mine.step(actions), ref.step(actions)
        assert_same(got, want, f"step {t}")
        done = want[2] | want[3]
        ended += int(done.sum())
        if mode is AutoresetMode.DISABLED and done.any():
            seeds = [100 * t + i for i in range(ref.num_envs)]
            mine_options = {"reset_mask": done.copy(), "level": t}
            ref_options = {"reset_mask": done.copy(), "level": t}
            got = mine.reset(seed=seeds, options=mine_options)
            assert_same(got, ref.reset(seed=seeds, options=ref_options), f"reset at {t}")
            assert mine_options == ref_options == {"level": t}
        if t == steps // 2:
            seeds = [11 + i for i in range(ref.num_envs)]
            assert_same(mine.reset(seed=seeds), ref.reset(seed=seeds), f"reset at {t}")
    return ended


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_autoreset_modes_match_gymnasium(
    vecs: VecFactory, config: Config, mode: AutoresetMode
) -> None:
    fns = countdowns(3)
    mine = vecs(fns, config, autoreset_mode=mode)
    ref = SyncVectorEnv(fns, autoreset_mode=mode)
    assert mine.metadata == ref.metadata
    assert mine.metadata["autoreset_mode"] is mode
    assert (mine.single_action_space, mine.action_space) == (
        ref.single_action_space,
        ref.action_space,
    )
    assert mine.observation_space == ref.observation_space
    assert run_side_by_side(mine, ref, 24, mode) >= 3


@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_dict_and_tuple_spaces_match_gymnasium(vecs: VecFactory, config: Config) -> None:
    fns = [Nested] * 2
    mode = AutoresetMode.SAME_STEP
    mine = vecs(fns, config, autoreset_mode=mode)
    ref = SyncVectorEnv(fns, autoreset_mode=mode)
    assert mine.single_observation_space == ref.single_observation_space
    assert mine.observation_space == ref.observation_space
    assert mine.action_space == ref.action_space
    assert run_side_by_side(mine, ref, 14, mode) >= 2


@pytest.mark.parametrize("config", [THREADS, SHM], ids=str)
def test_spaces_without_a_fixed_shape(vecs: VecFactory, config: Config) -> None:
    fns = [Labeled] * 2
    mode = AutoresetMode.SAME_STEP
    mine = vecs(fns, config, autoreset_mode=mode, exchange="auto")
    if config.procs:
        # Shared memory asked for (Gymnasium's default): the Text entry
        # takes the queue, and the pool says why.
        assert mine.pool.resolved_exchange == "queue"
        assert "name" in str(mine.pool.exchange_reason)
    ref = SyncVectorEnv(fns, autoreset_mode=mode)
    assert mine.observation_space == ref.observation_space
    assert run_side_by_side(mine, ref, 10, mode) >= 2


def test_infos_decoded_only_for_envs_that_returned_some(
    vecs: VecFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoded: list[dict[str, Any]] = []

    def counting(row: Any) -> dict[str, Any]:
        info = rlpool.decode_info(row)
        decoded.append(info)
        return info

    # The one place infos are decoded (rlpool.gymnasium reads them through it).
    monkeypatch.setattr(rlpool._pyenv, "decode_info", counting)
    mine = vecs(countdowns(3))
    ref = SyncVectorEnv(countdowns(3))
    actions = np.array([0, 1, 2])
    assert_same(mine.reset(seed=3), ref.reset(seed=3), "reset")
    assert decoded == []
    with_info = 0
    for t in range(12):
        want = ref.step(actions)
        assert_same(mine.step(actions), want, f"step {t}")
        masks = [v for k, v in want[4].items() if k.startswith("_")]
        with_info += int(np.logical_or.reduce(masks).sum()) if masks else 0
    assert with_info > 0
    assert len(decoded) == with_info
    assert all(decoded)


def test_matches_gymnasium_async_vector_env(vecs: VecFactory) -> None:
    fns = countdowns(2, render_mode="rgb_array")
    mine = vecs(fns, SHM)
    ref = gymnasium.vector.AsyncVectorEnv(fns)
    try:
        assert run_side_by_side(mine, ref, 16, AutoresetMode.NEXT_STEP) >= 2
        assert_same(mine.render(), ref.render(), "render")
        assert_same(mine.np_random_seed, ref.np_random_seed, "np_random_seed")
        assert repr(mine) == repr(ref) == "AsyncVectorEnv(num_envs=2)"
    finally:
        ref.close()


def test_observation_mode_different_and_custom(vecs: VecFactory) -> None:
    fns = [Countdown, functools.partial(Countdown, bound=5.0)]
    with pytest.raises(SpaceMismatch):
        vecs(fns)
    mine = vecs(fns, observation_mode="different")
    ref = SyncVectorEnv(fns, observation_mode="different")
    assert mine.observation_space == ref.observation_space
    single = gymnasium.spaces.Box(-5, 5, (3,), np.float32)
    custom = (gymnasium.vector.utils.batch_space(single, 2), single)
    mine = vecs(fns, observation_mode=custom)
    assert (mine.observation_space, mine.single_observation_space) == custom


@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_env_exception(vecs: VecFactory, config: Config) -> None:
    fns = [Countdown, functools.partial(Failing, fail_at=2), Countdown]
    mine = vecs(fns, config)
    ref = SyncVectorEnv(fns)
    mine.reset(seed=0)
    ref.reset(seed=0)
    actions = np.array([1, 1, 1])
    mine.step(actions)
    ref.step(actions)
    with pytest.raises(ValueError, match="deliberate failure at step 2"):
        ref.step(actions)
    with pytest.raises(rlpool.EnvFailed) as caught:
        mine.step(actions)
    assert caught.value.env == 1
    assert "ValueError: deliberate failure at step 2" in caught.value.cause
    assert "deliberate failure at step 2" in str(caught.value)
    # The other envs went on; everything can be reset and stepped again.
    obs, _ = mine.reset(seed=0)
    assert obs.shape == (3, 3)
    assert mine.step(actions)[0].shape == (3, 3)


@pytest.mark.filterwarnings("ignore:.*(Worker-1|Traceback|Raising the last):UserWarning")
def test_env_exception_in_gymnasium_async_too(vecs: VecFactory) -> None:
    fns = [Countdown, functools.partial(Failing, fail_at=1)]
    ref = gymnasium.vector.AsyncVectorEnv(fns)
    mine = vecs(fns, SHM)
    try:
        ref.reset(seed=0)
        mine.reset(seed=0)
        with pytest.raises(ValueError, match="deliberate failure at step 1"):
            ref.step(np.array([0, 0]))
        with pytest.raises(rlpool.EnvFailed, match="deliberate failure at step 1"):
            mine.step(np.array([0, 0]))
    finally:
        ref.close(terminate=True)


@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_call_get_attr_set_attr_render(vecs: VecFactory, config: Config) -> None:
    fns = countdowns(2, render_mode="rgb_array")
    mine = vecs(fns, config)
    ref = SyncVectorEnv(fns)
    for env in (mine, ref):
        env.reset(seed=1)
        env.step(np.array([2, 0]))
        env.set_attr("scale", [2.0, -1.0])
    assert_same(mine.get_attr("scale"), ref.get_attr("scale"), "scale")
    assert_same(mine.call("peek", 5), ref.call("peek", 5), "peek")
    assert_same(mine.call("max_steps"), (6, 6), "max_steps")
    assert_same(mine.render(), ref.render(), "render")
    assert mine.render_mode == ref.render_mode == "rgb_array"
    actions = np.array([1, 2])
    assert_same(mine.step(actions), ref.step(actions), "step after set_attr")
    mine.set_attr("scale", 0.5)
    assert mine.get_attr("scale") == (0.5, 0.5)
    mine.call_async("peek", k=2)
    assert mine.call_wait(timeout=10) == ref.call("peek", k=2)
    with pytest.raises(rlpool.InvalidArgument, match="use `step` directly"):
        mine.call("step", np.array([0, 0]))
    with pytest.raises(rlpool.InvalidArgument, match="Got `3` values for 2 environments"):
        mine.set_attr("scale", [1.0, 2.0, 3.0])


def test_attributes_through_wrappers(vecs: VecFactory) -> None:
    def wrapped() -> gymnasium.Env[Any, Any]:
        return gymnasium.wrappers.TimeLimit(Countdown(), max_episode_steps=4)

    fns = [wrapped] * 2
    mine = vecs(fns, SHM)
    ref = SyncVectorEnv(fns)
    for env in (mine, ref):
        env.reset(seed=2)
        env.set_attr("scale", 3.0)
    assert mine.get_attr("scale") == ref.get_attr("scale") == (3.0, 3.0)
    assert mine.call("peek", 1) == ref.call("peek", 1)
    actions = np.array([1, 1])
    assert_same(mine.step(actions), ref.step(actions), "step")


@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_timeouts_keep_the_call_pending(vecs: VecFactory, config: Config) -> None:
    mine = vecs(countdowns(2, delay=0.4), config)
    mine.reset(seed=0)
    mine.step_async(np.array([0, 1]))
    with pytest.raises(WaitTimeout) as caught:
        mine.step_wait(timeout=0.01)
    assert isinstance(caught.value, multiprocessing.TimeoutError)
    assert isinstance(caught.value, rlpool.Timeout)
    assert "step_wait" in str(caught.value)
    obs, rewards, *_ = mine.step_wait(timeout=20)
    assert obs.shape == (2, 3)
    assert rewards.dtype == np.float64
    mine.set_attr("delay", [0.0, 0.0])
    assert mine.step(np.array([0, 0]))[0].shape == (2, 3)


def test_close_twice_and_closed_errors(vecs: VecFactory) -> None:
    mine = vecs(countdowns(2), SHM)
    mine.reset(seed=0)
    mine.step_async(np.array([0, 1]))
    with pytest.warns(UserWarning, match="Calling `close` while waiting for a pending call"):
        mine.close()  # waits for the pending step first
    mine.close()
    assert mine.closed
    for call in (
        lambda: mine.reset(),
        lambda: mine.step(np.array([0, 0])),
        lambda: mine.get_attr("scale"),
        lambda: mine.set_attr("scale", 1.0),
        lambda: mine.send(np.array([0, 0])),
        lambda: mine.recv(),
    ):
        with pytest.raises(ClosedEnvironmentError):
            call()
    terminated = vecs(countdowns(2), SHM)
    terminated.close(terminate=True)
    assert terminated.closed


@pytest.mark.parametrize("config", [THREADS, SHM], ids=str)
def test_close_closes_every_env(vecs: VecFactory, config: Config, tmp_path: Any) -> None:
    log = tmp_path / "closed"
    mine = vecs(countdowns(3, close_log=str(log)), config)
    mine.reset(seed=0)
    mine.close()
    assert log.read_text().splitlines() == ["closed"] * 3


def test_state_errors(vecs: VecFactory) -> None:
    mine = vecs(countdowns(2))
    with pytest.raises(NoAsyncCallError):
        mine.step_wait()
    with pytest.raises(NoAsyncCallError):
        mine.reset_wait()
    with pytest.raises(NoAsyncCallError):
        mine.call_wait()
    with pytest.raises(NoAsyncCallError):
        mine.recv()
    mine.reset_async(seed=0)
    for call in (
        lambda: mine.reset_async(),
        lambda: mine.step_async(np.array([0, 0])),
        lambda: mine.call_async("peek", 1),
        lambda: mine.set_attr("scale", 1.0),
        lambda: mine.send(np.array([0, 0])),
    ):
        with pytest.raises(AlreadyPendingCallError) as caught:
            call()
        assert caught.value.name == "reset"
    with pytest.raises(NoAsyncCallError):
        mine.step_wait()
    mine.reset_wait()
    mine.send(np.array([0, 1]))
    with pytest.raises(rlpool.Busy):
        mine.send(np.array([0]), [1])
    with pytest.raises(AlreadyPendingCallError, match=r"envs \[0, 1\] have results to `recv`"):
        mine.step_async(np.array([0, 0]))
    mine.recv()
    mine.step(np.array([0, 0]))


def test_invalid_arguments(vecs: VecFactory) -> None:
    fns = countdowns(2)
    with pytest.raises(rlpool.InvalidArgument, match="worker="):
        AsyncVectorEnv(fns, worker=lambda *args: None)
    with pytest.raises(rlpool.InvalidArgument, match="autoreset_mode='Sometimes'"):
        AsyncVectorEnv(fns, autoreset_mode="Sometimes")
    with pytest.raises(rlpool.InvalidArgument, match="env_fns is empty"):
        AsyncVectorEnv([])
    with pytest.raises(rlpool.InvalidArgument, match="max_concurrency=0"):
        AsyncVectorEnv(fns, max_concurrency=0)
    with pytest.raises(rlpool.InvalidArgument, match="backend='fork'"):
        AsyncVectorEnv(fns, backend="fork")  # type: ignore[arg-type]
    with pytest.raises(rlpool.InvalidArgument, match="Invalid `observation_mode`"):
        vecs(fns, observation_mode="similar")
    with pytest.raises(SpaceMismatch, match="env 1's observation space") as caught:
        vecs([Countdown, functools.partial(Countdown, bound=1.0)])
    assert isinstance(caught.value, RuntimeError)
    assert caught.value.env == 1
    with pytest.raises(SpaceMismatch, match="env 1's observation space Dict"):
        vecs([Countdown, Nested], SHM, exchange="auto")
    with pytest.raises(SpaceMismatch, match="env 2's action space Discrete\\(2\\)"):
        vecs([Countdown, Countdown, functools.partial(Countdown, actions=2)])
    with pytest.raises(rlpool.InvalidType, match="both elements of observation_mode"):
        vecs(fns, observation_mode=(1, 2))
    spoken = vecs([Spoken] * 2)
    spoken.reset(seed=0)
    with pytest.raises(rlpool.InvalidType, match=r"action entry 'action' \(Text"):
        spoken.step(("a", "b"))
    mine = vecs(fns)
    with pytest.raises(rlpool.InvalidArgument, match="length must match num_envs=2"):
        mine.reset(seed=[1, 2, 3])
    bad_masks: list[tuple[Any, type[Exception], str]] = [
        ([True, False], rlpool.InvalidType, "must be a numpy array"),
        (np.array([True]), rlpool.InvalidArgument, "must have shape `\\(2,\\)`"),
        (np.array([1, 0]), rlpool.InvalidType, "must have `dtype=np.bool_`"),
        (np.array([False, False]), rlpool.InvalidArgument, "at least one True"),
    ]
    for mask, error, message in bad_masks:
        with pytest.raises(error, match=message):
            mine.reset(options={"reset_mask": mask})
    with pytest.raises(rlpool.InvalidArgument, match="batch_size=3"):
        vecs(fns, batch_size=3)
    mine.reset(seed=0)
    mine.send(np.array([0, 0]))
    with pytest.raises(rlpool.InvalidArgument, match="min_get=2, max_get=1"):
        mine.recv(min_get=2, max_get=1)


def per_env_reference(fns: list[Any], seed: int) -> list[SyncVectorEnv]:
    """One single-env SyncVectorEnv per env, seeded as env ``i`` of a vector
    env reset with ``seed`` (``seed + i``)."""
    refs = [SyncVectorEnv([fn]) for fn in fns]
    for i, ref in enumerate(refs):
        ref.reset(seed=seed + i)
    return refs


def row_info(infos: dict[str, Any], row: int) -> dict[str, Any]:
    """Row ``row`` of flat vector-form infos: the keys whose mask is set."""
    return {k: v[row] for k, v in infos.items() if not k.startswith("_") and infos[f"_{k}"][row]}


@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_send_recv_matches_per_env_steps(vecs: VecFactory, config: Config) -> None:
    fns = countdowns(4)
    mine = vecs(fns, config, batch_size=2)
    refs = per_env_reference(fns, seed=5)
    mine.reset(seed=5)
    rng = np.random.default_rng(0)
    todo = rng.integers(0, 3, 4)
    mine.send(todo)
    for _ in range(12):
        obs, rewards, terminated, truncated, infos = mine.recv(timeout=20)
        ids = infos.pop("env_id")
        assert ids.dtype == np.int32
        assert len(ids) == 2
        assert list(ids) == sorted(ids)
        for row, i in enumerate(ids.tolist()):
            want = refs[i].step(todo[i : i + 1])
            got = (obs[row], rewards[row], terminated[row], truncated[row])
            assert_same(got, tuple(a[0] for a in want[:4]), f"env {i}")
            assert_same(row_info(infos, row), row_info(want[4], 0), f"env {i}'s info")
        todo[ids] = rng.integers(0, 3, len(ids))
        mine.send(todo[ids], ids)
    _, _, _, _, infos = mine.recv(min_get=4, max_get=4, timeout=20)
    assert infos["env_id"].tolist() == [0, 1, 2, 3]


def test_make_vec_runs_rust_envs() -> None:
    with make_vec("CartPole-v1", num_envs=3) as envs:
        ref = gymnasium.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync")
        assert envs.single_observation_space == ref.single_observation_space
        assert envs.observation_space == ref.observation_space
        assert envs.action_space == ref.action_space
        assert envs.metadata == ref.metadata
        assert envs.spec is not None
        assert envs.spec.id == "CartPole-v1"
        obs, infos = envs.reset(seed=4)
        again, _ = envs.reset(seed=4)
        np.testing.assert_array_equal(obs, again)
        assert (obs.shape, obs.dtype, infos) == ((3, 4), np.float32, {})
        assert np.all(np.abs(obs) < 0.05)
        done = np.zeros(3, dtype=bool)
        ended = 0
        for _ in range(200):
            obs, rewards, terminated, truncated, infos = envs.step(np.ones(3, dtype=np.int64))
            assert rewards.dtype == np.float64
            assert infos == {}
            # The step after an episode ends is its reset: reward 0, not done.
            np.testing.assert_array_equal(rewards, np.where(done, 0.0, 1.0))
            assert not (terminated | truncated)[done].any()
            assert np.all(np.abs(obs[done]) < 0.05)
            done = terminated | truncated
            ended += int(done.sum())
        assert ended >= 3
        assert envs.render() == (None, None, None)
        ref.close()


def test_make_vec_rust_send_recv_and_same_step() -> None:
    with make_vec("Pendulum-v1", 2, vector_kwargs={"autoreset_mode": "SameStep"}, g=9.81) as envs:
        assert envs.action_space.shape == (2, 1)
        obs, _ = envs.reset(seed=0)
        assert obs.shape == (2, 3)
        for _ in range(200):
            obs, rewards, _terminated, truncated, infos = envs.step(np.zeros((2, 1), np.float32))
        assert truncated.all()
        assert infos["_final_obs"].all()
        assert infos["final_obs"][0].shape == (3,)
    with make_vec("CartPole-v1", 2, max_episode_steps=3) as envs:
        envs.reset(seed=1)
        seen: list[tuple[int, float, bool]] = []
        envs.send(np.array([0, 0]))
        for _ in range(8):
            _, rewards, _, truncated, infos = envs.recv(min_get=1, max_get=1, timeout=20)
            i = int(infos["env_id"][0])
            seen.append((i, float(rewards[0]), bool(truncated[0])))
            envs.send(np.array([i % 2]), [i])
        per_env = [[(r, t) for j, r, t in seen if j == i] for i in range(2)]
        for steps in per_env:
            # Three steps, the third truncated, then the reset (reward 0).
            assert (
                steps[:4] == [(1.0, False), (1.0, False), (1.0, True), (0.0, False)][: len(steps)]
            )


def test_make_vec_rust_deferred_reset_is_a_result_to_receive() -> None:
    with make_vec("CartPole-v1", 2, max_episode_steps=1) as envs:
        envs.reset(seed=0)
        envs.step(np.array([0, 0]))  # both truncated: their resets wait for the next step
        envs.send(np.array([1]), [0])
        with pytest.raises(rlpool.Busy, match=r"envs \[0\]"):
            envs.send(np.array([1]), [0])
        _, rewards, terminated, truncated, infos = envs.recv(timeout=20)
        assert infos["env_id"].tolist() == [0]
        assert (rewards.tolist(), terminated.tolist(), truncated.tolist()) == (
            [0.0],
            [False],
            [False],
        )
        with pytest.raises(NoAsyncCallError):
            envs.recv()


def test_make_vec_rust_invalid_arguments() -> None:
    with pytest.raises(rlpool.InvalidArgument, match=r"vector_kwargs: unknown keys \['colour'\]"):
        make_vec("CartPole-v1", 2, vector_kwargs={"colour": "red"})
    with pytest.raises(rlpool.InvalidArgument, match="observation_mode='different'"):
        make_vec("CartPole-v1", 2, vector_kwargs={"observation_mode": "different"})
    with pytest.raises(rlpool.InvalidArgument, match="batch_size=5"):
        make_vec("CartPole-v1", 2, vector_kwargs={"batch_size": 5})
    with make_vec("CartPole-v1", 2) as envs:
        with pytest.raises(rlpool.InvalidArgument, match="takes no reset options"):
            envs.reset(options={"low": -0.1})
        mask = {"reset_mask": np.array([True, False])}
        with pytest.raises(rlpool.InvalidArgument, match="a seeded reset resets every env"):
            envs.reset(seed=3, options=mask)
        envs.reset(seed=3)
        obs, _ = envs.reset(options={"reset_mask": np.array([True, False])})
        assert obs.shape == (2, 4)


def test_make_vec_falls_back_to_gymnasium_envs() -> None:
    wrappers = [functools.partial(gymnasium.wrappers.TimeLimit, max_episode_steps=7)]
    mine = make_vec("CartPole-v1", 2, vectorization_mode="sync", wrappers=wrappers)
    ref = gymnasium.make_vec("CartPole-v1", 2, vectorization_mode="sync", wrappers=wrappers)
    try:
        assert isinstance(mine, AsyncVectorEnv)
        assert mine.spec is not None
        assert mine.spec.kwargs["wrappers"] == wrappers
        assert run_side_by_side(mine, ref, 40, AutoresetMode.NEXT_STEP) >= 4
    finally:
        mine.close()
        ref.close()


def test_make_vec_as_vector_entry_point() -> None:
    gymnasium.register(
        "RlpoolCartPole-v1",
        entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv",
        vector_entry_point=functools.partial(make_vec, "CartPole-v1"),
        max_episode_steps=500,
    )
    try:
        envs = gymnasium.make_vec("RlpoolCartPole-v1", num_envs=2)
        assert isinstance(envs, AsyncVectorEnv)
        assert envs.reset(seed=0)[0].shape == (2, 4)
        envs.close()
        with pytest.raises(rlpool.InvalidArgument, match="vectorization_mode='threads'"):
            make_vec("CartPole-v1", 2, vectorization_mode="threads")
    finally:
        del gymnasium.registry["RlpoolCartPole-v1"]
