"""What counts as a path of the machine that made a file: an absolute path whose first folder
is a home, the temporary folder, a mounted or work volume (``PREFIXES``: home, root, Users, tmp,
private, var/folders, work, mnt, ...), or a Windows user folder, as a path of its own (after a
space, a quote, ``=``, a parenthesis or at the start), not inside a URL.

Not flagged, on purpose: system paths that are the same on every machine and that the docs of
the setup name (``/dev/null``, ``/etc/xdg``, ``/usr/bin/env``, ``/proc``, ``/opt/...``), the
placeholder ``/path/to/...`` of the docs' examples, and ``~/...`` (the reader's own home).
A URL's path (``https://host/home/...``) follows a host name, so it is not a path of its own.
"""

from __future__ import annotations

import re

PREFIXES = (
    "home", "root", "Users", "tmp", "private", "var/folders", "work", "workspace", "mnt",
    "media", "scratch", "srv", "builds", "content",
)  # fmt: skip
PATTERN = re.compile(
    r"(?<![\w.:/~\\-])(?:/(?:" + "|".join(re.escape(p) for p in PREFIXES) + r")/"
    r"|[A-Za-z]:\\Users\\)"
)


def found(text: str) -> list[str]:
    """Each line of ``text`` that names a machine path, with its number."""
    return [
        f"{n}: {line.strip()[:160]}"
        for n, line in enumerate(text.splitlines(), 1)
        if PATTERN.search(line)
    ]
