"""Relay's text format (version 0.0.5) to IR: TVM's ``tvm.relay.parse`` / ``parse_expr``.

Reads what TVM's ``astext()`` and Kiln's :func:`kiln.ir.printer.astext` write::

    #[version = "0.0.5"]
    def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(16, 3, 3, 3), float32]) {
      %0 = nn.conv2d(%x, %w, padding=[1, 1], channels=16, kernel_size=[3, 3]);
      nn.relu(%0)
    }
    #[metadata]
    {...}

The grammar follows TVM's recursive-descent parser (``src/relay/parser/parser.cc``): graph
bindings ``%0 = ...;``, ``let %x: T = ...;``, ``free_var %x: T;``, functions ``fn (...) -> T {...}``
with attributes, ``if (c) {...} else {...}``, tuples and ``.0`` projections, the infix operators
``* / + - < <= > >= == !=``, scalar literals (``1f``, ``2i64``, ``True``), ``meta[relay.Constant][k]``
resolved against the ``#[metadata]`` section, comments (``//`` and nested ``/* */``). Call
attributes are built with the operator's attrs class from the operator registry; unknown operators,
names and attribute keys are errors naming ``line:column`` and what was expected.

References read as ``ref(e)``, ``ref_read(r)``, ``ref_write(r, v)`` and types ``ref(T)``. Kiln's IR
has no type variables, algebraic data types or dynamic (``?``) dimensions, so ``def @f[A]``,
``type``, ``match`` and ``?`` are reported as unsupported.
"""

from __future__ import annotations

import bisect
import dataclasses
import re
from collections.abc import Mapping
from typing import Any, NoReturn

import numpy as np

from kiln.errors import FrontendError
from kiln.ir.attrs import Attrs, attrs_class_for
from kiln.ir.expr import (
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Op,
    Tuple,
    TupleGetItem,
    Var,
)
from kiln.ir.meta_json import MetaNode, load_meta_section
from kiln.ir.module import IRModule
from kiln.ir.ref import RefCreate, RefRead, RefType, RefWrite
from kiln.ir.span import SourceName, Span
from kiln.ir.types import FuncType, TensorType, TupleType, Type, as_dtype
from kiln.transform.pass_infra import ModulePass, Pass, PassContext, PassInfo

__all__ = ["AnnotateSpans", "RelayTextError", "fromtext", "parse", "parse_expr"]


class RelayTextError(FrontendError):
    """Relay text that does not parse: names the source, ``line:column`` and what was expected."""


# --- tokens ---------------------------------------------------------------------------------

KEYWORDS = {"let", "fn", "def", "if", "else", "type", "match", "extern", "free_var", "ref",
            "ref_read", "ref_write"}

_IDENT = r"[A-Za-z_][A-Za-z0-9_/]*"
# local names: TVM's identifier letters, plus '.' before a letter and '-' or ':' before a digit
# or letter, so that names imported from ONNX/TF (``conv1.weight``, ``input:0``) read back
_LOCAL_NAME = r"[A-Za-z0-9_/]+(?:(?:\.(?=[A-Za-z_])|-(?=[A-Za-z0-9_])|:(?=[0-9]))[A-Za-z0-9_/]+)*"
_NUMBER = r"(?:\d+(?:\.\d*)?(?:[eE][+-]?\d+)?(?:[fi]\d*)?|inff\d*)(?![A-Za-z_])"

_TOKEN_RE = re.compile(
    r"""[ \t\r\n]*(?:
    (?P<punct>==|!=|<=|>=|[,=;:()+*<>{}\[\]!?])
  | (?P<graph>%(?P<graph_no>\d+)(?![A-Za-z_/]))
  | (?P<ident>""" + _IDENT + r""")
  | (?P<number>-*(?:""" + _NUMBER + r"""))
  | (?P<local>%(?P<local_name>""" + _LOCAL_NAME + r"""))
  | (?P<period>\.)
  | (?P<global>@(?P<global_name>""" + _IDENT + r"""))
  | (?P<lcomment>//[^\n]*)
  | (?P<bcomment>/\*)
  | (?P<slash>/)
  | (?P<minus>-)
  | (?P<attr>\#\[)
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<end>$)
    )""",
    re.VERBOSE,
)
_META_RE = re.compile(r"meta\[(?P<key>[^\]]*)\]\[(?P<idx>[^\]]*)\]")
_INT_RE = re.compile(r"[ \t\r\n]*(\d+)")


