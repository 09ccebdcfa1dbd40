"""HLO text frontend: turns an XLA HLO module (JAX, XLA pass dumps, compiled modules, torch-xla)
into Scalify's graph IR.

Parsing is one LALR pass (grammar `hlo.lark`) whose inline transformer builds light records; the
attribute values are kept as raw text and only the handful Scalify needs are interpreted here.
Lowering then walks the ENTRY computation once, inlining `call`/`fusion` bodies, resolving
tuples, dropping sharding/layout-only instructions, mapping opcodes to the canonical vocabulary
of `scalify.ir`, and finally pruning what the outputs do not reach. Every pass is linear.
"""

from __future__ import annotations

import gc
import math
import re
import threading
from pathlib import Path
from typing import Any

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken
from lark.lexer import PatternStr

from scalify.errors import ScalifyError, line_of
from scalify.frames import pick_location
from scalify.frontends.common import prune_and_renumber
from scalify.grammar import grammar_path
from scalify.ir import Graph, Node, SourceLoc, TileSharding
from scalify.one_hot_forms import rows_added

__all__ = ["load_hlo", "parse_hlo"]


# --------------------------------------------------------------------------------------------
# Parse records


class _Array:
    """An array type: dtype and dims (a dynamic `<=N` dim reads as N, `?` as -1)."""

    __slots__ = ("dtype", "dims")

    def __init__(self, dtype: str, dims: tuple[int, ...]) -> None:
        self.dtype = dtype
        self.dims = dims


# A shape is an _Array or a list of shapes (a tuple type).
_Shape = Any
# A raw attribute value: the token text, or a (start, end) span into the module text.
_Raw = Any


class _Instr:
    """One HLO instruction as written; attribute values stay raw until someone needs them."""

    __slots__ = ("name", "shape", "opcode", "operands", "args_span", "attrs", "root", "token")

    def __init__(
        self,
        name: str,
        shape: _Shape,
        opcode: str,
        operands: list[str],
        args_span: tuple[int, int],
        attrs: dict[str, _Raw],
        root: bool,
        token: Token,
    ) -> None:
        self.name = name
        self.shape = shape
        self.opcode = opcode
        self.operands = operands
        self.args_span = args_span
        self.attrs = attrs
        self.root = root
        self.token = token


class _Comp:
    """One computation: its instructions in text order, the root, and a name index."""

    __slots__ = ("name", "entry", "instrs", "token", "root", "order", "by_name")

    def __init__(self, name: str, entry: bool, instrs: list[_Instr], token: Token) -> None:
        self.name = name
        self.entry = entry
        self.instrs = instrs
        self.token = token
        self.root: _Instr | None = None
        self.order: list[_Instr] = instrs
        self.by_name: dict[str, _Instr] = {}


class _Module:
    __slots__ = ("attrs", "tables", "comps")

    def __init__(self) -> None:
        self.attrs: dict[str, _Raw] = {}
        self.tables: dict[str, list[tuple[int, _Raw]]] = {}
        self.comps: list[_Comp] = []


class _BadToken(Exception):
    """A token the grammar accepted but whose content is malformed (raised during parsing)."""

    def __init__(self, token: Token, message: str) -> None:
        super().__init__(message)
        self.token = token
        self.message = message


def _window_field(window: str, name: str) -> list:
    """`size=1x8x1` as [1, 8, 1]; `pad=0_0x7_0x0_0` as [[0, 0], [7, 0], [0, 0]]."""
    match = re.search(rf"\b{name}=([0-9x_-]+)", window)
    if not match:
        return []
    parts = match.group(1).split("x")
    if name == "pad":
        return [[int(v) for v in part.split("_")] for part in parts]
    return [int(v) for v in parts]


def _int_value(node: Node | None) -> int | None:
    """The value of a scalar integer constant node, or None."""
    if node is None or node.op != "constant" or node.shape != ():
        return None
    try:
        return int(str(node.attrs.get("value")))
    except ValueError:
        return None


def _strip_pct(name: str) -> str:
    return name[1:] if name.startswith("%") else name


_SHAPE_CACHE: dict[str, _Array] = {}
_SHAPE_RE = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\]")


def _array_of(token: Token) -> _Array:
    """Parse `f32[8,16]{1,0}` (cached: real modules repeat a few shapes thousands of times)."""
    text = str(token)
    cached = _SHAPE_CACHE.get(text)
    if cached is not None:
        return cached
    m = _SHAPE_RE.match(text)
    assert m is not None  # the SHAPE terminal guarantees it
    dims: list[int] = []
    body = m.group(2).strip()
    if body:
        for part in body.split(","):
            part = part.strip().removeprefix("<=")
            if part == "?":
                dims.append(-1)
            elif part.isdigit():
                dims.append(int(part))
            else:
                raise _BadToken(token, f"bad dimension '{part}' in shape '{text}'")
    arr = _Array(m.group(1), tuple(dims))
    _SHAPE_CACHE[text] = arr
    return arr


_KEY_CACHE: dict[str, str] = {}
_LITERAL_OPCODES = frozenset({"constant", "parameter"})
# A loop whose unrolled body would exceed this many instructions (iterations times the
# body's size, the computations it calls included) stays opaque rather than being unrolled.
MAX_UNROLLED_INSTRUCTIONS = 200_000


def _attr_key(token: Token) -> str:
    """`, lhs_contracting_dims=` -> `lhs_contracting_dims` (few distinct keys: cached)."""
    text = str(token)
    key = _KEY_CACHE.get(text)
    if key is None:
        key = _strip_pct(text.lstrip(",").rstrip("=").strip())
        _KEY_CACHE[text] = key
    return key


def _attrs(c: list[Any], start: int) -> dict[str, _Raw]:
    return {_attr_key(c[i]): c[i + 1] for i in range(start, len(c), 2)}


def _shape_of(item: Any) -> _Shape:
    return _array_of(item) if isinstance(item, Token) else item


class _Kids:
    """Stand-in for the Tree of Lark's helper rules (`x*` repetitions), which their parent
    splices in through `.children`: a plain object skips Tree and position bookkeeping."""

    __slots__ = ("children",)

    def __init__(self, children: list[Any]) -> None:
        self.children = children


