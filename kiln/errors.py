"""Kiln's exception hierarchy.

Every error Kiln raises on purpose is a :class:`KilnError`; each stage has its own subclass so
callers can catch import problems separately from build or runtime problems. Messages name the
node, op, shapes and pass involved.
"""

from __future__ import annotations

__all__ = [
    "CompileError",
    "FrontendError",
    "KilnError",
    "KilnTypeError",
    "ParamsFormatError",
    "PassError",
    "RuntimeFormatError",
    "TuningLogError",
    "UnsupportedOpError",
]


class KilnError(Exception):
    """Base class of every error Kiln raises deliberately."""


class KilnTypeError(KilnError, TypeError):
    """Type inference failed: an op got arguments of shapes or dtypes it cannot take."""


class PassError(KilnError):
    """A pass failed; the message says which pass and after which passes."""


class FrontendError(KilnError):
    """A model could not be imported (corrupt file, unbound dynamic dimension, ...)."""


class UnsupportedOpError(FrontendError):
    """The model uses operators (or attribute values) Kiln does not support.

    Parameters
    ----------
    problems : list of (op_type, node_names, detail)
        Every unsupported operator found, so a user sees all of them at once.
    opset : int or None
        The opset the model was imported with.
    """

    def __init__(self, problems: list[tuple[str, list[str], str]], opset: int | None = None):
        self.problems = problems
        self.opset = opset
        lines = [f"{len(problems)} unsupported operator kind(s)"
                 + (f" at opset {opset}" if opset is not None else "") + ":"]
        for op_type, names, detail in problems:
            shown = ", ".join(repr(n) for n in names[:10])
            more = f" and {len(names) - 10} more" if len(names) > 10 else ""
            lines.append(f"  {op_type}: nodes {shown}{more}" + (f" ({detail})" if detail else ""))
        super().__init__("\n".join(lines))


class CompileError(KilnError):
    """Native compilation failed: the message holds the command and the compiler's stderr."""


class ParamsFormatError(KilnError):
    """A params blob is truncated, inconsistent or not in TVM's format."""


class RuntimeFormatError(KilnError):
    """A graph JSON, exported library or other runtime artifact is malformed."""


class TuningLogError(KilnError):
    """A tuning record could not be parsed or applied."""
