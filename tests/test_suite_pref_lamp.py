"""The Pref-LaMP suite: the time split and leak rule on the real ACL Anthology data and on small
files, record validation, generated and other-author negatives. No model: a fake reference."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from fractions import Fraction
from pathlib import Path

import pytest

from prefalign_suites import pref_lamp
from prefalign_suites.pref_lamp.negatives import clean_title
from prefalign_suites.splits import held_out
from pytest_prefalign.api import DataError, DataNotFound
from pytest_prefalign.cache import CacheWarning

ROOT = Path(__file__).resolve().parents[1]
REAL = Path(os.environ.get("PREFALIGN_DATA") or ROOT.parent / "shared" / "data")
PREFIX = "Generate a title for the following abstract of a paper: "


class FakeReference:
    """The reference LM's interface; its 'title' is derived from the prompt, and every call is
    recorded so that tests can see what the cache spared."""

    name = "fake-reference"

    def __init__(self, fingerprint: str = "fake-1", echo: dict[str, str] | None = None) -> None:
        self.fingerprint = fingerprint
        self.echo = echo or {}  # abstract -> the title it answers (e.g. the real one)
        self.prompts: list[str] = []

    def generate(self, prompts, *, max_new_tokens=32, batch_size=16):
        self.prompts += prompts
        return [[self._title(p)] for p in prompts]

    def _title(self, prompt: str) -> str:
        abstract = prompt.removeprefix(PREFIX)
        if abstract in self.echo:
            return f"Title: {self.echo[abstract]}\n"
        return f'Title: "Zero-shot {abstract.split()[0]}"\nAnd more text'


def real_data() -> Path:
    if not (REAL / "acl-anthology" / "authors.json").is_file():
        pytest.skip(f"the shared ACL Anthology data is not at {REAL}")
    return REAL


def paper(aid: str, title: str, abstract: str, authors: list[str], year: int = 2019) -> dict:
    return {
        "anthology_id": aid,
        "year": year,
        "venue": "V",
        "title": title,
        "abstract": abstract,
        "authors": [{"name": a, "id": None} for a in authors],
    }


def write(root: Path, authors: list[dict], lines: list[str | bytes]) -> Path:
    folder = root / "acl-anthology"
    folder.mkdir(parents=True)
    (folder / "authors.json").write_text(json.dumps(authors), encoding="utf-8")
    blob = b"".join((ln if isinstance(ln, bytes) else ln.encode()) + b"\n" for ln in lines)
    (folder / "papers-00.jsonl").write_bytes(blob)
    return root


def corpus(
    root: Path, users: dict[str, list[tuple[str, str, list[str]]]], extra: list[dict] = ()
) -> Path:
    """Authors ``name -> [(paper id, abstract words, authors)]`` oldest first; titles are
    ``Title of <id>``."""
    papers: dict[str, dict] = {}
    for _, listed in users.items():
        for aid, words, names in listed:
            papers[aid] = paper(aid, f"Title of {aid}", words, names)
    for p in extra:
        papers[p["anthology_id"]] = p
    authors = [
        {"user_id": f"acl:{name}", "author": name, "paper_ids": [a for a, _, _ in listed]}
        for name, listed in users.items()
    ]
    return write(root, authors, [json.dumps(p) for p in papers.values()])


def own(name: str, *ids: str) -> list[tuple[str, str, list[str]]]:
    return [(i, f"abstract {i} about {name} topics", [name]) for i in ids]


def load(root: Path, limit: int | None = None, **options: str):
    """The suite loaded with these options; the tests of the generated design ask for it (the
    default is other_author)."""
    options = {"negatives": "generated", **options}
    return pref_lamp.PrefLamp().load(root, limit=limit, options=options)


# -- the real data --------------------------------------------------------------------------------


def test_time_split_on_real_data():
    root = real_data()
    authors = json.loads((root / "acl-anthology" / "authors.json").read_text(encoding="utf-8"))
    data = load(root, limit=4)
    assert data.users == sorted(a["user_id"] for a in authors[:4])  # the first 4, file order
    for author in authors[:4]:
        ids = author["paper_ids"]
        n_test = held_out(len(ids), Fraction(3, 10))
        items = [i for i in data.items if i.user == author["user_id"]]
        assert [i.item_id for i in items] == [f"{author['user_id']}/{a}" for a in ids[-n_test:]]
        profile_ids = [e.doc_id for e in data.profiles[author["user_id"]]]
        assert profile_ids == [a for a in ids[:-n_test] if a in profile_ids]  # oldest first
    # Adam Lopez 24 papers -> 7.2 -> 7; Adam Trischler 15 -> 4.5 -> 5 (half up);
    # Aditya Joshi 13 -> 3.9 -> 4; Akihiro Tamura 12 -> 3.6 -> 4
    assert [len(a["paper_ids"]) for a in authors[:4]] == [24, 15, 13, 12]
    counts = [sum(i.user == a["user_id"] for i in data.items) for a in authors[:4]]
    assert counts == [7, 5, 4, 4]


def test_items_hold_the_real_title_and_the_instruction():
    data = load(real_data(), limit=3)
    lines = (real_data() / "acl-anthology" / "papers-00.jsonl").read_text(encoding="utf-8")
    papers = {p["anthology_id"]: p for p in map(json.loads, lines.splitlines())}
    item = data.items[0]
    raw = papers[item.item_id.split("/", 1)[1]]
    assert item.reference == " ".join(raw["title"].split())
    assert item.input == " ".join(raw["abstract"].split())
    assert item.prompt == PREFIX + item.input
    assert 4 <= len(data.items) / len(data.users) <= 6  # about five test items per user


def test_leak_rule_on_real_data_keeps_test_papers_out_of_every_profile():
    data = load(real_data(), limit=40)
    tests = {i.item_id.split("/", 1)[1] for i in data.items}
    assert not tests & {e.doc_id for entries in data.profiles.values() for e in entries}
    assert data.provenance["leak_rule_removed_profile_papers"] > 0  # co-authors in 40 authors


def test_leak_rule_on_real_data_keeps_a_test_papers_twin_out_of_every_profile():
    """Dan Roth's test paper 2020.findings-emnlp.439 ("Do Language Embeddings capture
    Scales?") was also published as 2020.blackboxnlp-1.27, which his profile held: retrieval
    would hand the reference to the prompt. No profile title is a test item's title."""
    data = load(real_data(), limit=40)
    norm = lambda title: " ".join(re.findall(r"[^\W_]+", title.casefold()))  # noqa: E731
    tested = {norm(i.reference) for i in data.items}
    titles = {e.doc_id: norm(e.output) for entries in data.profiles.values() for e in entries}
    assert not [doc for doc, title in titles.items() if title in tested]
    assert "2020.blackboxnlp-1.27" not in titles