class _ToRecords(Transformer):
    """Inline LALR callbacks: build records directly, no parse tree (this is the hot path)."""

    def __default__(self, data: Any, children: list[Any], meta: Any) -> _Kids:
        return _Kids(children)

    def tuple_shape(self, c: list[Any]) -> list[_Shape]:
        return [_shape_of(x) for x in c[1:-1]]

    def group(self, c: list[Any]) -> tuple[int, int]:
        return (c[0].start_pos, c[-1].end_pos)

    def nested(self, c: list[Any]) -> None:
        return None

    def typed_arg(self, c: list[Any]) -> Token | None:
        return c[1] if len(c) > 1 else None

    def name_arg(self, c: list[Any]) -> Token:
        return c[0]

    def literal_arg(self, c: list[Any]) -> None:
        return None

    def args(self, c: list[Any]) -> tuple[list[str], tuple[int, int]]:
        names = [_strip_pct(str(x)) for x in c[1:-1] if x is not None]
        return names, (c[0].end_pos, c[-1].start_pos)

    def instr(self, c: list[Any]) -> _Instr:
        root = c[0].type == "ROOT"
        i = 1 if root else 0
        def_tok = c[i]
        opcode = str(c[i + 2])
        args = c[i + 3]
        if isinstance(args, Token):
            span = (args.start_pos + 1, args.end_pos - 1)
            names = [n.strip() for n in args[1:-1].replace("%", "").split(",")]
            if names == [""]:
                names = []
        else:
            names, span = args
        if opcode in _LITERAL_OPCODES:
            names = []
        name = _strip_pct(def_tok[:-1].rstrip())
        return _Instr(
            name, _shape_of(c[i + 1]), opcode, names, span, _attrs(c, i + 4), root, def_tok
        )

    def computation(self, c: list[Any]) -> _Comp:
        entry = c[0].type == "ENTRY"
        name_tok = c[1] if entry else c[0]
        instrs = [x for x in c if isinstance(x, _Instr)]
        return _Comp(_strip_pct(str(name_tok)), entry, instrs, name_tok)

    def signature(self, c: list[Any]) -> None:
        return None

    def param_decl(self, c: list[Any]) -> None:
        return None

    def table_row(self, c: list[Any]) -> tuple[int, _Raw]:
        return (int(c[0]), c[1])

    def table(self, c: list[Any]) -> tuple[str, list[tuple[int, _Raw]]]:
        return (str(c[0]), c[1:])

    def module_header(self, c: list[Any]) -> dict[str, _Raw]:
        return _attrs(c, 1)

    def start(self, c: list[Any]) -> _Module:
        module = _Module()
        for item in c:
            if isinstance(item, _Comp):
                module.comps.append(item)
            elif isinstance(item, dict):
                module.attrs.update(item)
            elif isinstance(item, tuple):
                module.tables[item[0]] = item[1]
        return module


_PARSER: Lark | None = None
_PARSER_LOCK = threading.Lock()


def _parser() -> Lark:
    """The module-wide parser, built on first use (grammar analysis takes ~0.2 s; lark keeps
    the analysis in a file of the temporary directory, keyed by the grammar, for later
    processes)."""
    global _PARSER
    with _PARSER_LOCK:
        if _PARSER is None:
            _PARSER = Lark(
                grammar_path("hlo.lark").read_text(encoding="utf-8"),
                parser="lalr",
                lexer="contextual",
                propagate_positions=True,
                maybe_placeholders=False,
                transformer=_ToRecords(),
                cache=True,
            )
        return _PARSER


# --------------------------------------------------------------------------------------------
# Syntax errors

_TERMINAL_WORDS = {
    "NAME": "a name",
    "SHAPE": "a shape",
    "NUMBER": "a number",
    "INT": "an integer",
    "STRING": "a string",
    "FLAT": "'{'",
    "INNER": "a value",
    "ATOM": "a value",
    "IOTA": "a device list",
    "DEF": "an instruction 'name ='",
    "ATTR_KEY": "', attribute='",
    "ARGS": "'('",
    "$END": "end of input",
}


def _show(text: str) -> str:
    """A found token for a message: quoted, one line, at most 40 characters."""
    text = text if len(text) <= 40 else text[:40] + "..."
    return repr(text) if not text.isprintable() else f"'{text}'"


def _terminal_word(parser: Lark, name: str) -> str:
    if name in _TERMINAL_WORDS:
        return _TERMINAL_WORDS[name]
    try:
        pattern = parser.get_terminal(name).pattern
    except KeyError:
        return name.lower()
    if isinstance(pattern, PatternStr):
        return f"'{pattern.value}'"
    return name.lower()


def _end_position(text: str) -> tuple[int, int]:
    """Line and column just after the last non-blank character (where truncation shows)."""
    body = text.rstrip()
    if not body:
        return 1, 1
    line = body.count("\n") + 1
    last = body[body.rfind("\n") + 1 :]
    return line, len(last) + 1


def _syntax_error(parser: Lark, err: UnexpectedInput, text: str, path: str) -> ScalifyError:
    if isinstance(err, UnexpectedToken):
        expected = err.expected
        token = err.token
        if token.type == "$END":
            found = "end of input"
            line, column = _end_position(text)
        else:
            found = _show(str(token))
            line, column = token.line, token.column
    elif isinstance(err, UnexpectedCharacters):
        expected = err.allowed or set()
        found = _show(err.char)
        line, column = err.line, err.column
    else:
        assert isinstance(err, UnexpectedEOF)
        expected = set(err.expected)
        found = "end of input"
        line, column = _end_position(text)
    words = sorted({_terminal_word(parser, name) for name in expected})
    message = f"expected one of {', '.join(words)}, found {found}" if words else f"found {found}"
    return ScalifyError(message, path, line, column, line_of(text, line))


# --------------------------------------------------------------------------------------------
# Attribute parsers (small and dedicated, on raw attribute text)

_COMMENT_RE = re.compile(r"/\*.*?\*/")
_INT_RE = re.compile(r"-?\d+")
_IOTA_RE = re.compile(r"\[([\d,\s]*)\]\s*<=\s*\[([\d,\s]*)\](?:\s*T\(([\d,\s]*)\))?")


def _ints(raw: str) -> tuple[int, ...]:
    """`{1,0}` -> (1, 0); `{}` -> (); a bare `3` -> (3,)."""
    return tuple(int(x) for x in _INT_RE.findall(raw))


def _int_list(text: str) -> list[int]:
    return [int(x) for x in _INT_RE.findall(text)]


def _iota_groups(m: re.Match[str]) -> list[list[int]]:
    """Expand an iota device list `[G,S]<=[d0,d1,..]T(p..)`: iota(prod(d)) reshaped to d,
    transposed by p, flattened, then reshaped to [G, S] (only its last dim splits groups)."""
    shape = _int_list(m.group(1))
    dims = _int_list(m.group(2))
    perm = _int_list(m.group(3)) if m.group(3) is not None else list(range(len(dims)))
    flat = _iota_devices(dims, perm)
    if math.prod(shape) != len(flat):
        raise ValueError(f"inconsistent iota device list '{m.group(0)}'")
    width = shape[-1] if shape else 1
    return [flat[i : i + width] for i in range(0, len(flat), width)]


