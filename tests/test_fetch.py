"""``prefalign data fetch`` and the fetch a run does on its own, with no network at all: a tiny
Anthology ``data/`` folder written here and read through the real ``acl-anthology`` code (and
through git from a local repository), pooch against ``file://`` URLs, the ``datasets`` library
replaced by a tiny in-memory dataset."""

from __future__ import annotations

import argparse
import io
import json
import os
import pkgutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from xml.sax.saxutils import escape

import pytest

from prefalign_suites.polis import fetch as polis_fetch
from prefalign_suites.polis.suite import Polis
from prefalign_suites.pref_lamp.suite import PrefLamp
from pytest_prefalign import fetch
from pytest_prefalign.api import DataNotFound
from pytest_prefalign.datadir import find_data_dir

SHARED_POLIS = (
    Path(os.environ.get("PREFALIGN_DATA") or Path(__file__).parents[1].parent / "shared" / "data")
    / "polis"
)


@pytest.fixture(autouse=True)
def caches(tmp_path, monkeypatch):
    """An empty user cache, no data directory from the environment, and offline unless a test
    says otherwise (no test may reach a network)."""
    monkeypatch.setenv("PREFALIGN_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("PREFALIGN_DATA", raising=False)
    monkeypatch.setenv("PREFALIGN_OFFLINE", "1")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_prefalign.cli", "data", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=os.environ.copy(),
        timeout=300,
    )


# -- a tiny ACL Anthology data/ folder ------------------------------------------------------------

PEOPLE = {  # json/people.json, the Anthology's people (acl-anthology 1.3 reads it)
    "jane-doe": {"names": [{"first": "Jane", "last": "Doe"}, {"first": "J.", "last": "Doe"}]},
    "wei-zhang-edinburgh": {"names": [{"first": "Wei", "last": "Zhang"}], "comment": "Edinburgh"},
    "wei-zhang-tsinghua": {"names": [{"first": "Wei", "last": "Zhang"}], "comment": "Tsinghua"},
}
ABSTRACT = "We study how people write the titles of their own papers, year after year. " * 4


def xml_author(first: str, last: str, pid: str | None = None) -> str:
    attribute = f' id="{pid}"' if pid else ""
    return f"<author{attribute}><first>{first}</first><last>{last}</last></author>"


def tiny_anthology(data: Path) -> Path:
    """One collection a year, 2015 to 2022. Jane Doe (also written J. Doe, no id: the library
    matches the name) and two people named Wei Zhang, told apart by their ids, write 14 to 21
    papers from 2016 on; Bob Minor too few; 2015 papers and too-short abstracts do not count."""
    (data / "xml").mkdir(parents=True)
    (data / "json").mkdir()
    (data / "xml" / "schema.rnc").write_bytes(
        pkgutil.get_data("acl_anthology", "data/schema.rnc") or b""
    )
    (data / "json" / "people.json").write_text(json.dumps(PEOPLE), encoding="utf-8")
    edinburgh = xml_author("Wei", "Zhang", "wei-zhang-edinburgh")
    tsinghua = xml_author("Wei", "Zhang", "wei-zhang-tsinghua")
    for year in range(2015, 2023):
        papers = [
            (f"Jane's first paper of {year}", [xml_author("Jane", "Doe")], ABSTRACT),
            (f"Jane's second paper of {year}", [xml_author("J.", "Doe")], ABSTRACT),
            (f"Edinburgh papers of {year}", [edinburgh], ABSTRACT),
            (f"Edinburgh again in {year}", [edinburgh], ABSTRACT),
            (f"Tsinghua papers of {year}", [tsinghua], ABSTRACT),
            (f"Tsinghua with Jane in {year}", [tsinghua, xml_author("Jane", "Doe")], ABSTRACT),
            (f"A short abstract of {year}", [xml_author("Jane", "Doe")], "Too short."),
            (f"Bob's paper of {year}", [xml_author("Bob", "Minor")], ABSTRACT),
        ]
        body = "\n".join(
            f'    <paper id="{n}"><title>{escape(title)}</title>{"".join(authors)}'
            f"<abstract>{escape(abstract)}</abstract><bibkey>tiny-{year}-{n}</bibkey></paper>"
            for n, (title, authors, abstract) in enumerate(papers, 1)
        )
        (data / "xml" / f"{year}.tiny.xml").write_text(
            f"""<?xml version='1.0' encoding='UTF-8'?>
<collection id="{year}.tiny">
  <volume id="1" type="proceedings">
    <meta>
      <booktitle>Proceedings of the Tiny Workshop {year}</booktitle>
      <publisher>Association for Computational Linguistics</publisher>
      <month>July</month>
      <year>{year}</year>
      <venue>tiny</venue>
    </meta>
{body}
  </volume>
</collection>
""",
            encoding="utf-8",
        )
    return data


