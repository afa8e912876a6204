"""Building ``polis/`` from the Polis open data (the builder of ``prefalign data fetch polis``).

Source: github.com/compdemocracy/openData at a pinned commit; the 12 English-language
conversations the suite uses (the Austrian/German and vTaiwan ones are left out, and
american-assembly.bowling-green and march-on, which lack a comments.csv), each
``summary.csv``, ``comments.csv`` and ``votes.csv``, and the data's README (its licence and
attribution statement) as ``README.upstream.md``. Every file is downloaded with ``pooch``
against its SHA-256 pinned below (computed from the files of that commit) into the user cache
(``downloads/polis/<commit>/``), so a fetch resumes with the files it has; a file whose hash
differs is refused and deleted.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from urllib.parse import urlparse

from prefalign_suites.polis.suite import Polis
from pytest_prefalign import storage
from pytest_prefalign.errors import import_extra
from pytest_prefalign.fetch import Built, FetchError, Progress

COMMIT = "0bc2ce0f32c673f68da20b57bce15c457aa787b5"  # compdemocracy/openData, 2024-10-09
BASE_URL = f"https://raw.githubusercontent.com/compdemocracy/openData/{COMMIT}/"
UPSTREAM_README = ("README.md", "README.upstream.md")  # (path upstream, name written)
CSV_FILES = ("comments.csv", "summary.csv", "votes.csv")
CONVERSATIONS = {  # folder -> the SHA-256 of its CSV_FILES, in that order
    "15-per-hour-seattle": (
        "23306ea084fbecf5e924e78da03b13cd3ad289e5f9b533b658b8caa59f5c1981",
        "7d7c5cb5baf3a4e2f81e041fd53eb12eac5837abf2a9c7b98c1cb0e03a4b2921",
        "00ab2d76426ce3bad6f304022dba22e5807dfd12d5d7ef9dfb6bf7efbfecbe10",
    ),
    "bg2050-volunteers": (
        "1df85d984c87cd350f76ca62218a389e865eaf90a514687980b3b249aa79a360",
        "6e2ee82b81601d36f59b66ff8ae88ae4f4096bda805750a6f83385f4ca74b07c",
        "76a51f5cdea8832f6fd8cd88c0d9b0fcbf89b80a019432fcb67a9d187aeee1ad",
    ),
    "brexit-consensus": (
        "f9a341a6acadd8277458ed1ec1280508450dcc53f23cfdad9baf92a538bbd74c",
        "1ace30cbb65cca8f090e95e06dae15c4c24bd1328f6bc803108b4facc03c7ebf",
        "088d3063eb821de6974259ca249887c8b80793d476f16ef502835317e3aeedc4",
    ),
    "canadian-electoral-reform": (
        "f3fca647a6b13e218a454f06a9f8c985a0a7b63d64daf277b6f0916cf6d54a5d",
        "75d5bf666fec281eb57a256d3179180b39e4da93d3d87b21b67afcf984d00333",
        "ed648b83d058b2a174c2ed3a03636de2cd54d7e6eeb430c4d446ee94c66d7e87",
    ),
    "football-concussions": (
        "80e4e937e6a308263bdf57eb608b3f6c9c3d1a936819dd554d9d647f63ced291",
        "d61aaf54a79d4572e18a1e40c258366752167b1a83a8df4b762ce20dbb65b71d",
        "c20593a06c3a5322cedf3ff1e5654521484016f033445400742e8489db4df8ab",
    ),
    "london.youth.policing": (
        "61bdfdc160b0ff59f28d2823d9ccdd3472823df151ba9963f0035f723f7dcba7",
        "1b635595cd0ba41f147064f9f09bc6c136aab497cb01425d76e36b96c98ae8e4",
        "e3e1262555d7e0ae792c38b1dca94a518d070394969fb0d9fd0b54947b044f4e",
    ),
    "scoop-hivemind.affordable-housing": (
        "f559586c28eb933d1954df35b7b449af011754393d0d835f82d4c29a40c712eb",
        "9ce32b1fa68ec6e42254fab46e609c07e8dd55274e31e91f03c48d6aa689b6bf",
        "9a16d6b22ed2a53ac80f56bdcb82a03ddf430dcd4e6ebeec6ece79110c21e55b",
    ),
    "scoop-hivemind.biodiversity": (
        "de84b8c9d9b4b70d4929ee0603aa242ba60f53cc456dbf03a62719f1abc16165",
        "d4200eed905ad960a254a894923fd1753e1ca61145084356697957795585f2a5",
        "4798567ec583fc9a826f08dbddafdd3099e9f26e660c313a14b12c73859922d0",
    ),
    "scoop-hivemind.freshwater": (
        "508001134c37e424c074a53391ab02f807b0045ae233d63324cba8aa173bc843",
        "c1f21e14c6d37451adc064df5bef54822477cb87e85f58f133c50271b9c25aca",
        "f826cded421476ad23471e72d45a60bb424ed9db0fdc316253a6f7c523a77af0",
    ),
    "scoop-hivemind.taxes": (
        "cf53851ef9475bae8e8f493da7ef167feac69c893e6b730a14c1b8e3465dd4c5",
        "d093104dc6080fa43ebbc9e1156ec6367d70f54b2e4041fced795ced651d2da3",
        "fd3ac8a478c2ef1a21f513c4747ca440dd939146b3be2f893a615e37d181ac7a",
    ),
    "scoop-hivemind.ubi": (
        "f47dcf4fde68bd9da3fdff0981e62b6ec5d2673e8e82144fefd4c82ce8953a8e",
        "8a17c635bc6685625ba8e59fc14eb5abf15e51dc33b040eef42bae05a17fe313",
        "594485d8763194cd685fc8bf2c547211b907821e9084fd4f68d8c700e977917d",
    ),
    "ssis.land-bank-farmland.2rumnecbeh.2021-08-01": (
        "32999cfd0d28b4de2d14af463b9554a3c5d5e29453b93a5d45e7f92a034525ca",
        "a606972c8089c758ddc8915999eef1a8f77b87d1c3251296b49cc14bf22f27c7",
        "e9ed2a46ac33b8fcc2ef810dff15d2e795e4f4c791a6683e2fd4d3a287bd9c6c",
    ),
}
# the data's README.md (licence, attribution), written as README.upstream.md
README_SHA256 = "a8e6434c91fe913c89e8b35cc10b8ef2e6b3ec1dd36118f5d70d620896b7e369"
FILES = {  # path in the repository -> SHA-256
    **{
        f"{conv}/{name}": sha
        for conv, shas in CONVERSATIONS.items()
        for name, sha in zip(CSV_FILES, shas, strict=True)
    },
    "README.md": README_SHA256,
}
LICENCE = "CC BY 4.0"
ATTRIBUTION = Polis.attribution


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--polis-url",
        metavar="URL",
        type=_base_url,
        default=BASE_URL,
        help="base URL of the openData files at the pinned commit (a mirror, or "
        "file:///path/to/openData/); the pinned hashes are checked whatever it is "
        "(default: %(default)s)",
    )


def _base_url(text: str) -> str:
    """A URL as it is; a local folder as its ``file://`` URL."""
    if urlparse(text).scheme:
        return text
    if Path(text).is_dir():
        return Path(text).resolve().as_uri() + "/"
    raise argparse.ArgumentTypeError(
        f"{text!r} is neither a URL nor a folder: a local mirror is file:///path/to/openData/"
    )


