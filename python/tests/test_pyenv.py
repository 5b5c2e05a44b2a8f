"""Python envs (``gymnasium.Env``) in pools: makers of every kind reach the
workers, spaces become specs and round-trip their values, infos, calls on
the envs' own attributes, next-step autoreset, and every failure as a typed
error naming the env. On every configuration unless a test says otherwise."""

from __future__ import annotations

import functools
import os
import resource
import signal
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import python_envs
from gymnasium import spaces
from helpers import PATIENCE, gone, wait_until

import rlpool
from rlpool.specs import Binary, Bounded, Categorical, MultiCategorical, NonTensor, Unbounded

pytestmark = pytest.mark.timeout(90)

DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float32", "float64"]


def flatten(space: Any, value: Any) -> list[Any]:
    """The leaves of a value of ``space``, in the pool's order."""
    if isinstance(space, spaces.Dict):
        return [leaf for key, sub in space.spaces.items() for leaf in flatten(sub, value[key])]
    if isinstance(space, spaces.Tuple):
        return [leaf for sub, item in zip(space.spaces, value) for leaf in flatten(sub, item)]
    return [value]


def keys_of(space: Any, prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
    if isinstance(space, spaces.Dict):
        return [k for key, sub in space.spaces.items() for k in keys_of(sub, (*prefix, key))]
    if isinstance(space, spaces.Tuple):
        return [k for i, sub in enumerate(space.spaces) for k in keys_of(sub, (*prefix, str(i)))]
    return [prefix]


def direct_run(make: Any, seeds: list[int], actions: list[list[Any]]) -> list[list[Any]]:
    """Observations of each env run in this process: reset with its seed,
    then stepped with its actions."""
    out = []
    for i, seed in enumerate(seeds):
        env = make()
        obs, _ = env.reset(seed=seed)
        steps = [obs]
        for action in actions[i]:
            obs, *_ = env.step(action)
            steps.append(obs)
        out.append(steps)
    return out


def pool_actions(space: Any, per_env: list[Any]) -> dict[str, Any]:
    """The pool's input (a nested dict) for one action per env of ``space``."""
    keys = keys_of(space, ("action",))
    leaves = [flatten(space, a) for a in per_env]
    out: dict[str, Any] = {}
    for i, key in enumerate(keys):
        node = out
        for part in key[:-1]:
            node = node.setdefault(part, {})
        node[key[-1]] = np.stack([np.asarray(row[i]) for row in leaves])
    return out


def check_round_trip(pools: Any, config: Any, make: Any, n: int = 3, steps: int = 4) -> None:
    """The pool's observations equal the same envs' run in this process,
    leaf by leaf, dtype and shape included; the infos echo the actions."""
    pool = pools([make] * n, **config.options())
    env = make()
    seeds = [11 * i + 1 for i in range(n)]
    action_space = env.action_space
    action_space.seed(5)
    actions = [[action_space.sample() for _ in range(steps)] for _ in range(n)]
    expected = direct_run(make, seeds, actions)
    obs_keys = keys_of(env.observation_space, ("observation",))
    pool.set_reset_args(seed=seeds)
    got = [pool.reset()]
    for t in range(steps):
        out = pool.step(pool_actions(action_space, [actions[i][t] for i in range(n)]))
        got.append(out["next"])
        infos = rlpool.decode_infos(out["next", "info"])
        for i in range(n):
            assert infos[i]["t"] == t + 1
            for a, b in zip(
                flatten(action_space, infos[i]["action"]), flatten(action_space, actions[i][t])
            ):
                np.testing.assert_array_equal(a, b)
    for t, td in enumerate(got):
        for i in range(n):
            want = flatten(env.observation_space, expected[i][t])
            for key, leaf in zip(obs_keys, want):
                value = td[key][i]
                leaf = np.asarray(leaf)
                assert value.dtype == leaf.dtype, (key, t, i)
                np.testing.assert_array_equal(value, leaf, err_msg=f"{key} step {t} env {i}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_box_of_every_dtype_round_trips(pools, config, dtype):
    check_round_trip(pools, config, functools.partial(python_envs.box_env, dtype, (2, 3)))


def test_nested_dict_and_tuple_spaces_round_trip(pools, config):
    check_round_trip(pools, config, python_envs.nested_env)


def test_spaces_become_specs(pools):
    """Every leaf of a nested space becomes the spec a TorchRL user would
    expect: bounds kept, Discrete's start as bounds, MultiDiscrete as
    multi-categorical, MultiBinary as binary, float64 reward."""
    pool = pools([python_envs.nested_env] * 2)
    obs = pool.full_observation_spec
    pos = obs["observation", "pos"]
    assert isinstance(pos, Bounded)
    assert pos.shape == (2, 2)
    np.testing.assert_array_equal(pos.low, np.full((2, 2), -1.0, np.float32))
    start = obs["observation", "inner", "0"]
    assert isinstance(start, Bounded)
    assert start.dtype == np.int64
    np.testing.assert_array_equal(start.low, [-1, -1])
    np.testing.assert_array_equal(start.high, [1, 1])
    assert isinstance(obs["observation", "inner", "1"], Binary)
    assert obs["observation", "inner", "1"].dtype == np.int8
    grid = obs["observation", "inner", "2", "grid"]
    assert (grid.shape, grid.dtype) == ((2, 2, 3), np.uint8)
    counts = obs["observation", "counts"]
    assert isinstance(counts, MultiCategorical)
    assert obs["info"].dtype == np.uint8
    action = pool.full_action_spec
    assert isinstance(action["action", "0"], Categorical)
    assert action["action", "0"].n == 4
    assert action["action", "1", "force"].dtype == np.float64
    assert pool.full_reward_spec["reward"].dtype == np.float64
    assert pool.full_done_spec["terminated"].dtype == np.bool_


def test_an_unbounded_box_is_unbounded_and_infinite_bounds_are_kept_finite(pools):
    def make() -> Any:
        high = np.array([1.0, np.inf], np.float32)
        return python_envs.SpaceEnv(
            spaces.Dict(
                {
                    "free": spaces.Box(-np.inf, np.inf, (2,), np.float32),
                    "half": spaces.Box(-high, high, dtype=np.float32),
                }
            ),
            spaces.Discrete(2),
        )

    pool = pools([make])
    obs = pool.full_observation_spec
    assert isinstance(obs["observation", "free"], Unbounded)
    half = obs["observation", "half"]
    assert isinstance(half, Bounded)
    assert half.high[0, 1] == np.finfo(np.float32).max
    assert half.high[0, 0] == 1.0


@pytest.mark.parametrize("exchange", ["auto", "queue"])
def test_a_space_without_a_fixed_shape_takes_the_queue_and_says_why(pools, exchange):
    pool = pools(
        [python_envs.text_env] * 2,
        backend="multiprocessing",
        exchange=exchange,
        envs_per_worker=2,
    )
    assert pool.resolved_exchange == "queue"
    if exchange == "auto":
        assert "word" in (pool.exchange_reason or "")
    assert isinstance(pool.full_observation_spec["observation", "word"], NonTensor)
    pool.set_reset_args(seed=[3, 4])
    root = pool.reset()
    expected = direct_run(python_envs.text_env, [3, 4], [[], []])
    words = [rlpool.decode_leaf(w) for w in root["observation", "word"]]
    assert words == [steps[0]["word"] for steps in expected]


def test_shm_is_refused_for_a_space_without_a_fixed_shape(pools):
    with pytest.raises(rlpool.StartError, match="word"):
        pools([python_envs.text_env], backend="multiprocessing", exchange="shm")


def test_makers_of_every_kind(pools, config):
    """A lambda, a function, a ``functools.partial`` (of gymnasium.make),
    a class, and a :class:`PyEnvMaker` with create_env_kwargs, in one pool."""
    makers = [
        lambda: gym.make("CartPole-v1"),
        python_envs.where_am_i,
        functools.partial(gym.make, "CartPole-v1"),
        python_envs.Raising,
        rlpool.PyEnvMaker(python_envs.box_env, {"dtype": "float32", "shape": (4,)}),
        "CartPole-v1",
    ]
    kwargs = [None, None, None, {"fail_at": 100}, None, {"seed": 1}]
    # Envs of different shapes: lazy stacking, and the queue with processes.
    options = config.options(exchange="auto") if config.procs else config.options()
    pool = pools(makers, create_env_kwargs=kwargs, stack="lazy", **options)
    root = pool.reset()
    assert [root[i]["observation"].shape for i in range(6)] == [(4,), (3,), (4,), (2,), (4,), (4,)]
    label = pool.env_get_attr("label", env_index=1)[0]
    pid, cwd = label.split(":", 1)
    assert cwd == os.getcwd()
    assert (int(pid) != os.getpid()) == config.procs
    with pytest.raises(rlpool.InvalidArgument, match="env 5 is the registered env"):
        pool.env_get_attr("spec", env_index=5)


def test_python_envs_on_threads_step_on_one_worker_thread_by_default(pools):
    """Python envs hold the GIL while they step: by default the threading
    backend runs them on one worker thread (the caller may help), not one
    per core that would only take turns; ``num_threads`` asks for more, and
    a ``worker_affinity`` list for one per CPU set."""
    caller = threading.get_ident()

    def workers(pool, n, steps):
        pool.reset()
        for _ in range(steps):
            pool.step({"action": np.zeros(n, dtype=np.int64)})
        seen = set().union(*pool.env_get_attr("threads"))
        return {(thread, cpus) for thread, cpus in seen if thread != caller}

    quick = pools([python_envs.ThreadRecorder] * 8, backend="threading")
    # One worker thread (none, had the caller run every step itself).
    assert len(workers(quick, 8, 50)) <= 1
    # Envs of 1 ms (the caller does not help with those) that sleep with the
    # GIL released: as many worker threads as asked for, each of them used.
    slow = functools.partial(python_envs.ThreadRecorder, step_s=0.001)
    assert len(workers(pools([slow] * 8, backend="threading"), 8, 10)) == 1
    two = pools([slow] * 8, backend="threading", num_threads=2)
    assert len(workers(two, 8, 10)) == 2
    cpus = sorted(os.sched_getaffinity(0))[:2]
    pinned = pools([slow] * 4, backend="threading", worker_affinity=[[cpu] for cpu in cpus])
    seen = workers(pinned, 4, 10)
    assert len(seen) == len(cpus), seen
    assert sorted(set_ for _, set_ in seen) == [(cpu,) for cpu in cpus], seen


def test_a_maker_in_a_module_found_through_sys_path_only(pools, tmp_path, monkeypatch):
    """The workers get the parent's sys.path (a directory added at run time)
    and working directory."""
    (tmp_path / "my_envs_mod.py").write_text(
        textwrap.dedent(
            """
            import gymnasium as gym

            def make():
                return gym.make("CartPole-v1")
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    import my_envs_mod  # type: ignore[import-not-found]

    pool = pools([my_envs_mod.make] * 2, backend="multiprocessing")
    assert pool.reset()["observation"].shape == (2, 4)


SCRIPT = """
import sys
import gymnasium as gym
import numpy as np
import rlpool

def main():
    pool = rlpool.AsyncEnvPool(
        [lambda: gym.make("CartPole-v1")] * 4, backend="multiprocessing", envs_per_worker=2
    )
    pool.reset()
    print("worker pids:", *pool.worker_pids, flush=True)
    actions = {"action": np.zeros(4, np.int64)}
    if sys.argv[1] == "once":
        out = pool.step(actions)
        print("obs", out["next", "observation"].shape, flush=True)
        pool.shutdown()
        return
    while True:
        pool.step_and_maybe_reset(actions)

main()
"""


def test_a_lambda_of_a_script_runs_in_the_workers(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), "once"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "obs (4, 4)" in done.stdout
    # Workers that stop right after their start exit cleanly (no thread of
    # theirs caught inside a C library that exit tears down).
    assert "Fatal Python error" not in done.stderr, done.stderr


def test_ctrl_c_in_the_parent_ends_cleanly(tmp_path):
    """SIGINT to the whole process group (a Ctrl-C at a terminal) while the
    parent steps: the parent ends with KeyboardInterrupt, the workers
    (which ignore SIGINT) are stopped and reaped, within seconds."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    proc = subprocess.Popen(
        [sys.executable, str(script), "loop"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("worker pids:"), line
        pids = [int(p) for p in line.split(":", 1)[1].split()]
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0
    assert "KeyboardInterrupt" in stderr
    assert wait_until(lambda: all(gone(pid) for pid in pids), 10.0), pids


def test_infos_travel_pickled_and_empty_infos_cost_one_look(pools, config):
    pool = pools(
        [python_envs.box_env, functools.partial(python_envs.box_env, info=False)],
        **config.options(),
    )
    pool.set_reset_args(options=[{"level": 3}, None])
    root = pool.reset()
    infos = rlpool.decode_infos(root["info"])
    assert infos == [{"reset": True, "options": {"level": 3}}, {}]
    out = pool.step({"action": np.array([1, 0])})
    infos = rlpool.decode_infos(out["next", "info"])
    assert infos[0] == {"action": 1, "t": 1}
    assert infos[1] == {}
    assert out["next", "info"][1, :4].tolist() == [0, 0, 0, 0]


def test_infos_that_shrink_and_grow_decode_whole(pools, config):
    # With shared memory the info entry is length-prefixed: only its count
    # and the bytes counted cross, so a short info after a long one leaves
    # the long one's tail behind it, which decoding must not read.
    sizes = [300, 5, 0, 120, 0, 0, 700]
    pool = pools(
        [rlpool.PyEnvMaker(python_envs.VaryingInfo, {"sizes": sizes})] * 2, **config.options()
    )
    pool.reset()
    for t in range(1, 2 * len(sizes)):
        out = pool.step({"action": np.array([0, 1])})
        size = sizes[t % len(sizes)]
        expected = {"blob": b"y" * size} if size else {}
        assert rlpool.decode_infos(out["next", "info"]) == [expected, expected], t


def test_max_info_bytes_zero_drops_the_info_entry(pools):
    pool = pools([rlpool.PyEnvMaker(python_envs.box_env, max_info_bytes=0)])
    assert "info" not in pool.reset()


def test_an_info_too_large_is_an_error_naming_the_limit(pools, config):
    pool = pools(
        [rlpool.PyEnvMaker(python_envs.BigInfo, {"size": 5000}, max_info_bytes=256)] * 2,
        **config.options(),
    )
    pool.reset()
    with pytest.raises(rlpool.EnvFailed, match="max_info_bytes=256") as caught:
        pool.step({"action": np.array([0, 0])})
    assert caught.value.env in (0, 1)


def test_next_step_autoreset(pools, config):
    """With autoreset="next_step" the step after the end of an episode
    returns the reset observation, reward 0 and both flags False."""
    maker = rlpool.PyEnvMaker(python_envs.box_env, {"episode": 2}, autoreset="next_step")
    pool = pools([maker], **config.options())
    pool.set_reset_args(seed=[7])
    pool.reset()
    expected = direct_run(functools.partial(python_envs.box_env, episode=2), [7], [[0, 0]])
    rewards, flags = [], []
    for _ in range(3):
        out = pool.step({"action": np.array([0])})
        rewards.append(float(out["next", "reward"][0, 0]))
        flags.append(bool(out["next", "terminated"][0, 0]))
    assert rewards == [1.0, 2.0, 0.0]
    assert flags == [False, True, False]
    assert rlpool.decode_infos(out["next", "info"])[0]["reset"] is True
    # The reset's observation continues the env's own random stream.
    assert not np.array_equal(out["next", "observation"][0], expected[0][0])


def test_reset_seeds_reproduce_gymnasium(pools, config):
    pool = pools([lambda: gym.make("CartPole-v1")] * 3, **config.options())
    pool.set_reset_args(seed=[1, 2, 3])
    first = pool.reset()["observation"]
    for i, seed in enumerate([1, 2, 3]):
        obs, _ = gym.make("CartPole-v1").reset(seed=seed)
        np.testing.assert_array_equal(first[i], obs)
    # Used once: the next reset draws from the env's own stream.
    second = pool.reset()["observation"]
    assert not np.array_equal(first, second)


def test_calls_on_the_envs(pools, config):
    pool = pools([python_envs.box_env] * 3, **config.options())
    pool.reset()
    assert pool.env_call("slow", (0.01,), env_index=[2, 0]) == ["slept 0.01"] * 2
    pool.env_set_attr("label", ["a", "b"], env_index=[0, 1])
    pool.env_set_attr("episode", 9)
    assert pool.env_get_attr("label") == ["a", "b", "unset"]
    assert pool.env_get_attr("episode") == [9, 9, 9]
    assert pool.env_call("episode", env_index=1) == [9]
    with pytest.raises(KeyError, match="no such thing"):
        pool.env_call("boom", env_index=0)
    with pytest.raises(rlpool.InvalidArgument, match="values has 2 values for 3 envs"):
        pool.env_set_attr("label", ["x", "y"])
    with pytest.raises(rlpool.InvalidArgument, match="env_index 7 is out of range"):
        pool.env_get_attr("label", env_index=7)
    with pytest.raises(rlpool.InvalidType, match="seed of env 0 must be an int"):
        pool.set_reset_args(seed="one")
    with pytest.raises(rlpool.InvalidArgument, match="timeout must be a positive"):
        pool.env_get_attr("label", timeout=0)


def test_a_call_that_times_out_loses_nothing_after(pools, proc_config):
    pool = pools([python_envs.box_env], **proc_config.options())
    with pytest.raises(rlpool.Timeout, match="env 0: no answer to call 'slow'"):
        pool.env_call("slow", (1.0,), timeout=0.2)
    # The late answer is skipped; the next call gets its own.
    assert pool.env_call("slow", (0.0,)) == ["slept 0.0"]


def test_calls_after_shutdown_are_refused(pools, config):
    pool = pools([python_envs.box_env], **config.options())
    pool.shutdown()
    with pytest.raises(rlpool.ShutDown):
        pool.env_get_attr("label")


def test_an_exception_in_a_step_names_the_env_and_carries_the_traceback(pools, config):
    pool = pools(
        [functools.partial(python_envs.box_env, shape=(2,)), python_envs.Raising],
        create_env_kwargs=[None, {"fail_at": 2}],
        **config.options(),
    )
    pool.reset()
    pool.step({"action": np.array([0, 0])})
    pool.async_step_send({"action": np.array([0, 0])})
    with pytest.raises(rlpool.EnvFailed) as caught:
        pool.async_step_recv(min_get=2, timeout=PATIENCE)
    err = caught.value
    assert err.env == 1
    assert err.during == "step"
    assert "ValueError: the simulator diverged at step 2" in err.cause
    assert "Traceback (most recent call last)" in err.cause
    assert "python_envs.py" in err.cause
    assert "env 1" in str(err)
    # The other env's result is kept for a later receive; the failed env
    # resets and steps again.
    assert pool.in_flight() == [0]
    kept = pool.async_step_recv(timeout=PATIENCE)
    assert (kept["env_index"].tolist(), kept["next", "reward"].tolist()) == ([0], [[2.0]])
    pool.reset()
    out = pool.step({"action": np.array([0, 0])})
    assert out["next", "reward"].tolist() == [[1.0], [1.0]]


def test_a_wrong_observation_shape_names_the_key(pools, config):
    pool = pools([python_envs.WrongShape], **config.options())
    pool.reset()
    with pytest.raises(rlpool.EnvFailed, match=r"observation.*shape \(3,\).*\(2,\)"):
        pool.step({"action": np.array([0])})


@pytest.mark.parametrize(
    ("maker", "message"),
    [
        (python_envs.failing_maker, "no simulator licence"),
        (python_envs.not_an_env, r"must return a gymnasium\.Env"),
    ],
)
def test_a_maker_that_fails_is_a_start_error_naming_the_env(pools, config, maker, message):
    with pytest.raises(rlpool.StartError, match=message) as caught:
        pools([python_envs.box_env, maker], **config.options())
    assert "env 1" in str(caught.value)


def test_an_unpicklable_maker_is_refused_for_processes(pools):
    import threading

    lock = threading.Lock()

    def make() -> Any:
        with lock:
            return python_envs.box_env()

    with pytest.raises(rlpool.InvalidArgument, match=r"env_makers\[1\] cannot be pickled"):
        pools([python_envs.box_env, make], backend="multiprocessing")
    # The refused pool's call listener (made for env 0) is gone too.
    assert wait_until(lambda: not any(t.name == "rlpool-hub" for t in threading.enumerate()), 5.0)
    # Threads take it as it is.
    pool = pools([make], backend="threading")
    assert pool.reset()["observation"].shape == (1, 3)


def test_a_maker_that_is_not_callable_is_refused(pools):
    with pytest.raises(rlpool.InvalidType, match=r"env_makers\[1\] is int"):
        pools([python_envs.box_env, 3])
    with pytest.raises(rlpool.InvalidArgument, match="autoreset must be"):
        rlpool.PyEnvMaker(python_envs.box_env, autoreset="sometimes")  # type: ignore[arg-type]
    with pytest.raises(rlpool.InvalidType, match="max_info_bytes must be an int"):
        rlpool.PyEnvMaker(python_envs.box_env, max_info_bytes=1.5)  # type: ignore[arg-type]


def test_a_segfault_in_an_env_is_a_dead_worker_naming_its_envs(pools, proc_config):
    """Env 0 crashes its worker in C code: a receive raises WorkerDied
    naming worker 0 and its envs 0 and 1; the other worker's envs answer
    and step on."""
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, hard))
    try:
        pool = pools(
            [python_envs.Crashing] * 2 + [functools.partial(python_envs.box_env, shape=(2,))] * 2,
            **proc_config.options(envs_per_worker=2),
        )
        pool.reset()
        pool.async_step_send({"action": np.array([1, 0, 0, 0])})
        rewards: dict[int, float] = {}
        errors = []
        while len(rewards) + len(errors) < 4 and not (errors and len(rewards) == 2):
            try:
                batch = pool.async_step_recv(timeout=PATIENCE)
            except rlpool.WorkerDied as err:
                errors.append(err)
                continue
            for env, reward in zip(batch["env_index"], batch["next", "reward"][:, 0]):
                rewards[int(env)] = float(reward)
    finally:
        resource.setrlimit(resource.RLIMIT_CORE, (soft, hard))
    assert errors
    err = errors[0]
    assert (err.worker, err.envs) == (0, [0, 1])
    assert "11" in err.reason or "SIGSEGV" in err.reason, err.reason
    assert rewards.get(2) == rewards.get(3) == 1.0
    pool.async_step_send({"action": np.array([0, 0])}, env_index=[2, 3])
    again = pool.async_step_recv(min_get=2, timeout=PATIENCE)
    assert again["next", "reward"][:, 0].tolist() == [2.0, 2.0]


def test_shutdown_closes_the_envs(pools, config, tmp_path):
    log = tmp_path / "closed.txt"
    pool = pools(
        [functools.partial(python_envs.Closing, str(log))] * 2,
        **config.options(),
    )
    pool.reset()
    pool.shutdown()
    assert wait_until(lambda: log.exists() and len(log.read_text().split()) == 2, 10.0)


def test_shutdown_with_an_env_stuck_in_a_step_returns(pools, config):
    """An env that never returns from its step does not hold shutdown
    (threads: it is not closed; processes: its worker is killed)."""
    pool = pools([python_envs.Hanging], **config.options())
    pool.reset()
    pool.async_step_send({"action": np.array([0])})
    time.sleep(0.2)
    start = time.monotonic()
    pool.shutdown()
    assert time.monotonic() - start < 10.0
