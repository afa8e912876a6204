"""Released Pref-LaMP pairs (``release.py``, ``prefalign data build-pairs``): written once, read
by every run on the same authors without a writer, refused when damaged, and the matched pairing
of a test paper's candidates. A fake writer (``test_pair_writer.FakeWriter``)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from prefalign_suites import pref_lamp
from prefalign_suites.pref_lamp import build_pairs, release, writer
from pytest_prefalign import cache
from pytest_prefalign.api import DataError
from tests.test_pair_writer import STRANGERS, FakeWriter, authors


def released(root: Path, folder: Path, out: Path, **options: str) -> release.Release:
    """A release of every brief of ``root``'s authors, written by the fake writer."""
    suite = pref_lamp.PrefLamp()
    data = suite.load(root, limit=None, options={"negatives": "style", **options})
    writing, (train, test), _ = suite._briefs.pop(id(data))
    every = [*train, *test]
    made, who = writer.sides(every, FakeWriter(), folder, writing, tests={b.source for b in test})
    return release.write(out, "test.1", who, writing, every, made)


@pytest.fixture
def shipped(tmp_path, monkeypatch):
    """The authors' data and a release of their pairs in the packaged file's place."""
    root = authors(tmp_path / "data", STRANGERS)
    monkeypatch.setattr(release, "RELEASED", tmp_path / "released")
    out = release.packaged("nearest")
    return root, released(root, tmp_path / "written", out)


def written(root: Path, folder: Path, fake: FakeWriter, **options: str):
    suite = pref_lamp.PrefLamp()
    data = suite.load(root, limit=None, options={"negatives": "style", **options})
    if not data.test_pairs:
        suite.build_pairs(data, fake, folder)
    return data


def test_a_run_on_released_authors_reads_their_pairs_and_writes_nothing(shipped, tmp_path):
    root, made = shipped
    suite = pref_lamp.PrefLamp()
    data = suite.load(root, limit=None, options={"negatives": "style"})
    assert suite.writer(data) is None  # no writer to load: the pairs are there already
    # the same pairs as a writer writing them (the release's writer wrote them so)
    fresh = written(root, tmp_path / "fresh", FakeWriter(), writer="tiny")
    assert [(p.pair_id, p.chosen, p.rejected) for p in data.test_pairs] == [
        (p.pair_id, p.chosen, p.rejected) for p in fresh.test_pairs
    ]
    assert len(data.train_pairs) == len(fresh.train_pairs) == 6
    note = data.provenance["pairs_release"]
    assert note == {
        "version": "test.1",
        "sha256": made.checksum,
        "briefs_released": 8,
        "briefs_written": 0,
    }
    assert data.provenance["writer"] == "fake-writer"
    assert data.provenance["writer_fingerprint"] == "w-1"
    assert "written_cache" not in data.provenance


def test_a_release_made_with_other_options_is_not_used(shipped, tmp_path):
    root, _ = shipped
    fake = FakeWriter()
    data = written(root, tmp_path / "pairs", fake, writer_samples="2")
    assert fake.prompts  # written: the release was made with 3 samples
    assert "pairs_release" not in data.provenance


def test_briefs_the_release_lacks_are_written_and_counted(shipped, tmp_path):
    root, made = shipped
    # another author's papers: Cat's briefs are not in the release, Ann's and Bob's are
    from tests.test_suite_pref_lamp import corpus, own

    people = {name: own(name, *(f"{name[0].lower()}{n}" for n in range(1, 5))) for name in NAMES}
    more = corpus(tmp_path / "more", people, extra=STRANGERS)
    fake = FakeWriter()
    data = written(more, tmp_path / "pairs", fake)
    note = data.provenance["pairs_release"]
    assert note["briefs_written"] > 0 and note["briefs_released"] > 0
    assert note["sha256"] == made.checksum
    assert any("abstract c4" in p for p in fake.prompts)


NAMES = ("Ann", "Bob", "Cat")


def test_a_changed_paper_is_written_again(shipped, tmp_path):
    root, _ = shipped
    papers = root / "acl-anthology" / "papers-00.jsonl"
    lines = papers.read_text().splitlines()
    edited = [json.loads(line) for line in lines]
    for p in edited:
        if p["anthology_id"] == "a4":
            p["abstract"] += " Revised."
    papers.write_text("\n".join(json.dumps(p) for p in edited) + "\n")
    fake = FakeWriter()
    data = written(root, tmp_path / "pairs", fake)
    assert data.provenance["pairs_release"]["briefs_written"] >= 1
    assert any("Revised." in p for p in fake.prompts)


def test_a_damaged_release_fails_naming_the_file_and_both_checksums(shipped):
    root, made = shipped
    doc = json.loads(gzip.decompress(release.packaged("nearest").read_bytes()))
    first = next(iter(doc["sources"].values()))
    first["pairs"][0][2] = "A title nobody wrote"
    release.packaged("nearest").write_bytes(gzip.compress(json.dumps(doc).encode()))
    with pytest.raises(DataError) as failed:
        pref_lamp.PrefLamp().load(root, limit=None, options={"negatives": "style"})
    message = str(failed.value)
    assert str(release.packaged("nearest")) in message and made.checksum in message


def test_the_release_file_is_the_same_bytes_for_the_same_pairs(tmp_path, monkeypatch):
    root = authors(tmp_path / "data", STRANGERS)
    one = released(root, tmp_path / "w1", tmp_path / "one.json.gz")
    two = released(root, tmp_path / "w2", tmp_path / "two.json.gz")
    assert (tmp_path / "one.json.gz").read_bytes() == (tmp_path / "two.json.gz").read_bytes()
    assert one.checksum == two.checksum


