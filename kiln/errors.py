"""Kiln's exception hierarchy.

Every error Kiln raises on purpose is a :class:`KilnError`; each stage has its own subclass so
callers can catch import problems separately from build or runtime problems. Messages name the
node, op, shapes and pass involved.
"""

from __future__ import annotations

__all__ = [
    "CompileError",
    "CompilerNotFoundError",
    "CPUFeatureError",
    "ConfigError",
    "DynamicShapeError",
    "FrontendError",
    "InputShapeError",
    "KilnError",
    "KilnTypeError",
    "MeasureWorkerError",
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
        The opset the model was imported with (ONNX).
    framework : str or None
        The framework whose graph it is, when not ONNX ("TensorFlow", "PyTorch", ...).
    """

    def __init__(self, problems: list[tuple[str, list[str], str]], opset: int | None = None,
                 framework: str | None = None):
        self.problems = problems
        self.opset = opset
        self.framework = framework
        lines = [f"{len(problems)} unsupported operator kind(s)"
                 + (f" in the {framework} model" if framework else "")
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


def _format_dims(dims: tuple[int | str | None, ...]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


class DynamicShapeError(FrontendError):
    """Graph inputs have symbolic or unknown dims that the caller did not bind to sizes.

    The message suggests ``shape={...}`` (the Python API); :meth:`describe` with ``style="cli"``
    phrases the same hint as ``--input-shapes name:1x3x224x224`` for the command line.

    Parameters
    ----------
    unbound : sequence of (name, dims, unknown)
        Per unbound input: its name; its declared dims (an int for a static dim, the dim's name
        or None for a symbolic or unknown one), or None when the model declares no shape; and the
        indices of the dims to bind.
    frontend : str
        The importer the hint names (``shape={...}`` is passed to it).
    """

    def __init__(self, unbound: list[tuple[str, tuple[int | str | None, ...] | None, tuple[int, ...]]],
                 frontend: str = "from_onnx"):
        self.unbound = [(str(name), None if dims is None else tuple(dims), tuple(unknown))
                       for name, dims, unknown in unbound]
        self.frontend = frontend
        super().__init__(self.describe("api"))

    def problems(self) -> list[str]:
        """One phrase per input: ``input 'x' has unknown dim 0 ('N')``."""
        out = []
        for name, dims, unknown in self.unbound:
            if dims is None:
                out.append(f"input {name!r} has no declared shape")
                continue
            labels = [f"dim {i}" + (f" ({dims[i]!r})" if isinstance(dims[i], str) else "")
                      for i in unknown]
            out.append(f"input {name!r} has unknown {', '.join(labels)}")
        return out

    def example(self, name: str) -> tuple[int, ...] | None:
        """The declared shape of input ``name`` with 1 for each unknown dim (None: no shape)."""
        for n, dims, _ in self.unbound:
            if n == name and dims is not None:
                return tuple(d if isinstance(d, int) else 1 for d in dims)
        return None

    def describe(self, style: str = "api") -> str:
        """The message, hinting ``shape={...}`` (``"api"``) or ``--input-shapes`` (``"cli"``)."""
        head = ("cannot import with dynamic shapes: " + "; ".join(self.problems())
                + ". Kiln compiles static shapes: pass ")
        examples = [(name, self.example(name)) for name, _, _ in self.unbound]
        if style == "cli":
            items = [f"{n}:{'x'.join(str(d) for d in ex) if ex is not None else 'D0xD1x...'}"
                     for n, ex in examples]
            hint = f"--input-shapes {','.join(items)}"
        else:
            items = [f"{n!r}: {ex if ex is not None else '(d0, d1, ...)'}" for n, ex in examples]
            hint = "shape={" + ", ".join(items) + "} to " + self.frontend
        return head + hint + " (with your sizes for the unknown dims)"


class InputShapeError(FrontendError):
    """A shape given for a graph input contradicts the rank or a static dim the model declares.

    Parameters
    ----------
    input_name : str
        The graph input.
    dim : int or None
        The dim that disagrees (None: the ranks differ).
    declared : tuple
        The model's dims (an int for a static dim, a name or None for a symbolic one).
    given : tuple of int
        The shape given.
    """

    def __init__(self, input_name: str, dim: int | None,
                 declared: tuple[int | str | None, ...], given: tuple[int, ...]):
        self.input_name = input_name
        self.dim = dim
        self.declared = tuple(declared)
        self.given = tuple(given)
        model = _format_dims(self.declared)
        if dim is None:
            message = (f"the shape given for input {input_name!r}, {list(self.given)}, has rank "
                       f"{len(self.given)}, but the model declares rank {len(self.declared)} "
                       f"({model})")
        else:
            message = (f"the shape given for input {input_name!r}, {list(self.given)}, contradicts "
                       f"the model at dim {dim}: the model declares {self.declared[dim]}, got "
                       f"{self.given[dim]} (model shape {model}; only symbolic or unknown dims "
                       "can be chosen)")
        super().__init__(message)



class ConfigError(KilnError, ValueError):
    """A setting is invalid: the message names the environment variable (or attribute) and value."""


class CompilerNotFoundError(CompileError):
    """The configured C compiler command cannot be run (missing, or not executable)."""


class MeasureWorkerError(KilnError):
    """A measurement worker process cannot be started (the message has its stderr)."""


class CPUFeatureError(KilnError, RuntimeError):
    """A compiled library needs CPU features (``avx512f``, ...) the running CPU lacks.

    Parameters
    ----------
    what : str
        The library (its file name, or "the built library").
    missing : sequence of str
        The missing features, by their ``/proc/cpuinfo`` names.
    target : str, optional
        The target it was built for.
    """

    def __init__(self, what: str, missing: list[str], target: str | None = None):
        self.missing = list(missing)
        built = f" (built for target {target!r})" if target else ""
        wide = any(f.startswith("avx512") for f in missing)
        hint = ('"llvm -mattr=-avx512f" or "llvm -mcpu=znver3"' if wide else
                '"llvm -mcpu=<this CPU>" or "llvm -mcpu=x86-64-v2"')
        super().__init__(f"{what} needs {', '.join(self.missing)}{built}; this CPU lacks "
                         f"{'it' if len(self.missing) == 1 else 'them'}: rebuild with target "
                         f"{hint} (or the default target on this machine)")


class RPCUnsupportedError(KilnError, NotImplementedError):
    """A TVM RPC entry point (``kiln.rpc``) was called: Kiln runs models on the host only."""


class TopiUnsupportedError(KilnError, NotImplementedError):
    """A TVM TOPI per-target schedule hook (``kiln.topi.nn``/``kiln.topi.x86``) was called."""


class UnknownOpError(KilnError, KeyError):
    """No operator of this name is registered (``Op.get``, ``get_op_def``, ``register_op_attr``)."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0]) if self.args else ""


class ExternalTargetError(KilnError):
    """An external target is unknown, not available in Kiln, or declared twice, or an operator
    attribute other than ``target.<name>`` was registered."""


class UnknownInputError(FrontendError, AssertionError):
    """A shape, dtype or constant was given for a name that is not a graph input (TVM's importers
    assert this, so it is also an ``AssertionError``)."""


class SymbolicShapeError(KilnError, NotImplementedError):
    """A symbolic dimension (``relay.Any()``, ``te.size_var``) was asked for: Kiln's types hold
    static shapes only."""