# -- the rules on small files ---------------------------------------------------------------------


def test_a_co_authors_test_paper_leaves_the_other_profile(tmp_path):
    shared = ("S", "a shared paper", ["Ann", "Bob"])
    root = corpus(
        tmp_path,
        {
            "Ann": [*own("Ann", "a1", "a2", "a3", "a4", "a5"), shared],
            "Bob": [shared, *own("Bob", "b1", "b2", "b3", "b4", "b5")],
        },
    )
    data = load(root)
    # Ann: 6 papers -> 1.8 -> 2 test items (a5, S); Bob: 6 -> b4, b5; S was Bob's oldest paper
    assert [i.item_id for i in data.items] == [
        "acl:Ann/a5",
        "acl:Ann/S",
        "acl:Bob/b4",
        "acl:Bob/b5",
    ]
    assert [e.doc_id for e in data.profiles["acl:Bob"]] == ["b1", "b2", "b3"]
    assert data.provenance["leak_rule_removed_profile_papers"] == 1


def test_a_test_papers_twin_under_another_id_leaves_every_profile(tmp_path):
    """The same paper published twice (two ids, one title up to case and punctuation): the
    twin leaves every profile, as the test paper itself would."""
    twin = paper("T1", "Do embeddings capture Scales?", "a workshop version", ["Ann"])
    root = corpus(
        tmp_path,
        {
            "Ann": own("Ann", "T1", "a1", "a2", "a3", "a4", "a5"),
            "Bob": [*own("Bob", "b1", "b2", "b3", "b4"), ("T2", "the findings version", ["Bob"])],
        },
        extra=[twin, paper("T2", "Do Embeddings Capture scales", "the findings version", ["Bob"])],
    )
    data = load(root)
    assert "acl:Bob/T2" in [i.item_id for i in data.items]
    assert [e.doc_id for e in data.profiles["acl:Ann"]] == ["a1", "a2", "a3"]
    assert data.provenance["leak_rule_removed_profile_papers"] == 1


