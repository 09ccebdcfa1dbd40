"""HLO text frontend: turns an XLA HLO module (JAX, XLA pass dumps, compiled modules, torch-xla)
into Scalify's graph IR.

Parsing is one LALR pass (grammar `hlo.lark`) whose inline transformer builds light records
(`hlo_syntax.py`, with the syntax errors); the attribute values are kept as raw text and
only the handful Scalify needs are interpreted (`hlo_attributes.py`). Lowering, here, walks
the ENTRY computation once, inlining `call`/`fusion` bodies, resolving tuples, dropping
sharding/layout-only instructions, mapping opcodes to the canonical vocabulary of
`scalify.ir`, and finally pruning what the outputs do not reach. Every pass is linear."""

from __future__ import annotations

import gc
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

from lark import Token
from lark.exceptions import UnexpectedInput

from scalify.errors import ScalifyError, line_of
from scalify.frontends.common import prune_and_renumber
from scalify.frontends.frames import pick_location
from scalify.frontends.hlo_attributes import (
    _GATHER_FIELDS,
    _SCATTER_FIELDS,
    _check_batching,
    _frontend_attr,
    _gather_form,
    _groups,
    _hlo_sharding,
    _ints,
    _is_identity,
    _leaves,
    _literal,
    _mesh_hint,
    _metadata,
    _pairs,
    _rows_added_form,
    _sdy_shardings,
    _slice,
    _stack_in_source_file,
    _unit_windows_as_batch,
    _unquote,
    _vector_dim,
)
from scalify.frontends.hlo_syntax import (
    MAX_UNROLLED_INSTRUCTIONS,
    _Array,
    _BadToken,
    _Comp,
    _Instr,
    _int_value,
    _Module,
    _parser,
    _Raw,
    _Shape,
    _strip_pct,
    _syntax_error,
    _window_field,
    blank_comments,
)
from scalify.ir import Graph, Node, SourceLoc, TileSharding
from scalify.ops import PLAIN_ELEMENTWISE
from scalify.ops.one_hot_forms import rows_added

__all__ = ["load_hlo", "parse_hlo"]


# --------------------------------------------------------------------------------------------
# Lowering

# HLO opcodes whose canonical op has another name; an opcode that is already the name of a
# canonical elementwise op without attributes (`log`, `tanh`, `select`, ...) maps to itself.
_RENAMED_ELEMENTWISE = {
    "subtract": "sub",
    "multiply": "mul",
    "divide": "div",
    "maximum": "max",
    "minimum": "min",
    "power": "pow",
    "negate": "neg",
    "exponential": "exp",
    "remainder": "rem",
    "cosine": "cos",
    "sine": "sin",
    "exponential-minus-one": "exponential_minus_one",
    "log-plus-one": "log_plus_one",
}

_REDUCERS = {
    "add": "sum",
    "multiply": "prod",
    "maximum": "max",
    "minimum": "min",
    "and": "and",
    "or": "or",
}
_IDENTITY_TARGETS = frozenset(
    {
        "Sharding",
        "SPMDFullToShardShape",
        "SPMDShardToFullShape",
        "xla.sdy.FuncResultSharding",
        "xla.sdy.LocalToGlobalShape",
    }
)
_IDENTITY_OPS = frozenset(
    {
        "copy",
        "opt-barrier",
        "domain",
        "all-reduce-done",
        "all-gather-done",
        "collective-permute-done",
        "copy-done",
        "async-update",
        "async-done",
    }
)
_COLLECTIVES = {
    "all-reduce": "all_reduce",
    "all-reduce-start": "all_reduce",
    "all-gather": "all_gather",
    "all-gather-start": "all_gather",
    "reduce-scatter": "reduce_scatter",
    "all-to-all": "all_to_all",
    "collective-permute": "collective_permute",
    "collective-permute-start": "collective_permute",
}
_PLAIN_NAME_RE = re.compile(r"[A-Za-z_]\w*")
_NAME_SUFFIX_RE = re.compile(r"\.\d+$")

# A lowered value: a node id, or a tuple of values for tuple-shaped instructions.
_Value = Any


def _tiling(
    global_dims: tuple[int, ...], local_dims: tuple[int, ...], axes_per_value: list, j: int
) -> TileSharding:
    """The tiling of the j-th value cut from `global_dims` into `local_dims` pieces (blocks
    per dim), over the mesh axes Shardy names for it when they are one per dim."""
    tiles = tuple(
        whole // part if part > 0 else 1
        for whole, part in zip(global_dims, local_dims, strict=True)
    )
    axes = axes_per_value[j] if j < len(axes_per_value) else None
    if axes is not None and len(axes) != len(tiles):
        axes = None
    return TileSharding(tiles=tiles, axes=axes, replicated=all(t == 1 for t in tiles))