class Token:
    """One token: ``kind`` (``ident``, ``local``, ``graph``, ``global``, ``int``, ``float``,
    ``bool``, ``string``, ``meta``, ``version``, a keyword, punctuation or ``eof``), its ``value``,
    and the offset ``pos`` where it starts."""

    __slots__ = ("kind", "pos", "value")

    def __init__(self, kind: str, value: Any, pos: int):
        self.kind = kind
        self.value = value
        self.pos = pos

    def __repr__(self) -> str:
        return f"Token({self.kind!r}, {self.value!r}, {self.pos})"

    def describe(self) -> str:
        """How error messages show the token."""
        if self.kind == "eof":
            return "the end of the input"
        if self.kind in ("int", "float"):
            value = self.value[0] if isinstance(self.value, tuple) else self.value
            return f"{self.kind} `{value}`"
        if self.kind == "ident":
            return f"identifier `{self.value}`"
        if self.kind == "string":
            return f'string "{self.value}"'
        if self.kind in ("local", "graph"):
            return f"`%{self.value}`"
        if self.kind == "global":
            return f"`@{self.value}`"
        if self.kind == "bool":
            return f"`{self.value}`"
        if self.kind == "meta":
            return f"`meta[{self.value[0]}][{self.value[1]}]`"
        return f"`{self.kind}`"


# dtypes written as a bare kind, read as TVM's String2DLDataType reads them (32 bits)
_BARE_DTYPES = {"int": "int32", "uint": "uint32", "float": "float32"}

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\"}


def _unescape(body: str) -> str:
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), body)


class _Source:
    """The text and its name; turns offsets into ``line:column``."""

    def __init__(self, text: str, name: str):
        self.text = text
        self.name = name
        self._newlines: list[int] | None = None

    def line_col(self, pos: int) -> tuple[int, int]:
        """1-based line and column of offset ``pos``."""
        if self._newlines is None:
            self._newlines = [m.start() for m in re.finditer("\n", self.text)]
        line = bisect.bisect_left(self._newlines, pos)
        start = self._newlines[line - 1] + 1 if line else 0
        return line + 1, pos - start + 1

    def where(self, pos: int) -> str:
        line, col = self.line_col(pos)
        return f"{self.name}:{line}:{col}"

    def error(self, pos: int, msg: str) -> RelayTextError:
        return RelayTextError(f"{self.where(pos)}: {msg}")


def _tokenize(src: _Source) -> tuple[list[Token], str | None]:
    """The tokens of ``src`` (ending with ``eof``) and the text of its ``#[metadata]`` section."""
    text = src.text
    out: list[Token] = []
    append = out.append
    match = _TOKEN_RE.match
    numbers: dict[str, Any] = {}  # literal text -> (value, dtype)
    pos = 0
    while True:
        m = match(text, pos)
        if m is None:
            start = pos
            while start < len(text) and text[start].isspace():
                start += 1
            end = start
            while end < len(text) and not text[end].isspace():
                end += 1
            raise src.error(start, f"unexpected character(s) `{text[start:end]}`")
        kind = m.lastgroup
        start = m.start(kind)  # type: ignore[arg-type]
        pos = m.end()
        if kind == "punct":
            value = m.group(kind)
            append(Token(value, value, start))
        elif kind == "graph":
            append(Token("graph", int(m.group("graph_no")), start))
        elif kind == "ident":
            word = m.group(kind)
            if word.startswith("inff") and (word[4:].isdigit() or len(word) == 4):
                append(_number(src, word, start))
            elif word == "nanf":  # what the printer writes for a NaN float attribute
                append(Token("float", (float("nan"), "float32"), start))
            elif word == "meta" and text.startswith("[", pos):
                mm = _META_RE.match(text, start)
                if mm is None:
                    raise src.error(start, "expected `meta[<type key>][<index>]`")
                idx = mm.group("idx").strip()
                if not idx.isdigit():
                    raise src.error(start, f"meta reference index `{idx}` is not an integer")
                append(Token("meta", (mm.group("key").strip(), int(idx)), start))
                pos = mm.end()
            elif word in KEYWORDS:
                append(Token(word, word, start))
            elif word in ("True", "False"):
                append(Token("bool", word == "True", start))
            elif word == "_":
                append(Token("_", word, start))
            else:
                append(Token("ident", word, start))
        elif kind == "number":
            raw = m.group(kind)
            value = numbers.get(raw)
            if value is None:
                value = numbers[raw] = _number(src, raw, start).value
            append(Token("float" if value[1][0] == "f" else "int", value, start))
        elif kind == "local":
            append(Token("local", m.group("local_name"), start))
        elif kind == "period":
            append(Token(".", ".", start))
            mi = _INT_RE.match(text, pos)  # a projection index: `%x.0.1` is not a float
            if mi is not None:
                append(Token("int", int(mi.group(1)), mi.start(1)))
                pos = mi.end()
        elif kind == "global":
            append(Token("global", m.group("global_name"), start))
        elif kind == "lcomment":
            pass
        elif kind == "bcomment":
            pos = _skip_comment(src, start)
        elif kind == "slash":
            append(Token("/", "/", start))
        elif kind == "minus":
            append(Token("-", "-", start))
        elif kind == "attr":
            close = text.find("]", pos)
            if close < 0:
                raise src.error(start, "`#[` is not closed by `]`")
            attribute = text[pos:close].strip()
            if attribute == "metadata":
                append(Token("eof", None, start))
                return out, text[close + 1:]
            if not attribute.startswith("version"):
                raise src.error(start, f"unsupported attribute `#[{attribute}]` (expected "
                                       "`#[version = \"0.0.5\"]` or `#[metadata]`)")
            append(Token("version", attribute[attribute.find("=") + 1:].strip(), start))
            pos = close + 1
        elif kind == "string":
            append(Token("string", _unescape(m.group(kind)[1:-1]), start))
        else:  # end
            append(Token("eof", None, start))
            return out, None


