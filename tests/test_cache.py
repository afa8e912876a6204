"""The cache layer: keys that change with each input, code versions from the syntax tree, the
disk cache (hit, miss, disabled, corrupt files) and the ledger of which values a test used."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_prefalign import cache, versions
from pytest_prefalign.api import Item, Pair, ProfileEntry


def test_a_key_changes_with_each_input_and_with_its_kind() -> None:
    inputs = {"model": "m1", "data": "d1", "options": {"k": 10, "w": 1.0}, "seed": 0, "code": "c1"}
    base = cache.make_key("generations", **inputs)
    assert cache.make_key("generations", **inputs).digest == base.digest
    changed = {"model": "m2", "data": "d2", "options": {"k": 10, "w": 1.5}, "seed": 1, "code": "c2"}
    for name, value in changed.items():
        assert cache.make_key("generations", **{**inputs, name: value}).digest != base.digest, name
    assert cache.make_key("rewards", **inputs).digest != base.digest
    # an input added (None is not the same as absent)
    assert cache.make_key("generations", **inputs, reward=None).digest != base.digest


def test_a_key_summary_shows_short_inputs_and_hashes_long_ones() -> None:
    key = cache.make_key("x", seed=3, method="args[lore]", options={"k": 10}, text="y" * 100)
    summary = key.summary()
    assert summary["seed"] == 3 and summary["method"] == "args[lore]"
    assert summary["options"].startswith("#") and summary["text"].startswith("#")
    other = cache.make_key("x", seed=3, method="args[lore]", options={"k": 5}, text="y" * 100)
    assert other.summary()["options"] != summary["options"]
    assert other.summary()["text"] == summary["text"]


@pytest.mark.parametrize(
    "record",
    [
        Pair("p1", "ann", "prompt", "chosen", "rejected"),
        Item("i1", "ann", "input", "prompt", "reference"),
        ProfileEntry("d1", "input", "output"),
    ],
)
def test_records_fingerprint_changes_with_every_field(record) -> None:
    import dataclasses

    first = cache.records_fingerprint([record])
    for field in dataclasses.fields(record):
        edited = dataclasses.replace(record, **{field.name: "changed"})
        assert cache.records_fingerprint([edited]) != first, field.name
    assert cache.records_fingerprint([record, record]) != first  # count and order count


def test_profiles_fingerprint_ignores_dict_order_only() -> None:
    a = [ProfileEntry("d1", "x", "y")]
    b = [ProfileEntry("d2", "x", "z")]
    assert cache.profiles_fingerprint({"ann": a, "bob": b}) == cache.profiles_fingerprint(
        {"bob": b, "ann": a}
    )
    assert cache.profiles_fingerprint({"ann": a, "bob": b}) != cache.profiles_fingerprint(
        {"ann": b, "bob": a}
    )


# --------------------------------------------------------------------------------------------
# Code versions
# --------------------------------------------------------------------------------------------

MAIN = '''
"""A module of a third-party package."""
from mypkg import helper


def reward(x):
    # the reward of x
    return helper.scale(x) + 1
'''
HELPER = '''
def scale(x):
    """Doubles."""
    return 2 * x
'''


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "site" / "mypkg"
    root.mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "main.py").write_text(MAIN)
    (root / "helper.py").write_text(HELPER)
    monkeypatch.syspath_prepend(str(root.parent))
    yield root
    for name in [m for m in sys.modules if m == "mypkg" or m.startswith("mypkg.")]:
        del sys.modules[name]


def version(package: Path) -> str:
    for name in [m for m in sys.modules if m == "mypkg" or m.startswith("mypkg.")]:
        del sys.modules[name]
    import mypkg.main

    return versions.code_version(mypkg.main.reward)


def test_code_version_ignores_comments_docstrings_and_layout(package: Path) -> None:
    first = version(package)
    (package / "main.py").write_text(
        MAIN.replace("# the reward of x", "# another comment").replace(
            '"""A module', '"""The module'
        )
    )
    (package / "helper.py").write_text(
        HELPER.replace('"""Doubles."""', '"""Twice x."""').replace(
            "return 2 * x", "return 2*x  # spaces"
        )
    )
    assert version(package) == first


def test_code_version_changes_with_the_code_and_with_what_it_imports(package: Path) -> None:
    first = version(package)
    (package / "main.py").write_text(MAIN.replace("+ 1", "+ 2"))
    second = version(package)
    assert second != first
    (package / "helper.py").write_text(HELPER.replace("2 * x", "3 * x"))
    assert version(package) not in (first, second)


def test_code_version_reads_what_a_module_imports_without_importing_it(package: Path) -> None:
    """``from mypkg.heavy import fn`` inside a function names ``mypkg.heavy.fn``: looking for
    that module must not import ``mypkg.heavy`` (a heavy import, or here a failing one), and
    ``module_version`` versions a module that is not imported at all, as ``code_version``."""
    (package / "heavy.py").write_text(
        "raise RuntimeError('imported')\n\ndef fn(x):\n    return x\n"
    )
    (package / "main.py").write_text(
        MAIN + "\n\ndef later(x):\n    from mypkg.heavy import fn\n\n    return fn(x)\n"
    )
    first = version(package)
    assert "mypkg.heavy" not in sys.modules
    assert versions.module_version("mypkg.main") == first
    (package / "heavy.py").write_text(
        "raise RuntimeError('imported')\n\ndef fn(x):\n    return -x\n"
    )
    assert version(package) != first and "mypkg.heavy" not in sys.modules
    for name in [m for m in sys.modules if m == "mypkg" or m.startswith("mypkg.")]:
        del sys.modules[name]
    assert versions.module_version("mypkg.main") == version(package)
    with pytest.raises(ValueError, match="no Python source for the module 'mypkg.absent'"):
        versions.module_version("mypkg.absent")


def test_code_version_of_a_class_whose_module_left_sys_modules(package: Path) -> None:
    """pytester's in-process runs restore ``sys.modules`` afterwards, while the parent package
    keeps the submodule as an attribute: a class from it is still versioned, from its file,
    the same as before; a module with no source anywhere is named."""
    (package / "main.py").write_text(MAIN + "\n\nclass Method:\n    name = 'm'\n")
    version(package)
    import mypkg.main

    cls = mypkg.main.Method
    first = versions.code_version(cls)
    del sys.modules["mypkg.main"]
    assert versions.code_version(cls) == first
    (package / "main.py").write_text(MAIN + "\n\nclass Method:\n    name = 'n'\n")
    assert versions.code_version(cls) != first
    ghost = type("Ghost", (), {"__module__": "mypkg.gone"})
    with pytest.raises(ValueError, match="no source found for the module 'mypkg.gone'"):
        versions.code_version(ghost)


def test_parsed_code_is_kept_on_disk_and_a_rerun_parses_nothing(
    package: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ast

    monkeypatch.setenv("PREFALIGN_CACHE", str(tmp_path / "cache"))
    for slot in (versions._TREES, versions._STORED):  # a new process
        monkeypatch.setitem(cache.PROCESS._values, slot, slot.make())
    first = version(package)
    assert (tmp_path / "cache" / "code").is_dir()
    monkeypatch.setitem(cache.PROCESS._values, versions._TREES, {})
    monkeypatch.setitem(cache.PROCESS._values, versions._STORED, versions._read_stored())
    real = ast.parse
    monkeypatch.setattr(ast, "parse", lambda *a, **k: pytest.fail("parsed again"))
    assert version(package) == first  # every tree read from the disk
    (package / "helper.py").write_text(HELPER.replace("2 * x", "3 * x"))
    monkeypatch.setattr(ast, "parse", real)
    assert version(package) != first  # a changed file is parsed, and kept too
    # a file that cannot be read is parsed again
    [stored] = (tmp_path / "cache" / "code").glob("trees-*.json")
    stored.write_text("{not json")
    monkeypatch.setitem(cache.PROCESS._values, versions._TREES, {})
    monkeypatch.setitem(cache.PROCESS._values, versions._STORED, versions._read_stored())
    (package / "helper.py").write_text(HELPER)
    assert version(package) == first


def test_code_version_leaves_out_type_checking_imports(package: Path) -> None:
    typed = MAIN.replace(
        "from mypkg import helper\n",
        "from typing import TYPE_CHECKING\n"
        "from mypkg import helper\nif TYPE_CHECKING:\n    from mypkg import "
        "unused\n",
    )
    (package / "main.py").write_text(typed)
    (package / "unused.py").write_text("X = 1\n")
    first = version(package)
    (package / "unused.py").write_text("X = 2\n")
    assert version(package) == first


def test_code_version_includes_the_libraries_the_code_imports(
    package: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (package / "helper.py").write_text("import numpy\n" + HELPER)
    first = version(package)
    real = versions.library_versions
    monkeypatch.setattr(
        versions,
        "library_versions",
        lambda *names: {n: ("0.0.1" if n == "numpy" else v) for n, v in real(*names).items()},
    )
    assert version(package) != first


def test_code_version_of_a_project_module_follows_its_first_party_imports() -> None:
    from prefalign_methods.rewards.lore import LoRe
    from pytest_prefalign.runtime.lm import LM

    captured = {}
    real = versions.storage.content_key

    def spy(*parts):
        if parts and parts[0] == "code":
            captured["modules"] = [name for name, _ in parts[1]]
            captured["libraries"] = dict(parts[2])
        return real(*parts)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(versions.storage, "content_key", spy)
        versions.code_version(LoRe)
        lore = captured.copy()
        versions.code_version(LM)
    assert {
        "prefalign_methods.rewards.lore",
        "prefalign_methods.rewards.bt_heads",
        "prefalign_methods.rewards.features",
    } <= set(lore["modules"])
    assert "pytest_prefalign.cache" not in lore["modules"]  # versioned by cache.SCHEMA
    assert "torch" in lore["libraries"]
    assert {"pytest_prefalign.runtime.lm", "pytest_prefalign.runtime.prefill"} <= set(
        captured["modules"]
    )
    assert {"torch", "transformers"} <= set(captured["libraries"])


def load_conftest(path: Path) -> Any:
    """Import ``path`` as pytest imports a conftest outside a package: as the module
    ``conftest``, replacing the one imported before it in ``sys.modules``."""
    spec = importlib.util.spec_from_file_location("conftest", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["conftest"] = module
    spec.loader.exec_module(module)
    return module


CONF_RM = """
import functools


