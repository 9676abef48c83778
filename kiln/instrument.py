"""``tvm.instrument`` (also ``tvm.ir.instrument`` in TVM): pass instruments.

They live in :mod:`kiln.transform.instrument`, beside the pass infrastructure that calls them.
"""

from __future__ import annotations

from kiln.transform.instrument import (
    PassInstrument,
    PassPrintingInstrument,
    PassTimingInstrument,
    PrintAfterAll,
    PrintBeforeAll,
    pass_instrument,
)

__all__ = ["PassInstrument", "PassPrintingInstrument", "PassTimingInstrument", "PrintAfterAll",
           "PrintBeforeAll", "pass_instrument"]