def test_a_dropped_users_test_paper_returns_to_the_other_profiles(tmp_path):
    q = ("Q", "a shared paper", ["Eve", "Fay"])
    root = corpus(
        tmp_path,
        {"Eve": [*own("Eve", "e1", "e2"), q], "Fay": [q, *own("Fay", "f1", "f2", "f3", "f4")]},
    )
    data = load(root)
    # Eve: 3 papers -> 1 test (Q), profile e1, e2: below min_profile 3, dropped; Q is then no
    # test item of the run, so Fay (tests f3, f4) keeps Q in her profile
    assert data.users == ["acl:Fay"]
    assert data.dropped == {"user:too_few_profile_papers": 1}
    assert [e.doc_id for e in data.profiles["acl:Fay"]] == ["Q", "f1", "f2"]


def test_bad_records_are_dropped_and_reported_with_file_line_and_field(tmp_path):
    good = [paper(f"p{i}", f"Title {i}", f"Abstract {i}", ["Ann"]) for i in range(5)]
    no_title = paper("x1", "", "An abstract", ["Ann"])
    str_year = paper("x2", "A title", "An abstract", ["Ann"], year="2019")  # type: ignore[arg-type]
    no_names = {**paper("x3", "A title", "An abstract", []), "authors": [{"id": 3}]}
    dup = paper("p0", "Another title", "Another abstract", ["Bob"])
    lines = [
        *map(json.dumps, good),
        json.dumps(no_title),
        b'{"anthology_id": "\xff"}',
        "{not json",
        json.dumps(str_year),
        json.dumps(no_names),
        json.dumps(dup),
        "[1, 2]",
    ]
    authors = [
        {
            "user_id": "acl:Ann",
            "author": "Ann",
            "paper_ids": ["p0", "p1", "p2", "p3", "p4", "nope", "p1", 7],
        },
        {"user_id": "acl:Bob", "author": "Bob", "paper_ids": "p0"},
        {"user_id": "acl:Cy", "author": "Cy", "paper_ids": ["p1"]},
        {"user_id": "acl:Cy", "author": "Cy", "paper_ids": ["p2"]},
    ]
    data = load(write(tmp_path, authors, lines))
    papers = tmp_path / "acl-anthology" / "papers-00.jsonl"
    people = tmp_path / "acl-anthology" / "authors.json"
    errors = data.provenance["data_errors"]
    assert f"{papers}: record 6: field 'title': empty" in errors
    assert (
        f"{papers}: record 7: field '(whole record)': not valid UTF-8 (byte 18 of the line)"
        in errors
    )
    assert any(
        e.startswith(f"{papers}: record 8: field '(whole record)': not valid JSON") for e in errors
    )
    assert f"{papers}: record 9: field 'year': expected an integer, got str" in errors
    assert f"{papers}: record 10: field 'authors[0].name': missing" in errors
    assert any(
        e.startswith(f"{papers}: record 11: field 'anthology_id': 'p0' also at") for e in errors
    )
    assert (
        f"{people}: record 0: field 'paper_ids[5]': unknown paper id 'nope' (no valid "
        "record in papers-*.jsonl)" in errors
    )
    assert f"{people}: record 0: field 'paper_ids[6]': 'p1' repeats" in errors
    assert f"{people}: record 1: field 'paper_ids': expected a list, got str" in errors
    assert data.dropped == {
        "record:bad_paper": 6,
        "record:duplicate_paper_id": 2,
        "record:bad_paper_id": 4,
        "record:bad_author": 1,
        "record:duplicate_user_id": 2,
    }
    # p0 was duplicated, so Ann keeps p1..p4: 4 papers, 1 test item, profile p1, p2, p3
    assert data.users == ["acl:Ann"]
    assert [e.doc_id for e in data.profiles["acl:Ann"]] == ["p1", "p2", "p3"]
    assert data.provenance["data_errors_total"] == 13  # the drops without a message: first copies


