"""Parallel loops as outlined chunk functions run by the library's thread pool.

A loop marked ``parallel`` (with up to two more parallel loops perfectly nested in it, which are
flattened into one iteration space) becomes a ``static`` function of the chunk range and a call
of the runtime (see :mod:`kiln.codegen.c_runtime`)::

    typedef struct {
      const float* restrict p0;
      float* restrict T_add;
    } k__par0_ctx;

    static void k__par0(void* kiln_ctx, int64_t kiln_begin, int64_t kiln_end) {
      const k__par0_ctx* restrict kiln_c = (const k__par0_ctx*)kiln_ctx;
      const float* restrict p0 = kiln_c->p0;
      float* restrict T_add = kiln_c->T_add;
      for (int32_t i = (int32_t)kiln_begin; i < (int32_t)kiln_end; ++i) {
        ...
      }
    }

    int32_t k(void** args) {
      ...
      {
        k__par0_ctx kiln_ctx0 = {p0, T_add};
        kiln_parallel_for(k__par0, &kiln_ctx0, 4096);
      }
    }

The context struct holds what the body reads from the enclosing function: buffer pointers
(kernel arguments and intermediate buffers allocated outside the loop) and scalar variables
(enclosing loop counters, ``let`` values); constant tables are file-scope arrays and need no
capture. Parallel loops inside the body run serially. A loop whose body touches a register tile
of the enclosing function (vector-typed local variables) cannot be outlined and runs serially
where it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kiln.codegen.c_runtime import PARALLEL_FOR
from kiln.errors import CompileError
from kiln.te.expr import Var
from kiln.te.loop_ir import (
    Allocate,
    Buffer,
    BufferLoad,
    For,
    LetStmt,
    Stmt,
    Store,
    own_exprs,
    walk_stmts,
)
from kiln.te.visit import post_order

if TYPE_CHECKING:
    from kiln.codegen.c_codegen import CCodegen

__all__ = ["MAX_COLLAPSE", "emit_parallel_loop"]

# Perfectly nested parallel loops flattened into one iteration space.
MAX_COLLAPSE = 3


def _free_names(body: Stmt, bound: set[int]) -> tuple[list[Var], list[Buffer]]:
    """Variables and buffers ``body`` uses but does not define (first-use order)."""
    inner_vars = set(bound)
    inner_bufs: set[int] = set()
    for s in walk_stmts(body):
        if isinstance(s, (For, LetStmt)):
            inner_vars.add(id(s.var))
        elif isinstance(s, Allocate):
            inner_bufs.add(id(s.buffer))
    free_vars: dict[int, Var] = {}
    free_bufs: dict[int, Buffer] = {}
    for s in walk_stmts(body):
        if isinstance(s, Store) and id(s.buffer) not in inner_bufs:
            free_bufs.setdefault(id(s.buffer), s.buffer)
        for e in own_exprs(s):
            for n in post_order(e):
                if isinstance(n, Var) and id(n) not in inner_vars:
                    free_vars.setdefault(id(n), n)
                elif isinstance(n, BufferLoad) and id(n.buffer) not in inner_bufs:
                    free_bufs.setdefault(id(n.buffer), n.buffer)
    return list(free_vars.values()), list(free_bufs.values())


def emit_parallel_loop(cg: CCodegen, loop: For) -> bool:
    """Emit ``loop`` (and the parallel loops nested right inside it) as a pool job.

    Parameters
    ----------
    cg : CCodegen
        The generator, positioned where the loop goes.
    loop : For
        A ``parallel`` loop outside any other parallel loop.

    Returns
    -------
    bool
        False, with nothing emitted, when the body touches register-tile variables of the
        enclosing function (the caller then emits a serial loop).
    """
    f = cg.state
    nest = [loop]
    body = loop.body
    while isinstance(body, For) and body.kind == "parallel" and len(nest) < MAX_COLLAPSE:
        nest.append(body)
        body = body.body
    free_vars, free_bufs = _free_names(body, {id(x.var) for x in nest})
    if any(id(b) in f.registers for b in free_bufs):
        return False
    order = {key: k for k, key in enumerate(f.buffer_types)}  # declaration order
    free_bufs.sort(key=lambda b: order.get(id(b), len(order)))
    members: list[tuple[str, str]] = []  # (C declaration type, name)
    for b in free_bufs:
        if b.kind == "const":
            continue  # a file-scope table, redeclared in the chunk function
        ptr = f.buffer_types.get(id(b))
        if ptr is None:
            raise CompileError(f"parallel loop in {f.func_name}: buffer {b.name} is used before "
                               "it is declared")
        members.append((f"{ptr} restrict", b.name))
    for v in free_vars:
        ctype = f.var_types.get(id(v))
        if ctype is None:
            raise CompileError(f"parallel loop in {f.func_name}: variable {v.name} is used "
                               "outside its scope")
        members.append((ctype, cg.var_name(v)))
    fn = f"{f.func_name}__par{f.n_parallel}"
    f.n_parallel += 1
    ctx_type = f"{fn}_ctx"
    total = 1
    for x in nest:
        total *= x.extent

    saved = (f.lines, f.indent, f.in_parallel, f.loop_depth)
    f.lines, f.indent = [], 1
    fields = "".join(f"  {t} {name};\n" for t, name in members) or "  char unused;\n"
    f.lines.append(f"typedef struct {{\n{fields}}} {ctx_type};\n")
    f.lines.append(f"static void {fn}(void* kiln_ctx, int64_t kiln_begin, int64_t kiln_end) {{")
    if members:
        cg.emit(f"const {ctx_type}* restrict kiln_c = (const {ctx_type}*)kiln_ctx;")
    else:
        cg.emit("(void)kiln_ctx;")
    for t, name in members:
        cg.emit(f"{t} {name} = kiln_c->{name};")
    for b in free_bufs:
        if b.kind == "const":
            cg.emit(f"const {cg.c_type_of(b)}* restrict {b.name} = {f.func_name}_{b.name};")
    it = cg.index_type
    if len(nest) == 1:
        name = cg.var_name(loop.var)
        header = f"for ({it} {name} = ({it})kiln_begin; {name} < ({it})kiln_end; ++{name}) {{"
    else:
        header = "for (int64_t kiln_i = kiln_begin; kiln_i < kiln_end; ++kiln_i) {"
    with cg.block(header):
        if len(nest) > 1:
            inner = total
            for k, x in enumerate(nest):
                inner //= x.extent
                value = "kiln_i" if inner == 1 else f"kiln_i / {inner}"
                if k:
                    value = f"({value}) % {x.extent}"
                cg.emit(f"const {it} {cg.var_name(x.var)} = ({it})({value});")
        for x in nest:
            f.var_types[id(x.var)] = it
        f.in_parallel, f.loop_depth = True, f.loop_depth + len(nest)
        f.loops.extend((x.var, x.extent) for x in nest)
        cg.stmt(body)
        del f.loops[len(f.loops) - len(nest):]
    f.lines.append("}")
    f.outlined.append("\n".join(f.lines) + "\n")
    f.lines, f.indent, f.in_parallel, f.loop_depth = saved

    ctx_var = cg.temp_name("kiln_ctx")
    with cg.block("{"):
        values = ", ".join(name for _, name in members) or "0"
        cg.emit(f"{ctx_type} {ctx_var} = {{{values}}};")
        cg.emit(f"{PARALLEL_FOR}({fn}, &{ctx_var}, {total});")
    return True
