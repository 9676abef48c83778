"""Argument types shared by the ``kiln`` commands (argparse ``type=`` callables)."""

from __future__ import annotations

import argparse

__all__ = ["positive_int"]


def positive_int(text: str) -> int:
    """An integer of at least 1, e.g. for ``--threads`` (else a one-line usage error).

    Parameters
    ----------
    text : str
        The option's value as typed.

    Returns
    -------
    int
        The value.

    Raises
    ------
    argparse.ArgumentTypeError
        ``text`` is not an integer, or is below 1 (argparse prints usage and exits with 2).
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer (1 or more), got {value}")
    return value
