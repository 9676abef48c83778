"""``tvm.testing`` helpers, for CPU targets.

The names follow TVM's ``python/tvm/testing/utils.py``: target parametrization
(:func:`parametrize_targets`, :func:`enabled_targets`), feature marks (:func:`requires_llvm`,
:func:`uses_gpu`, :func:`requires_gpu`, :func:`requires_cuda`, ...), pytest parameters and fixtures
(:func:`parameter`, :func:`parameters`, :func:`fixture`) and :func:`assert_allclose`. Kiln's enabled
targets are ``llvm`` and ``c`` (both compile to C for the host CPU); every GPU or accelerator target
is reported disabled, so tests marked for one skip with a reason that names it.

pytest is imported lazily, only by the helpers that build marks or fixtures, so ``import kiln``
does not import it. The ``target``/``dev`` fixtures for tests that take them without
:func:`parametrize_targets` come from the pytest plugin :mod:`kiln.testing.plugin`.
"""

from __future__ import annotations

import contextlib
import inspect
import operator
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_TARGETS",
    "assert_allclose",
    "device_enabled",
    "disable_span_filling",
    "enable_span_filling",
    "enabled_targets",
    "exclude_targets",
    "fixture",
    "known_failing_targets",
    "main",
    "parameter",
    "parameters",
    "parametrize_targets",
    "requires_arm_dot",
    "requires_cuda",
    "requires_gpu",
    "requires_llvm",
    "requires_rpc",
    "requires_x86",
    "requires_x86_avx512",
    "requires_x86_vnni",
    "skip_if_32bit",
    "uses_gpu",
]

#: Targets Kiln compiles for (the host CPU).
DEFAULT_TARGETS: tuple[str, ...] = ("llvm", "c")
_GPU_KINDS = frozenset({"cuda", "gpu", "rocm", "opencl", "metal", "vulkan", "nvptx", "webgpu",
                        "hexagon"})
_KNOWN_FAILING = "_kiln_known_failing_targets"
_EXCLUDED = "_kiln_excluded_targets"


def assert_allclose(actual: Any, desired: Any, rtol: float = 1e-7, atol: float = 1e-7,
                    verbose: bool = True) -> None:
    """``numpy.testing.assert_allclose`` that also accepts NDArrays, with TVM's defaults."""
    a = actual.numpy() if hasattr(actual, "numpy") and not isinstance(actual, np.ndarray) else actual
    d = desired.numpy() if hasattr(desired, "numpy") and not isinstance(desired, np.ndarray) else desired
    np.testing.assert_allclose(np.asarray(a), np.asarray(d), rtol=rtol, atol=atol, verbose=verbose)


def _target_kind(target: Any) -> str:
    text = str(getattr(target, "kind", None) or target).strip()
    kind = text.split()[0] if text else ""
    return str(getattr(kind, "name", kind))


def device_enabled(target: Any) -> bool:
    """Whether ``target`` (a string or Target) runs here: only the CPU kinds ``llvm`` and ``c``.

    Parameters
    ----------
    target : str or Target
        e.g. ``"llvm -mcpu=skylake"``, ``"cuda"``.
    """
    return _target_kind(target) in DEFAULT_TARGETS


def _device(target: str) -> Any:
    from kiln.runtime.ndarray import device

    return device(_target_kind(target))


def enabled_targets() -> list[tuple[str, Any]]:
    """``[(target, device), ...]`` for every enabled target, as TVM's ``enabled_targets``."""
    return [(t, _device(t)) for t in DEFAULT_TARGETS]


def _pytest() -> Any:
    import pytest

    return pytest


def _skip_mark(reason: str) -> Any:
    return _pytest().mark.skip(reason=reason)