def test_unreadable_authors_file_is_fatal_and_named(tmp_path):
    root = write(tmp_path, [], [json.dumps(paper("p", "T", "A", ["Ann"]))])
    (root / "acl-anthology" / "authors.json").write_text('{"user_id": "x"}')
    with pytest.raises(DataError) as err:
        load(root)
    assert err.value.file == str(root / "acl-anthology" / "authors.json")
    assert "expected a JSON list of authors" in str(err.value)


def test_missing_folder_and_unknown_option(tmp_path):
    with pytest.raises(DataNotFound, match="acl-anthology"):
        load(tmp_path)
    with pytest.raises(
        DataError,
        match=r"suite.toml: record \[options\]: field 'negative': "
        r"unknown option; known: .*negatives",
    ):
        load(real_data(), limit=1, negative="generated")
    with pytest.raises(DataError, match="field 'test_share': expected a number between 0 and 1"):
        load(real_data(), limit=1, test_share="1.5")
    with pytest.raises(DataError, match="field 'title_tokens': expected an integer, got 'many'"):
        load(real_data(), limit=1, title_tokens="many")


# -- pairs ----------------------------------------------------------------------------------------


def test_generated_negatives_are_cached_per_reference(tmp_path):
    data = load(real_data(), limit=2)
    ref = FakeReference()
    pref_lamp.PrefLamp().build_pairs(data, ref, tmp_path)
    n_train = sum(len(p) for p in data.profiles.values())
    assert (len(data.train_pairs), len(data.test_pairs)) == (n_train, len(data.items))
    assert len(ref.prompts) == n_train + len(data.items)
    item, pair = data.items[0], data.test_pairs[0]
    assert (pair.pair_id, pair.prompt, pair.chosen) == (item.item_id, item.prompt, item.reference)
    assert pair.rejected == f"Zero-shot {item.input.split()[0]}"  # cleaned of label and quotes
    assert (
        data.provenance
        | {
            "negatives": "generated",
            "reference_model": "fake-reference",
            "reference_fingerprint": "fake-1",
        }
        == data.provenance
    )
    cache = json.loads(Path(data.provenance["negatives_cache"]).read_text())
    assert cache["reference_fingerprint"] == "fake-1" and len(cache["titles"]) == len(ref.prompts)
    again = load(real_data(), limit=2)
    second = FakeReference()
    pref_lamp.PrefLamp().build_pairs(again, second, tmp_path)
    assert second.prompts == [] and again.test_pairs == data.test_pairs  # all from the cache
    other = FakeReference(fingerprint="fake-2")
    pref_lamp.PrefLamp().build_pairs(load(real_data(), limit=2), other, tmp_path)
    assert len(other.prompts) == len(ref.prompts)  # another reference model: generated anew


