"""The command line's integer options (docs: reference/cli.md): ASCII digits only, bounds
and the limits of :mod:`exactlearn.limits` named in one line."""

from __future__ import annotations

import argparse
import re

from exactlearn import limits

_ASCII_INT = re.compile(r"[+-]?[0-9]+")


def integer_option(what, low=None, high=None, limit=None):
    """argparse type: an integer in ASCII digits (``int()`` would also read ``2_0`` and
    Arabic-Indic or full-width digits, which model files refuse), >= low when given (and <=
    high, the limit named ``limit`` of :mod:`exactlearn.limits`), with a one-line message
    naming the option."""
    def conv(text):
        if len(text.strip().lstrip("+-")) > limits.MAX_ENTRY_DIGITS:   # never convert it
            raise argparse.ArgumentTypeError(f"{what} must be an integer of at most "
                                             f"{limits.MAX_ENTRY_DIGITS} digits (MAX_ENTRY_DIGITS), "
                                             f"got {len(text)} characters")
        if not _ASCII_INT.fullmatch(text.strip()):
            raise argparse.ArgumentTypeError(f"{what} must be an integer in ASCII digits, "
                                             f"got {text!r}")
        n = int(text)
        if low is not None and n < low:
            raise argparse.ArgumentTypeError(f"{what} must be >= {low}, got {n}")
        if high is not None and n > high:
            raise argparse.ArgumentTypeError(f"{what} must be <= {high} ({limit}; "
                                             f"docs/reference/cli.md, \"Limits\"), got {n}")
        return n
    return conv
