"""The GPU path's parts that run without a GPU: the device of each xdist worker, batches that
halve on out-of-memory (an injected fake raises it), ``device_map=auto`` in the ini lines and
the scheduler's groups; and the CPU-against-CUDA equivalence of the tiny model, skipped where
there is no GPU."""

from __future__ import annotations

import copy
import importlib.util
import warnings

import numpy as np
import pytest
import torch

from pytest_prefalign.errors import PrefalignWarning
from pytest_prefalign.plumbing.workers import group_scope
from pytest_prefalign.runtime import devices
from pytest_prefalign.runtime.model_lines import parse_models
from pytest_prefalign.runtime.models import ModelSpec

# CPU against CUDA, both fp32: the same greedy tokens, log-likelihoods within this
LOGPROB_TOLERANCE = 1e-3


def test_each_worker_gets_its_own_gpu_round_robin():
    assert devices.default_device({"PYTEST_XDIST_WORKER": "gw0"}, gpus=4) == "cuda:0"
    assert devices.default_device({"PYTEST_XDIST_WORKER": "gw5"}, gpus=4) == "cuda:1"
    assert devices.default_device({}, gpus=2) == "cuda"
    assert devices.default_device({"PYTEST_XDIST_WORKER": "gw3"}, gpus=0) == "cpu"
    assert devices.dtype_for("cpu") == torch.float32


