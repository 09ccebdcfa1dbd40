"""HLO text to light records: one LALR pass (grammar `hlo.lark`) whose inline transformer
builds an instruction per line, attribute values kept as raw text; and the syntax errors,
at `file:line:col` with what was expected."""

from __future__ import annotations

import re
import threading
from typing import Any

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken
from lark.lexer import PatternStr

from scalify.errors import ScalifyError, line_of
from scalify.grammar import grammar_path
from scalify.ir import Node

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


# --------------------------------------------------------------------------------------------
# Comments

# A quoted string (kept: `//` is common in op_name and source_file values), a `//` comment
# to the end of its line, a block comment, or a block comment that never ends.
_STRING_OR_COMMENT = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"|//[^\n]*|/\*.*?\*/|/\*', re.DOTALL)


def blank_comments(text: str, path: str) -> str:
    """`text` with its `//` and `/* */` comments, outside quoted strings, turned into spaces.

    XLA's HLO parser skips both anywhere whitespace may appear. Blanking them before the
    lexer, rather than giving the grammar a comment terminal, keeps the coarse tokens
    (a whole operand list, a brace group) and the raw attribute text the frontend slices
    free of comments, and every line and column where it was."""
    if "//" not in text and "/*" not in text:
        return text  # the common case: one scan each, no regex pass
    return _STRING_OR_COMMENT.sub(lambda m: _blank(m, text, path), text)


def _blank(match: re.Match[str], text: str, path: str) -> str:
    found = match.group()
    if found.startswith('"'):
        return found
    if found == "/*":
        start = match.start()
        line = text.count("\n", 0, start) + 1
        column = start - text.rfind("\n", 0, start)
        message = "expected '*/' closing this comment, found end of input"
        raise ScalifyError(message, path, line, column, line_of(text, line))
    return re.sub(r"[^\n]", " ", found)


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
