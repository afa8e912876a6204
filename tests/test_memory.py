"""The memory a run may use: the stores' budgets sized from the memory available (or
``--prefalign-memory``) and shared by the xdist workers, and the warning before a run likely to
exceed it. The machine's memory and the worker count are set by each test."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_prefalign.runtime import memory
from pytest_prefalign.runtime.sources import ModelSpec

GIB = 2**30


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """A machine whose ``/proc/meminfo`` says what the test sets (``machine(gb)``), with no
    worker count and no total or prefill budget set by hand."""
    for name in (memory.TOTAL_ENV, memory.WORKERS_ENV, memory.PREFILL_ENV):
        monkeypatch.delenv(name, raising=False)
    meminfo = tmp_path / "meminfo"
    monkeypatch.setattr(memory, "MEMINFO", meminfo)

    def available(gb: float) -> None:
        kb = int(gb * memory.GB / 1024)
        meminfo.write_text(f"MemTotal:       {2 * kb} kB\nMemAvailable:   {kb} kB\n")

    return available


def test_the_prefill_budget_is_an_eighth_of_the_process_share(machine, monkeypatch):
    machine(16)
    assert memory.available_bytes() == int(16 * memory.GB / 1024) * 1024
    assert memory.prefill_budget() == min(memory.PREFILL_MOST, memory.available_bytes() // 8)
    assert memory.prefill_budget() < memory.PREFILL_MOST  # 2 GB: below the former fixed 4 GiB
    monkeypatch.setenv(memory.WORKERS_ENV, "2")  # two xdist workers share it
    assert memory.process_share() == memory.available_bytes() // 2
    assert memory.prefill_budget() == memory.available_bytes() // 2 // 8
    assert memory.hidden_budget() == memory.available_bytes() // 2 // 64
    machine(256)  # a large machine: the former budgets are the most
    assert memory.prefill_budget() == memory.PREFILL_MOST
    assert memory.hidden_budget() == memory.HIDDEN_MOST


def test_the_run_total_replaces_the_memory_available(machine, monkeypatch):
    machine(64)
    monkeypatch.setenv(memory.TOTAL_ENV, "4")  # --prefalign-memory 4
    monkeypatch.setenv(memory.WORKERS_ENV, "2")
    assert memory.run_total() == 4 * memory.GB
    assert memory.prefill_budget() == 2 * memory.GB // 8
    monkeypatch.setenv(memory.TOTAL_ENV, "lots")
    with pytest.raises(ValueError, match=memory.TOTAL_ENV):
        memory.run_total()


def test_a_budget_set_by_hand_wins(machine, monkeypatch):
    machine(1)
    monkeypatch.setenv(memory.PREFILL_ENV, "1.5")
    assert memory.prefill_budget() == int(1.5 * 2**20)
    monkeypatch.setenv(memory.PREFILL_ENV, "0")
    assert memory.prefill_budget() == 0


def test_unknown_memory_keeps_the_former_budgets(machine, monkeypatch):
    monkeypatch.setattr(memory, "MEMINFO", Path("/nonexistent/meminfo"))

    def no_sysconf(name):
        raise ValueError(name)

    monkeypatch.setattr(memory.os, "sysconf", no_sysconf)
    assert memory.available_bytes() is None
    assert memory.prefill_budget() == memory.PREFILL_MOST
    assert memory.hidden_budget() == memory.HIDDEN_MOST


def test_the_worker_count_is_read_from_xdist(monkeypatch):
    monkeypatch.delenv(memory.WORKERS_ENV, raising=False)
    assert memory.workers() == 1
    monkeypatch.setenv(memory.WORKERS_ENV, "3")
    assert memory.workers() == 3
    monkeypatch.setenv(memory.WORKERS_ENV, "")
    assert memory.workers() == 1


def test_a_model_store_on_the_cpu_takes_its_share(machine, monkeypatch):
    torch = pytest.importorskip("torch")
    from pytest_prefalign.runtime.prefill import budget_from_env

    machine(8)
    assert budget_from_env(torch.device("cpu")) == memory.prefill_budget() < memory.PREFILL_MOST
    # on a GPU the store is device memory: the host's says nothing of it
    assert budget_from_env(torch.device("meta")) == memory.PREFILL_MOST


def test_the_weights_of_each_kind_of_source(tmp_path):
    assert memory.weights_bytes(ModelSpec("135m", "embedded:smollm2-135m")) == 134_515_008 * 4
    half = ModelSpec("135m", "embedded:smollm2-135m", dtype="bfloat16")
    assert memory.weights_bytes(half) == 134_515_008 * 2
    assert memory.weights_bytes(ModelSpec("tiny", "tiny")) == 0
    (tmp_path / "model.safetensors").write_bytes(b"x" * 1000)
    assert memory.weights_bytes(ModelSpec("mine", str(tmp_path))) == 1000
    assert memory.weights_bytes(ModelSpec("7b", "Org/Some-7B")) is None  # not known before


MODELS = [ModelSpec("135m", "embedded:smollm2-135m"), ModelSpec("w", "embedded:gemma3-270m")]


def test_a_run_that_fits_is_not_warned(machine, monkeypatch):
    machine(64)
    assert memory.shortfall(MODELS, 2) is None


def test_a_run_beyond_the_memory_available_is_warned(machine, monkeypatch):
    machine(6)
    needed = memory.need(MODELS, 2)
    # the two models' weights in fp32, and per process a store for each and the hidden states
    assert needed.weights == (134_515_008 + 268_098_176) * 4
    share = memory.available_bytes() // 2
    assert needed.stores == 2 * (share // 8) + share // 64
    assert needed.bytes > memory.available_bytes()
    warning = memory.shortfall(MODELS, 2)
    assert warning is not None
    assert "2 process(es)" in warning and "more than the run's 6.0 GB" in warning
    # one process: its share of the machine's 12 GB packs the 135m model's linears (0.54 GB, at
    # most a sixteenth of it), not Gemma's 1.07 GB, and the copy is what no longer fits
    assert memory.need(MODELS, 1).packed == 134_515_008 * 4
    assert "their packed copies 0.5 GB" in (memory.shortfall(MODELS, 1) or "")
    monkeypatch.setenv(memory.PACKED_ENV, "0")
    assert memory.need(MODELS, 1).packed == 0
    assert memory.shortfall(MODELS, 1) is None  # one process fits in the same machine


def test_a_total_above_the_machine_is_warned(machine, monkeypatch):
    machine(8)
    monkeypatch.setenv(memory.TOTAL_ENV, "100")
    warning = memory.shortfall(MODELS, 1)
    assert warning is not None and "more than the 8.0 GB this machine has available" in warning


def test_a_run_is_warned_before_its_first_test(pytester, monkeypatch):
    """``--prefalign-memory`` below what the run's one process needs: a ``PrefalignWarning``
    in the warnings summary, and the tests still run."""
    pytester.makeini("[pytest]\nprefalign_models = tiny = tiny\n")
    pytester.mkdir("synthetic").joinpath("suite.toml").write_text('[suite]\nname = "synthetic"\n')
    monkeypatch.setenv("PREFALIGN_CACHE", str(pytester.path / "cache"))
    args = ["--prefalign", "synthetic", "-p", "no:cacheprovider", "--prefalign-limit", "2"]
    args += ["--prefalign-methods", "base", "--prefalign-sizes", "tiny"]
    warned = pytester.runpytest_subprocess(*args, "--prefalign-memory", "0.5")
    warned.assert_outcomes(passed=1, warnings=1)
    warned.stdout.fnmatch_lines(
        ["*PrefalignWarning: prefalign: the run is likely to exceed its memory*"
         "more than the run's 0.5 GB*"]
    )  # fmt: skip
    bad = pytester.runpytest_subprocess(*args, "--prefalign-memory", "none")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--prefalign-memory*expected a number of GB*"])


def test_a_model_whose_size_is_unknown_is_named_as_not_counted(machine):
    machine(2)
    warning = memory.shortfall([*MODELS, ModelSpec("7b", "Org/Some-7B")], 1)
    assert warning is not None and "not counted: Org/Some-7B" in warning


def test_the_run_s_models_are_its_sizes_the_reference_and_a_suite_s_writer():
    from types import SimpleNamespace

    from prefalign_suites import pref_lamp
    from pytest_prefalign.plumbing import preflight
    from pytest_prefalign.runtime.pool import ModelPool

    registry = SimpleNamespace(suite=lambda name: pref_lamp.PrefLamp())
    pool = ModelPool.from_lines(["270m = embedded:gemma3-270m"])
    found = {"pref_lamp": ("suites/pref_lamp/suite.toml", {})}
    models = preflight.run_models(registry, found, pool, ["270m"])
    assert [(m.label, m.source) for m in models] == [
        ("270m", "embedded:gemma3-270m"),
        ("135m", "embedded:smollm2-135m"),  # the suites' reference generator
        ("writer", "embedded:gemma3-270m"),  # Pref-LaMP's default writer
    ]
    found = {"pref_lamp": ("suites/pref_lamp/suite.toml", {"writer": "tiny"})}
    assert preflight.run_models(registry, found, pool, ["270m"])[-1].source == "tiny"
    # no evaluation test collected: nothing loads, nothing is warned
    assert preflight.memory_warning(registry, {}, pool, ["270m"], 64) is None


def test_the_packing_share_is_the_machines_memory_not_what_is_free_now(machine, monkeypatch):
    machine(6)  # 12 GB in all, 6 available
    assert memory.pack_share(2) == 6 * memory.GB
    kb = int(12 * memory.GB / 1024)
    # the same machine with 1 GB free: the share of the memory available moves, this does not
    memory.MEMINFO.write_text(f"MemTotal: {kb} kB\nMemAvailable: {kb // 12} kB\n")
    assert memory.process_share(2) < memory.GB
    assert memory.pack_share(2) == 6 * memory.GB
    monkeypatch.setenv(memory.TOTAL_ENV, "8")  # a total set by hand decides
    assert memory.pack_share(4) == 2 * memory.GB