def test_out_of_memory_halves_the_batch_and_says_so_once(tiny_lm, monkeypatch):
    """A fake forward that runs out of memory above 2 rows: the LM retries at 4, then 2, gives
    the texts an unconstrained run gives, keeps 2 for later calls, and warns once."""
    prompts = [f"Write a title for: paper {n}" for n in range(6)]
    expected = tiny_lm.generate(prompts, max_new_tokens=3, batch_size=8)
    lm = copy.copy(tiny_lm)
    lm.label, lm.batch_cap = "oom-test", None
    lm.prefills = type(tiny_lm.prefills)(lm.model, lm.pad_id, lm.device)
    real = lm.model.base_model.forward
    seen = []

    def forward(*args, **kwargs):
        rows = (kwargs.get("input_ids") if "input_ids" in kwargs else args[0]).shape[0]
        seen.append(rows)
        if rows > 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (fake)")
        return real(*args, **kwargs)

    monkeypatch.setattr(lm.model.base_model, "forward", forward)
    monkeypatch.setattr(devices, "_WARNED", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert lm.generate(prompts, max_new_tokens=3, batch_size=8) == expected
        assert lm.batch_cap == 2
        lm.generate(prompts[:1], max_new_tokens=3, batch_size=8)
        lm.within_memory(lambda size: size, 8, "generate")
    said = [w for w in caught if issubclass(w.category, PrefalignWarning)]
    assert len(said) == 1
    assert "model oom-test: generate: out of GPU memory at batch size 8; retrying with 4" in str(
        said[0].message
    )
    assert max(seen) > 2 and seen[-1] <= 2


def test_out_of_memory_at_batch_size_one_is_raised():
    def work(size):
        raise torch.cuda.OutOfMemoryError("fake")

    with pytest.raises(torch.cuda.OutOfMemoryError), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        devices.halving(work, 2, what="a test")


def test_device_map_auto_is_read_from_the_ini_lines():
    specs = parse_models(["70b = org/big-model device_map=auto", "7b = org/small"])
    assert specs["70b"] == ModelSpec("70b", "org/big-model", "auto")
    assert specs["7b"].device_map is None
    for line, message in (
        ("x = org/m device_map=balanced", "unknown option 'device_map=balanced'"),
        ("x = org/m gpus=2", "unknown option 'gpus=2'"),
        ("x = tiny device_map=auto", "not tiny"),
    ):
        with pytest.raises(ValueError, match=message):
            parse_models([line])


def test_dtype_is_read_from_the_ini_lines():
    specs = parse_models(["a = org/m dtype=bfloat16", "b = tiny dtype=float32 ", "c = org/m"])
    assert specs["a"].dtype == "bfloat16" and specs["b"].dtype == "float32"
    assert specs["c"].dtype is None
    both = parse_models(["x = org/m device_map=auto dtype=bfloat16"])["x"]
    assert (both.device_map, both.dtype) == ("auto", "bfloat16")
    for line, message in (
        ("x = org/m dtype=float16", "unknown dtype 'float16'; expected one of float32, bfloat16"),
        ("x = org/m dtype=bfloat16 dtype=float32", "given twice"),
        ("x = org/m dtype=bfloat16 device_map=auto gpus=2", "expected 'LABEL = SOURCE"),
    ):
        with pytest.raises(ValueError, match=message):
            parse_models([line])


def test_device_map_without_accelerate_names_the_package(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "accelerate" else real(name, *a),
    )
    with pytest.raises(ValueError, match="needs the Python package 'accelerate'.*not installed"):
        parse_models(["70b = org/big-model device_map=auto"])


def test_scheduler_groups_by_suite_file_and_size():
    sizes = ["tiny2", "tiny"]
    assert group_scope("toy/suite.toml::toy[args[lore]-tiny]", sizes) == "toy/suite.toml::tiny"
    assert group_scope("toy/suite.toml::toy[base-tiny2]", sizes) == "toy/suite.toml::tiny2"
    assert group_scope("tests/test_x.py::test_y", sizes) == "tests/test_x.py::test_y"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_tiny_model_on_cuda_gives_the_cpu_tokens_and_logprobs():
    from pytest_prefalign.runtime.tiny import build_tiny_lm

    cpu, gpu = build_tiny_lm(0), build_tiny_lm(0, device="cuda")
    prompts = [f"Write a title for: cats and dogs {n}" for n in range(4)]
    assert cpu.generate(prompts, max_new_tokens=8) == gpu.generate(prompts, max_new_tokens=8)
    responses = ["Cats on a mat", "A study of dogs", "Purring", "Loud dogs"]
    for a, b in zip(
        cpu.response_logprobs(prompts, responses),
        gpu.response_logprobs(prompts, responses),
        strict=True,
    ):
        np.testing.assert_allclose(a, b, atol=LOGPROB_TOLERANCE)


def test_native_bf16_is_read_from_cpuinfo_else_from_torchs_cpu_checks(tmp_path, monkeypatch):
    def ask_torch() -> bool:
        raise AssertionError("torch asked although /proc/cpuinfo lists the CPU's features")

    for check in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        monkeypatch.setattr(torch.cpu, check, ask_torch, raising=False)
    info = tmp_path / "cpuinfo"
    monkeypatch.setattr(devices, "CPUINFO", str(info))
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f\n")  # x86 without bf16
    assert not devices.cpu_bf16()
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 clzero\n")
    assert devices.cpu_bf16()  # this project's EPYC of 2026-12-08
    info.write_text("processor\t: 0\nflags\t\t: fpu avx512f amx_bf16 amx_tile amx_int8\n")
    assert devices.cpu_bf16()  # a Xeon with AMX
    info.write_text("processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n")  # ARM's FEAT_BF16
    assert devices.cpu_bf16()
    info.write_text("processor\t: 0\nFeatures\t: fp asimd svebf16\n")  # only a whole word
    assert not devices.cpu_bf16()
    # no file, or none that lists features: torch's checks answer
    for check in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        monkeypatch.setattr(torch.cpu, check, lambda: False, raising=False)
    info.write_text("processor\t: 0\n")
    assert not devices.cpu_bf16()
    info.write_text("processor\t: 0\nflags\t\t:\n")  # a line with no feature on it
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True, raising=False)
    assert devices.cpu_bf16()
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False, raising=False)
    monkeypatch.setattr(devices, "CPUINFO", str(tmp_path / "absent"))
    assert not devices.cpu_bf16()
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    assert devices.cpu_bf16()


def test_checking_bf16_on_the_cpu_does_not_import_torch(pytester):
    if devices.cpuinfo_features() is None:
        pytest.skip("no /proc/cpuinfo listing this CPU's features")
    pytester.makepyfile(
        check="""
        import sys
        from pytest_prefalign.runtime import devices
        devices.bf16_refusal("cpu")
        print("torch imported:", "torch" in sys.modules)
        """
    )
    result = pytester.runpython(pytester.path / "check.py")
    result.stdout.fnmatch_lines(["torch imported: False"])


def test_bfloat16_is_refused_in_one_line_where_the_device_has_no_native_bf16(monkeypatch):
    monkeypatch.setattr(devices, "cpu_bf16", lambda: False)
    refusal = devices.bf16_refusal("cpu")
    assert refusal is not None and "\n" not in refusal
    assert "no native bf16" in refusal and "use float32" in refusal
    monkeypatch.setattr(devices, "cpu_bf16", lambda: True)
    assert devices.bf16_refusal("cpu") is None
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert "cuda:1 does not support bf16" in str(devices.bf16_refusal("cuda:1"))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert devices.bf16_refusal("cuda:1") is None