@pytest.mark.parametrize(
    "change", ["nothing", "title_tokens", "batch_size", "reference", "code", "papers"]
)
def test_generated_negatives_are_keyed_by_everything_they_depend_on(tmp_path, change, monkeypatch):
    from pytest_prefalign import cache, versions

    def build(ref, limit=2, **options):
        data = load(real_data(), limit=limit, **options)
        with cache.recording() as uses:
            pref_lamp.PrefLamp().build_pairs(data, ref, tmp_path)
        (use,) = uses
        assert use.key.kind == "negatives"
        return data, use

    first, use = build(FakeReference())
    assert not use.hit
    ref, options, limit = FakeReference(), {}, 2
    if change == "reference":
        ref = FakeReference(fingerprint="fake-2")
    elif change in ("title_tokens", "batch_size"):
        options = {change: "7"}
    elif change == "papers":
        limit = 3  # a third author's papers
    elif change == "code":
        real = versions.code_version
        monkeypatch.setattr(versions, "code_version", lambda obj: real(obj) + "-edited")
    again, use = build(ref, limit, **options)
    assert use.hit == (change == "nothing")
    assert bool(ref.prompts) == (change != "nothing")
    if change in ("nothing", "papers"):
        # the titles of papers already generated are reused from the same file
        assert len(ref.prompts) < len(again.train_pairs) + len(again.test_pairs)


def test_a_corrupt_cache_file_is_generated_afresh(tmp_path):
    data = load(real_data(), limit=1)
    ref = FakeReference()
    pref_lamp.PrefLamp().build_pairs(data, ref, tmp_path)
    Path(data.provenance["negatives_cache"]).write_bytes(b'{"titles": {"half')
    again, second = load(real_data(), limit=1), FakeReference()
    with pytest.warns(CacheWarning, match="unreadable cache entry .*titles-.*JSONDecodeError"):
        pref_lamp.PrefLamp().build_pairs(again, second, tmp_path)
    assert second.prompts == ref.prompts and again.test_pairs == data.test_pairs


def test_a_negative_equal_to_the_real_title_is_skipped_and_counted(tmp_path):
    data = load(real_data(), limit=1)
    item = data.items[0]
    ref = FakeReference(echo={item.input: item.reference.upper()})
    pref_lamp.PrefLamp().build_pairs(data, ref, tmp_path)
    assert item.item_id not in {p.pair_id for p in data.test_pairs}
    assert len(data.test_pairs) == len(data.items) - 1
    assert data.dropped == {"pair:negative_equals_real": 1}


@pytest.mark.parametrize(
    ("raw", "title"),
    [
        ('Title: "Graph Parsing"\nMore', "Graph Parsing"),
        ("\n\n**Title:** Neural  Nets\n", "Neural Nets"),
        ("'Quoted'", "Quoted"),
        ("", ""),
    ],
)
def test_clean_title(raw, title):
    assert clean_title(raw) == title


def test_other_author_negative_is_the_nearest_paper_by_nobody_involved(tmp_path):
    words = "kangaroo wombat platypus echidna"
    users = {
        "Ann": [
            ("a1", "parsing trees with grammars", ["Ann"]),
            ("a2", "parsing graphs with grammars", ["Ann"]),
            ("a3", "tagging words with grammars", ["Ann"]),
            ("a4", f"{words} marsupial habitats", ["Ann"]),
        ],
        "Bob": [
            ("b1", "speech signals and noise", ["Bob"]),
            ("b2", "speech signals and music", ["Bob"]),
            ("b3", "speech recognition of noise", ["Bob"]),
            ("W", f"{words} koala habitats", ["Bob"]),
        ],
    }
    extra = [
        paper("Y", "Shares an author", f"{words} marsupial habitats", ["Ann", "Yan"]),
        paper("Z", "The nearest other", f"{words} dingo", ["Zed"]),
        paper("F", "Far away", "compilers and registers", ["Fox"]),
    ]
    data = load(corpus(tmp_path, users, extra), negatives="other_author")
    rejected = {p.pair_id: p.rejected for p in data.test_pairs}
    # Y is closer but shares Ann; W is closer but is Bob's test item: Z is the nearest allowed
    assert rejected["acl:Ann/a4"] == "The nearest other"
    assert "Title of W" not in {p.rejected for p in data.train_pairs + data.test_pairs}
    assert len(data.train_pairs) == 6 and len(data.test_pairs) == 2
    assert data.provenance["negatives"] == "other_author"


MARSUPIALS = "kangaroo wombat platypus echidna"
# Ann's test paper a9 is about marsupials; nobody else in the data is
MARSUPIAL_USERS = {
    "Ann": [(f"a{i}", f"parsing topic {i} with grammars", ["Ann"]) for i in range(3)]
    + [("a9", f"{MARSUPIALS} marsupial habitats", ["Ann"])],
    "Bob": [(f"b{i}", f"speech topic {i} and noise", ["Bob"]) for i in range(4)],
}


