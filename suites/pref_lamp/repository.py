"""The Anthology's repository at one revision, through git: fetched shallow with only ``data/``
checked out, kept in the user cache and reused (for ``fetch.py``, the builder of
``prefalign data fetch pref_lamp``); and the revision of a local folder.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from pytest_prefalign.fetch import FetchError, Progress

LATEST = "latest"  # the revision that stands for the default branch's newest commit


def checkout(url: str, revision: str, root: Path, progress: Progress) -> tuple[Path, str]:
    """``data/`` of ``url`` at ``revision`` (a commit, or LATEST for the default branch),
    fetched shallow with only ``data/`` checked out; kept under ``root`` and reused."""
    clone = root / (LATEST if revision == LATEST else revision)
    if revision != LATEST and _head(clone) == revision and (clone / "data" / "xml").is_dir():
        progress.say(f"using the repository at {revision[:12]} already in {clone}")
        return clone / "data", revision
    progress.say(f"fetching data/ of {url} at {revision} into {clone}")
    clone.mkdir(parents=True, exist_ok=True)
    if not (clone / ".git").is_dir():
        _git(clone, "init", "--quiet")
        _git(clone, "remote", "add", "origin", url)
    _git(clone, "remote", "set-url", "origin", url)
    _git(clone, "config", "core.sparseCheckout", "true")
    (clone / ".git" / "info").mkdir(exist_ok=True)
    (clone / ".git" / "info" / "sparse-checkout").write_text("/data/\n", encoding="utf-8")
    # git's progress on a terminal only: in a log its carriage-return updates are hundreds
    # of lines; elsewhere quiet, its error still kept for the message
    shown = progress.interactive
    _git(
        clone,
        "fetch",
        "--depth",
        "1",
        "--progress" if shown else "--quiet",
        "origin",
        "HEAD" if revision == LATEST else revision,
        show=shown,
    )
    _git(clone, "checkout", "--quiet", "--force", "--detach", "FETCH_HEAD")
    commit = _head(clone) or "?"
    if revision != LATEST and commit != revision:
        raise FetchError(f"{url}: fetched {commit} for revision {revision} (give a full commit)")
    if not (clone / "data" / "xml").is_dir():
        raise FetchError(f"{url} at {commit}: no data/xml/ in the repository")
    return clone / "data", commit


def _git(where: Path, *args: str, show: bool = False) -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(where), *args],
            check=False,
            text=True,
            stdout=subprocess.PIPE,
            stderr=None if show else subprocess.PIPE,
        )
    except FileNotFoundError:
        raise FetchError(
            "the git program is needed to fetch the Anthology (or give --anthology-data DIR)"
        ) from None
    if done.returncode != 0:
        last = (done.stderr or "").strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        raise FetchError(f"git {' '.join(args)} in {where} failed: {last[0]}")
    return done.stdout.strip()


def _head(clone: Path) -> str | None:
    if not (clone / ".git").is_dir():
        return None
    try:
        return _git(clone, "rev-parse", "--verify", "--quiet", "HEAD")
    except FetchError:
        return None


def local_revision(datadir: Path) -> str:
    """The commit of a local folder that is in a git clone, else a plain description."""
    try:
        done = subprocess.run(
            ["git", "-C", str(datadir), "rev-parse", "HEAD"],
            text=True,
            capture_output=True,
            check=False,
        )
    except FileNotFoundError:
        done = None
    if done is not None and done.returncode == 0:
        return done.stdout.strip()
    return f"local folder {datadir} (not in a git clone: revision unknown)"