def _skip_comment(src: _Source, pos: int) -> int:
    """Skip a (nested) ``/* */`` comment starting at ``pos``; returns the offset after it."""
    text = src.text
    depth = 0
    i = pos
    while True:
        opening = text.find("/*", i)
        closing = text.find("*/", i)
        if closing < 0:
            raise src.error(pos, "comment `/*` is not closed by `*/`")
        if 0 <= opening < closing:
            depth += 1
            i = opening + 2
        else:
            depth -= 1
            i = closing + 2
            if depth == 0:
                return i


def _number(src: _Source, raw: str, pos: int) -> Token:
    stripped = raw.lstrip("-")
    negative = (len(raw) - len(stripped)) % 2 == 1
    suffix_at = 3 if stripped.startswith("inf") else max(stripped.rfind("f"), stripped.rfind("i"))
    literal, suffix = (stripped, "") if suffix_at < 0 else (stripped[:suffix_at],
                                                            stripped[suffix_at:])
    is_float = suffix.startswith("f") or (not suffix and ("." in literal or "e" in literal
                                                           or "E" in literal))
    width = suffix[1:] or "32"
    if not width.isdigit():
        raise src.error(pos, f"invalid numeric suffix `{suffix}` in `{raw}`")
    if is_float:
        dtype = f"float{width}"
        if dtype not in ("float16", "float32", "float64"):
            raise src.error(pos, f"`{raw}`: no float type of width {width}")
        value = float(literal)
        return Token("float", (-value if negative else value, dtype), pos)
    if "." in literal or "e" in literal or "E" in literal:
        raise src.error(pos, f"`{raw}`: an integer suffix on a non-integer literal")
    ivalue = -int(literal) if negative else int(literal)
    dtype = f"int{width}"
    if dtype not in ("int8", "int16", "int32", "int64"):
        raise src.error(pos, f"`{raw}`: no integer type of width {width}")
    info = np.iinfo(dtype)
    if not info.min <= ivalue <= info.max:
        if suffix:
            raise src.error(pos, f"integer `{raw}` does not fit in {dtype}")
        dtype = "int64"  # TVM: an unsuffixed integer out of int32's range is an int64
    return Token("int", (ivalue, dtype), pos)


# --- the parser ----------------------------------------------------------------------------

_BINARY_OPS: dict[str, tuple[str, int]] = {
    "*": ("multiply", 12), "/": ("divide", 12), "+": ("add", 10), "-": ("subtract", 10),
    "<": ("less", 8), "<=": ("less_equal", 8), ">": ("greater", 8), ">=": ("greater_equal", 8),
    "==": ("equal", 7), "!=": ("not_equal", 7),
}

_UNSUPPORTED = {
    "type": "algebraic data types (`type`) are not supported by Kiln's IR",
    "extern": "extern types are not supported by Kiln's IR",
    "match": "`match` needs algebraic data types, which Kiln's IR does not have",
}


