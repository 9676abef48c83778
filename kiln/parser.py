"""TVM's legacy ``tvm.parser`` module: the relay text parser (:mod:`kiln.frontend.relay_text`).

``tvm.parser.parse``, ``parse_expr`` and ``fromtext`` are the deprecated spellings of
``tvm.relay.parse``, ``parse_expr`` and ``fromtext``.
"""

from __future__ import annotations

from kiln.frontend.relay_text import RelayTextError, fromtext, parse, parse_expr

__all__ = ["RelayTextError", "fromtext", "parse", "parse_expr"]