def _target_params(func: Callable[..., Any], targets: tuple[str, ...] | None) -> tuple[list[str], list[Any]]:
    """The pytest parametrization (argnames, params) of ``func`` over ``targets``."""
    pytest = _pytest()
    try:
        names = set(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        names = {"target", "dev"}
    argnames = ["target"] + (["dev"] if "dev" in names else [])
    chosen = list(targets) if targets else list(DEFAULT_TARGETS)
    excluded = set(getattr(func, _EXCLUDED, ()))
    failing = set(getattr(func, _KNOWN_FAILING, ()))
    params = []
    for t in chosen:
        kind = _target_kind(t)
        marks = []
        if not device_enabled(t):
            marks.append(pytest.mark.skip(reason=f"target {t!r} is not enabled in Kiln's "
                                          "TVM-compatibility suite (it runs on the CPU)"))
        elif kind in excluded or t in excluded:
            continue
        elif kind in failing or t in failing:
            marks.append(pytest.mark.xfail(reason=f"known failing on target {t!r}"))
        values = [t] + ([_device(t) if device_enabled(t) else None] if "dev" in argnames else [])
        params.append(pytest.param(*values, marks=marks, id=t))
    return argnames, params


def parametrize_targets(*args: Any) -> Any:
    """Run a test once per target: ``@parametrize_targets`` (all enabled) or ``("llvm", "cuda")``.

    The test receives ``target`` (a string) and, if it takes one, ``dev`` (its Device). Targets
    that are not enabled (every GPU target) are kept as skipped parameters with the reason.
    """
    if len(args) == 1 and callable(args[0]) and not isinstance(args[0], str):
        return _parametrize(args[0], None)
    targets = tuple(str(a) for a in args)
    return lambda func: _parametrize(func, targets)


def _parametrize(func: Callable[..., Any], targets: tuple[str, ...] | None) -> Any:
    argnames, params = _target_params(func, targets)
    return _pytest().mark.parametrize(",".join(argnames), params)(func)


def exclude_targets(*targets: str) -> Callable[[Any], Any]:
    """Leave ``targets`` out of the target parametrization (apply below ``parametrize_targets``)."""
    def deco(func: Any) -> Any:
        setattr(func, _EXCLUDED, tuple(getattr(func, _EXCLUDED, ())) + targets)
        return func
    return deco


def known_failing_targets(*targets: str) -> Callable[[Any], Any]:
    """Mark the test ``xfail`` on ``targets`` (apply below ``parametrize_targets`` or with the plugin)."""
    def deco(func: Any) -> Any:
        setattr(func, _KNOWN_FAILING, tuple(getattr(func, _KNOWN_FAILING, ())) + targets)
        return func
    return deco


def uses_gpu(func: Any) -> Any:
    """Mark a test that also runs on GPUs; on Kiln it runs on the enabled CPU targets only."""
    return _pytest().mark.gpu(func)


def _requires(reason: str, enabled: bool) -> Callable[[Any], Any]:
    def deco(func: Any) -> Any:
        if enabled:
            return func
        return _pytest().mark.skip(reason=reason)(func)
    return deco


def requires_gpu(func: Any) -> Any:
    """Skip: TVM's GPU tests are not run by Kiln's compatibility suite (it runs on the CPU)."""
    return _requires("requires gpu: Kiln's TVM-compatibility suite runs on the CPU", False)(func)


def requires_cuda(func: Any) -> Any:
    """Skip: TVM's CUDA tests are not run by Kiln's compatibility suite (it runs on the CPU)."""
    return _requires("requires cuda: Kiln's TVM-compatibility suite runs on the CPU", False)(func)


def requires_llvm(func: Any) -> Any:
    """Run: Kiln's ``llvm`` target is enabled (it compiles C for the host)."""
    return _requires("", True)(func)


def requires_rpc(func: Any) -> Any:
    """Skip: Kiln has no TVM RPC server."""
    return _requires("requires rpc: TVM's RPC runtime is out of scope", False)(func)


def requires_x86(func: Any) -> Any:
    """Skip: x86-specific schedules of TVM's C++ (TOPI x86 strategies) are out of scope."""
    return _requires("requires x86: TVM's x86 schedule/codegen internals are out of scope", False)(func)


def requires_x86_vnni(func: Any) -> Any:
    """Skip: VNNI intrinsics are TVM codegen internals."""
    return _requires("requires x86 vnni: TVM's tensorize intrinsics are out of scope", False)(func)


def requires_x86_avx512(func: Any) -> Any:
    """Skip: AVX-512 intrinsics are TVM codegen internals."""
    return _requires("requires x86 avx512: TVM's tensorize intrinsics are out of scope", False)(func)


def requires_arm_dot(func: Any) -> Any:
    """Skip: ARM dot-product intrinsics are TVM codegen internals."""
    return _requires("requires arm dot: TVM's tensorize intrinsics are out of scope", False)(func)


def skip_if_32bit(reason: str) -> Callable[[Any], Any]:
    """Skip on a 32-bit Python."""
    return _requires(f"skip on 32-bit: {reason}", sys.maxsize > 2**32)


def fixture(func: Any = None, *, cache_return_value: bool = False) -> Any:
    """A pytest fixture, usable bare (``@fixture``) or called (``@fixture(cache_return_value=True)``)."""
    def wrap(f: Any) -> Any:
        return _pytest().fixture(f)
    return wrap if func is None else wrap(func)


def _caller_namespace(depth: int) -> tuple[dict[str, Any], bool]:
    """The namespace of the frame that called a helper, and whether it is a class body."""
    frame = sys._getframe(depth + 1)
    ns = frame.f_locals
    in_class = ns is not frame.f_globals and "__qualname__" in ns and "__module__" in ns
    return ns, in_class


def _make_fixture(argname: str, pick: Callable[[Any], Any], in_class: bool, name: str) -> Any:
    def as_fixture(*args: Any, **kwargs: Any) -> Any:
        return pick(kwargs[argname])

    params = [inspect.Parameter(argname, inspect.Parameter.KEYWORD_ONLY)]
    if in_class:
        params.insert(0, inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD))
    as_fixture.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    as_fixture.__name__ = name
    return _pytest().fixture(as_fixture)