@pytest.fixture(scope="module")
def anthology_data(tmp_path_factory) -> Path:
    return tiny_anthology(tmp_path_factory.mktemp("anthology") / "data")


def read_authors(folder: Path) -> dict[str, dict]:
    return {a["user_id"]: a for a in json.loads((folder / "authors.json").read_text())}


def read_papers(folder: Path) -> list[dict]:
    return [
        json.loads(line)
        for f in sorted(folder.glob("papers-*.jsonl"))
        for line in f.read_text(encoding="utf-8").splitlines()
    ]


def test_pref_lamp_from_a_local_anthology_folder(anthology_data, tmp_path):
    out = tmp_path / "data"
    done = run_cli("fetch", "pref_lamp", "--to", str(out), "--anthology-data", str(anthology_data))
    assert done.returncode == 0, done.stderr
    folder = out / "acl-anthology"
    authors = read_authors(folder)
    # people by the Anthology's ids: the two Wei Zhangs apart, Jane's name variants together
    assert set(authors) == {"acl:jane-doe", "acl:wei-zhang-edinburgh", "acl:wei-zhang-tsinghua"}
    assert [len(authors[u]["paper_ids"]) for u in sorted(authors)] == [21, 14, 14]
    papers = {p["anthology_id"]: p for p in read_papers(folder)}
    for author in authors.values():
        years = [papers[i]["year"] for i in author["paper_ids"]]
        assert years == sorted(years) and years[0] == 2016  # oldest first, none before 2016
    assert len(papers) == 42  # 6 papers a year by the three, 2016 to 2022
    assert papers["2016.tiny-1.2"]["authors"] == [{"name": "J. Doe", "id": "jane-doe"}]
    assert papers["2016.tiny-1.6"]["venue"] == "Proceedings of the Tiny Workshop 2016"
    assert "at least 12 papers" in done.stderr and "3 authors, 42 papers" in done.stderr


def test_manifest_lists_every_file_with_its_hash(anthology_data, tmp_path):
    out = tmp_path / "data"
    assert (
        run_cli(
            "fetch", "pref_lamp", "--to", str(out), "--anthology-data", str(anthology_data)
        ).returncode
        == 0
    )
    folder = out / "acl-anthology"
    manifest = json.loads((folder / "MANIFEST.json").read_text())
    assert set(manifest["files"]) == {"authors.json", "papers-00.jsonl"}
    for name, entry in manifest["files"].items():
        assert entry["sha256"] == fetch.storage.file_sha256(folder / name)
    assert manifest["licence"].startswith("CC BY 4.0")
    assert manifest["attribution"] == "ACL Anthology, https://aclanthology.org, CC BY 4.0"
    assert "acl-anthology 1.3.4" in manifest["source"] and manifest["date"]
    assert manifest["details"]["rules"]["users"] == "Anthology person ids"
    done = run_cli("fetch", "pref_lamp", "--to", str(out), "--check")
    assert done.returncode == 0 and "every file matches MANIFEST.json" in done.stdout
    (folder / "authors.json").write_text("[]")
    done = run_cli("fetch", "pref_lamp", "--to", str(out), "--check")
    assert done.returncode == 1
    assert f"{folder / 'authors.json'}: SHA-256 differs from MANIFEST.json" in done.stdout