def test_matched_pairing_makes_every_length_matched_pair_of_a_test_paper(tmp_path):
    root = authors(tmp_path / "data", STRANGERS)
    # samples 0 and 2 as long as each other, sample 1 three words longer
    fake = FakeWriter(lengths={1: 3})
    data = written(root, tmp_path / "pairs", fake, writer_pairs="matched")
    ann = sorted(p.pair_id for p in data.test_pairs if p.user == "acl:Ann")
    # own 0, 2 against others' 0, 2 (within 2 tokens), and own 1 against others' 1
    assert ann == [f"acl:Ann/a4#{i}-{j}" for i, j in ((0, 0), (0, 2), (1, 1), (2, 0), (2, 2))]
    # training pairs stay one per paper
    assert sorted(p.pair_id for p in data.train_pairs if p.user == "acl:Ann") == [
        "acl:Ann/a1",
        "acl:Ann/a2",
        "acl:Ann/a3",
    ]
    assert data.provenance["pairing"] == "matched"


def test_build_pairs_writes_the_release_of_the_chosen_authors(tmp_path, monkeypatch, capsys):
    root = authors(tmp_path / "data", STRANGERS)
    monkeypatch.setattr(build_pairs, "load_writer", lambda source: FakeWriter())
    out = tmp_path / "pairs.json.gz"
    with cache.using(cache.Disk(tmp_path / "cache")):
        code = build_pairs.build_main(
            ["--authors", "2", "--data", str(root), "--out", str(out), "--version", "v9"]
        )
    assert code == 0
    made = release.read(out)
    assert made.version == "v9" and made.writer.name == "fake-writer"
    assert {pid.split("/")[0] for pid in made.sources} == {"acl:Bob"}  # author 2 only
    printed = capsys.readouterr()
    assert f"sha256 {made.checksum}" in printed.out and "writing 8 prompts' titles" in printed.err
    assert build_pairs.positions("1-3,2,7") == [0, 1, 2, 6]


def test_each_pairing_reads_its_own_release(shipped, tmp_path):
    root, nearest = shipped
    matched = released(root, tmp_path / "w-m", release.packaged("matched"), writer_pairs="matched")
    assert matched.checksum != nearest.checksum
    suite = pref_lamp.PrefLamp()
    data = suite.load(root, limit=None, options={"negatives": "style", "writer_pairs": "matched"})
    assert data.provenance["pairs_release"]["sha256"] == matched.checksum
    assert suite.writer(data) is None and data.provenance["pairing"] == "matched"


def test_prefalign_data_build_pairs_names_the_suites_that_release_pairs(capsys):
    from pytest_prefalign.datadir import data_main

    assert data_main(["build-pairs"]) == 2
    assert data_main(["build-pairs", "polis"]) == 2  # Polis' pairs are votes: nothing to write
    err = capsys.readouterr().err
    assert "suites with released pairs: pref_lamp" in err


def test_build_pairs_writes_only_what_the_packaged_release_lacks(shipped, tmp_path, monkeypatch):
    """A changed paper: the build takes every other brief from the packaged release and writes
    only the changed ones; the new release holds the same pairs for the rest. ``--again``
    writes every brief; a writer other than the release's is refused."""
    root, before = shipped
    papers = root / "acl-anthology" / "papers-00.jsonl"
    edited = [json.loads(line) for line in papers.read_text().splitlines()]
    for p in edited:
        if p["anthology_id"] == "a4":
            p["abstract"] += " Revised."
    papers.write_text("\n".join(json.dumps(p) for p in edited) + "\n")
    fakes: list[FakeWriter] = []
    monkeypatch.setattr(
        build_pairs, "load_writer", lambda source: fakes.append(FakeWriter()) or fakes[-1]
    )

    def build(out: Path, *more: str) -> release.Release:
        with cache.using(cache.Disk(tmp_path / f"cache-{out.stem}")):
            argv = ["--authors", "1-2", "--data", str(root), "--out", str(out), *more]
            assert build_pairs.build_main(argv) == 0
        found = release.read(out)
        assert found is not None
        return found

    after = build(tmp_path / "grown.json.gz")
    assert any("Revised." in p for p in fakes[0].prompts)
    changed = {pid for pid, held in after.sources.items() if before.sources.get(pid) != held}
    assert changed and len(changed) < len(after.sources)
    assert all(after.sources[pid] == before.sources[pid] for pid in set(after.sources) - changed)
    build(tmp_path / "again.json.gz", "--again")
    assert len(fakes[1].prompts) > len(fakes[0].prompts)
    # the same weights under newer code (another fingerprint): the release grows, naming its
    # first writer; other weights: refused
    newer = FakeWriter(fingerprint="w-2")
    monkeypatch.setattr(build_pairs, "load_writer", lambda source: newer)
    assert build(tmp_path / "newer.json.gz").writer == before.writer
    other = FakeWriter(fingerprint="w-3")
    other.weights_fingerprint = "other-weights"
    monkeypatch.setattr(build_pairs, "load_writer", lambda source: other)
    with cache.using(cache.Disk(tmp_path / "cache-other")):
        argv = ["--authors", "1-2", "--data", str(root), "--out", str(tmp_path / "x.json.gz")]
        assert build_pairs.build_main(argv) == 2
