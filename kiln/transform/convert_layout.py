"""ConvertLayout: move convolutions and pools to the data layouts a user asks for (TVM semantics).

``ConvertLayout({"nn.conv2d": ["NCHW", "default"]})`` rewrites every ``nn.conv2d`` to take its data
in ``NCHW`` and its kernel in the default kernel layout of that data layout, so that ``NHWC`` graphs
(TFLite, Keras, ...) reach the blocked ``NCHW{c}c`` convolutions of ``AlterOpLayout``. As in TVM:

- a converted operator (a key of ``desired_layouts``) gets a ``layout_transform`` on its data and
  on its weight (constant weights are folded by the next ``FoldConstant``), and its attributes
  name the new layouts;
- its result stays in the new layout through the layout-agnostic consumers that follow
  (element-wise and broadcasting ops, ``nn.bias_add``, ``nn.prelu``, norms and softmax with their
  axis remapped, pools, ``nn.pad``, ``concatenate``, reductions);
- every other consumer, and the function's result, gets the value converted back to its original
  layout. Each value is converted at most once per target layout, and a conversion back of a
  converted value reuses the value before the conversion, so no ``layout_transform`` pair that
  cancels out is left behind.

Supported keys and values:

===========================  ==============================================================
``nn.conv2d``                ``[data, kernel]``: data ``NCHW`` or ``NHWC``; kernel ``"default"``
                             (``NCHW`` -> ``OIHW``; ``NHWC`` -> ``HWIO``, ``HWOI`` when
                             depthwise) or any order of ``OIHW`` (e.g. ``OHWI``)
``nn.conv2d_transpose``      ``[data, kernel]``: kernel ``"default"`` (``NCHW`` -> ``IOHW``,
                             ``NHWC`` -> ``HWIO``) or any order of ``IOHW``
``nn.max_pool2d``,           ``[layout]``: ``NCHW`` or ``NHWC``
``nn.avg_pool2d``,
``nn.global_max_pool2d``,
``nn.global_avg_pool2d``
===========================  ==============================================================

``qnn.conv2d``/``qnn.conv2d_transpose`` and ``nn.deformable_conv2d`` (whose offsets move with
the data) are converted as their float counterparts; ``nn.conv2d`` also takes TVM's blocked
targets ``["NCHW{n}c", "OIHW{n}i{m}o"]`` (``contrib_conv2d_NCHWc`` where the blocks divide the
channels); ``nn.upsampling`` and ``image.resize2d`` take ``[layout]`` like the pools. As in TVM,
``nn.bias_add`` is canonicalized to ``add`` first (ConvertLayout requires ``CanonicalizeOps``), an
operator with a user ``FTVMConvertOpLayout`` hook is converted by the hook, and other registered
operators named in ``desired_layouts`` are left alone.

Pools that are not keys follow the layout of their input. Convolutions whose current layouts are
not plain 4-d ones (``NCHW8c``, ...) are left alone. The rewrite itself (values held in another
layout, the operators that follow them, the conversions) is the layout engine's,
:mod:`kiln.transform.layout_propagation`; this module adds the rules of the converted operators.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence

from kiln.errors import PassError
from kiln.ir.expr import Call, Function, Op
from kiln.ir.module import IRModule
from kiln.ir.op_table import get_op_attr
from kiln.op.registry import all_ops, make_call
from kiln.transform.canonicalize_ops import CanonicalizeOps
from kiln.transform.infer_type import infer_type
from kiln.transform.layout_propagation import Held, LayoutRewriter, Rule, hook_rule
from kiln.transform.pass_infra import ModulePass, PassContext, PassInfo

__all__ = ["ConvertLayout", "convert_layout"]

_DATA_LAYOUTS = ("NCHW", "NHWC")


def _convs() -> dict[str, str]:
    """Convolutions ConvertLayout moves (2 spatial axes), with the letters of their kernels."""
    convs = {name: op.kernel_layout for name, op in all_ops().items() if len(op.kernel_layout) == 4}
    if _DEFORMABLE in all_ops():  # (data, offset, weight): the offset moves with the data
        convs[_DEFORMABLE] = "OIHW"
    return convs


_DEFORMABLE = "nn.deformable_conv2d"


def _pools() -> tuple[str, ...]:
    """2-d pools and resizes (``nn.upsampling``, ``image.resize2d``), which ConvertLayout moves
    when asked and which otherwise follow their input."""
    ops = all_ops()
    return (*(name for name, op in ops.items() if op.layout in ("pool", "resize")),
            *(name for name in _ROI_OPS if name in ops))


# ROI ops: (data, rois), ``attrs.layout`` names the data's; desired ``[layout, "default"]``
_ROI_OPS = ("vision.roi_align", "vision.roi_pool")


# --- desired layouts -----------------------------------------------------------------------------

def _is_order_of(layout: str, letters: str) -> bool:
    return len(layout) == len(letters) and set(layout) == set(letters)


def _nchwc_blocks(data: str, kernel: str) -> tuple[int, int] | None:
    """``(ic, oc)`` of a blocked ``nn.conv2d`` target ``[NCHW{ic}c, OIHW{ic}i{oc}o]``, else None."""
    m = re.fullmatch(r"NCHW(\d+)c", data)
    k = re.fullmatch(r"OIHW(\d+)i(\d+)o", kernel)
    if m is None or k is None or m.group(1) != k.group(1):
        return None
    return int(k.group(1)), int(k.group(2))


def _check_desired(desired_layouts: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
    """Validate ``desired_layouts``; raise ``PassError`` naming every bad key or layout."""
    convs, pools = _convs(), _pools()
    problems: list[str] = []
    out: dict[str, tuple[str, ...]] = {}
    for key, value in desired_layouts.items():
        layouts = (value,) if isinstance(value, str) else tuple(str(v) for v in value)
        if key in convs:
            letters = convs[key]
            if len(layouts) != 2:
                problems.append(f"{key}: expected [data_layout, kernel_layout], got {list(layouts)}")
                continue
            data, kernel = layouts
            if key == "nn.conv2d" and _nchwc_blocks(data, kernel) is not None:
                out[key] = layouts
                continue
            if data not in _DATA_LAYOUTS:
                problems.append(f"{key}: data layout {data!r} is not one of {list(_DATA_LAYOUTS)}")
            if kernel != "default" and not _is_order_of(kernel, letters):
                problems.append(f"{key}: kernel layout {kernel!r} is neither 'default' nor an "
                                f"order of {letters!r}")
        elif key in pools:
            if key in _ROI_OPS and len(layouts) == 2 and layouts[1] == "default":
                layouts = layouts[:1]
            if len(layouts) != 1 or layouts[0] not in _DATA_LAYOUTS:
                problems.append(f"{key}: expected one layout of {list(_DATA_LAYOUTS)}, got "
                                f"{list(layouts)}")
        elif key not in all_ops():
            problems.append(f"{key!r} is not an operator (ConvertLayout converts "
                            f"{', '.join([*convs, *pools])} and operators with a registered "
                            "FTVMConvertOpLayout)")
        # other operators: converted by their FTVMConvertOpLayout hook when one is registered
        # when the pass runs, else left alone (as TVM does)
        out[key] = layouts
    if problems:
        raise PassError("ConvertLayout: " + "; ".join(problems))
    return out


def _default_kernel(letters: str, data_layout: str, depthwise: bool) -> str:
    """TVM's default kernel layout for ``data_layout`` of a convolution whose kernel has the axes
    ``letters`` (``IOHW``: transposed)."""
    if letters.startswith("IO"):
        return "IOHW" if data_layout == "NCHW" else "HWIO"
    if data_layout == "NCHW":
        return "OIHW"
    return "HWOI" if depthwise else "HWIO"


# --- rules of the converted operators -----------------------------------------------------------

def _conv(cv: LayoutRewriter, call: Call, desired: tuple[str, ...]) -> Held | None:
    """``conv(x, w)`` -> ``conv(x', layout_transform(w))`` with the desired layouts; result moved
    from the original output layout to the desired data layout."""
    assert isinstance(call.op, Op) and call.attrs is not None
    attrs = call.attrs
    w_at = 2 if call.op.name == _DEFORMABLE else 1
    data, weight = cv.tensor(call.args[0]), cv.tensor(call.args[w_at])
    letters = _convs()[call.op.name]
    out_layout = attrs.out_layout or attrs.data_layout
    if (data is None or weight is None or attrs.data_layout not in _DATA_LAYOUTS
            or out_layout not in _DATA_LAYOUTS or not _is_order_of(attrs.kernel_layout, letters)):
        return None
    want_data, want_kernel = desired
    blocks = _nchwc_blocks(want_data, want_kernel)
    if blocks is not None and w_at == 1:
        return _conv_nchwc(cv, call, blocks, want_data, want_kernel)
    if want_kernel == "default":
        c_in = data.shape[attrs.data_layout.index("C")]
        c_out = weight.shape[attrs.kernel_layout.index("O")]
        want_kernel = _default_kernel(letters, want_data, c_in == c_out == attrs.groups)
    new_attrs = attrs.replace(data_layout=want_data, kernel_layout=want_kernel, out_layout="")
    args = [cv.primal(a) for a in call.args]  # qnn: zero points and scales stay
    args[0] = cv.convert(call.args[0], attrs.data_layout, want_data)
    args[w_at] = cv.convert(call.args[w_at], attrs.kernel_layout, want_kernel)
    if w_at == 2:  # deformable: the offsets are laid out as the data
        args[1] = cv.convert(call.args[1], attrs.data_layout, want_data)
    if new_attrs == attrs and all(a is b for a, b in zip(args, call.args)):
        return None  # already in the desired layouts
    return Held(cv.recall(call, args, new_attrs), out_layout, want_data)


def _conv_nchwc(cv: LayoutRewriter, call: Call, blocks: tuple[int, int], want_data: str,
                want_kernel: str) -> Held | None:
    """``conv2d(x, w)`` (``NCHW``/``OIHW``, not grouped) ->
    ``contrib_conv2d_NCHWc(x{ic}, layout_transform(w)){oc}`` when the blocks divide the channels
    (TVM's ``convert_conv2d``); other convolutions stay as they are."""
    attrs = call.attrs
    assert attrs is not None
    data, weight = cv.tensor(call.args[0]), cv.tensor(call.args[1])
    ic, oc = blocks
    if (data is None or weight is None or attrs.data_layout != "NCHW"
            or attrs.kernel_layout != "OIHW" or attrs.out_layout not in ("", "NCHW")
            or attrs.groups != 1 or data.shape[1] % ic or weight.shape[0] % oc):
        return None
    new_attrs = attrs.replace(data_layout=want_data, kernel_layout=want_kernel, out_layout="")
    args = [cv.convert(call.args[0], "NCHW", want_data), cv.convert(call.args[1], "OIHW", want_kernel)]
    new = make_call("nn.contrib_conv2d_NCHWc", args, new_attrs, source_names=call.source_names)
    return Held(new, "NCHW", f"NCHW{oc}c")


def _converted_pool(cv: LayoutRewriter, call: Call, desired: tuple[str, ...]) -> Held | None:
    """``pool(x, layout=L)`` -> ``pool(x', layout=D)`` for the desired layout ``D``."""
    attrs = call.attrs
    assert attrs is not None
    has_out = "out_layout" in attrs
    if attrs.layout not in _DATA_LAYOUTS or (has_out and (attrs.out_layout or attrs.layout)
                                             != attrs.layout):
        return None
    want = desired[0]
    new_attrs = attrs.replace(layout=want, out_layout=want) if has_out else attrs.replace(layout=want)
    data = cv.convert(call.args[0], attrs.layout, want)
    if want == attrs.layout and data is call.args[0]:
        return None  # already in the desired layout
    rest = [cv.primal(a) for a in call.args[1:]]  # ROI ops: the boxes
    return Held(cv.recall(call, [data, *rest], new_attrs), attrs.layout, want)


def _rules_for(desired: Mapping[str, tuple[str, ...]]) -> dict[str, Rule]:
    """The conversion rule of every operator in ``desired``: the user's ``FTVMConvertOpLayout``
    hook when one is registered (``relay.op.register_convert_op_layout``), else Kiln's."""
    convs, pools = _convs(), _pools()
    rules: dict[str, Rule] = {}
    for name, layouts in desired.items():
        hook = get_op_attr(name, "FTVMConvertOpLayout")
        if hook is not None:
            rules[name] = hook_rule(hook, list(layouts))
        elif name in convs or name in pools:
            rules[name] = functools.partial(_conv if name in convs else _converted_pool,
                                            desired=layouts)
    return rules


def convert_layout(fn: Function, desired_layouts: Mapping[str, Sequence[str]]) -> Function:
    """Convert the layouts of one function's convolutions and pools (see the module docstring).

    Parameters
    ----------
    fn : Function
        A typed function (not modified); run ``InferType`` first.
    desired_layouts : mapping of str to list of str
        Desired layouts per operator name, as for :func:`ConvertLayout`.

    Returns
    -------
    Function
        The rewritten function (untyped; ``fn`` itself when nothing changed).

    Raises
    ------
    PassError
        When ``desired_layouts`` names an unknown operator or a bad layout.
    """
    return LayoutRewriter(_rules_for(_check_desired(desired_layouts))).run(fn)


def _skipped(fn: Function) -> bool:
    return any(fn.attrs.get(key) for key in ("Primitive", "Compiler", "SkipOptimization"))


def ConvertLayout(desired_layouts: Mapping[str, Sequence[str]]) -> ModulePass:
    """The ConvertLayout pass (opt level 3): convolutions and pools to the desired layouts.

    Parameters
    ----------
    desired_layouts : mapping of str to list of str
        Per operator name, its desired layouts: ``[data_layout, kernel_layout]`` for
        ``nn.conv2d`` / ``nn.conv2d_transpose`` (kernel ``"default"`` picks TVM's default for the
        data layout), ``[layout]`` for the 2-d pools. Data layouts are ``NCHW`` or ``NHWC``.

    Returns
    -------
    ModulePass
        Rewrites every function except fused and externally compiled ones; the result is typed.

    Raises
    ------
    PassError
        At once, when ``desired_layouts`` names an unknown operator or a bad layout.

    Examples
    --------
    >>> desired = {"nn.conv2d": ["NCHW", "default"]}
    >>> with PassContext(opt_level=3):  # doctest: +SKIP
    ...     mod = ConvertLayout(desired)(mod)
    """
    checked = _check_desired(desired_layouts)

    def run(mod: IRModule, ctx: PassContext) -> IRModule:
        rules = _rules_for(checked)
        typed = infer_type(CanonicalizeOps()(mod))  # TVM's ConvertLayout requires CanonicalizeOps
        out = typed.copy()
        for gv, fn in typed.items():
            if not _skipped(fn):
                out[gv] = LayoutRewriter(rules).run(fn)
        return infer_type(out)

    return ModulePass(run, PassInfo(3, "ConvertLayout", ("InferType",)))