def test_the_built_folder_is_what_the_suite_reads(anthology_data, tmp_path):
    out = tmp_path / "data"
    assert (
        run_cli(
            "fetch", "pref_lamp", "--to", str(out), "--anthology-data", str(anthology_data)
        ).returncode
        == 0
    )
    data = PrefLamp().load(out, limit=None, options={"negatives": "other_author"})
    assert set(data.users) == {"acl:jane-doe", "acl:wei-zhang-edinburgh", "acl:wei-zhang-tsinghua"}
    assert data.items and data.train_pairs and data.test_pairs
    assert not data.dropped


def test_an_existing_folder_is_kept_unless_forced(anthology_data, tmp_path):
    out = tmp_path / "data"
    args = ("fetch", "pref_lamp", "--to", str(out), "--anthology-data", str(anthology_data))
    assert run_cli(*args).returncode == 0
    stamp = (out / "acl-anthology" / "MANIFEST.json").read_text()
    done = run_cli(*args)
    assert "already there" in done.stderr
    assert (out / "acl-anthology" / "MANIFEST.json").read_text() == stamp
    assert run_cli(*args, "--force").returncode == 0
    assert sorted(p.name for p in out.iterdir()) == ["acl-anthology", "acl-anthology.lock"]


def test_not_an_anthology_folder_is_an_error_naming_it(tmp_path):
    done = run_cli(
        "fetch", "pref_lamp", "--to", str(tmp_path / "data"), "--anthology-data", str(tmp_path)
    )
    assert done.returncode == 1
    assert f"{tmp_path}: not the Anthology's data/ folder" in done.stderr
    assert not (tmp_path / "data" / "acl-anthology").exists()


def test_an_anthology_too_old_for_the_library_names_the_revision_that_works(tmp_path):
    """An older checkout keeps its people in yaml/name_variants.yaml, not json/people.json."""
    from prefalign_suites.pref_lamp.fetch import REVISION

    old = tiny_anthology(tmp_path / "old" / "data")
    (old / "json" / "people.json").unlink()
    (old / "yaml").mkdir()
    (old / "yaml" / "name_variants.yaml").write_text("- canonical: {first: Jane, last: Doe}\n")
    done = run_cli(
        "fetch", "pref_lamp", "--to", str(tmp_path / "data"), "--anthology-data", str(old)
    )
    assert done.returncode == 1
    assert "this Anthology checkout's format predates acl-anthology" in done.stderr
    assert f"fetch the pinned revision {REVISION}" in done.stderr
    assert not (tmp_path / "data" / "acl-anthology").exists()


def git(where: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(where), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def test_pref_lamp_fetches_a_pinned_revision_through_git(tmp_path, monkeypatch):
    monkeypatch.delenv("PREFALIGN_OFFLINE")  # a file:// repository needs no network
    repo = tmp_path / "acl-anthology"
    tiny_anthology(repo / "data")
    (repo / "README.md").write_text("not data")
    git(repo.parent, "init", "--quiet", str(repo))
    git(repo, "add", ".")
    git(repo, "commit", "--quiet", "-m", "tiny")
    pinned = git(repo, "rev-parse", "HEAD")
    (repo / "data" / "xml" / "2022.tiny.xml").unlink()  # a later commit drops a year
    git(repo, "commit", "--quiet", "-am", "later")
    out = tmp_path / "data"
    args = (
        "fetch",
        "pref_lamp",
        "--to",
        str(out),
        "--anthology-repository",
        f"file://{repo}",
        "--anthology-revision",
        pinned,
    )
    done = run_cli(*args)
    assert done.returncode == 0, done.stderr
    # stderr is a pipe, as in a CI log: git's progress stays out of it
    assert "\r" not in done.stderr and "objects" not in done.stderr, done.stderr
    manifest = json.loads((out / "acl-anthology" / "MANIFEST.json").read_text())
    assert manifest["version"] == pinned
    assert len(read_papers(out / "acl-anthology")) == 42  # the pinned commit, not the latest
    clone = tmp_path / "cache" / "downloads" / "acl-anthology" / pinned
    assert (clone / "data" / "xml").is_dir() and not (clone / "README.md").exists()
    done = run_cli(*args, "--force")  # the clone is reused
    assert "already in" in done.stderr and done.returncode == 0
    done = run_cli(
        "fetch",
        "pref_lamp",
        "--to",
        str(tmp_path / "newest"),
        "--anthology-repository",
        f"file://{repo}",
        "--anthology-revision",
        "latest",
    )
    assert done.returncode == 0, done.stderr
    newest = json.loads((tmp_path / "newest" / "acl-anthology" / "MANIFEST.json").read_text())
    assert newest["version"] == git(repo, "rev-parse", "HEAD") != pinned


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("stream", "shown"), [(io.StringIO(), False), (Terminal(), True)])
def test_git_shows_its_progress_on_a_terminal_only(tmp_path, monkeypatch, stream, shown):
    from prefalign_suites.pref_lamp import repository

    calls = []

    def git_call(where, *args, show=False):
        calls.append((args, show))
        if args[0] == "init":
            (where / ".git").mkdir()
        return ""

    monkeypatch.setattr(repository, "_git", git_call)
    progress = fetch.Progress("pref_lamp", stream)
    with pytest.raises(fetch.FetchError):  # no commit checked out by the stand-in
        repository.checkout("file:///nowhere", "0" * 40, tmp_path, progress)
    (fetched,) = [(args, show) for args, show in calls if args[0] == "fetch"]
    assert ("--progress" in fetched[0], "--quiet" in fetched[0], fetched[1]) == (
        shown,
        not shown,
        shown,
    )


