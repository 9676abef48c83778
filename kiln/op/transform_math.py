"""Matrix-structure operators: trilu, einsum, matrix_set_diag.

``einsum`` accepts NumPy's equation language (explicit ``->`` output or the implicit form,
``...`` for broadcast dimensions, repeated letters for diagonals/traces) on tensors of one dtype;
floats are contracted in float64 and rounded once.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.errors import KilnTypeError
from kiln.ir.attrs import Attrs, attrs_class
from kiln.ir.expr import Call, Expr, const
from kiln.ir.types import TensorType, Type, is_int
from kiln.op.registry import OpPattern, broadcast_shapes, make_call, register_op, tensor_arg, tuple_arg
from kiln.op.transform_common import as_result, tuple_expr

__all__ = [
    "EinsumAttrs",
    "MatrixSetDiagAttrs",
    "TriluAttrs",
    "einsum",
    "matrix_set_diag",
    "trilu",
]


# --- trilu -----------------------------------------------------------------------------------

@attrs_class("relay.attrs.TriluAttrs")
class TriluAttrs(Attrs):
    """Which triangle ``trilu`` keeps."""

    upper: bool = True


def _trilu_rel(types: list[Type], attrs: TriluAttrs) -> Type:
    data = tensor_arg(types, 0, "trilu", "data")
    k = tensor_arg(types, 1, "trilu", "k")
    if data.ndim < 2:
        raise KilnTypeError(f"trilu: data must be at least 2-d, got shape {data.shape}")
    if k.ndim != 0 or not is_int(k.dtype):
        raise KilnTypeError(f"trilu: k must be an integer scalar, got {k}")
    return data


def _trilu_ref(args: list[np.ndarray], attrs: TriluAttrs, out: Type) -> np.ndarray:
    x, k = args[0], int(args[1])
    return np.triu(x, k) if attrs.upper else np.tril(x, k)


register_op("trilu", num_inputs=2, type_rel=_trilu_rel, reference=_trilu_ref,
            pattern=OpPattern.ELEMWISE, attrs_type=TriluAttrs,
            doc="keep the upper or lower triangle of the last two axes")


def trilu(data: Expr, k: Any, upper: bool = True) -> Call:
    """Zero everything below (``upper``) or above diagonal ``k`` of the last two axes (ONNX Trilu).

    Parameters
    ----------
    data : Expr
        At least 2-d tensor.
    k : Expr or int
        Diagonal offset (0 main, positive above, negative below); an int becomes an int32 constant.
    upper : bool
        Keep the upper triangle (else the lower).

    Returns
    -------
    Call
        The masked tensor.
    """
    k_expr = k if isinstance(k, Expr) else const(int(k), "int32")
    return make_call("trilu", [data, k_expr], TriluAttrs(upper=bool(upper)))


# --- einsum ----------------------------------------------------------------------------------

@attrs_class("relay.attrs.EinsumAttrs")
class EinsumAttrs(Attrs):
    """Equation of ``einsum``."""

    equation: str


def _term_dims(op: str, term: str, shape: tuple[int, ...]) -> tuple[dict[str, int], tuple[int, ...]]:
    """Letter sizes and the ellipsis part of one operand's shape."""
    if term.count("...") > 1:
        raise KilnTypeError(f"{op}: term {term!r} has more than one ellipsis")
    letters = term.replace("...", "")
    if not letters.isalpha() and letters:
        raise KilnTypeError(f"{op}: term {term!r} may only hold letters and '...'")
    n_ellipsis = len(shape) - len(letters)
    if n_ellipsis < 0 or (n_ellipsis and "..." not in term):
        raise KilnTypeError(f"{op}: term {term!r} does not match an operand of shape {shape}")
    head = term.split("...")[0] if "..." in term else term
    ellipsis = shape[len(head):len(head) + n_ellipsis] if "..." in term else ()
    dims_list = list(shape[:len(head)]) + list(shape[len(head) + len(ellipsis):])
    sizes: dict[str, int] = {}
    for letter, dim in zip(letters, dims_list):
        if sizes.setdefault(letter, dim) != dim:
            raise KilnTypeError(f"{op}: letter {letter!r} is used for sizes {sizes[letter]} and {dim} "
                                f"in term {term!r}")
    return sizes, tuple(ellipsis)