def _iota_devices(dims: list[int], perm: list[int]) -> list[int]:
    """iota(prod(dims)) reshaped to `dims`, transposed by `perm`, flattened."""
    if sorted(perm) != list(range(len(dims))):
        raise ValueError(f"bad transpose {perm} for dims {dims}")
    strides = [math.prod(dims[i + 1 :]) for i in range(len(dims))]
    flat: list[int] = [0]
    for p in perm:
        flat = [base + k * strides[p] for base in flat for k in range(dims[p])]
    return flat


def _groups(raw: str) -> tuple[tuple[int, ...], ...]:
    """Replica groups: `{{0,1},{2,3}}`, `{}` (all devices -> ()), the iota form, or the
    mesh-axes form."""
    raw = _COMMENT_RE.sub("", raw).strip()
    m = _IOTA_RE.fullmatch(raw)
    if m is not None:
        return tuple(tuple(g) for g in _iota_groups(m))
    if raw.startswith("mesh["):
        return _mesh_groups(raw)
    groups = [tuple(_int_list(g)) for g in re.findall(r"\{([^{}]*)\}", raw[1:-1])]
    if all(not g for g in groups):
        return ()
    return tuple(groups)


_MESH_GROUPS_RE = re.compile(
    r"mesh\[([^\[\]]*)\](?:\s*,\s*device_ids=\((.*)\))?\s*\{([^{}]*)\}", re.S
)
_MESH_AXIS_RE = re.compile(r"\s*'?([^'=:(),]+?)'?\s*(?::\((\d+)\)(\d+))?\s*")
_DEVICE_IOTA_RE = re.compile(r"\s*\[([\d,\s]*)\]\s*(?:T\(([\d,\s]*)\))?\s*")