# -- polis: pooch against file:// URLs ------------------------------------------------------------


def polis_mirror(root: Path) -> dict[str, str]:
    """Two tiny conversations as openData lays them out; returns their pinned hashes."""
    conversations = {  # comment-id, author-id, agrees, disagrees, moderated, comment-body
        "alpha": ["1,1,3,0,1,Fund the parks", "2,2,0,3,1,Close the parks", "3,1,3,0,1,Trees"],
        "beta": ["1,5,3,0,1,Build homes", "2,6,0,3,1,Build nothing"],
    }
    for name, comments in conversations.items():
        folder = root / name
        folder.mkdir(parents=True)
        (folder / "summary.csv").write_text(f"topic,Topic {name}\nconversation-id,{name}\n")
        (folder / "comments.csv").write_text(
            "timestamp,datetime,comment-id,author-id,agrees,disagrees,moderated,comment-body\n"
            + "".join(f"1,d,{row}\n" for row in comments)
        )
        votes = [
            f"{t},d,{c},{v},{1 if (v + c) % 2 else -1}"
            for t, (v, c) in enumerate(
                (v, c) for v in range(1, 8) for c in (1, 2, 3) if c <= len(comments)
            )
        ]
        (folder / "votes.csv").write_text(
            "timestamp,datetime,comment-id,voter-id,vote\n" + "".join(f"{row}\n" for row in votes)
        )
    (root / "README.md").write_text("Polis open data, CC BY 4.0\n")
    return {
        f.relative_to(root).as_posix(): fetch.storage.file_sha256(f)
        for f in sorted(root.rglob("*"))
        if f.is_file()
    }


def test_polis_downloads_every_file_against_its_pinned_hash(tmp_path, monkeypatch):
    mirror = tmp_path / "openData"
    monkeypatch.setattr(polis_fetch, "FILES", polis_mirror(mirror))
    out = tmp_path / "data"
    assert fetch.fetch_main(["polis", "--to", str(out), "--polis-url", f"file://{mirror}/"]) == 0
    folder = out / "polis"
    assert sorted(p.name for p in folder.iterdir()) == [
        "MANIFEST.json",
        "README.upstream.md",
        "alpha",
        "beta",
    ]
    assert not fetch.check_manifest(folder)
    manifest = json.loads((folder / "MANIFEST.json").read_text())
    assert manifest["version"] == polis_fetch.COMMIT and manifest["licence"] == "CC BY 4.0"
    assert "Computational Democracy Project" in manifest["attribution"]
    data = Polis().load(out, limit=None, options={"min_votes": "1"})
    assert data.users and data.test_pairs
    downloads = tmp_path / "cache" / "downloads" / "polis" / polis_fetch.COMMIT
    assert (downloads / "alpha" / "votes.csv").is_file()  # kept: a second fetch resumes