def parameter(*values: Any, ids: Any = None) -> Any:
    """A fixture parametrized over ``values``: ``dtype = parameter("float16", "float32")``.

    Assigned at module or class level; pytest finds it by the name it is assigned to.
    """
    def as_fixture(*args: Any, request: Any) -> Any:
        return request.param

    if callable(ids):
        ids = [ids(v) for v in values]
    return _pytest().fixture(params=list(values), ids=ids)(as_fixture)


_GROUPS = [0]


def parameters(*value_sets: Any, ids: Any = None) -> tuple[Any, ...]:
    """Correlated fixtures: ``a, b = parameters((1, 2), (3, 4))`` gives (a, b) = (1, 2) then (3, 4).

    A hidden fixture holding the tuples is added to the caller's namespace (module or class), and
    each returned fixture picks its element from it.
    """
    sets = [tuple(v) for v in value_sets]
    if not sets:
        raise ValueError("parameters() needs at least one value set")
    width = len(sets[0])
    if any(len(s) != width for s in sets):
        raise ValueError(f"parameters(): value sets differ in length: {sets}")
    ns, in_class = _caller_namespace(1)
    _GROUPS[0] += 1
    hidden = f"_kiln_parameters_group_{_GROUPS[0]}"
    if callable(ids):
        ids = [ids(*s) for s in sets]

    def group(*args: Any, request: Any) -> Any:
        return request.param

    ns[hidden] = _pytest().fixture(params=sets, ids=ids, name=hidden)(group)
    return tuple(_make_fixture(hidden, operator.itemgetter(i), in_class, f"param_{i}")
                 for i in range(width))


@contextlib.contextmanager
def enable_span_filling() -> Iterator[None]:
    """No-op context: Kiln keeps no source spans on relay expressions."""
    yield


@contextlib.contextmanager
def disable_span_filling() -> Iterator[None]:
    """No-op context: Kiln keeps no source spans on relay expressions."""
    yield


def main() -> None:
    """Run pytest on the calling script, as ``tvm.testing.main()`` (``if __name__ == "__main__"``)."""
    sys.exit(_pytest().main([sys.argv[0], *sys.argv[1:]]))