class _Lowering:
    """Walks the ENTRY computation and emits IR nodes (ids in creation = topological order)."""

    def __init__(self, module: _Module, text: str, path: str) -> None:
        self.module = module
        self.text = text
        self.path = path
        self.nodes: list[Node] = []
        self.comps: dict[str, _Comp] = {}
        self.entry_params: dict[int, tuple[int, tuple[int, ...]]] = {}  # node -> (index, path)
        self.input_shardings: dict[int, TileSharding] = {}
        self.value_shardings: dict[int, TileSharding] = {}  # from xla.sdy.out_shardings
        self.local_params: dict[tuple[int, tuple[int, ...]], int] = {}
        self.active: set[str] = set()
        self.meta_cache: dict[str, tuple[SourceLoc | None, str, dict[str, str]]] = {}
        self.frame_cache: dict[int, SourceLoc | None] = {}
        # (instruction, source location, framework op) of the instruction being lowered
        self.at: tuple[_Instr, SourceLoc | None, str] | Any = None
        self._read_tables()

    # ---- errors and raw text

    def error(self, message: str, token: Token | None) -> ScalifyError:
        line = token.line if token is not None and token.line else 0
        column = token.column if token is not None and token.column else 0
        return ScalifyError(message, self.path, line, column, line_of(self.text, line))

    def operand_error(self, ins: _Instr, name: str) -> ScalifyError:
        """An undefined operand, pointed at where it is written in the operand list."""
        start, end = ins.args_span
        pos = self.text.find(name, start, end)
        if pos < 0:
            return self.error(f"operand '{name}' names no instruction", ins.token)
        line = self.text.count("\n", 0, pos) + 1
        column = pos - self.text.rfind("\n", 0, pos)
        return ScalifyError(
            f"operand '{name}' names no instruction in this computation",
            self.path,
            line,
            column,
            line_of(self.text, line),
        )

    def raw(self, value: _Raw) -> str:
        return str(value) if isinstance(value, str) else self.text[value[0] : value[1]]

    def attr(self, ins: _Instr, key: str) -> str | None:
        value = ins.attrs.get(key)
        return None if value is None else self.raw(value)

    # ---- debug-info tables and source locations

    def _read_tables(self) -> None:
        tables = self.module.tables
        self.file_names = {k: _unquote(self.raw(v)) for k, v in tables.get("FileNames", [])}
        self.function_names = {k: _unquote(self.raw(v)) for k, v in tables.get("FunctionNames", [])}
        self.file_locations: dict[int, dict[str, int]] = {}
        for k, v in tables.get("FileLocations", []):
            self.file_locations[k] = {
                key: int(val) for key, val in re.findall(r"(\w+)=(-?\d+)", self.raw(v))
            }
        self.frames: dict[int, tuple[int, int]] = {}
        for k, v in tables.get("StackFrames", []):
            fields = {key: int(val) for key, val in re.findall(r"(\w+)=(-?\d+)", self.raw(v))}
            self.frames[k] = (fields.get("file_location_id", 0), fields.get("parent_frame_id", 0))

    def _frame_loc(self, frame_id: int) -> SourceLoc | None:
        """The innermost non-library frame of a stack (else the innermost).

        Frames are numbered from 1 as printed. The printed `parent_frame_id` is one more than
        the parent's frame number, 1 meaning "no parent": in real dumps the outermost frame
        (`<module>`) prints `parent_frame_id=1`, and e.g. a frame for `x @ w1` inside `mlp`
        prints `parent_frame_id=2`, whose parent is frame 1 (the `<module>` call site). So the
        parent is `parent_frame_id - 1`, and 0 ends the chain.
        """
        if frame_id in self.frame_cache:
            return self.frame_cache[frame_id]
        chain: list[SourceLoc] = []
        seen: set[int] = set()
        current = frame_id
        while current in self.frames and current not in seen:
            seen.add(current)
            location_id, parent = self.frames[current]
            loc = self._location(location_id)
            if loc is not None:
                chain.append(loc)
            current = parent - 1
        result = pick_location(chain)
        self.frame_cache[frame_id] = result
        return result

    def _location(self, location_id: int) -> SourceLoc | None:
        fields = self.file_locations.get(location_id)
        if fields is None:
            return None
        file = self.file_names.get(fields.get("file_name_id", 0), "")
        function = self.function_names.get(fields.get("function_name_id", 0), "")
        return SourceLoc(file, fields.get("line", 0), function)

    def meta(self, ins: _Instr) -> tuple[SourceLoc | None, str, dict[str, str]]:
        """(loc, framework op, metadata fields) of an instruction, cached on the raw text."""
        value = ins.attrs.get("metadata")
        if value is None:
            return None, "", {}
        raw = self.raw(value)
        cached = self.meta_cache.get(raw)
        if cached is not None:
            return cached
        fields = _metadata(raw)
        loc: SourceLoc | None = None
        frame = fields.get("stack_frame_id")
        if frame is not None and frame.isdigit():
            loc = self._frame_loc(int(frame))
        if loc is None and "source_file" in fields:
            loc = _stack_in_source_file(fields["source_file"])
        if loc is None and "source_file" in fields:
            line = fields.get("source_line", "0")
            loc = SourceLoc(fields["source_file"], int(line) if line.isdigit() else 0)
        result = (loc, fields.get("op_name") or fields.get("op_type", ""), fields)
        self.meta_cache[raw] = result
        return result

    # ---- module structure

    def index(self) -> _Comp:
        """Index computations and instructions, check every reference, return the ENTRY."""
        entry: _Comp | None = None
        for comp in self.module.comps:
            if comp.name in self.comps:
                raise self.error(f"computation '{comp.name}' is defined twice", comp.token)
            self.comps[comp.name] = comp
            if comp.entry:
                if entry is not None:
                    raise self.error("a second ENTRY computation", comp.token)
                entry = comp
            self._index_computation(comp)
        if entry is None:
            first = self.module.comps[0].token if self.module.comps else None
            line = first.line if first is not None else 1
            raise ScalifyError(
                "no ENTRY computation in the HLO module",
                self.path,
                line,
                0,
                line_of(self.text, line),
            )
        return entry

    def _index_computation(self, comp: _Comp) -> None:
        if not comp.instrs:
            raise self.error(f"computation '{comp.name}' has no instructions", comp.token)
        by_name = comp.by_name = {}
        for ins in comp.instrs:
            if ins.name in by_name:
                raise self.error(f"instruction '{ins.name}' is defined twice", ins.token)
            by_name[ins.name] = ins
            if ins.root:
                comp.root = ins
        if comp.root is None:
            comp.root = comp.instrs[-1]
        self._check_parameter_numbers(comp)
        in_order = True
        seen: set[str] = set()
        for ins in comp.instrs:
            for name in ins.operands:
                if name not in by_name:
                    raise self.operand_error(ins, name)
                if name not in seen:
                    in_order = False
            seen.add(ins.name)
        if not in_order:
            comp.order = self._topological(comp)

    def _check_parameter_numbers(self, comp: _Comp) -> None:
        """A computation's parameters are numbered 0..n-1, each once: two with one number
        would be read as two inputs, and a gap leaves an operand no name."""
        first: dict[int, _Instr] = {}
        for ins in comp.instrs:
            if ins.opcode != "parameter":
                continue
            numbers = _ints(self.raw_args(ins))
            if len(numbers) != 1 or numbers[0] < 0:
                raise self.error("parameter() needs one parameter number", ins.token)
            if numbers[0] in first:
                raise self.error(
                    f"parameter({numbers[0]}) is declared twice in computation '{comp.name}' "
                    f"(first as '{first[numbers[0]].name}')",
                    ins.token,
                )
            first[numbers[0]] = ins
        missing = sorted(set(range(len(first))) - set(first))
        if missing:
            last = first[max(first)]
            raise self.error(
                f"computation '{comp.name}' has {len(first)} parameters but no "
                f"parameter({missing[0]}): they must be numbered 0 to {len(first) - 1}",
                last.token,
            )

    def _topological(self, comp: _Comp) -> list[_Instr]:
        """Definition order for a computation written with forward references."""
        order: list[_Instr] = []
        state: dict[str, int] = {}  # 1 = on stack, 2 = done
        for start in comp.instrs:
            if state.get(start.name):
                continue
            stack = [(start, 0)]
            state[start.name] = 1
            while stack:
                ins, i = stack.pop()
                if i < len(ins.operands):
                    stack.append((ins, i + 1))
                    dep = comp.by_name[ins.operands[i]]
                    mark = state.get(dep.name)
                    if mark == 1:
                        raise self.error(f"instruction '{dep.name}' depends on itself", dep.token)
                    if not mark:
                        state[dep.name] = 1
                        stack.append((dep, 0))
                else:
                    state[ins.name] = 2
                    order.append(ins)
        return order

    def conditional(self, ins: _Instr, vals: list[_Value], shape: _Array) -> _Value:
        """HLO `conditional` with one array result: every branch lowered on its operand, and
        the result picked by the predicate (`true_computation`/`false_computation`) or the
        branch index (`branch_computations`; an index out of range picks the last branch).
        Branches are pure, so this is exact; where the index folds to a literal (JAX's
        `lax.cond` on a configuration value), literal folding keeps the branch taken."""
        if any(not isinstance(v, int) for v in vals):
            return self.opaque(vals)
        index, operands = vals[0], vals[1:]
        if self.attr(ins, "branch_computations") is not None:
            names = (self.attr(ins, "branch_computations") or "").strip().strip("{}").split(",")
            branches = [self.comps.get(_strip_pct(n.strip())) for n in names]
        else:
            names = ["true_computation", "false_computation"]
            branches = [self.called(ins, key) for key in names]
        missing = [n.strip() for n, b in zip(names, branches, strict=True) if b is None]
        if missing:
            raise self.error(f"conditional: {missing[0]} names no computation", ins.token)
        if len(branches) != len(operands):
            raise self.error("conditional: one operand per branch computation expected", ins.token)
        results = [
            self.evaluate(b, [o], self.at[1]) for b, o in zip(branches, operands, strict=True)
        ]
        if any(not isinstance(r, int) for r in results):
            return self.opaque(vals)
        predicate = self.nodes[index]
        picked = results[-1]
        for k in range(len(results) - 2, -1, -1):
            if predicate.dtype == "pred":
                chosen = index  # true_computation is branch 0
            else:
                scalar = _Array(predicate.dtype, ())
                k_id = self.new("constant", (), scalar, {"value": str(k)})
                eq = {"direction": "EQ"}
                chosen = self.new("compare", (index, k_id), _Array("pred", ()), eq)
            if shape.dims:
                spread = _Array("pred", shape.dims)
                chosen = self.new("broadcast", (chosen,), spread, {"dims": ()})
            picked = self.new("select", (chosen, results[k], picked), shape, {})
        return picked

    def called(self, ins: _Instr, key: str) -> _Comp:
        raw = self.attr(ins, key)
        if raw is None:
            raise self.error(f"{ins.opcode} '{ins.name}' has no {key}=", ins.token)
        name = _strip_pct(raw.strip().strip("{}").split(",")[0].strip())
        comp = self.comps.get(name)
        if comp is None:
            raise self.error(f"{key}={raw} names no computation", ins.token)
        return comp

    # ---- node creation

    def new(self, op: str, operands: tuple[int, ...], arr: _Array, attrs: dict[str, Any]) -> int:
        """A node of the instruction being lowered (`self.at`): its name, location and op."""
        ins, loc, fop = self.at
        node_id = len(self.nodes)
        self.nodes.append(
            Node(node_id, op, operands, arr.dims, arr.dtype, attrs, loc, ins.name, fop)
        )
        return node_id

    def opaque(self, vals: list[_Value], extra: dict[str, Any] | None = None) -> _Value:
        """An instruction Scalify does not interpret: operands kept, one node per result leaf."""
        ins = self.at[0]
        operands: list[int] = []
        for v in vals:
            operands.extend(_leaves(v, int))
        attrs: dict[str, Any] = {"hlo_op": ins.opcode}
        if extra:
            attrs.update(extra)

        def build(shape: _Shape, path: tuple[int, ...]) -> _Value:
            if isinstance(shape, _Array):
                leaf_attrs = dict(attrs, tuple_index=path) if path else dict(attrs)
                return self.new("opaque", tuple(operands), shape, leaf_attrs)
            return tuple(build(s, path + (i,)) for i, s in enumerate(shape))

        return build(ins.shape, ())

    # ---- evaluation

    def run(self) -> Graph:
        entry = self.index()
        self.entry_names = self._entry_parameter_names(entry)
        root_value = self.evaluate(entry, None, None)
        outputs = _leaves(root_value, int)
        output_shardings = self._output_shardings(entry, root_value, outputs)
        return self._finish(outputs, output_shardings)

    def evaluate(
        self, comp: _Comp, args: list[_Value] | None, inherited: SourceLoc | None
    ) -> _Value:
        """Lower a computation; `args` binds its parameters (None for the ENTRY)."""
        if comp.name in self.active:
            raise self.error(f"computation '{comp.name}' calls itself", comp.token)
        self.active.add(comp.name)
        outer = self.at  # the instruction that calls `comp`, lowered on after it
        env: dict[str, _Value] = {}
        for ins in comp.order:
            try:
                env[ins.name] = self.lower(ins, env, args, inherited)
            except ScalifyError:
                raise
            except (ValueError, IndexError, KeyError, TypeError, ZeroDivisionError) as exc:
                raise self.error(
                    f"cannot read {ins.opcode} '{ins.name}': {exc}", ins.token
                ) from None
        self.active.discard(comp.name)
        self.at = outer
        assert comp.root is not None
        return env[comp.root.name]

    def lower(
        self,
        ins: _Instr,
        env: dict[str, _Value],
        args: list[_Value] | None,
        inherited: SourceLoc | None,
    ) -> _Value:
        opcode = ins.opcode
        vals = [env[name] for name in ins.operands]
        loc, fop, fields = self.meta(ins)
        if loc is None:
            loc = inherited
        self.at = (ins, loc, fop)
        shape = ins.shape

        if opcode == "parameter":
            (number,) = _ints(self.raw_args(ins))  # checked when the computation was indexed
            if args is None:
                return self.entry_parameter(ins, number)
            if number >= len(args):
                raise self.error(f"parameter({number}) but only {len(args)} operands", ins.token)
            return args[number]
        if opcode == "tuple":
            return tuple(vals)
        if opcode == "get-tuple-element":
            index = _ints(self.attr(ins, "index") or "")[0]
            value = vals[0]
            if isinstance(value, int):
                raise self.error("get-tuple-element of a value that is not a tuple", ins.token)
            return value[index]
        if opcode in ("call", "fusion", "async-start"):
            callee = self.called(ins, "to_apply" if opcode == "call" else "calls")
            return self.evaluate(callee, vals, loc)
        if opcode in _IDENTITY_OPS or opcode in ("copy-start",):
            return vals[0] if len(vals) == 1 else tuple(vals)
        if opcode == "bitcast" and isinstance(shape, _Array) and isinstance(vals[0], int):
            src = self.nodes[vals[0]]
            if src.dtype == shape.dtype:
                if src.shape == shape.dims:
                    return vals[0]
                return self.new("reshape", (vals[0],), shape, {})
            return self.opaque(vals)
        if opcode == "custom-call":
            return self.custom_call(ins, vals)
        if opcode == "while" and len(vals) == 1:
            return self.while_loop(ins, vals[0])
        if opcode == "conditional" and isinstance(shape, _Array):
            return self.conditional(ins, vals, shape)
        if any(not isinstance(v, int) for v in vals):
            return self.opaque(vals)
        if opcode in _COLLECTIVES:
            return self.collective(ins, vals)
        if opcode == "gather" and len(vals) == 2 and isinstance(shape, _Array):
            return self.gather(ins, vals, shape)
        if opcode == "scatter" and len(vals) == 3 and isinstance(shape, _Array):
            return self.scatter(ins, vals, shape)
        if opcode == "topk" and len(_leaves(shape, _Array)) == 2 and len(vals) == 1:
            return self.top_k(ins, vals[0])
        if opcode == "sort" and (descending := self.sort_direction(ins)) is not None:
            return self.sort(ins, vals, descending)
        if not isinstance(shape, _Array):
            return self.opaque(vals)
        operands = tuple(vals)

        canonical = _RENAMED_ELEMENTWISE.get(opcode)
        if canonical is None and opcode in PLAIN_ELEMENTWISE:
            canonical = opcode
        if canonical is not None:
            return self.new(canonical, operands, shape, {})
        attrs: dict[str, Any]
        if opcode == "convert":
            attrs = {"dtype": shape.dtype}
        elif opcode == "compare":
            attrs = {"direction": (self.attr(ins, "direction") or "").strip()}
        elif opcode == "dot":
            attrs = {
                key: _ints(self.attr(ins, f"{key}_dims") or "")
                for key in ("lhs_contracting", "rhs_contracting", "lhs_batch", "rhs_batch")
            }
        elif opcode == "reduce":
            return self.reduce(ins, vals)
        elif opcode == "reduce-window":
            return self.prefix_sum(ins, vals)
        elif opcode == "broadcast":
            attrs = {"dims": _ints(self.attr(ins, "dimensions") or "")}
        elif opcode == "reshape":
            attrs = {}
        elif opcode == "transpose":
            attrs = {"perm": _ints(self.attr(ins, "dimensions") or "")}
        elif opcode == "slice":
            starts, limits, strides = _slice(self.attr(ins, "slice") or "")
            attrs = {"starts": starts, "limits": limits, "strides": strides}
        elif opcode == "dynamic-slice":
            opcode = "dynamic_slice"
            attrs = {"sizes": _ints(self.attr(ins, "dynamic_slice_sizes") or "")}
        elif opcode == "dynamic-update-slice":
            opcode = "dynamic_update_slice"
            attrs = {}
        elif opcode == "concatenate":
            attrs = {"dim": _ints(self.attr(ins, "dimensions") or "")[0]}
        elif opcode == "pad":
            attrs = {"padding": (self.attr(ins, "padding") or "").strip()}
        elif opcode == "iota":
            attrs = {"dim": _ints(self.attr(ins, "iota_dimension") or "0")[0]}
        elif opcode == "constant":
            attrs = {"value": _literal(self.raw_args(ins))}
        elif opcode in ("partition-id", "replica-id"):
            return self.new("rank_index", operands, shape, {"kind": opcode[:-3]})
        else:
            return self.opaque(vals)
        return self.new(opcode, operands, shape, attrs)

    def while_loop(self, ins: _Instr, init: _Value) -> _Value:
        """A loop with a static trip count (a counter from a constant, +1 per iteration, while
        below a constant: what `lax.scan`, `fori_loop` and torch-xla's loops lower to) is
        unrolled: its body is lowered once per iteration, so the layers of a scanned stack
        become ordinary segments that partitioning proves once each and memoisation shares.
        Any other loop stays opaque."""
        cond, body = self.called(ins, "condition"), self.called(ins, "body")
        trip = self.trip_count(cond, body, init)
        if trip is None or trip * self.lowered_size(body) > MAX_UNROLLED_INSTRUCTIONS:
            return self.opaque([init])
        carried = init
        for _ in range(trip):
            carried = self.evaluate(body, [carried], self.at[1])
        return carried

    def lowered_size(self, comp: _Comp, seen: frozenset[str] = frozenset()) -> int:
        """Instructions that lowering `comp` goes through, the computations it calls (and
        loops it contains, once) included."""
        total = 0
        for ins in comp.order:
            total += 1
            for key in ("to_apply", "calls", "body"):
                if self.attr(ins, key) is None:
                    continue
                callee = self.called(ins, key)  # the same lookup lowering does
                if callee.name not in seen:
                    total += self.lowered_size(callee, seen | {comp.name})
        return total

    def trip_count(self, cond: _Comp, body: _Comp, init: _Value) -> int | None:
        """Iterations of `while (carried[k] < N) { carried[k] += 1; ... }`, or None."""
        root = cond.root
        if root is None or root.opcode != "compare" or self.attr(root, "direction") != "LT":
            return None
        counter, limit = (cond.by_name.get(name) for name in root.operands)
        k = self.tuple_index_of_parameter(counter, cond)
        bound = self.int_constant(limit)
        if k is None or bound is None or isinstance(init, int) or k >= len(init):
            return None
        start_node = self.nodes[init[k]] if isinstance(init[k], int) else None
        start = _int_value(start_node)
        step = body.root
        if start is None or step is None or step.opcode != "tuple" or k >= len(step.operands):
            return None
        update = body.by_name.get(step.operands[k])
        if update is None or update.opcode != "add":
            return None
        parts = [body.by_name.get(name) for name in update.operands]
        if sorted(
            (self.tuple_index_of_parameter(p, body) is not None, self.int_constant(p))
            for p in parts
        ) != [(False, 1), (True, None)] or k not in {
            self.tuple_index_of_parameter(p, body) for p in parts
        }:
            return None
        return max(0, bound - start)

    def tuple_index_of_parameter(self, ins: _Instr | None, comp: _Comp) -> int | None:
        """k when `ins` is get-tuple-element(parameter(0), index=k) of `comp`."""
        if ins is None or ins.opcode != "get-tuple-element" or len(ins.operands) != 1:
            return None
        source = comp.by_name.get(ins.operands[0])
        if source is None or source.opcode != "parameter":
            return None
        index = _ints(self.attr(ins, "index") or "")
        return index[0] if index else None

    def int_constant(self, ins: _Instr | None) -> int | None:
        if ins is None or ins.opcode != "constant":
            return None
        try:
            return int(str(_literal(self.raw_args(ins))))
        except ValueError:
            return None

    def raw_args(self, ins: _Instr) -> str:
        start, end = ins.args_span
        return self.text[start:end]

    def _entry_parameter_names(self, entry: _Comp) -> dict[str, tuple[str, str]]:
        """Instruction name -> (input name, pairing name) for the ENTRY's parameters.

        The input name is the argument's name from the metadata, else the instruction's
        name without the printer's `.N` counter, so `x.1` and `x.3` pair by name across two
        modules. Where that name repeats (XLA's SPMD partitioner calls every parameter
        `param`, `param.1`, ...), the instruction's own name keeps the inputs apart in
        reports and relations files, while they still pair by the repeated name, that is by
        position."""
        chosen: dict[str, str] = {}
        for ins in entry.instrs:
            if ins.opcode == "parameter":
                fields = self.meta(ins)[2]
                op_name = fields.get("op_name", "")
                if op_name and "op_type" not in fields and _PLAIN_NAME_RE.fullmatch(op_name):
                    chosen[ins.name] = op_name
                else:
                    chosen[ins.name] = _NAME_SUFFIX_RE.sub("", ins.name)
        counts = Counter(chosen.values())
        return {ins: (name if counts[name] == 1 else ins, name) for ins, name in chosen.items()}

    def entry_parameter(self, ins: _Instr, number: int) -> _Value:
        name, pairing = self.entry_names[ins.name]
        sharding_raw = self.attr(ins, "sharding")
        shardings = _hlo_sharding(sharding_raw, ins.shape) if sharding_raw else []
        leaf_count = [0]

        def build(shape: _Shape, path: tuple[int, ...]) -> _Value:
            if isinstance(shape, _Array):
                leaf = leaf_count[0]
                leaf_count[0] += 1
                leaf_path = f"[{','.join(map(str, path))}]" if path else ""
                attrs: dict[str, Any] = {"name": name + leaf_path, "index": number}
                if pairing != name:
                    attrs["pairing_name"] = pairing + leaf_path
                if path:
                    attrs["tuple_index"] = path
                node = self.new("parameter", (), shape, attrs)
                self.entry_params[node] = (number, path)
                if leaf < len(shardings) and shardings[leaf] is not None:
                    self.input_shardings[node] = shardings[leaf]
                return node
            return tuple(build(s, path + (i,)) for i, s in enumerate(shape))

        return build(ins.shape, ())

    def reducer(self, ins: _Instr) -> str | None:
        """sum/max/min/prod when `to_apply` is `ROOT = op(param0, param1)`, else None."""
        comp = self.called(ins, "to_apply")
        root = comp.root
        assert root is not None
        op = _REDUCERS.get(root.opcode)
        if op is None or len(root.operands) != 2:
            return None
        params = set(root.operands)
        if len(params) != 2 or any(comp.by_name[p].opcode != "parameter" for p in params):
            return None
        return op

    def top_k(self, ins: _Instr, x: int) -> _Value:
        """HLO `topk`: the k largest (or smallest) entries along the last dim, and their
        indices, as two `top_k` nodes (`part` 0 and 1)."""
        k = _ints(self.attr(ins, "k") or "")
        largest = self.attr(ins, "largest") != "false"
        attrs = {"k": k[0] if k else 0, "largest": largest}
        return tuple(
            self.new("top_k", (x,), leaf, {**attrs, "part": part})
            for part, leaf in enumerate(_leaves(ins.shape, _Array))
        )

    def sort_direction(self, ins: _Instr) -> bool | None:
        """Whether a `sort` is descending, when its comparator orders by the first operand
        alone (`compare(p0, p1)`, LT or GT, as argsort, top-k and sorted routing lower);
        None for any other comparator, which stays opaque."""
        comp = self.called(ins, "to_apply")
        root = comp.root
        if root is None or root.opcode != "compare" or len(root.operands) != 2:
            return None
        direction = (self.attr(root, "direction") or "").strip()
        params = [self.compared_parameter(comp, name) for name in root.operands]
        if direction not in ("LT", "GT") or params != [0, 1]:
            return None
        return direction == "GT"

    def compared_parameter(self, comp: _Comp, name: str) -> int | None:
        """The parameter number a comparator compares, through JAX's canonicalisation of a
        float key for a total order (`select(ne(p, p), nan, select(eq(p, 0), 0, p))`: every
        NaN to one NaN, -0 to 0), which keeps every finite value; None for anything else."""
        chain = []
        ins = comp.by_name.get(name)
        while ins is not None and ins.opcode == "select" and len(ins.operands) == 3:
            chain.append(ins)
            ins = comp.by_name.get(ins.operands[2])
        if ins is None or ins.opcode != "parameter":
            return None
        for select in chain:
            cond, fill = (comp.by_name.get(n) for n in select.operands[:2])
            if cond is None or fill is None or cond.opcode != "compare":
                return None
            test = (self.attr(cond, "direction") or "").strip()
            fill_text = self.raw_args(fill).strip() if fill.opcode == "constant" else None
            others = [comp.by_name.get(n) for n in cond.operands if n != ins.name]
            nan_canon = test == "NE" and not others and fill_text == "nan"
            zero_canon = (
                test == "EQ"
                and len(others) == 1
                and others[0] is not None
                and others[0].opcode == "constant"
                and self.raw_args(others[0]).strip() == fill_text
            )
            if not (nan_canon or zero_canon):
                return None
        (number,) = _ints(self.raw_args(ins)) or [None]
        return number

    def sort(self, ins: _Instr, vals: list[int], descending: bool) -> _Value:
        """HLO `sort` along `dimensions`: one `sort` node per operand (`part`), each reading
        every operand, since all are put in the order of the first."""
        dims = _ints(self.attr(ins, "dimensions") or "")
        leaves = _leaves(ins.shape, _Array)
        if len(dims) != 1 or not 0 <= dims[0] < len(leaves[0].dims):
            raise self.error(
                f"sort '{ins.name}' needs one dimension to sort along, of its "
                f"{len(leaves[0].dims)}; found dimensions={{{','.join(map(str, dims))}}}",
                ins.token,
            )
        attrs = {"dim": dims[0], "descending": descending}
        nodes = tuple(
            self.new("sort", tuple(vals), leaf, {**attrs, "part": part})
            for part, leaf in enumerate(leaves)
        )
        return nodes[0] if isinstance(ins.shape, _Array) else nodes

    def gather(self, ins: _Instr, vals: list[int], shape: _Array) -> _Value:
        """HLO `gather` in the two forms lookups lower to: whole slices of a table along one dim
        (`take`: jnp.take, x[idx], an embedding) and one entry per row along a dim
        (`take_along`: take_along_axis, torch.gather). HLO clamps every index into range, and
        so do both ops. Any other gather is the general `gather`, with HLO's dims."""
        table, index = (self.nodes[v] for v in vals)
        fields = {key: _ints(self.attr(ins, key) or "") for key in _GATHER_FIELDS}
        fields["index_vector_dim"] = (_vector_dim(fields["index_vector_dim"], index.shape),)
        _check_batching(
            fields["operand_batching_dims"],
            fields["start_indices_batching_dims"],
            len(table.shape),
            len(index.shape),
        )
        form = _gather_form(fields, table.shape, index.shape, shape.dims)
        index_shape = index.shape
        if form is None:  # as a gather vmapped over the unit dims: the form the others have
            fields, index_shape = _unit_windows_as_batch(
                fields, table.shape, index.shape, shape.dims
            )
            form = _gather_form(fields, table.shape, index_shape, shape.dims)
        if index_shape != index.shape:  # a unit dim for each new batching dim
            reshaped = _Array(index.dtype, index_shape)
            vals = [vals[0], self.new("reshape", (vals[1],), reshaped, {})]
        if form is None:
            attrs: dict[str, Any] = dict(fields)
            attrs["index_vector_dim"] = fields["index_vector_dim"][0]
            return self.new("gather", tuple(vals), shape, attrs)
        op, dim, batch_shape, perm = form
        index_id = vals[1]
        if batch_shape != index_shape:  # drop the index vector dim (of size 1)
            index_id = self.new("reshape", (index_id,), _Array(index.dtype, batch_shape), {})
        if perm is None:
            return self.new(op, (vals[0], index_id), shape, {"dim": dim})
        canonical = tuple(shape.dims[perm.index(i)] for i in range(len(perm)))
        taken = self.new(op, (vals[0], index_id), _Array(shape.dtype, canonical), {"dim": dim})
        return self.new("transpose", (taken,), shape, {"perm": perm})

    def scatter(self, ins: _Instr, vals: list[int], shape: _Array) -> _Value:
        """HLO `scatter` of one operand: `scatter` with HLO's dims and the combiner (`sum`,
        `max`, `min`, `prod`, or `replace` when it returns the update); others are opaque."""
        op = self.reducer(ins) or ("replace" if self._returns_update(ins) else None)
        if op is None:
            return self.opaque(vals)
        attrs: dict[str, Any] = {key: _ints(self.attr(ins, key) or "") for key in _SCATTER_FIELDS}
        operand, index = (self.nodes[v].shape for v in vals[:2])
        attrs["index_vector_dim"] = _vector_dim(attrs["index_vector_dim"], index)
        _check_batching(
            attrs["input_batching_dims"],
            attrs["scatter_indices_batching_dims"],
            len(operand),
            len(index),
        )
        attrs["op"] = op
        updates = self.nodes[vals[2]].shape
        k = _rows_added_form(attrs, operand, index, updates)
        if op == "sum" and k is not None:
            return self.rows_added(ins, vals, k, shape)
        return self.new("scatter", tuple(vals), shape, attrs)

    def rows_added(self, ins: _Instr, vals: list[int], k: int, shape: _Array) -> _Value:
        """A scatter-add of whole rows (an embedding's gradient, as `jax.grad` of a lookup
        writes it): `x + one_hot(i)^T u`, the one-hot over x's rows contracted with the
        updates over the k index dims. Exact: an index outside the rows, which the scatter
        skips, has an all-zero one-hot row (the FX frontend's `rows_added` is the same)."""
        x, index_id, updates = vals
        index = self.nodes[index_id]
        batch = index.shape[:k]
        if batch != index.shape:  # drop the index vector dim (of size 1)
            batch_arr = _Array(index.dtype, batch)
            index_id = self.new("reshape", (index_id,), batch_arr, {})

        def emit(op: str, operands: tuple[int, ...], dims, dtype: str, attrs) -> int:
            return self.new(op, operands, _Array(dtype, dims), attrs)

        return rows_added(emit, x, index_id, batch, index.dtype, updates, shape.dims, shape.dtype)

    def _returns_update(self, ins: _Instr) -> bool:
        comp = self.called(ins, "to_apply")
        root = comp.root
        return (
            root is not None and root.opcode == "parameter" and _ints(self.raw_args(root)) == (1,)
        )

    def prefix_sum(self, ins: _Instr, vals: list[int]) -> _Value:
        """`reduce-window` as `jnp.cumsum` lowers it (a sum over a window as long as one dim,
        padded before by its length minus one, stride 1) is `cumsum` along that dim; a window
        of one element is a `cumsum` along a dim of size 1; any other window stays opaque."""
        window = self.attr(ins, "window") or ""
        sizes = _window_field(window, "size")
        pads = _window_field(window, "pad")
        strides = _window_field(window, "stride")
        if (
            len(vals) != 2
            or self.reducer(ins) != "sum"
            or not isinstance(ins.shape, _Array)
            or not _is_identity(self.nodes[vals[1]], "sum")
        ):
            return self.opaque(vals)
        dims = ins.shape.dims
        long = [d for d, n in enumerate(sizes) if n != 1]
        flat = all(tuple(p) == (0, 0) for p in pads) and all(n == 1 for n in strides)
        if not long and flat and len(sizes) == len(dims):
            # a window of one element: jnp.cumsum along a dim of size 1 (the other graph may
            # have the whole dim where this one holds a block of one)
            units = [d for d, n in enumerate(dims) if n == 1]
            if not units:
                return vals[0]
            return self.new("cumsum", (vals[0],), ins.shape, {"dim": units[0]})
        if (
            len(sizes) != len(dims)
            or len(long) != 1
            or sizes[long[0]] != dims[long[0]]
            or (strides and any(n != 1 for n in strides))
            or [tuple(p) for p in pads]
            != [(sizes[d] - 1, 0) if d == long[0] else (0, 0) for d in range(len(dims))]
        ):
            return self.opaque(vals)
        return self.new("cumsum", (vals[0],), ins.shape, {"dim": long[0]})

    def reduce(self, ins: _Instr, vals: list[int]) -> _Value:
        op = self.reducer(ins)
        if len(vals) != 2 or op is None or not isinstance(ins.shape, _Array):
            return self.opaque(vals)
        x, init = vals
        operands = (x,) if _is_identity(self.nodes[init], op) else (x, init)
        attrs = {"dims": _ints(self.attr(ins, "dimensions") or ""), "op": op}
        return self.new("reduce", operands, ins.shape, attrs)

    def collective(self, ins: _Instr, vals: list[int]) -> _Value:
        """One canonical node per operand (tuple forms split), sharing the attributes."""
        kind = _COLLECTIVES[ins.opcode]
        shape = ins.shape
        if ins.opcode in ("all-gather-start", "collective-permute-start") and not isinstance(
            shape, _Array
        ):
            shape = shape[1]  # (operands, results[, contexts])
        attrs: dict[str, Any] = {}
        if kind == "collective_permute":
            attrs["pairs"] = _pairs(self.attr(ins, "source_target_pairs") or "{}")
            devices = self._num_partitions()
            if devices and any(not 0 <= d < devices for pair in attrs["pairs"] for d in pair):
                raise self.error(
                    f"collective-permute `{ins.name}` names a device outside the module's "
                    f"{devices} partitions: {attrs['pairs']}",
                    ins.token,
                )
        else:
            attrs["groups"] = _groups(self.attr(ins, "replica_groups") or "{}")
        if kind in ("all_reduce", "reduce_scatter"):
            op = self.reducer(ins)
            if op is None:
                return self.opaque(vals)
            attrs["op"] = op
        if kind in ("all_gather", "reduce_scatter", "all_to_all"):
            dims = _ints(self.attr(ins, "dimensions") or "")
            if not dims:
                return self.opaque(vals)  # e.g. the tuple form of all-to-all
            attrs["dim"] = dims[0]
        if kind == "all_to_all":
            for key, name in (("split_dimension", "split_dim"), ("concat_dimension", "concat_dim")):
                raw = self.attr(ins, key)
                if raw is not None:
                    attrs[name] = _ints(raw)[0]
        if isinstance(shape, _Array):
            if len(vals) != 1:
                return self.opaque(vals)
            return self.new(kind, (vals[0],), shape, attrs)
        if len(shape) != len(vals) or not all(isinstance(s, _Array) for s in shape):
            return self.opaque(vals)
        return tuple(self.new(kind, (v,), s, dict(attrs)) for v, s in zip(vals, shape, strict=True))

    def custom_call(self, ins: _Instr, vals: list[_Value]) -> _Value:
        target = _unquote(self.attr(ins, "custom_call_target") or "")
        if target in _IDENTITY_TARGETS:
            if target == "xla.sdy.LocalToGlobalShape":
                self.record_out_shardings(ins, vals)
            if len(vals) == 1 and isinstance(ins.shape, _Array):
                value = vals[0]
                entering = target == "SPMDFullToShardShape"  # a global value made a device's
                if (
                    entering
                    and isinstance(value, int)
                    and self.nodes[value].shape != ins.shape.dims
                ):
                    raise self.error(
                        f"custom-call `{ins.name}` ({target}) turns "
                        f"{list(self.nodes[value].shape)} into {list(ins.shape.dims)}: the "
                        "edge of a manual (shard_map) region in a program the partitioner "
                        "has not run on, whose shapes inside are a device's; give Scalify "
                        "the partitioned module (XLA's dump after spmd-partitioning)",
                        ins.token,
                    )
                return value
            return tuple(vals)
        if target == "xla.sdy.GlobalToLocalShape":
            return self.global_to_local(ins, vals)
        return self.opaque(vals, {"target": target})

    def _sdy_attr(self, ins: _Instr, key: str) -> list[tuple[tuple[str, ...], ...]]:
        raw = self.attr(ins, "frontend_attributes")
        value = _frontend_attr(raw, key) if raw else None
        return _sdy_shardings(value) if value else []

    def global_to_local(self, ins: _Instr, vals: list[_Value]) -> _Value:
        """shard_map entry: an entry parameter seen through GlobalToLocalShape becomes a
        parameter of the local shape, with its tiling and mesh axes recorded."""
        locals_ = _leaves(ins.shape, _Array)
        axes_per_value = self._sdy_attr(ins, "xla.sdy.in_shardings")
        if len(locals_) != len(vals):
            return self.opaque(vals, {"target": "xla.sdy.GlobalToLocalShape"})
        out: list[int] = []
        for j, (value, local) in enumerate(zip(vals, locals_, strict=True)):
            param = self.nodes[value] if isinstance(value, int) else None
            if (
                param is None
                or value not in self.entry_params
                or len(param.shape) != len(local.dims)
            ):
                # Not an entry parameter: the local slice cannot be named, keep it opaque.
                attrs = {"hlo_op": ins.opcode, "target": "xla.sdy.GlobalToLocalShape"}
                operands = tuple(_leaves(value, int))
                out.append(self.new("opaque", operands, local, attrs))
                continue
            key = (value, local.dims)
            if key in self.local_params:
                out.append(self.local_params[key])
                continue
            node_id = len(self.nodes)
            attrs = dict(param.attrs)
            self.nodes.append(
                replace(param, id=node_id, shape=local.dims, dtype=local.dtype, attrs=attrs)
            )
            self.entry_params[node_id] = self.entry_params[value]
            self.local_params[key] = node_id
            self.input_shardings[node_id] = _tiling(param.shape, local.dims, axes_per_value, j)
            out.append(node_id)
        return out[0] if isinstance(ins.shape, _Array) else tuple(out)

    def record_out_shardings(self, ins: _Instr, vals: list[_Value]) -> None:
        axes_per_value = self._sdy_attr(ins, "xla.sdy.out_shardings")
        globals_ = _leaves(ins.shape, _Array)
        if len(globals_) != len(vals):
            return
        for j, (value, glob) in enumerate(zip(vals, globals_, strict=True)):
            if not isinstance(value, int):
                continue
            local = self.nodes[value].shape
            if len(local) != len(glob.dims):
                continue
            self.value_shardings[value] = _tiling(glob.dims, local, axes_per_value, j)

    def _output_shardings(
        self, entry: _Comp, root_value: _Value, outputs: list[int]
    ) -> dict[int, TileSharding]:
        result: dict[int, TileSharding] = {}
        root = entry.root
        assert root is not None
        raw = self.attr(root, "sharding")
        from_root = _hlo_sharding(raw, root.shape) if raw else []
        for k, node in enumerate(outputs):
            if node in self.value_shardings:
                result[node] = self.value_shardings[node]
            elif k < len(from_root) and from_root[k] is not None and len(from_root) == len(outputs):
                result[node] = from_root[k]  # type: ignore[assignment]
        return result

    def _finish(self, outputs: list[int], output_shardings: dict[int, TileSharding]) -> Graph:
        """Prune what the outputs do not reach and renumber ids densely, keeping order."""
        nodes, remap = prune_and_renumber(self.nodes, outputs)
        params = sorted(
            (self.entry_params[old], remap[old]) for old in self.entry_params if old in remap
        )
        graph = Graph(
            path=self.path,
            nodes=nodes,
            inputs=[new for _, new in params],
            outputs=[remap[o] for o in outputs],
            input_shardings={remap[k]: v for k, v in self.input_shardings.items() if k in remap},
            output_shardings={remap[k]: v for k, v in output_shardings.items()},
            mesh_hint=self._mesh(),
            num_partitions=self._num_partitions(),
            unread_inputs={
                str(self.nodes[old].attrs["name"]): self.nodes[old]
                for old in self.entry_params
                if old not in remap
            },
        )
        return graph

    def _mesh(self) -> dict[str, int]:
        raw = self.module.attrs.get("frontend_attributes")
        if raw is None:
            return {}
        value = _frontend_attr(self.raw(raw), "xla.sdy.meshes")
        return _mesh_hint(value) if value else {}

    def _num_partitions(self) -> int | None:
        raw = self.module.attrs.get("num_partitions")
        if raw is None:
            return None
        digits = self.raw(raw).strip()
        return int(digits) if digits.isdigit() else None