def test_a_download_with_the_wrong_hash_is_refused_and_nothing_is_left(
    tmp_path, monkeypatch, capsys
):
    mirror = tmp_path / "openData"
    monkeypatch.setattr(polis_fetch, "FILES", polis_mirror(mirror))
    (mirror / "beta" / "votes.csv").write_text("timestamp,datetime,comment-id,voter-id,vote\n")
    out = tmp_path / "data"
    assert fetch.fetch_main(["polis", "--to", str(out), "--polis-url", f"file://{mirror}/"]) == 1
    err = capsys.readouterr().err
    assert f"file://{mirror}/beta/votes.csv: refused, its SHA-256 is not the pinned one" in err
    assert sorted(p.name for p in out.iterdir()) == ["polis.lock"]  # no polis/, no .partial
    downloads = tmp_path / "cache" / "downloads" / "polis" / polis_fetch.COMMIT
    assert not (downloads / "beta" / "votes.csv").exists()
    assert (downloads / "alpha" / "votes.csv").is_file()


@pytest.mark.skipif(not SHARED_POLIS.is_dir(), reason="needs ../shared/data/polis")
def test_the_pinned_hashes_are_those_of_the_shipped_copies(tmp_path):
    """The shipped polis/ is byte-identical to openData at the pinned commit: used as the
    mirror, every pinned hash matches and the fetched folder equals the shipped one."""
    mirror = tmp_path / "openData"
    for name in polis_fetch.FILES:
        source = SHARED_POLIS / ("README.upstream.md" if name == "README.md" else name)
        (mirror / name).parent.mkdir(parents=True, exist_ok=True)
        (mirror / name).write_bytes(source.read_bytes())
    out = tmp_path / "data"
    assert fetch.fetch_main(["polis", "--to", str(out), "--polis-url", f"file://{mirror}/"]) == 0
    for name in json.loads((out / "polis" / "MANIFEST.json").read_text())["files"]:
        assert (out / "polis" / name).read_bytes() == (SHARED_POLIS / name).read_bytes()


# -- the fetch a run does on its own --------------------------------------------------------------


@pytest.mark.parametrize("variable", ["PREFALIGN_OFFLINE", "HF_HUB_OFFLINE"])
def test_offline_a_missing_folder_fails_at_once_in_one_line(monkeypatch, variable):
    monkeypatch.delenv("PREFALIGN_OFFLINE")
    monkeypatch.setenv(variable, "1")
    started = time.perf_counter()
    with pytest.raises(DataNotFound) as err:
        find_data_dir("acl-anthology")
    message = str(err.value)
    assert "\n" not in message and time.perf_counter() - started < 5
    assert f"offline ({variable}=1)" in message
    assert "`prefalign data fetch pref_lamp`" in message and "--prefalign-data DIR" in message


def test_a_host_that_does_not_resolve_counts_as_offline(monkeypatch):
    monkeypatch.delenv("PREFALIGN_OFFLINE")
    monkeypatch.setattr(fetch.socket, "getaddrinfo", _no_dns)
    with pytest.raises(
        DataNotFound,
        match=r"offline \(raw.githubusercontent.com does not "
        r"resolve\): run `prefalign data fetch polis`",
    ):
        find_data_dir("polis")


def _no_dns(host, port):
    raise OSError("Name or service not known")


def test_online_a_missing_folder_is_fetched_into_the_user_cache(
    anthology_data, tmp_path, monkeypatch, capsys
):
    monkeypatch.delenv("PREFALIGN_OFFLINE")
    local = argparse.Namespace(
        anthology_data=str(anthology_data),
        anthology_revision="x",
        anthology_repository="file:///nowhere",
        anthology_authors=200,
        anthology_seed=5,
    )
    monkeypatch.setattr(fetch, "default_options", lambda suite: local)
    found = find_data_dir("acl-anthology")
    assert found == tmp_path / "cache" / "data"
    assert "fetching it into" in capsys.readouterr().err
    assert set(read_authors(found / "acl-anthology")) >= {"acl:jane-doe"}
    monkeypatch.setattr(fetch, "fetch_suite", _must_not_run)
    assert find_data_dir("acl-anthology") == found  # now found in the fourth place


def _must_not_run(*args, **kwargs):
    raise AssertionError("fetched twice")


