"""Loading a model without transformers' progress bars ("Loading weights", "Loading checkpoint
shards"): under pytest they land in the test's captured stderr, and a failure's report shows
them around its traceback. The plugin's own messages say what is loaded (``events``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def no_progress_bars() -> Iterator[None]:
    """transformers' progress bars off inside the block, as they were after it."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()