class _Parser:
    def __init__(self, text: str, source_name: str,
                 init_meta_table: Mapping[str, Any] | None = None):
        self.source_name = source_name
        self.src = _Source(text, source_name)
        self.source = SourceName(source_name)
        self.tokens, metadata = _tokenize(self.src)
        self.pos = 0
        self.scopes: list[dict[str, Var]] = []
        self.free_vars: dict[str, Var] = {}
        self.graph: dict[int, Expr] = {}
        self.globals: dict[str, GlobalVar] = {}
        self.literals: dict[tuple[str, str], Constant] = {}
        self.meta: dict[str, list[Any]] = load_meta_section(metadata) if metadata else {}
        for key, items in (init_meta_table or {}).items():
            self.meta.setdefault(key, []).extend(list(items))

    # --- token helpers --------------------------------------------------------------------
    def peek(self, n: int = 0) -> Token:
        if n:
            return self.tokens[min(self.pos + n, len(self.tokens) - 1)]
        return self.tokens[self.pos]

    def next(self) -> Token:
        tok = self.tokens[self.pos]
        if tok.kind != "eof":
            self.pos += 1
        return tok

    def error(self, tok: Token, msg: str) -> NoReturn:
        raise self.src.error(tok.pos, msg)

    def expect(self, kind: str, what: str | None = None) -> Token:
        tok = self.peek()
        if tok.kind != kind:
            self.error(tok, f"expected {what or f'`{kind}`'}, found {tok.describe()}")
        return self.next()

    def accept(self, kind: str) -> bool:
        if self.peek().kind == kind:
            self.next()
            return True
        return False

    # --- scopes ---------------------------------------------------------------------------
    def bind(self, name: str, ty: Type | None) -> Var:
        v = Var(name, ty)
        self.scopes[-1][name] = v
        return v

    def lookup(self, tok: Token) -> Var:
        for scope in reversed(self.scopes):
            if tok.value in scope:
                return scope[tok.value]
        if tok.value in self.free_vars:
            return self.free_vars[tok.value]
        self.error(tok, f"local variable %{tok.value} has not been declared (bind it with a "
                        f"function parameter, `let` or `free_var`)")

    def global_var(self, name: str) -> GlobalVar:
        gv = self.globals.get(name)
        if gv is None:
            gv = self.globals[name] = GlobalVar(name)
        return gv

    # --- modules --------------------------------------------------------------------------
    def parse_version(self, required: bool) -> None:
        tok = self.peek()
        if tok.kind == "version":
            self.next()
            if tok.value != '"0.0.5"':
                self.error(tok, f"invalid semantic version {tok.value} (Kiln reads \"0.0.5\")")
        elif required:
            self.error(tok, "expected the text format version `#[version = \"0.0.5\"]`, found "
                            f"{tok.describe()}")

    def parse_module(self, init_module: IRModule | None) -> IRModule:
        self.parse_version(required=True)
        mod = init_module.copy() if init_module is not None else IRModule()
        for gv in mod.functions:
            self.globals[gv.name_hint] = gv
        defs: list[tuple[GlobalVar, Function]] = []
        while True:
            tok = self.peek()
            if tok.kind == "def":
                self.next()
                name = self.expect("global", "a global name `@name` after `def`")
                gv = self.global_var(name.value)
                if any(g is gv for g, _ in defs):
                    self.error(name, f"@{name.value} is defined twice")
                defs.append((gv, self.parse_function_def()))
            elif tok.kind in ("type", "extern"):
                self.error(tok, _UNSUPPORTED[tok.kind])
            elif tok.kind == "eof":
                break
            else:
                self.error(tok, f"expected a definition (`def @name(...) {{...}}`), found "
                                f"{tok.describe()}")
        for gv, fn in defs:
            mod[gv] = fn
        return mod

    # --- expressions ----------------------------------------------------------------------
    def parse_expr(self) -> Expr:
        """A sequence ``e1; e2; ...`` (values before the last bound to unnamed lets)."""
        exprs: list[Expr] = []
        while True:
            tok = self.peek()
            if tok.kind == "{":
                self.next()
                self.scopes.append({})
                exprs.append(self.parse_expr())
                self.scopes.pop()
                self.expect("}")
            elif tok.kind == "free_var":
                self.next()
                name = self.expect("local", "a local `%name` after `free_var`")
                ty = self.parse_type() if self.accept(":") else None
                self.free_vars[name.value] = Var(name.value, ty)
            elif tok.kind == "let" or (tok.kind == "graph" and self.peek(1).kind == "="):
                exprs.append(self.parse_bindings())
            else:
                exprs.append(self.parse_binop())
            if not self.accept(";"):
                break
        if not exprs:
            self.error(self.peek(), f"expected an expression, found {self.peek().describe()}")
        body = exprs.pop()
        while exprs:
            body = Let(Var("", None), exprs.pop(), body)
        return body

    def parse_bindings(self) -> Expr:
        """Graph bindings and lets, iteratively (constant stack depth over long chains)."""
        lets: list[tuple[Var, Expr]] = []
        pushed = 0
        while True:
            tok = self.peek()
            if tok.kind == "graph" and self.peek(1).kind == "=":
                self.next()
                self.next()
                value = self.parse_binop()
                self.expect(";", "`;` after a graph binding")
                self.graph[tok.value] = value
            elif tok.kind == "let":
                self.next()
                name = self.expect("local", "a local `%name` after `let`")
                ty = self.parse_type() if self.accept(":") else None
                self.expect("=", "`=` in a let binding")
                value = self.parse_binop()
                self.expect(";", "`;` after a let binding")
                self.scopes.append({})
                pushed += 1
                lets.append((self.bind(name.value, ty), value))
            else:
                body = self.parse_expr()
                del self.scopes[len(self.scopes) - pushed:]
                for var, value in reversed(lets):
                    body = Let(var, value, body)
                return body

    def parse_binop(self) -> Expr:
        exprs = [self.parse_call()]
        ops: list[tuple[str, int]] = []

        def reduce() -> None:
            name, _ = ops.pop()
            right = exprs.pop()
            left = exprs.pop()
            exprs.append(Call(self.op(name, self.peek()), [left, right]))

        while True:
            tok = self.peek()
            key = tok.kind
            if key not in _BINARY_OPS:
                break
            self.next()
            name, prec = _BINARY_OPS[key]
            while ops and ops[-1][1] >= prec:  # all of TVM's infix operators are left-associative
                reduce()
            ops.append((name, prec))
            exprs.append(self.parse_call())
        while ops:
            reduce()
        return exprs[0]

    def op(self, name: str, tok: Token) -> Op:
        try:
            return Op.get(name)
        except KeyError:
            self.error(tok, f"operator `{name}` not found (no operator of that name is registered)")

    def parse_call(self) -> Expr:
        start = self.peek()
        expr = self.parse_atomic()
        while self.peek().kind == "(":
            expr = self.parse_call_args(expr, start)
        return expr

    def span(self, start: Token) -> Span:
        """The span from ``start`` to the end of the last token consumed."""
        last = self.tokens[self.pos - 1]
        line, col = self.src.line_col(start.pos)
        end_line, end_col = self.src.line_col(last.pos)
        return Span(self.source, line, end_line, col, end_col + 1)

    def parse_call_args(self, callee: Expr, start: Token) -> Expr:
        open_tok = self.expect("(")
        args: list[Expr] = []
        kwargs: dict[str, Any] = {}
        first_key: Token | None = None
        while not self.accept(")"):
            tok = self.peek()
            key = self.attr_key()
            if key is not None:
                first_key = first_key or tok
                if key in kwargs:
                    self.error(tok, f"attribute `{key}` is given twice")
                kwargs[key] = self.parse_attr_value()
            elif kwargs:
                self.error(tok, f"expected an attribute `key=value` or `)`, found {tok.describe()} "
                                "(arguments come before attributes)")
            else:
                args.append(self.parse_expr())
            if not self.accept(","):
                self.expect(")", "`,` or `)` in a call")
                break
        attrs = self.make_attrs(callee, kwargs, first_key or open_tok)
        if not isinstance(callee, (Op, GlobalVar, Function, Var)):
            self.error(open_tok, f"cannot call {type(callee).__name__} (expected an operator, a "
                                 "global, a function or a variable)")
        return Call(callee, args, attrs, span=self.span(start))

    def attr_key(self) -> str | None:
        """Consume ``key =`` (a dotted name: ``relay.reshape_only=1``) and return the key; None
        (consuming nothing) when the next tokens are not an attribute."""
        n = 0
        while self.peek(n).kind == "ident" and self.peek(n + 1).kind == ".":
            n += 2
        if self.peek(n).kind != "ident" or self.peek(n + 1).kind != "=":
            return None
        key = "".join(str(self.peek(i).value) for i in range(n + 1))
        self.pos += n + 2
        return key

    def make_attrs(self, callee: Expr, kwargs: dict[str, Any], tok: Token) -> Attrs | None:
        if isinstance(callee, Op):
            cls = callee.op_def.attrs_type
            if cls is None:
                if kwargs:
                    self.error(tok, f"operator `{callee.name}` takes no attributes, got "
                                    f"{', '.join(kwargs)}")
                return None
        else:
            key = kwargs.pop("attrs_type_key", None)
            if key is None:
                if kwargs:
                    self.error(tok, "attributes of a call to a non-operator need "
                                    "`attrs_type_key=\"...\"`")
                return None
            cls = attrs_class_for(key)
            if cls is None:
                self.error(tok, f"unknown attrs type key {key!r}")
        return self.build_attrs(cls, kwargs, tok, getattr(callee, "name", "call"))

    def build_attrs(self, cls: type[Attrs], kwargs: dict[str, Any], tok: Token,
                    where: str) -> Attrs:
        fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = [k for k in kwargs if k not in fields]
        if unknown:
            self.error(tok, f"`{where}` has no attribute {', '.join(map(repr, unknown))} "
                            f"({cls.type_key} has {', '.join(fields) or 'none'})")
        for k, v in kwargs.items():
            default = fields[k].default
            if isinstance(default, float) and isinstance(v, int) and not isinstance(v, bool):
                kwargs[k] = float(v)
        try:
            return cls(**kwargs)
        except TypeError as e:
            self.error(tok, f"`{where}`: cannot build {cls.type_key} from the attributes: {e}")

    def parse_attr_value(self) -> Any:
        tok = self.peek()
        if tok.kind in ("int", "float"):
            self.next()
            return tok.value[0]
        if tok.kind == "bool":
            self.next()
            return bool(tok.value)
        if tok.kind == "string":
            self.next()
            return tok.value
        if tok.kind == "[":
            self.next()
            items: list[Any] = []
            while not self.accept("]"):
                items.append(self.parse_attr_value())
                if not self.accept(","):
                    self.expect("]", "`,` or `]` in a list")
                    break
            return tuple(items)
        if tok.kind == "(":
            self.next()
            value = self.parse_attr_value()
            self.expect(")")
            return value
        if tok.kind == "ident" and tok.value in ("None", "nullptr"):
            self.next()
            return None
        if tok.kind == "meta":
            return self.meta_ref()
        return self.parse_atomic()

    def meta_ref(self) -> Any:
        tok = self.next()
        key, index = tok.value
        items = self.meta.get(key)
        if items is None:
            have = ", ".join(self.meta) or "none"
            self.error(tok, f"no entry in the metadata section for `{key}` (it has: {have})")
        if index >= len(items):
            self.error(tok, f"index {index} is out of bounds for `{key}` ({len(items)} entries)")
        node = items[index]
        if isinstance(node, MetaNode):
            self.error(tok, f"meta[{key}][{index}] is a {node.type_key}, which Kiln's IR does not "
                            "support")
        return node

    def parse_atomic(self) -> Expr:
        tok = self.peek()
        kind = tok.kind
        expr: Expr
        if kind in ("int", "float"):
            self.next()
            key = (repr(tok.value[0]), tok.value[1])
            const = self.literals.get(key)  # one node per distinct literal: constants are values
            if const is None:
                const = self.literals[key] = Constant(np.array(tok.value[0], dtype=tok.value[1]))
            expr = const
        elif kind == "bool":
            self.next()
            expr = Constant(np.array(tok.value, dtype=np.bool_))
        elif kind == "local":
            self.next()
            expr = self.lookup(tok)
        elif kind == "global":
            self.next()
            expr = self.global_var(tok.value)
        elif kind == "graph":
            self.next()
            if tok.value not in self.graph:
                self.error(tok, f"graph variable %{tok.value} has not been defined yet")
            expr = self.graph[tok.value]
        elif kind == "ident":
            self.next()
            name = tok.value
            while self.peek().kind == "." and self.peek(1).kind == "ident":
                self.next()
                name += "." + self.next().value
            expr = self.op(name, tok)
        elif kind == "meta":
            node = self.meta_ref()
            if not isinstance(node, Expr):
                self.error(tok, f"meta[{tok.value[0]}][{tok.value[1]}] is not an expression")
            expr = node
        elif kind == "fn":
            self.next()
            expr = self.parse_function_def()
        elif kind == "if":
            expr = self.parse_if()
        elif kind == "(":
            self.next()
            if self.accept(")"):
                expr = Tuple([])
            else:
                first = self.parse_expr()
                if self.accept(")"):
                    expr = first
                else:
                    self.expect(",", "`,` or `)`")
                    fields = [first]
                    while not self.accept(")"):
                        fields.append(self.parse_expr())
                        if not self.accept(","):
                            self.expect(")", "`,` or `)` in a tuple")
                            break
                    expr = Tuple(fields)
        elif kind in ("ref", "ref_read", "ref_write"):
            self.next()
            self.expect("(", f"`(` after `{kind}`")
            first = self.parse_expr()
            if kind == "ref_write":
                self.expect(",", "`,` between the reference and the value of `ref_write`")
                expr = RefWrite(first, self.parse_expr())
            else:
                expr = RefCreate(first) if kind == "ref" else RefRead(first)
            self.expect(")", f"`)` closing `{kind}(...)`")
        elif kind in _UNSUPPORTED:
            self.error(tok, _UNSUPPORTED[kind])
        else:
            self.error(tok, f"expected an expression, found {tok.describe()}")
        while self.peek().kind == "." and self.peek(1).kind == "int":
            self.next()
            index = self.next().value
            expr = TupleGetItem(expr, index)
        return expr

    def parse_if(self) -> Expr:
        self.expect("if")
        self.expect("(", "`(` after `if`")
        cond = self.parse_expr()
        self.expect(")", "`)` after the condition of `if`")
        branches = []
        for i in range(2):
            if i:
                self.expect("else", "`else` after the true branch of `if`")
            self.expect("{", "`{` opening a branch of `if`")
            self.scopes.append({})
            branches.append(self.parse_expr())
            self.scopes.pop()
            self.expect("}", "`}` closing a branch of `if`")
        return If(cond, branches[0], branches[1])

    def parse_function_def(self) -> Function:
        """``[T, ...](%p: T, ..., attr=value) -> T { body }`` (after ``fn`` or ``def @name``)."""
        if self.peek().kind == "[":
            self.error(self.peek(), "type parameters (`[A, ...]`) are not supported by Kiln's IR")
        self.scopes.append({})
        self.expect("(", "`(` opening the parameter list")
        params: list[Var] = []
        attrs: dict[str, Any] = {}
        while not self.accept(")"):
            tok = self.peek()
            key = self.attr_key()
            if key is not None:
                attrs[key] = self.parse_attr_value()
            elif attrs:
                self.error(tok, f"expected a function attribute `key=value` or `)`, found "
                                f"{tok.describe()} (parameters come before attributes)")
            else:
                name = self.expect("local", "a parameter `%name`")
                if self.peek().kind == "{":
                    self.error(self.peek(), "parameter virtual devices are not supported by Kiln")
                ty = self.parse_type() if self.accept(":") else None
                params.append(self.bind(name.value, ty))
            if not self.accept(","):
                self.expect(")", "`,` or `)` in the parameter list")
                break
        ret_type = None
        if self.accept("-"):
            self.expect(">", "`->` before the return type")
            ret_type = self.parse_type()
        self.expect("{", "`{` opening the function body")
        body = self.parse_expr()
        self.expect("}", "`}` closing the function body")
        self.scopes.pop()
        return Function(params, body, ret_type, attrs=attrs)

    # --- types ----------------------------------------------------------------------------
    def parse_type(self) -> Type | None:
        tok = self.peek()
        if tok.kind == "(":
            self.next()
            fields: list[Type] = []
            while not self.accept(")"):
                fields.append(self.parse_known_type())
                if not self.accept(","):
                    self.expect(")", "`,` or `)` in a tuple type")
                    break
            return TupleType(tuple(fields))
        if tok.kind == "fn":
            self.next()
            if self.peek().kind == "[":
                self.error(self.peek(), "type parameters are not supported by Kiln's IR")
            self.expect("(", "`(` opening a function type's arguments")
            args: list[Type] = []
            while not self.accept(")"):
                args.append(self.parse_known_type())
                if not self.accept(","):
                    self.expect(")", "`,` or `)` in a function type")
                    break
            self.expect("-", "`->` in a function type")
            self.expect(">", "`->` in a function type")
            return FuncType(tuple(args), self.parse_known_type())
        if tok.kind == "_":
            self.next()
            return None
        if tok.kind == "ref":
            self.next()
            self.expect("(", "`(` after `ref` in a type")
            value = self.parse_known_type()
            self.expect(")", "`)` closing `ref(...)`")
            return RefType(value)
        if tok.kind == "ident":
            self.next()
            if tok.value == "Tensor":
                self.expect("[", "`[` after `Tensor`")
                shape = self.parse_shape()
                self.expect(",", "`,` between a tensor's shape and dtype")
                dtype = self.dtype(self.expect("ident", "a dtype"))
                self.expect("]", "`]` closing `Tensor[...]`")
                return TensorType(shape, dtype)
            if tok.value.startswith(("int", "uint", "float", "bool", "bfloat")):
                return TensorType((), self.dtype(tok))
            self.error(tok, f"unknown type `{tok.value}` (Kiln's IR has no type variables or "
                            "algebraic data types)")
        self.error(tok, f"expected a type, found {tok.describe()}")

    def parse_known_type(self) -> Type:
        tok = self.peek()
        ty = self.parse_type()
        if ty is None:
            self.error(tok, "incomplete types (`_`) are only allowed as annotations of variables")
        return ty

    def dtype(self, tok: Token) -> str:
        try:
            # TVM reads a bare kind as its 32-bit type (String2DLDataType: "int" is int32)
            return as_dtype(_BARE_DTYPES.get(tok.value, tok.value))
        except (KeyError, ValueError, TypeError):
            self.error(tok, f"unknown dtype `{tok.value}`")

    def parse_shape(self) -> tuple[int, ...]:
        self.expect("(", "`(` opening a shape")
        dims: list[int] = []
        while not self.accept(")"):
            tok = self.peek()
            if tok.kind == "int":
                self.next()
                dims.append(int(tok.value[0]))
            elif tok.kind == "?":
                self.error(tok, "dynamic dimensions (`?`) are not supported: Kiln's shapes are "
                                "static")
            elif tok.kind == "meta":
                self.error(tok, f"symbolic dimension {tok.describe()} is not supported: Kiln's "
                                "shapes are static")
            else:
                self.error(tok, f"expected a dimension (an integer), found {tok.describe()}")
            if not self.accept(","):
                self.expect(")", "`,` or `)` in a shape")
                break
        return tuple(dims)


