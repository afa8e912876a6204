"""How a prefalign run's OpenMP threads wait (``plumbing/waiting.py``): spinning where its cores
were idle at the start, sleeping at once where other work ran, the user's choice first."""

from __future__ import annotations

import pytest

from pytest_prefalign.plumbing import waiting

# two CPUs as /proc/stat writes them: user nice system idle iowait irq softirq steal guest ...
STAT = (
    "cpu  {a} 0 0 {b} 0 0 0 0 0 0\ncpu0 {c} 0 0 {d} 0 0 0 0 0 0\ncpu1 {e} 0 0 {f} {g} 0 0 0 0 0\n"
)


def test_the_busy_cores_are_read_per_cpu_from_proc_stat(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text(STAT.format(a=0, b=0, c=100, d=100, e=50, f=150, g=0))
    before = waiting.cpu_times(stat)
    assert before == {0: (200, 100), 1: (200, 150)}
    # then cpu0 busy 100 ticks of 100; cpu1 idle 60, waiting for I/O 20, busy 20 of 100
    stat.write_text(STAT.format(a=0, b=0, c=200, d=100, e=70, f=210, g=20))
    after = waiting.cpu_times(stat)
    assert waiting.busy_between(before, after, None) == pytest.approx(1.0 + 0.2)
    assert waiting.busy_between(before, after, {1}) == pytest.approx(0.2)  # its affinity only
    assert waiting.cpu_times(tmp_path / "missing") is None


@pytest.fixture
def environ(monkeypatch):
    """An environment without a choice of its own, and a machine as busy as the test says."""
    busy: list[float | None] = [0.0]
    monkeypatch.setattr(waiting, "busy_cores", lambda cores, seconds: busy[0])
    return {}, busy


def test_idle_cores_spin_and_busy_ones_sleep(environ):
    env, busy = environ
    chosen = waiting.choose(env)
    assert (chosen.how, env) == ("spin", {"GOMP_SPINCOUNT": waiting.SPIN_COUNT})
    assert "GOMP_SPINCOUNT=20000" in chosen.header() and "idle" in chosen.header()
    for level in (waiting.IDLE_BELOW, 1.3, None):  # busy, or not known
        env, busy[0] = {}, level
        assert waiting.choose(env).how == "passive"
        assert env == {"OMP_WAIT_POLICY": "PASSIVE"}


@pytest.mark.parametrize(
    "given",
    [{"OMP_WAIT_POLICY": "ACTIVE"}, {"GOMP_SPINCOUNT": "0"}, {"OMP_WAIT_POLICY": "PASSIVE"}],
)
def test_the_users_setting_comes_first(environ, given):
    env = dict(given)
    chosen = waiting.choose(env)
    assert chosen.how == "user" and env == given


def test_prefalign_wait_chooses_by_hand(environ):
    env, busy = environ
    busy[0] = 2.0
    env["PREFALIGN_WAIT"] = "Spin"
    assert waiting.choose(env).how == "spin" and env["GOMP_SPINCOUNT"] == waiting.SPIN_COUNT
    with pytest.raises(ValueError, match="PREFALIGN_WAIT='sometimes': expected spin or passive"):
        waiting.choose({"PREFALIGN_WAIT": "sometimes"})
