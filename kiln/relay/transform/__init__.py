"""``relay.transform``: the passes and the pass infrastructure."""

from kiln.transform import *
from kiln.transform import __all__
from kiln.transform.pass_infra import Pass


def AnnotateSpans() -> Pass:
    """TVM's ``AnnotateSpans``: print the module and parse it back, so calls carry spans of that
    text (:func:`kiln.frontend.relay_text.AnnotateSpans`; the parser loads on first use)."""
    from kiln.frontend.relay_text import AnnotateSpans as annotate_spans

    return annotate_spans()