# --------------------------------------------------------------------------------------------
# Public API


def parse_hlo(text: str, path: str) -> Graph:
    """Parse HLO module text into a Graph of its ENTRY computation; `path` labels errors."""
    # Parsing allocates millions of small acyclic objects; cyclic GC passes over them cost
    # about a third of the time on large modules, so it is paused for the duration.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _parse_hlo(text, path)
    finally:
        if gc_was_enabled:
            gc.enable()


def _parse_hlo(text: str, path: str) -> Graph:
    parser = _parser()
    code = text
    try:
        code = blank_comments(text, path)
        if not code.strip():
            raise ScalifyError(
                "expected one of 'HloModule', 'ENTRY', found end of input", path, 1, 1, ""
            )
        try:
            module = parser.parse(code)
        except UnexpectedInput as err:
            raise _syntax_error(parser, err, code, path) from None
        except _BadToken as err:
            tok = err.token
            raise ScalifyError(
                err.message, path, tok.line, tok.column, line_of(code, tok.line)
            ) from None
        return _Lowering(module, code, path).run()
    except ScalifyError as err:
        if code is not text and err.line:  # show the line as written, comments and all
            err.source_line = line_of(text, err.line)
        raise
    except RecursionError:
        raise ScalifyError("HLO module nests calls too deeply", path) from None
    except Exception as exc:  # noqa: BLE001 - the contract: users only ever see ScalifyError
        raise ScalifyError(f"cannot read HLO module ({type(exc).__name__}: {exc})", path) from exc


def load_hlo(path: str | Path) -> Graph:
    """Read an HLO text file (e.g. `jax.jit(f).lower(...).as_text(dialect="hlo")`)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ScalifyError(f"cannot read HLO file: {exc.strerror or exc}", str(p)) from None
    return parse_hlo(text, str(p))