def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        return fn(*args)

    return wrapper


class ConfRM:
    @staticmethod
    def scale(x):
        return 2 * x

    def score(self, x):
        return self.scale(x) + 1


def plain(x):
    return x


@logged
def decorated(x):
    return x
"""


@pytest.mark.parametrize("of", ["class", "instance", "function", "decorated function"])
def test_code_in_one_conftest_is_versioned_by_its_own_file_not_the_last_conftest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, of: str
) -> None:
    monkeypatch.delitem(sys.modules, "conftest", raising=False)
    for folder in ("root", "root/suite"):
        (tmp_path / folder).mkdir()
    (tmp_path / "root" / "conftest.py").write_text(CONF_RM)
    (tmp_path / "root" / "suite" / "conftest.py").write_text("HELPER = 1\n")
    root = load_conftest(tmp_path / "root" / "conftest.py")
    other = load_conftest(tmp_path / "root" / "suite" / "conftest.py")
    assert sys.modules["conftest"] is other
    obj = {
        "class": root.ConfRM,
        "instance": root.ConfRM(),
        "function": root.plain,
        "decorated function": root.decorated,
    }[of]
    assert versions.code_version(obj) == versions.code_version(root)
    assert versions.code_version(obj) != versions.code_version(other)
    # editing the method's own conftest changes its version, in a fresh import
    before = versions.code_version(obj)
    (tmp_path / "root" / "conftest.py").write_text(CONF_RM.replace("+ 1", "+ 2"))
    edited = load_conftest(tmp_path / "root" / "conftest.py")
    load_conftest(tmp_path / "root" / "suite" / "conftest.py")
    again = {
        "class": edited.ConfRM,
        "instance": edited.ConfRM(),
        "function": edited.plain,
        "decorated function": edited.decorated,
    }[of]
    assert versions.code_version(again) != before


# --------------------------------------------------------------------------------------------
# The disk cache and the ledger
# --------------------------------------------------------------------------------------------


def test_disk_computes_once_then_hits_and_notes_both(tmp_path: Path) -> None:
    disk = cache.Disk(tmp_path)
    key = cache.make_key("generations", model="m", items="i")
    calls = []
    with cache.recording() as uses:
        first = disk.json(key, lambda: calls.append(1) or ["a", "b"])
        again = disk.json(key, lambda: calls.append(1) or ["x"])
    assert first == again == ["a", "b"] and calls == [1]
    assert [(u.key.digest, u.hit) for u in uses] == [(key.digest, False), (key.digest, True)]
    assert disk.path(key).is_file()
    assert uses[0].to_json() == {
        "artifact": "generations",
        "key": key.digest,
        "hit": False,
        "inputs": {"model": "m", "items": "i"},
    }


def test_disk_disabled_computes_every_time_and_writes_nothing(tmp_path: Path) -> None:
    disk = cache.Disk(tmp_path, enabled=False)
    key = cache.make_key("generations", model="m")
    calls = []
    assert disk.json(key, lambda: calls.append(1) or [1]) == [1]
    assert disk.json(key, lambda: calls.append(1) or [2]) == [2]
    assert calls == [1, 1] and not any(tmp_path.iterdir())
    folder, hit = disk.folder(key)
    assert not hit and not folder.is_relative_to(tmp_path)
    disk.cleanup()
    assert not folder.exists()


def test_a_corrupt_or_refused_file_is_computed_again(tmp_path: Path) -> None:
    disk = cache.Disk(tmp_path)
    key = cache.make_key("generations", model="m")
    disk.path(key).parent.mkdir(parents=True)
    disk.path(key).write_text('["half a li')
    with pytest.warns(cache.CacheWarning) as caught:
        assert disk.json(key, lambda: ["fresh"]) == ["fresh"]
    # one warning, one line, naming the file and what was wrong with it
    (message,) = [str(w.message) for w in caught]
    assert message.startswith(f"unreadable cache entry {disk.path(key)} (JSONDecodeError: ")
    assert message.endswith("removed, computed again") and "\n" not in message
    assert disk.json(key, lambda: ["not used"]) == ["fresh"]
    # a value of the wrong shape (another version's layout) is refused and recomputed
    with pytest.warns(cache.CacheWarning, match="cached value refused"):
        assert disk.json(key, lambda: ["a", "b"], valid=lambda v: len(v) == 2) == ["a", "b"]


def test_a_file_any_reader_fails_on_is_removed_and_computed_again(tmp_path: Path) -> None:
    class LibraryError(Exception):  # as safetensors' SafetensorError: no OSError, no ValueError
        pass

    def read(path: Path) -> str:
        raise LibraryError("incomplete metadata, file not fully covered")

    disk = cache.Disk(tmp_path)
    key = cache.make_key("features", texts="t")
    disk.path(key, ".bin").parent.mkdir(parents=True)
    disk.path(key, ".bin").write_bytes(b"\x00")
    written: list[str] = []
    with pytest.warns(cache.CacheWarning, match="LibraryError: incomplete metadata"):
        value = disk.load_or_compute(
            key, lambda: "x", suffix=".bin", read=read, write=lambda p, v: written.append(v)
        )
    assert value == "x" and written == ["x"] and not disk.path(key, ".bin").exists()


def test_leftover_temporaries_are_removed_unless_a_write_may_still_own_them(
    tmp_path: Path,
) -> None:
    import os

    from filelock import FileLock

    from pytest_prefalign import storage

    models = tmp_path / "models"
    killed = models / ".abc123.x1y2.tmp"  # a conversion killed midway: its lock is free
    killed.mkdir(parents=True)
    (killed / "model.safetensors").write_bytes(b"half")
    (models / "abc123.lock").touch()
    running = models / ".def456.q9w8.tmp"  # a conversion in progress: its lock is held
    running.mkdir()
    old = tmp_path / "generations" / ".k.json.a1b2.tmp"  # no lock, untouched for two hours
    old.parent.mkdir()
    old.write_text("[")
    os.utime(old, (old.stat().st_atime - 7200, old.stat().st_mtime - 7200))
    fresh = tmp_path / "generations" / ".j.json.c3d4.tmp"  # no lock, just written
    fresh.write_text("[")
    kept = tmp_path / "generations" / "k.json"
    kept.write_text("[]")
    with FileLock(str(models / "def456.lock")):
        removed = storage.remove_stale_temporaries(tmp_path)
    assert sorted(removed) == sorted([killed, old])
    assert not killed.exists() and not old.exists()
    assert running.exists() and fresh.exists() and kept.exists()


def test_a_folder_reports_whether_it_held_files(tmp_path: Path) -> None:
    disk = cache.Disk(tmp_path)
    key = cache.make_key("rewards", method="m", train_pairs="p")
    folder, hit = disk.folder(key, "m")
    assert folder == tmp_path / "rewards" / "m" / key.digest and not hit
    (folder / "params.json").write_text("{}")
    assert disk.folder(key, "m") == (folder, True)


def test_recording_is_per_block_and_unique_keeps_first_uses() -> None:
    a, b = cache.make_key("x", n=1), cache.make_key("x", n=2)
    cache.note(a, hit=True)  # outside any recording: dropped
    with cache.recording() as outer:
        cache.note(a, hit=False)
        with cache.recording() as inner:
            cache.note(b, hit=True)
        cache.note(a, hit=True)
    assert [u.key for u in inner] == [b]
    assert [(u.key, u.hit) for u in cache.unique(outer)] == [(a, False)]


def test_active_disk_is_the_user_cache_unless_a_run_sets_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PREFALIGN_CACHE", str(tmp_path / "user"))
    assert cache.active().root == tmp_path / "user" and cache.active().enabled
    run = cache.Disk(tmp_path / "run", enabled=False)
    with cache.using(run):
        assert cache.active() is run
    assert cache.active().root == tmp_path / "user"


def test_function_version_follows_one_function_only(package: Path) -> None:
    import mypkg.main

    first = versions.function_version(mypkg.main.reward)
    (package / "helper.py").write_text(HELPER.replace("2 * x", "3 * x"))  # another function
    (package / "main.py").write_text(MAIN.replace("# the reward of x", "# a comment"))
    version(package)
    assert versions.function_version(sys.modules["mypkg.main"].reward) == first
    (package / "main.py").write_text(MAIN.replace("+ 1", "+ 2"))
    version(package)
    assert versions.function_version(sys.modules["mypkg.main"].reward) != first


# --------------------------------------------------------------------------------------------
# Per artifact: each input changed alone is a miss (generations and trained reward methods are
# checked end to end in test_cache_plugin.py, negatives in test_suite_pref_lamp.py, converted
# models in test_models.py)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("change", ["nothing", "text", "model", "code"])
def test_features_are_keyed_by_model_texts_and_code(
    tiny_lm, tmp_path: Path, change: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefalign_methods.rewards import features
    from pytest_prefalign.runtime.tiny import build_tiny_lm

    prompts, texts = ["Write a title for: cats"] * 2, ["Cats", "Dogs"]

    def hits(lm, texts):
        features.clear_memo()  # the in-process memo would hide the disk cache
        with cache.recording() as uses:
            features.response_features(lm, prompts, texts, cache_dir=tmp_path)
        return [u.hit for u in uses]

    assert hits(tiny_lm, texts) == [False]
    lm = tiny_lm
    if change == "text":
        texts = ["Cats", "Birds"]
    elif change == "model":
        lm = build_tiny_lm(1)
    elif change == "code":
        real = versions.code_version
        monkeypatch.setattr(versions, "code_version", lambda obj: real(obj) + "-edited")
    assert hits(lm, texts) == [change == "nothing"]


@pytest.mark.slow  # loads the MiniLM encoder
@pytest.mark.parametrize("change", ["nothing", "rejected", "chosen", "config", "code"])
def test_the_independent_judge_is_keyed_by_config_code_encoder_and_its_pairs(
    tmp_path: Path, change: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataclasses

    from prefalign_methods.rewards import judge

    pytest.importorskip(judge.ENCODER_PACKAGE)
    pairs = [
        Pair(f"{u}/{i}", u, f"Write a title for: {t}", t.title(), "Other")
        for u, topic in (("ann", ["cats", "kittens"]), ("bob", ["dogs", "puppies"]))
        for i, t in enumerate(topic)
    ]

    def fit(pairs, config=judge.CONFIG):
        with cache.using(cache.Disk(tmp_path)), cache.recording() as uses:
            judge.fit_judge(pairs, config)
        (use,) = uses
        return use.hit

    assert fit(pairs) is False
    config = judge.CONFIG
    if change == "rejected":  # the judge reads the preferred side only
        pairs = [dataclasses.replace(p, rejected="Edited") for p in pairs]
    elif change == "chosen":
        pairs = [dataclasses.replace(pairs[0], chosen="Edited"), *pairs[1:]]
    elif change == "config":
        config = dataclasses.replace(config, l2_user=0.5)
    elif change == "code":
        real = versions.code_version
        monkeypatch.setattr(versions, "code_version", lambda obj: real(obj) + "-edited")
    assert fit(pairs, config) is (change in ("nothing", "rejected"))


def test_the_distributions_of_import_names_are_kept_by_what_is_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.metadata

    monkeypatch.setenv("PREFALIGN_CACHE", str(tmp_path / "cache"))
    want = {k: list(v) for k, v in importlib.metadata.packages_distributions().items()}
    assert versions._distributions() == want  # asked, and kept
    asked: list[int] = []

    def other() -> dict[str, list[str]]:
        asked.append(1)
        return {"x": ["y"]}

    monkeypatch.setattr(importlib.metadata, "packages_distributions", other)
    assert versions._distributions() == want and asked == []  # read back, not asked
    site = tmp_path / "site"
    (site / "newdist-1.0.dist-info").mkdir(parents=True)
    monkeypatch.syspath_prepend(str(site))
    assert versions._distributions() == {"x": ["y"]} and asked == [1]  # another install