def _mesh_groups(raw: str) -> tuple[tuple[int, ...], ...]:
    """`mesh['x'=2,'y'=4] {'x'}`: devices that agree on every mesh coordinate outside the
    listed axes form a group, ordered by the listed axes (first = most significant). The
    mesh holds iota(n) unless `device_ids=(...)` gives an iota `[dims]T(perm)` or a list.
    A listed sub-axis `'x':(pre)size` is the digit `(i // pre) % size` of coordinate i."""
    m = _MESH_GROUPS_RE.fullmatch(raw)
    if m is None:
        raise ValueError(f"cannot read mesh replica groups '{raw}'")
    names, sizes = [], []
    for part in _split_top(m.group(1)):
        name, _, size = part.rpartition("=")
        names.append(name.strip().strip("'\""))
        sizes.append(int(size))
    total = math.prod(sizes)
    devices = list(range(total))
    if m.group(2) is not None:
        iota = _DEVICE_IOTA_RE.fullmatch(m.group(2))
        if iota is not None:
            dims = _int_list(iota.group(1))
            perm = _int_list(iota.group(2)) if iota.group(2) else list(range(len(dims)))
            devices = _iota_devices(dims, perm)
        else:
            devices = _int_list(m.group(2))
        if len(devices) != total:
            raise ValueError(f"device_ids do not fill the mesh in '{raw}'")
    refs: list[tuple[int, int, int]] = []  # (mesh axis, pre, size)
    for part in _split_top(m.group(3)):
        am = _MESH_AXIS_RE.fullmatch(part)
        if am is None or am.group(1) not in names:
            raise ValueError(f"unknown mesh axis '{part}' in '{raw}'")
        axis = names.index(am.group(1))
        pre, size = (int(am.group(2)), int(am.group(3))) if am.group(2) else (1, sizes[axis])
        refs.append((axis, pre, size))
    strides = [math.prod(sizes[i + 1 :]) for i in range(len(sizes))]
    groups: dict[tuple[int, ...], list[tuple[int, int]]] = {}
    for pos in range(total):
        coords = [(pos // strides[i]) % sizes[i] for i in range(len(sizes))]
        ordinal = 0
        for axis, pre, size in refs:
            ordinal = ordinal * size + (coords[axis] // pre) % size
        rest = list(coords)
        for axis, pre, size in sorted(refs, key=lambda r: -r[1]):
            r = rest[axis]
            rest[axis] = (r // (pre * size)) * pre + r % pre
        groups.setdefault(tuple(rest), []).append((ordinal, devices[pos]))
    return tuple(tuple(d for _, d in sorted(g)) for _, g in sorted(groups.items()))


def _pairs(raw: str) -> tuple[tuple[int, int], ...]:
    """`source_target_pairs={{0,1},{1,2}}` -> ((0, 1), (1, 2))."""
    out = []
    for g in re.findall(r"\{([^{}]*)\}", raw[1:-1] if raw.startswith("{") else raw):
        ints = _int_list(g)
        if len(ints) != 2:
            raise ValueError(f"bad source/target pair '{{{g}}}'")
        out.append((ints[0], ints[1]))
    return tuple(out)


_SLICE_RE = re.compile(r"\[\s*(-?\d+)\s*:\s*(-?\d+)\s*(?::\s*(-?\d+)\s*)?\]")


def _slice(raw: str) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    starts, limits, strides = [], [], []
    for m in _SLICE_RE.finditer(raw):
        starts.append(int(m.group(1)))
        limits.append(int(m.group(2)))
        strides.append(int(m.group(3)) if m.group(3) is not None else 1)
    return tuple(starts), tuple(limits), tuple(strides)


def _unquote(raw: str) -> str:
    """The content of an HLO string literal (C escapes for quotes and backslashes)."""
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == '"' and raw[-1] == '"':
        raw = raw[1:-1]
    return re.sub(r"\\(.)", r"\1", raw)


def _split_top(text: str, sep: str = ",") -> list[str]:
    """Split on `sep` outside brackets, braces, parentheses and strings."""
    parts, depth, start, i, n = [], 0, 0, 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _hlo_sharding(raw: str, shape: _Shape) -> list[TileSharding | None]:
    """An HLO `sharding=` value as one TileSharding (or None) per leaf of `shape`.

    `{devices=[2,1,4]<=[8] last_tile_dim_replicate}` -> tiles (2, 1); `last_tile_dims={..}` drops
    as many trailing dims; `{replicated}` -> all ones. Maximal/manual/unknown give None. A tuple
    sharding lists the leaves' shardings in order.
    """
    leaves = _shape_leaves(shape)
    text = _COMMENT_RE.sub("", raw).strip()
    if text.startswith("{"):
        text = text[1:-1].strip()
    if text.startswith("{"):
        elements = _split_top(text)
        if len(elements) != len(leaves):
            return [None] * len(leaves)
        return [
            _one_sharding(e[1:-1].strip(), leaf) for e, leaf in zip(elements, leaves, strict=True)
        ]
    return [_one_sharding(text, leaf) for leaf in leaves]


def _one_sharding(text: str, leaf: _Array) -> TileSharding | None:
    if text.startswith("replicated"):
        return TileSharding(tiles=(1,) * len(leaf.dims), replicated=True)
    m = re.match(r"devices=\[([\d,\s]*)\]", text)
    if m is None:
        return None
    tiles = _int_list(m.group(1))
    devices = _tile_devices(text[m.end() :], tiles)
    all_tiles = tuple(tiles)
    if "last_tile_dim_replicate" in text:
        tiles = tiles[:-1]
    else:
        sub = re.search(r"last_tile_dims=\{([^{}]*)\}", text)
        if sub is not None:
            tiles = tiles[: len(tiles) - len(_split_top(sub.group(1)))]
    if len(tiles) != len(leaf.dims):
        return None
    return TileSharding(
        tiles=tuple(tiles),
        replicated=all(t == 1 for t in tiles),
        devices=devices,
        device_grid=all_tiles,
    )


def _tile_devices(rest: str, tiles: list[int]) -> tuple[int, ...] | None:
    """The device of each tile, in row-major tile order: `<=[8]`, `<=[2,4]T(1,0)` or an
    explicit list `0,1,2,3`."""
    total = 1
    for t in tiles:
        total *= t
    m = re.match(r"\s*<=\s*\[([\d,\s]*)\](?:\s*T\(([\d,\s]*)\))?", rest)
    if m:
        import numpy as np

        ids = np.arange(total).reshape(_int_list(m.group(1)) or [total])
        if m.group(2):
            ids = ids.transpose(_int_list(m.group(2)))
        return tuple(int(i) for i in ids.reshape(-1))
    m = re.match(r"\s*([\d,\s]+)", rest)
    if m:
        ids = _int_list(m.group(1))
        return tuple(ids) if len(ids) == total else None
    return None


_SDY_DIMS_RE = re.compile(
    r"<\s*(?:@[\w.\-]+|#?sdy\.mesh<[^>]*>|mesh<[^>]*>)\s*,\s*"
    r"\[((?:\s*\{[^{}]*\}(?:p\d+)?\s*,?)*)\]"
)
_SDY_AXIS_RE = re.compile(r'"([^"]*)"((?::\(\d+\)\d+)?)')


def _sdy_shardings(raw: str) -> list[tuple[tuple[str, ...], ...]]:
    """Mesh axes per dim for each value of a Shardy sharding (per-value list or single):
    `#sdy.sharding_per_value<[<@mesh, [{}, {"tp"}]>]>` -> [((), ("tp",))]. Sub-axes keep their
    `:(k)n` suffix in the axis name."""
    text = _unquote(raw)
    out = []
    for m in _SDY_DIMS_RE.finditer(text):
        dims = re.findall(r"\{([^{}]*)\}", m.group(1))
        out.append(tuple(tuple(a + s for a, s in _SDY_AXIS_RE.findall(d)) for d in dims))
    return out


def _mesh_hint(raw: str) -> dict[str, int]:
    """Axis sizes of the first non-empty `#sdy.mesh<[...]>` in `xla.sdy.meshes`."""
    text = _unquote(raw) if raw.lstrip().startswith('"') else raw.replace('\\"', '"')
    for m in re.finditer(r"sdy\.mesh<\[([^\]]*)\]", text):
        axes = re.findall(r'"([^"]+)"\s*=\s*(\d+)', m.group(1))
        if axes:
            return {name: int(size) for name, size in axes}
    return {}


def _frontend_attr(raw: str, key: str) -> str | None:
    """One entry of a `frontend_attributes={k=v,...}` value, raw."""
    text = raw.strip()
    if text.startswith("{"):
        text = text[1:-1]
    for part in _split_top(text):
        name, _, value = part.partition("=")
        if name.strip() == key:
            return value.strip()
    return None


_META_RE = re.compile(r'([\w.\-]+)=("(?:[^"\\]|\\.)*"|[^\s}]+)')


_STACK_FRAME_RE = re.compile(r"""['"]([^'"]+?):(\d+)['"]""")


def _stack_in_source_file(source_file: str) -> SourceLoc | None:
    """The op's place when `source_file` holds the whole Python stack as a quoted list of
    `'file:line'`, outermost first (torch-neuronx writes `<driver>\\n----\\n[...]` there,
    with the driver's line as `source_line` for every op); None for a plain file name."""
    start = source_file.find("[")
    if start < 0 or not source_file.rstrip().endswith("]"):
        return None
    frames = [SourceLoc(f, int(n)) for f, n in _STACK_FRAME_RE.findall(source_file[start:])]
    return pick_location(list(reversed(frames)))


def _metadata(raw: str) -> dict[str, str]:
    return {k: _unquote(v) if v.startswith('"') else v for k, v in _META_RE.findall(raw)}


def _literal(raw: str) -> str:
    """Canonical constant text: whitespace and comments removed, old `f32[2] {..}` prefix
    dropped: `0.5`, `-inf`, `{8}`, `{{1,2},{3,4}}`."""
    text = _COMMENT_RE.sub("", raw).strip()
    m = re.match(r"[a-z][a-z0-9]*\[[^\]]*\](?:\{[^{}\s]*\})?\s+", text)
    if m is not None:
        text = text[m.end() :]
    return re.sub(r"\s+", "", text)


_GATHER_FIELDS = (
    "offset_dims",
    "collapsed_slice_dims",
    "start_index_map",
    "index_vector_dim",
    "slice_sizes",
    "operand_batching_dims",
    "start_indices_batching_dims",
)


_SCATTER_FIELDS = (
    "update_window_dims",
    "inserted_window_dims",
    "scatter_dims_to_operand_dims",
    "index_vector_dim",
    "input_batching_dims",
    "scatter_indices_batching_dims",
)


def _rows_added_form(
    attrs: dict[str, Any],
    operand: tuple[int, ...],
    index: tuple[int, ...],
    updates: tuple[int, ...],
) -> int | None:
    """k when a scatter writes whole rows of its operand (dim 0), one per entry of k index
    dims (the index vector, of one entry, last or absent): the updates are those k dims then
    a whole row. None for any other scatter."""
    vector = attrs["index_vector_dim"]
    k = len(index) - (1 if vector < len(index) else 0)
    if vector < len(index) and (vector != len(index) - 1 or index[vector] != 1):
        return None
    rows = (
        attrs["inserted_window_dims"] == (0,)
        and attrs["scatter_dims_to_operand_dims"] == (0,)
        and not attrs["input_batching_dims"]
        and not attrs["scatter_indices_batching_dims"]
        and attrs["update_window_dims"] == tuple(range(k, k + len(operand) - 1))
        and tuple(updates) == (*index[:k], *operand[1:])
    )
    return k if rows and len(operand) >= 1 else None


def _vector_dim(given: tuple[int, ...], index: tuple[int, ...]) -> int:
    """HLO's index_vector_dim (default: past the last dim), checked against the indices."""
    vector_dim = given[0] if given else len(index)
    if not 0 <= vector_dim <= len(index):
        raise ValueError(
            f"index_vector_dim={vector_dim} is not a dim of the {len(index)}-dim indices "
            f"(expected 0..{len(index)})"
        )
    return vector_dim


def _unit_windows_as_batch(
    f: dict[str, tuple[int, ...]],
    table: tuple[int, ...],
    index: tuple[int, ...],
    out: tuple[int, ...],
) -> tuple[dict[str, tuple[int, ...]], tuple[int, ...]]:
    """The gather with every unit window dim of the table made a batching dim, and the
    indices' shape with the unit dim that pairs with it. JAX writes a dim of size 1 as a
    window (a one-group shard of a vmapped gather) where the whole dim is a batching dim;
    both take the same single entry, and only the batching form is one op with the other."""
    kept = set(f["collapsed_slice_dims"]) | set(f["operand_batching_dims"])
    windows = [d for d in range(len(table)) if d not in kept]
    if len(windows) != len(f["offset_dims"]) or len(out) != len(index) - (
        f["index_vector_dim"][0] < len(index)
    ) + len(windows):
        return f, index
    f = dict(f)
    index_shape = list(index)
    for d in [w for w in windows if table[w] == 1 and f["slice_sizes"][w] == 1]:
        windows = [w for w in range(len(table)) if w not in kept]
        position = f["offset_dims"][windows.index(d)]  # where the unit dim is in the output
        batch_out = [p for p in range(len(out)) if p not in f["offset_dims"]]
        vector = f["index_vector_dim"][0]
        index_dims = [e for e in range(len(index_shape)) if e != vector]
        rank = sum(p < position for p in batch_out)  # its place among the index dims
        new = index_dims[rank] if rank < len(index_dims) else len(index_shape)
        if rank == len(index_dims) and vector < len(index_shape):
            new = vector if vector > (index_dims[-1] if index_dims else -1) else new
        index_shape.insert(new, 1)

        def moved(e: int, new: int = new) -> int:
            return e + (e >= new)

        f["index_vector_dim"] = (moved(vector) if vector < len(index_shape) - 1 else vector + 1,)
        f["start_indices_batching_dims"] = (
            *(moved(e) for e in f["start_indices_batching_dims"]),
            new,
        )
        f["operand_batching_dims"] = (*f["operand_batching_dims"], d)
        f["offset_dims"] = tuple(p for p in f["offset_dims"] if p != position)
        kept.add(d)
    pairs = sorted(zip(f["operand_batching_dims"], f["start_indices_batching_dims"], strict=True))
    f["operand_batching_dims"] = tuple(d for d, _ in pairs)
    f["start_indices_batching_dims"] = tuple(e for _, e in pairs)
    return f, tuple(index_shape)


def _check_batching(
    operand_dims: tuple[int, ...], index_dims: tuple[int, ...], operand_rank: int, index_rank: int
) -> None:
    """Batching dims come in pairs, each a dim of the operand and of the indices."""
    if len(operand_dims) != len(index_dims):
        raise ValueError(
            f"{len(operand_dims)} operand batching dims but {len(index_dims)} indices batching "
            "dims (expected one of each per pair)"
        )
    for dims, rank, what in (
        (operand_dims, operand_rank, "operand"),
        (index_dims, index_rank, "indices"),
    ):
        if any(not 0 <= d < rank for d in dims):
            raise ValueError(
                f"{what} batching dims {list(dims)} are not dims of the {rank}-dim {what} "
                f"(expected 0..{rank - 1})"
            )


def _gather_form(
    f: dict[str, tuple[int, ...]],
    table: tuple[int, ...],
    index: tuple[int, ...],
    out: tuple[int, ...],
) -> tuple[str, int, tuple[int, ...], tuple[int, ...] | None] | None:
    """(op, dim, index shape without its vector dim, transpose to HLO's order or None) of a
    gather that is a `take` or a `take_along`, else None."""
    if len(f["start_index_map"]) != 1 or f["collapsed_slice_dims"] != f["start_index_map"]:
        return None
    (dim,) = f["start_index_map"]
    vector_dim = _vector_dim(f["index_vector_dim"], index)
    if vector_dim == len(index):
        batch_shape = index
    elif vector_dim == len(index) - 1 and index[-1] == 1:
        batch_shape = index[:-1]
    else:
        return None
    others = [e for e in range(len(table)) if e != dim]
    if not f["operand_batching_dims"]:  # take: whole slices
        if f["start_indices_batching_dims"] or list(f["slice_sizes"]) != [
            1 if e == dim else n for e, n in enumerate(table)
        ]:
            return None
        offsets = list(f["offset_dims"])
        if len(offsets) != len(others) or len(out) != len(batch_shape) + len(others):
            return None
        batch_positions = [p for p in range(len(out)) if p not in offsets]
        perm = tuple(
            len(batch_shape) + offsets.index(p) if p in offsets else batch_positions.index(p)
            for p in range(len(out))
        )
        return "take", dim, batch_shape, None if perm == tuple(range(len(out))) else perm
    if (  # take_along: one entry per row, every other dim a batch dim of both
        list(f["operand_batching_dims"]) != others
        or list(f["start_indices_batching_dims"]) != others
        or f["offset_dims"]
        or any(n != 1 for n in f["slice_sizes"])
        or len(batch_shape) != len(table)
        or tuple(out) != tuple(batch_shape)
        or any(batch_shape[e] != table[e] for e in others)
    ):
        return None
    return "take_along", dim, batch_shape, None


def _literal_number(text: str) -> float | None:
    low = text.lower()
    if low == "true":
        return 1.0
    if low == "false":
        return 0.0
    try:
        return float(low)
    except ValueError:
        try:
            return float.fromhex(low)
        except ValueError:
            return None


_FLOAT_MAX = {
    "f16": 65504.0,
    "bf16": 3.3895313892515355e38,
    "f32": 3.4028234663852886e38,
    "f64": 1.7976931348623157e308,
    "f8e4m3fn": 448.0,
    "f8e4m3": 240.0,
    "f8e5m2": 57344.0,
    "f8e4m3fnuz": 240.0,
    "f8e5m2fnuz": 57344.0,
    "f8e4m3b11fnuz": 30.0,
}


def _dtype_range(dtype: str) -> tuple[float, float] | None:
    """(lowest, highest) finite value of a dtype, when known."""
    if dtype in _FLOAT_MAX:
        return -_FLOAT_MAX[dtype], _FLOAT_MAX[dtype]
    if dtype == "pred":
        return 0.0, 1.0
    m = re.fullmatch(r"([su])(\d+)", dtype)
    if m is not None:
        bits = int(m.group(2))
        if m.group(1) == "s":
            return float(-(2 ** (bits - 1))), float(2 ** (bits - 1) - 1)
        return 0.0, float(2**bits - 1)
    return None


def _is_identity(node: Node, op: str) -> bool:
    """Whether `node` is a scalar constant equal to the identity of reducer `op`."""
    if node.op != "constant" or node.shape != ():
        return False
    value = _literal_number(str(node.attrs.get("value", "")))
    if value is None or math.isnan(value):
        return False
    if op == "sum":
        return value == 0
    if op == "prod":
        return value == 1
    if op in ("and", "or"):
        return value == (1 if op == "and" else 0)
    bounds = _dtype_range(node.dtype)
    if op == "max":
        return value == -math.inf or (bounds is not None and _close(value, bounds[0]))
    if op == "min":
        return value == math.inf or (bounds is not None and _close(value, bounds[1]))
    return False


def _close(a: float, b: float) -> bool:
    return a == b or (math.isfinite(a) and math.isclose(a, b, rel_tol=1e-6))


def _shape_leaves(shape: _Shape) -> list[_Array]:
    if isinstance(shape, _Array):
        return [shape]
    out: list[_Array] = []
    for s in shape:
        out.extend(_shape_leaves(s))
    return out


# --------------------------------------------------------------------------------------------
# Lowering

_ELEMENTWISE = {
    "add": "add",
    "subtract": "sub",
    "multiply": "mul",
    "divide": "div",
    "maximum": "max",
    "minimum": "min",
    "power": "pow",
    "negate": "neg",
    "exponential": "exp",
    "log": "log",
    "tanh": "tanh",
    "rsqrt": "rsqrt",
    "sqrt": "sqrt",
    "abs": "abs",
    "erf": "erf",
    "logistic": "logistic",
    "sign": "sign",
    "floor": "floor",
    "ceil": "ceil",
    "not": "not",
    "and": "and",
    "or": "or",
    "xor": "xor",
    "remainder": "rem",
    "cosine": "cos",
    "sine": "sin",
    "exponential-minus-one": "exponential_minus_one",
    "log-plus-one": "log_plus_one",
    "atan2": "atan2",
    "select": "select",
    "clamp": "clamp",
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


def _tiles(global_dims: tuple[int, ...], local_dims: tuple[int, ...]) -> tuple[int, ...]:
    """Blocks per dim of a value cut from `global_dims` into `local_dims` pieces."""
    return tuple(
        whole // part if part > 0 else 1
        for whole, part in zip(global_dims, local_dims, strict=True)
    )


def _value_leaves(value: _Value) -> list[int]:
    if isinstance(value, int):
        return [value]
    out: list[int] = []
    for v in value:
        out.extend(_value_leaves(v))
    return out


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

    def new(
        self,
        op: str,
        operands: tuple[int, ...],
        arr: _Array,
        attrs: dict[str, Any],
        ins: _Instr,
        loc: SourceLoc | None,
        fop: str,
    ) -> int:
        node_id = len(self.nodes)
        self.nodes.append(
            Node(node_id, op, operands, arr.dims, arr.dtype, attrs, loc, ins.name, fop)
        )
        return node_id

    def opaque(
        self,
        ins: _Instr,
        vals: list[_Value],
        loc: SourceLoc | None,
        fop: str,
        extra: dict[str, Any] | None = None,
    ) -> _Value:
        """An instruction Scalify does not interpret: operands kept, one node per result leaf."""
        operands: list[int] = []
        for v in vals:
            operands.extend(_value_leaves(v))
        attrs: dict[str, Any] = {"hlo_op": ins.opcode}
        if extra:
            attrs.update(extra)

        def build(shape: _Shape, path: tuple[int, ...]) -> _Value:
            if isinstance(shape, _Array):
                leaf_attrs = dict(attrs, tuple_index=path) if path else dict(attrs)
                return self.new("opaque", tuple(operands), shape, leaf_attrs, ins, loc, fop)
            return tuple(build(s, path + (i,)) for i, s in enumerate(shape))

        return build(ins.shape, ())

    # ---- evaluation

    def run(self) -> Graph:
        entry = self.index()
        root_value = self.evaluate(entry, None, None)
        outputs = _value_leaves(root_value)
        output_shardings = self._output_shardings(entry, root_value, outputs)
        return self._finish(outputs, output_shardings)

    def evaluate(
        self, comp: _Comp, args: list[_Value] | None, inherited: SourceLoc | None
    ) -> _Value:
        """Lower a computation; `args` binds its parameters (None for the ENTRY)."""
        if comp.name in self.active:
            raise self.error(f"computation '{comp.name}' calls itself", comp.token)
        self.active.add(comp.name)
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
        shape = ins.shape

        if opcode == "parameter":
            (number,) = _ints(self.raw_args(ins))  # checked when the computation was indexed
            if args is None:
                return self.entry_parameter(ins, number, loc, fop, fields)
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
                return self.new("reshape", (vals[0],), shape, {}, ins, loc, fop)
            return self.opaque(ins, vals, loc, fop)
        if opcode == "custom-call":
            return self.custom_call(ins, vals, loc, fop)
        if opcode == "while" and len(vals) == 1:
            return self.while_loop(ins, vals[0], loc, fop)
        if any(not isinstance(v, int) for v in vals):
            return self.opaque(ins, vals, loc, fop)
        if opcode in _COLLECTIVES:
            return self.collective(ins, vals, loc, fop)
        if opcode == "gather" and len(vals) == 2 and isinstance(shape, _Array):
            return self.gather(ins, vals, shape, loc, fop)
        if opcode == "scatter" and len(vals) == 3 and isinstance(shape, _Array):
            return self.scatter(ins, vals, shape, loc, fop)
        if opcode == "topk" and len(_shape_leaves(shape)) == 2 and len(vals) == 1:
            return self.top_k(ins, vals[0], loc, fop)
        if not isinstance(shape, _Array):
            return self.opaque(ins, vals, loc, fop)
        operands = tuple(vals)

        canonical = _ELEMENTWISE.get(opcode)
        if canonical is not None:
            return self.new(canonical, operands, shape, {}, ins, loc, fop)
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
            return self.reduce(ins, vals, loc, fop)
        elif opcode == "reduce-window":
            return self.prefix_sum(ins, vals, loc, fop)
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
            return self.new("rank_index", operands, shape, {"kind": opcode[:-3]}, ins, loc, fop)
        else:
            return self.opaque(ins, vals, loc, fop)
        return self.new(opcode, operands, shape, attrs, ins, loc, fop)

    def while_loop(self, ins: _Instr, init: _Value, loc: SourceLoc | None, fop: str) -> _Value:
        """A loop with a static trip count (a counter from a constant, +1 per iteration, while
        below a constant: what `lax.scan`, `fori_loop` and torch-xla's loops lower to) is
        unrolled: its body is lowered once per iteration, so the layers of a scanned stack
        become ordinary segments that partitioning proves once each and memoisation shares.
        Any other loop stays opaque."""
        cond, body = self.called(ins, "condition"), self.called(ins, "body")
        trip = self.trip_count(cond, body, init)
        if trip is None or trip * self.lowered_size(body) > MAX_UNROLLED_INSTRUCTIONS:
            return self.opaque(ins, [init], loc, fop)
        carried = init
        for _ in range(trip):
            carried = self.evaluate(body, [carried], loc)
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

    def entry_parameter(
        self, ins: _Instr, number: int, loc: SourceLoc | None, fop: str, fields: dict[str, str]
    ) -> _Value:
        op_name = fields.get("op_name", "")
        if op_name and "op_type" not in fields and _PLAIN_NAME_RE.fullmatch(op_name):
            name = op_name
        else:
            name = _NAME_SUFFIX_RE.sub("", ins.name)
        sharding_raw = self.attr(ins, "sharding")
        shardings = _hlo_sharding(sharding_raw, ins.shape) if sharding_raw else []
        leaf_count = [0]

        def build(shape: _Shape, path: tuple[int, ...]) -> _Value:
            if isinstance(shape, _Array):
                leaf = leaf_count[0]
                leaf_count[0] += 1
                attrs: dict[str, Any] = {"name": name, "index": number}
                if path:
                    attrs["name"] = f"{name}[{','.join(map(str, path))}]"
                    attrs["tuple_index"] = path
                node = self.new("parameter", (), shape, attrs, ins, loc, fop)
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

    def top_k(self, ins: _Instr, x: int, loc: SourceLoc | None, fop: str) -> _Value:
        """HLO `topk`: the k largest (or smallest) entries along the last dim, and their
        indices, as two `top_k` nodes (`part` 0 and 1)."""
        k = _ints(self.attr(ins, "k") or "")
        largest = self.attr(ins, "largest") != "false"
        values, indices = _shape_leaves(ins.shape)
        return tuple(
            self.new(
                "top_k",
                (x,),
                leaf,
                {"k": k[0] if k else 0, "largest": largest, "part": part},
                ins,
                loc,
                fop,
            )
            for part, leaf in enumerate((values, indices))
        )

    def gather(
        self, ins: _Instr, vals: list[int], shape: _Array, loc: SourceLoc | None, fop: str
    ) -> _Value:
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
            vals = [vals[0], self.new("reshape", (vals[1],), reshaped, {}, ins, loc, fop)]
        if form is None:
            attrs: dict[str, Any] = dict(fields)
            attrs["index_vector_dim"] = fields["index_vector_dim"][0]
            return self.new("gather", tuple(vals), shape, attrs, ins, loc, fop)
        op, dim, batch_shape, perm = form
        index_id = vals[1]
        if batch_shape != index_shape:  # drop the index vector dim (of size 1)
            index_id = self.new(
                "reshape", (index_id,), _Array(index.dtype, batch_shape), {}, ins, loc, fop
            )
        if perm is None:
            return self.new(op, (vals[0], index_id), shape, {"dim": dim}, ins, loc, fop)
        canonical = tuple(shape.dims[perm.index(i)] for i in range(len(perm)))
        taken = self.new(
            op, (vals[0], index_id), _Array(shape.dtype, canonical), {"dim": dim}, ins, loc, fop
        )
        return self.new("transpose", (taken,), shape, {"perm": perm}, ins, loc, fop)

    def scatter(
        self, ins: _Instr, vals: list[int], shape: _Array, loc: SourceLoc | None, fop: str
    ) -> _Value:
        """HLO `scatter` of one operand: `scatter` with HLO's dims and the combiner (`sum`,
        `max`, `min`, `prod`, or `replace` when it returns the update); others are opaque."""
        op = self.reducer(ins) or ("replace" if self._returns_update(ins) else None)
        if op is None:
            return self.opaque(ins, vals, loc, fop)
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
            return self.rows_added(ins, vals, k, shape, loc, fop)
        return self.new("scatter", tuple(vals), shape, attrs, ins, loc, fop)

    def rows_added(
        self, ins: _Instr, vals: list[int], k: int, shape: _Array, loc: SourceLoc | None, fop: str
    ) -> _Value:
        """A scatter-add of whole rows (an embedding's gradient, as `jax.grad` of a lookup
        writes it): `x + one_hot(i)^T u`, the one-hot over x's rows contracted with the
        updates over the k index dims. Exact: an index outside the rows, which the scatter
        skips, has an all-zero one-hot row (the FX frontend's `rows_added` is the same)."""
        x, index_id, updates = vals
        index = self.nodes[index_id]
        batch = index.shape[:k]
        if batch != index.shape:  # drop the index vector dim (of size 1)
            batch_arr = _Array(index.dtype, batch)
            index_id = self.new("reshape", (index_id,), batch_arr, {}, ins, loc, fop)

        def emit(op: str, operands: tuple[int, ...], dims, dtype: str, attrs) -> int:
            return self.new(op, operands, _Array(dtype, dims), attrs, ins, loc, fop)

        return rows_added(emit, x, index_id, batch, index.dtype, updates, shape.dims, shape.dtype)

    def _returns_update(self, ins: _Instr) -> bool:
        comp = self.called(ins, "to_apply")
        root = comp.root
        return (
            root is not None and root.opcode == "parameter" and _ints(self.raw_args(root)) == (1,)
        )

    def prefix_sum(self, ins: _Instr, vals: list[int], loc: SourceLoc | None, fop: str) -> _Value:
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
            return self.opaque(ins, vals, loc, fop)
        dims = ins.shape.dims
        long = [d for d, n in enumerate(sizes) if n != 1]
        flat = all(tuple(p) == (0, 0) for p in pads) and all(n == 1 for n in strides)
        if not long and flat and len(sizes) == len(dims):
            # a window of one element: jnp.cumsum along a dim of size 1 (the other graph may
            # have the whole dim where this one holds a block of one)
            units = [d for d, n in enumerate(dims) if n == 1]
            if not units:
                return vals[0]
            return self.new("cumsum", (vals[0],), ins.shape, {"dim": units[0]}, ins, loc, fop)
        if (
            len(sizes) != len(dims)
            or len(long) != 1
            or sizes[long[0]] != dims[long[0]]
            or (strides and any(n != 1 for n in strides))
            or [tuple(p) for p in pads]
            != [(sizes[d] - 1, 0) if d == long[0] else (0, 0) for d in range(len(dims))]
        ):
            return self.opaque(ins, vals, loc, fop)
        return self.new("cumsum", (vals[0],), ins.shape, {"dim": long[0]}, ins, loc, fop)

    def reduce(self, ins: _Instr, vals: list[int], loc: SourceLoc | None, fop: str) -> _Value:
        op = self.reducer(ins)
        if len(vals) != 2 or op is None or not isinstance(ins.shape, _Array):
            return self.opaque(ins, vals, loc, fop)
        x, init = vals
        operands = (x,) if _is_identity(self.nodes[init], op) else (x, init)
        attrs = {"dims": _ints(self.attr(ins, "dimensions") or ""), "op": op}
        return self.new("reduce", operands, ins.shape, attrs, ins, loc, fop)

    def collective(self, ins: _Instr, vals: list[int], loc: SourceLoc | None, fop: str) -> _Value:
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
        else:
            attrs["groups"] = _groups(self.attr(ins, "replica_groups") or "{}")
        if kind in ("all_reduce", "reduce_scatter"):
            op = self.reducer(ins)
            if op is None:
                return self.opaque(ins, vals, loc, fop)
            attrs["op"] = op
        if kind in ("all_gather", "reduce_scatter", "all_to_all"):
            dims = _ints(self.attr(ins, "dimensions") or "")
            if not dims:
                return self.opaque(ins, vals, loc, fop)  # e.g. the tuple form of all-to-all
            attrs["dim"] = dims[0]
        if kind == "all_to_all":
            for key, name in (("split_dimension", "split_dim"), ("concat_dimension", "concat_dim")):
                raw = self.attr(ins, key)
                if raw is not None:
                    attrs[name] = _ints(raw)[0]
        if isinstance(shape, _Array):
            if len(vals) != 1:
                return self.opaque(ins, vals, loc, fop)
            return self.new(kind, (vals[0],), shape, attrs, ins, loc, fop)
        if len(shape) != len(vals) or not all(isinstance(s, _Array) for s in shape):
            return self.opaque(ins, vals, loc, fop)
        return tuple(
            self.new(kind, (v,), s, dict(attrs), ins, loc, fop)
            for v, s in zip(vals, shape, strict=True)
        )

    def custom_call(
        self, ins: _Instr, vals: list[_Value], loc: SourceLoc | None, fop: str
    ) -> _Value:
        target = _unquote(self.attr(ins, "custom_call_target") or "")
        if target in _IDENTITY_TARGETS:
            if target == "xla.sdy.LocalToGlobalShape":
                self.record_out_shardings(ins, vals)
            if len(vals) == 1 and isinstance(ins.shape, _Array):
                return vals[0]
            return tuple(vals)
        if target == "xla.sdy.GlobalToLocalShape":
            return self.global_to_local(ins, vals, loc, fop)
        return self.opaque(ins, vals, loc, fop, {"target": target})

    def _sdy_attr(self, ins: _Instr, key: str) -> list[tuple[tuple[str, ...], ...]]:
        raw = self.attr(ins, "frontend_attributes")
        value = _frontend_attr(raw, key) if raw else None
        return _sdy_shardings(value) if value else []

    def global_to_local(
        self, ins: _Instr, vals: list[_Value], loc: SourceLoc | None, fop: str
    ) -> _Value:
        """shard_map entry: an entry parameter seen through GlobalToLocalShape becomes a
        parameter of the local shape, with its tiling and mesh axes recorded."""
        locals_ = _shape_leaves(ins.shape)
        axes_per_value = self._sdy_attr(ins, "xla.sdy.in_shardings")
        if len(locals_) != len(vals):
            return self.opaque(ins, vals, loc, fop, {"target": "xla.sdy.GlobalToLocalShape"})
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
                operands = tuple(_value_leaves(value))
                out.append(self.new("opaque", operands, local, attrs, ins, loc, fop))
                continue
            key = (value, local.dims)
            if key in self.local_params:
                out.append(self.local_params[key])
                continue
            node_id = len(self.nodes)
            self.nodes.append(
                Node(
                    node_id,
                    "parameter",
                    (),
                    local.dims,
                    local.dtype,
                    dict(param.attrs),
                    param.loc,
                    param.name,
                    param.framework_op,
                )
            )
            self.entry_params[node_id] = self.entry_params[value]
            self.local_params[key] = node_id
            tiles = _tiles(param.shape, local.dims)
            axes = axes_per_value[j] if j < len(axes_per_value) else None
            if axes is not None and len(axes) != len(tiles):
                axes = None
            self.input_shardings[node_id] = TileSharding(
                tiles=tiles, axes=axes, replicated=all(t == 1 for t in tiles)
            )
            out.append(node_id)
        return out[0] if isinstance(ins.shape, _Array) else tuple(out)

    def record_out_shardings(self, ins: _Instr, vals: list[_Value]) -> None:
        axes_per_value = self._sdy_attr(ins, "xla.sdy.out_shardings")
        globals_ = _shape_leaves(ins.shape)
        if len(globals_) != len(vals):
            return
        for j, (value, glob) in enumerate(zip(vals, globals_, strict=True)):
            if not isinstance(value, int):
                continue
            local = self.nodes[value].shape
            if len(local) != len(glob.dims):
                continue
            tiles = _tiles(glob.dims, local)
            axes = axes_per_value[j] if j < len(axes_per_value) else None
            if axes is not None and len(axes) != len(tiles):
                axes = None
            self.value_shardings[value] = TileSharding(
                tiles=tiles, axes=axes, replicated=all(t == 1 for t in tiles)
            )

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
    try:
        if not text.strip():
            raise ScalifyError(
                "expected one of 'HloModule', 'ENTRY', found end of input", path, 1, 1, ""
            )
        try:
            module = parser.parse(text)
        except UnexpectedInput as err:
            raise _syntax_error(parser, err, text, path) from None
        except _BadToken as err:
            tok = err.token
            raise ScalifyError(
                err.message, path, tok.line, tok.column, line_of(text, tok.line)
            ) from None
        return _Lowering(module, text, path).run()
    except ScalifyError:
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