def einsum_shape(equation: str, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """The output shape of ``einsum(equation, *operands)`` for operands of ``shapes``.

    Parameters
    ----------
    equation : str
        NumPy einsum equation.
    shapes : list of tuple of int
        Operand shapes.

    Returns
    -------
    tuple of int
        The result shape.
    """
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise KilnTypeError(f"einsum: equation {equation!r} has {len(terms)} operand term(s) but "
                            f"{len(shapes)} tensor(s) were given")
    sizes: dict[str, int] = {}
    counts: dict[str, int] = {}
    ellipsis: tuple[int, ...] = ()
    for term, shape in zip(terms, shapes):
        term_sizes, term_ellipsis = _term_dims("einsum", term, shape)
        ellipsis = broadcast_shapes(ellipsis, term_ellipsis, "einsum")
        for letter, dim in term_sizes.items():
            if sizes.setdefault(letter, dim) != dim:
                raise KilnTypeError(f"einsum: letter {letter!r} has size {sizes[letter]} in one operand and "
                                    f"{dim} in another (equation {equation!r}, shapes {shapes})")
        for letter in term.replace("...", ""):
            counts[letter] = counts.get(letter, 0) + 1
    if not arrow:
        rhs = ("..." if any("..." in t for t in terms) else "") + "".join(
            sorted(letter for letter, c in counts.items() if c == 1))
    out_letters = rhs.replace("...", "")
    if len(set(out_letters)) != len(out_letters) or not set(out_letters) <= set(sizes):
        raise KilnTypeError(f"einsum: output {rhs!r} of equation {equation!r} repeats a letter or names "
                            "one no operand has")
    head, _, tail = rhs.partition("...")
    if "..." not in rhs and ellipsis:
        raise KilnTypeError(f"einsum: equation {equation!r} drops the '...' dimensions {ellipsis}")
    return (tuple(sizes[c] for c in head) + (ellipsis if "..." in rhs else ())
            + tuple(sizes[c] for c in tail))


def _einsum_rel(types: list[Type], attrs: EinsumAttrs) -> Type:
    tup = tuple_arg(types, 0, "einsum")
    fields = [f for f in tup.fields if isinstance(f, TensorType)]
    if not fields:
        raise KilnTypeError("einsum: needs at least one tensor")
    for i, f in enumerate(fields[1:], start=1):
        if f.dtype != fields[0].dtype:
            raise KilnTypeError(f"einsum: field {i} has dtype {f.dtype} but field 0 has {fields[0].dtype}")
    return TensorType(einsum_shape(attrs.equation, [f.shape for f in fields]), fields[0].dtype)


def _einsum_ref(args: list[np.ndarray], attrs: EinsumAttrs, out: Type) -> np.ndarray:
    operands = [a.astype(np.float64) if a.dtype.kind == "f" else a for a in args[0]]
    return as_result(out, np.einsum(attrs.equation, *operands))


register_op("einsum", num_inputs=1, type_rel=_einsum_rel, reference=_einsum_ref,
            pattern=OpPattern.INJECTIVE, attrs_type=EinsumAttrs, doc="Einstein summation")


def einsum(data: Any, equation: str) -> Call:
    """Einstein summation over a tuple of tensors.

    Parameters
    ----------
    data : list of Expr or Tuple
        The operands (one dtype).
    equation : str
        E.g. ``"bij,bjk->bik"`` or ``"bhqd,bhkd->bhqk"``.

    Returns
    -------
    Call
        The contraction.
    """
    return make_call("einsum", [tuple_expr(data, "einsum")], EinsumAttrs(equation=str(equation)))


# --- matrix_set_diag -------------------------------------------------------------------------

@attrs_class("relay.attrs.MatrixSetDiagAttrs")
class MatrixSetDiagAttrs(Attrs):
    """Diagonal range ``[k1, k2]`` and alignment of ``matrix_set_diag``."""

    k1: int = 0
    k2: int = 0
    super_diag_right_align: bool = True
    sub_diag_right_align: bool = False


def _max_diag_len(rows: int, cols: int, k1: int, k2: int) -> int:
    return min(rows + min(k2, 0), cols - max(k1, 0))


def _matrix_set_diag_rel(types: list[Type], attrs: MatrixSetDiagAttrs) -> Type:
    data = tensor_arg(types, 0, "matrix_set_diag", "data")
    diag = tensor_arg(types, 1, "matrix_set_diag", "diagonal")
    if data.ndim < 2:
        raise KilnTypeError(f"matrix_set_diag: data must be at least 2-d, got shape {data.shape}")
    rows, cols = data.shape[-2:]
    k1, k2 = attrs.k1, attrs.k2
    if not -rows < k1 <= k2 < cols:
        raise KilnTypeError(f"matrix_set_diag: diagonals [{k1}, {k2}] are not inside a {rows}x{cols} matrix")
    band = (k2 - k1 + 1,) if k1 != k2 else ()
    want = data.shape[:-2] + band + (_max_diag_len(rows, cols, k1, k2),)
    if diag.shape != want or diag.dtype != data.dtype:
        raise KilnTypeError(f"matrix_set_diag: diagonal must be {TensorType(want, data.dtype)} for data "
                            f"{TensorType(data.shape, data.dtype)} and k=({k1}, {k2}), got "
                            f"{TensorType(diag.shape, diag.dtype)}")
    return data


def _matrix_set_diag_ref(args: list[np.ndarray], attrs: MatrixSetDiagAttrs, out: Type) -> np.ndarray:
    x, diagonal = args
    result = x.copy()
    rows, cols = x.shape[-2:]
    k1, k2 = attrs.k1, attrs.k2
    max_len = _max_diag_len(rows, cols, k1, k2)
    for d in range(k1, k2 + 1):
        length = min(cols - max(d, 0), rows + min(d, 0))
        right = attrs.super_diag_right_align if d >= 0 else attrs.sub_diag_right_align
        offset = max_len - length if right else 0
        r = np.arange(length) + max(-d, 0)
        values = diagonal[..., k2 - d, :] if k1 != k2 else diagonal
        result[..., r, r + d] = values[..., offset:offset + length]
    return result


register_op("matrix_set_diag", num_inputs=2, type_rel=_matrix_set_diag_rel,
            reference=_matrix_set_diag_ref, pattern=OpPattern.INJECTIVE,
            attrs_type=MatrixSetDiagAttrs, doc="replace diagonals of the last two axes")


def matrix_set_diag(data: Expr, diagonal: Expr, k: Any = 0, align: str = "RIGHT_LEFT") -> Call:
    """Replace diagonals ``k`` (an int or a ``(k1, k2)`` band) of the last two axes with ``diagonal``.

    Parameters
    ----------
    data : Expr
        Tensor of shape ``(..., M, N)``.
    diagonal : Expr
        ``(..., L)`` for one diagonal or ``(..., k2 - k1 + 1, L)`` for a band (row ``i`` holds
        diagonal ``k2 - i``), ``L`` the longest diagonal's length.
    k : int or (int, int)
        Diagonal offset(s): 0 main, positive above, negative below.
    align : str
        ``"RIGHT_LEFT"``, ``"LEFT_RIGHT"``, ``"LEFT_LEFT"`` or ``"RIGHT_RIGHT"``: how shorter
        super-/sub-diagonals are aligned in ``diagonal`` (TensorFlow's convention).

    Returns
    -------
    Call
        The updated tensor.
    """
    k1, k2 = (int(k[0]), int(k[-1])) if isinstance(k, (tuple, list)) else (int(k), int(k))
    attrs = MatrixSetDiagAttrs(k1=k1, k2=k2, super_diag_right_align=align[:5] == "RIGHT",
                               sub_diag_right_align=align[-5:] == "RIGHT")
    return make_call("matrix_set_diag", [data, diagonal], attrs)