def parse(source: str, source_name: str = "from_string", init_module: IRModule | None = None,
          init_meta_table: Mapping[str, Any] | None = None) -> IRModule:
    """Parse a module in relay's text format and type-check it (TVM's ``tvm.relay.parse``).

    Parameters
    ----------
    source : str
        The text, starting with ``#[version = "0.0.5"]``.
    source_name : str
        Name used in error messages.
    init_module : IRModule, optional
        Functions to start from (a copy gets the parsed definitions; it is not changed).
    init_meta_table : dict, optional
        Extra metadata entries (type key -> list of nodes), appended after the text's own.

    Returns
    -------
    IRModule
        The type-checked module.

    Examples
    --------
    >>> mod = parse('#[version = "0.0.5"]\\ndef @main(%x: float32) { %x }')  # doctest: +SKIP
    """
    from kiln.transform.infer_type import infer_type

    mod = _Parser(source, source_name, init_meta_table).parse_module(init_module)
    return infer_type(mod)


def parse_expr(source: str) -> Expr:
    """Parse one expression in relay's text format (TVM's ``tvm.relay.parse_expr``).

    The version header is optional; free variables must be declared with ``free_var``. The
    result is not type-checked.

    Parameters
    ----------
    source : str
        The text.

    Returns
    -------
    Expr
        The expression.
    """
    parser = _Parser(source, "string")
    parser.parse_version(required=False)
    parser.scopes.append({})
    expr = parser.parse_expr()
    parser.expect("eof", "the end of the input")
    return expr


def fromtext(source: str, source_name: str = "from_string") -> IRModule:
    """TVM's ``tvm.relay.fromtext``: :func:`parse` of a module."""
    return parse(source, source_name)


def AnnotateSpans() -> Pass:
    """TVM's ``relay.transform.AnnotateSpans``: print the module (with its metadata section) and
    parse it back as ``GeneratedSource``, so that every call carries a span of that text.

    Returns
    -------
    Pass
        The module pass.
    """

    def run(mod: IRModule, ctx: PassContext) -> IRModule:
        from kiln.ir.printer import astext

        return parse(astext(mod, show_meta_data=True), "GeneratedSource")

    return ModulePass(run, PassInfo(0, "AnnotateSpans"))