def hosts(options: argparse.Namespace) -> list[str]:
    host = urlparse(options.polis_url).hostname
    return [host] if host and urlparse(options.polis_url).scheme != "file" else []


def build(folder: Path, options: argparse.Namespace, progress: Progress) -> Built:
    import_extra(
        "pooch",
        package="pooch",
        extra="polis",
        needed_for="downloading Polis's data",
        error=FetchError,
    )
    base = options.polis_url if options.polis_url.endswith("/") else options.polis_url + "/"
    downloads = storage.cache_dir("downloads", "polis", COMMIT)
    progress.say(f"{len(FILES)} files from {base} into {downloads}")
    for name in progress.bar(sorted(FILES), desc="files", unit="file"):
        local = download(base + name, FILES[name], downloads / name, progress)
        written = UPSTREAM_README[1] if name == UPSTREAM_README[0] else name
        (folder / written).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local, folder / written)
    return Built(
        source="Polis open data (github.com/compdemocracy/openData), 12 English conversations",
        version=COMMIT,
        licence=LICENCE,
        attribution=ATTRIBUTION,
        details={"url": base, "conversations": sorted(CONVERSATIONS)},
    )


def download(url: str, sha256: str, target: Path, progress: Progress) -> Path:
    """``url`` at ``target``, checked against ``sha256`` (kept where it already matches)."""
    import pooch

    try:
        path = pooch.retrieve(
            url,
            known_hash=f"sha256:{sha256}",
            fname=target.name,
            path=target.parent,
            downloader=_downloader(url, progress),
            progressbar=False,
        )
    except ValueError as exc:  # pooch: a hash that does not match (the download is deleted)
        raise FetchError(f"{url}: refused, its SHA-256 is not the pinned one ({exc})") from None
    except OSError as exc:  # requests' connection errors are OSErrors too
        raise FetchError(f"{url}: download failed: {type(exc).__name__}: {exc}") from None
    return Path(path)


def _downloader(url: str, progress: Progress):
    import pooch

    if urlparse(url).scheme == "file":
        return _copy_file
    return pooch.HTTPDownloader(progressbar=progress.interactive, timeout=60)


def _copy_file(url: str, output_file: str, pooch: object, check_only: bool = False) -> bool:
    """A pooch downloader for ``file://`` URLs (a local mirror): copies the file."""
    source = Path(urlparse(url).path)
    if check_only:
        return source.is_file()
    if not source.is_file():
        raise FileNotFoundError(f"{source}: no such file")
    shutil.copyfile(source, output_file)
    return True