@pytest.mark.parametrize("first", ["Copy one", "Copy two"])
def test_other_author_negative_among_equal_scores_is_the_first_in_the_pool(tmp_path, first):
    # the same paper listed twice (as the Anthology does across venues) scores the same: the
    # pool's order decides, not the order a sort leaves equal scores in, which differs between
    # CPUs (AVX-512 and AVX2 sorting kernels)
    users = MARSUPIAL_USERS
    copies = [
        paper(f"C{n}", title, f"{MARSUPIALS} dingo", ["Cy"])
        for n, title in enumerate(["Copy one", "Copy two"])
    ]
    if first == "Copy two":
        copies.reverse()
    data = load(corpus(tmp_path, users, copies), negatives="other_author")
    pair = next(p for p in data.test_pairs if p.pair_id == "acl:Ann/a9")
    assert pair.rejected == first


def test_other_author_negative_matches_the_real_titles_length(tmp_path):
    users = MARSUPIAL_USERS
    extra = [
        # nearest by BM25, but nine words against the real title's three
        paper(
            "L", "A much longer title than the real one by far", f"{MARSUPIALS} marsupial", ["Lu"]
        ),
        # a little farther, and three words long
        paper("S", "Three word title", f"{MARSUPIALS} koala dingo", ["Sam"]),
    ]
    root = corpus(tmp_path, users, extra)
    matched = load(root, negatives="other_author")
    pair = next(p for p in matched.test_pairs if p.pair_id == "acl:Ann/a9")
    assert pair.chosen == "Title of a9" and pair.rejected == "Three word title"
    assert matched.provenance["length_slack"] == 1
    anything = load(root, negatives="other_author", length_slack="any")
    pair = next(p for p in anything.test_pairs if p.pair_id == "acl:Ann/a9")
    assert pair.rejected == "A much longer title than the real one by far"


def test_other_author_pairs_on_real_data_are_matched_in_length():
    options = {"negatives": "other_author"}
    data = pref_lamp.PrefLamp().load(real_data(), limit=4, options=options)
    assert data.provenance["negatives"] == "other_author"
    pairs = data.train_pairs + data.test_pairs
    gaps = [abs(len(p.chosen.split()) - len(p.rejected.split())) for p in pairs]
    assert len(pairs) > 30 and sum(g <= 1 for g in gaps) / len(gaps) > 0.95


# -- packaging ------------------------------------------------------------------------------------


def test_registers_a_suite_with_the_protocol_attributes():
    from pytest_prefalign.registry import Registry, add_builtins

    registry = Registry()
    add_builtins(registry, "pref_lamp")
    suite = registry.suite("pref_lamp")
    assert isinstance(suite, pref_lamp.PrefLamp)
    assert suite.name == "pref_lamp" and suite.source == "acl-anthology"
    assert "CC BY 4.0" in suite.licence and suite.description
    entry = pref_lamp.PrefLamp().load(real_data(), limit=1, options={}).profiles
    first = next(iter(entry.values()))[0]
    assert suite.example(first) == f"Abstract: {first.input}\nTitle: {first.output}"


@pytest.mark.parametrize("name", ["pref_lamp", "polis", "tldr", "prism"])
def test_suite_toml_names_its_suite(name):
    doc = tomllib.loads((ROOT / "suites" / name / "suite.toml").read_text(encoding="utf-8"))
    assert doc["suite"]["name"] == name
    assert all(isinstance(v, str) for v in doc.get("options", {}).values())


def test_suite_modules_import_without_heavy_packages():
    code = (
        "import sys; import prefalign_suites.pref_lamp, prefalign_suites.polis, "
        "prefalign_suites.tldr, prefalign_suites.prism; "
        "print(sorted(m for m in ('torch', 'transformers', 'datasets', 'numpy', 'bm25s') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
