"""The built-in ``synthetic`` suite (registered through the ``prefalign`` entry point): users with
known preferences, for the tool's known-answer checks. Its ``oracle`` reward methods register
through an entry point of their own (``oracle.py``)."""

from __future__ import annotations

from prefalign_suites.synthetic.suite import Synthetic


def pytest_prefalign_register(registry) -> None:
    registry.add_suite(Synthetic())