def test_suites_that_do_without_a_data_directory_are_not_fetched_by_a_run(monkeypatch):
    monkeypatch.delenv("PREFALIGN_OFFLINE")
    monkeypatch.setattr(fetch, "fetch_suite", _must_not_run)
    with pytest.raises(
        DataNotFound, match="(?s)openai/summarize_from_feedback/ not found; looked in:.*user cache"
    ):
        find_data_dir("openai/summarize_from_feedback")
    with pytest.raises(DataNotFound, match="looked in:"):
        find_data_dir("acl-anthology", fetch=False)


class SlowSuite:
    name, source, fetcher = "slow", "slow-data", __name__  # this module is its builder


def add_arguments(group):
    """The builder of SlowSuite (this module): no options."""


def hosts(options):
    return []


BUILDS: list[int] = []


def build(folder, options, progress):
    BUILDS.append(1)
    time.sleep(0.5)  # long enough for the other thread to wait on the lock
    (folder / "data.txt").write_text("built once")
    return fetch.Built("test", "1", "CC0", "none")


def test_concurrent_fetches_build_once(tmp_path):
    BUILDS.clear()
    results: list[Path] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(
                fetch.fetch_suite(
                    SlowSuite(),
                    tmp_path,
                    argparse.Namespace(),
                    progress=fetch.Progress("t", _Null()),
                )
            )
        )
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert BUILDS == [1] and results == [tmp_path / "slow-data"] * 2
    assert not fetch.check_manifest(tmp_path / "slow-data")


def test_an_interrupted_build_leaves_nothing_where_the_loaders_look(tmp_path, monkeypatch):
    def broken(folder, options, progress):
        (folder / "half.txt").write_text("half")
        raise KeyboardInterrupt

    monkeypatch.setattr(sys.modules[__name__], "build", broken)
    with pytest.raises(KeyboardInterrupt):
        fetch.fetch_suite(
            SlowSuite(), tmp_path, argparse.Namespace(), progress=fetch.Progress("t", _Null())
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["slow-data.lock"]


class _Null:
    def write(self, text):
        return len(text)

    def flush(self):
        pass


# -- tldr and prism: the datasets library's copy, written where hf_source reads it --------------


def test_tldr_is_written_as_a_local_copy_the_suite_reads(tmp_path, monkeypatch):
    import datasets
    from test_suite_hf import tldr_records

    from prefalign_suites.tldr.suite import Tldr

    records = tldr_records()
    splits = {
        "train": [r for r in records if r["split"] == "train"],
        "validation": [
            {k: v for k, v in r.items() if k != "split"} for r in records if r["split"] != "train"
        ],
    }
    loaded = datasets.DatasetDict({k: datasets.Dataset.from_list(v) for k, v in splits.items()})
    asked = []
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: asked.append(a) or loaded)
    out = tmp_path / "data"
    assert fetch.fetch_main(["tldr", "--to", str(out)]) == 0
    assert asked == [("openai/summarize_from_feedback", "comparisons")]
    folder = out / "openai" / "summarize_from_feedback"
    assert sorted(p.name for p in folder.iterdir()) == [
        "MANIFEST.json",
        "train.jsonl",
        "validation.jsonl",
    ]
    first = json.loads((folder / "validation.jsonl").read_text().splitlines()[0])
    assert first["split"] == "validation"  # a record without one gets its split's name
    data = Tldr().load(out, limit=None, options={"users": "all"})
    assert data.source == str(folder) and len(data.users) == 4


# -- the command line ---------------------------------------------------------------------------


def test_prefalign_data_says_which_command_builds_a_missing_folder(tmp_path, monkeypatch, capsys):
    from pytest_prefalign.datadir import data_main

    monkeypatch.chdir(tmp_path)  # no pytest configuration file: no ini value
    assert data_main(["--data", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "  data: NOT FOUND (prefalign data fetch pref_lamp builds it in the user cache)" in out
    assert "  data: NOT FOUND (prefalign data fetch polis builds it in the user cache)" in out


def test_an_unknown_suite_is_a_usage_error_listing_the_fetchable_ones(capsys):
    with pytest.raises(SystemExit) as exit_:
        fetch.fetch_main(["nosuch"])
    assert exit_.value.code == 2
    assert (
        "no fetchable suite 'nosuch'; fetchable: polis, pref_lamp, prism, tldr"
        in capsys.readouterr().err
    )


def test_offline_a_folder_already_there_is_kept_without_the_network(tmp_path, monkeypatch, capsys):
    # a CI step that fetches every time must pass on a machine where the data already is
    mirror = tmp_path / "openData"
    monkeypatch.setattr(polis_fetch, "FILES", polis_mirror(mirror))
    out = tmp_path / "data"
    assert fetch.fetch_main(["polis", "--to", str(out), "--polis-url", f"file://{mirror}/"]) == 0
    capsys.readouterr()  # offline from here: PREFALIGN_OFFLINE=1 (the fixture)
    assert fetch.fetch_main(["polis", "--to", str(out)]) == 0
    assert "is already there (--force builds it again)" in capsys.readouterr().err
    assert fetch.fetch_main(["polis", "--to", str(out), "--force"]) == 1  # a rebuild is online
    assert "offline (PREFALIGN_OFFLINE=1)" in capsys.readouterr().err


def test_a_local_mirror_is_a_folder_or_a_file_url(tmp_path, monkeypatch, capsys):
    mirror = tmp_path / "openData"
    monkeypatch.setattr(polis_fetch, "FILES", polis_mirror(mirror))
    monkeypatch.chdir(tmp_path)
    assert fetch.fetch_main(["polis", "--to", "data", "--polis-url", "openData"]) == 0
    assert (tmp_path / "data" / "polis" / "MANIFEST.json").is_file()
    with pytest.raises(SystemExit):
        fetch.fetch_main(["polis", "--to", "other", "--polis-url", "no/such/folder"])
    assert "is neither a URL nor a folder: a local mirror is file:///" in capsys.readouterr().err


def test_a_file_where_the_data_folder_goes_is_one_line(tmp_path, monkeypatch, capsys):
    mirror = tmp_path / "openData"
    monkeypatch.setattr(polis_fetch, "FILES", polis_mirror(mirror))
    blocker = tmp_path / "afile"
    blocker.write_text("not a folder")
    assert (
        fetch.fetch_main(["polis", "--to", str(blocker), "--polis-url", f"file://{mirror}/"]) == 1
    )
    err = capsys.readouterr().err
    assert err.startswith("prefalign data fetch: polis: error: ") and "Traceback" not in err
    assert str(blocker) in err


@pytest.mark.parametrize("given", ["-1", "0", "²", "two"])
def test_the_authors_drawn_are_a_positive_number(capsys, given):
    with pytest.raises(SystemExit):
        fetch.fetch_main(["pref_lamp", "--anthology-authors", given])
    err = capsys.readouterr().err
    assert f"--anthology-authors: expected a whole number >= 1, got {given!r}" in err


def test_a_local_clone_is_read_from_the_current_folder(tmp_path, monkeypatch):
    # git runs in the cache's clone folder: a relative path must not be read from there
    from prefalign_suites.pref_lamp import fetch as lamp_fetch

    (tmp_path / "myclone").mkdir()
    monkeypatch.chdir(tmp_path)
    parser = argparse.ArgumentParser()
    lamp_fetch.add_arguments(parser.add_argument_group())
    local = parser.parse_args(["--anthology-repository", "myclone"])
    assert local.anthology_repository == str(tmp_path / "myclone")
    url = "https://github.com/acl-org/acl-anthology"
    assert parser.parse_args(["--anthology-repository", url]).anthology_repository == url


def test_an_anthology_without_an_author_to_draw_installs_nothing(
    anthology_data, tmp_path, monkeypatch, capsys
):
    from prefalign_suites.pref_lamp import fetch as lamp_fetch

    monkeypatch.setattr(lamp_fetch, "MIN_PAPERS", 1000)  # nobody in the tiny Anthology
    out = tmp_path / "data"
    args = ["pref_lamp", "--to", str(out), "--anthology-data", str(anthology_data)]
    assert fetch.fetch_main(args) == 1
    assert "no author has 1000 papers from" in capsys.readouterr().err
    assert not (out / "acl-anthology").exists()
