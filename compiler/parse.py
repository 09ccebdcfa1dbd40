"""Parse `.srl` text into the typed AST; syntax errors become ScalifyError with a caret."""

from __future__ import annotations

from functools import cache

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken
from scalify.grammar import grammar_path

from scalify.errors import ScalifyError, line_of

from . import ast


@cache
def _parser() -> Lark:
    return Lark(
        grammar_path("srl.lark").read_text(),
        parser="lalr",
        strict=True,
        propagate_positions=True,
        maybe_placeholders=False,
        cache=True,  # the grammar's analysis, kept in the temporary directory by lark
    )


def _doc_comment(text_lines: list[str], line: int) -> str:
    """The `#` lines directly above line `line` (1-based): the identity a rule states."""
    doc: list[str] = []
    index = line - 2
    while index >= 0 and text_lines[index].lstrip().startswith("#"):
        doc.insert(0, text_lines[index].lstrip()[1:].strip())
        index -= 1
    return " ".join(doc)


class _ToAst(Transformer):
    def __init__(self, path: str, text: str) -> None:
        super().__init__()
        self.path = path
        self.lines = text.splitlines()

    def _span(self, meta_or_token) -> ast.Span:
        return ast.Span(self.path, meta_or_token.line, meta_or_token.column)

    def var(self, children: list[Token]) -> ast.Var:
        return ast.Var(str(children[0]), self._span(children[0]))

    def int(self, children: list[Token]) -> ast.IntLit:
        return ast.IntLit(int(children[0]), self._span(children[0]))

    def decimal(self, children: list[Token]) -> ast.DecimalLit:
        return ast.DecimalLit(str(children[0]), self._span(children[0]))

    def string(self, children: list[Token]) -> ast.StrLit:
        return ast.StrLit(str(children[0])[1:-1], self._span(children[0]))

    @v_args(meta=True)
    def app(self, meta, children) -> ast.App:
        name, *rest = children
        attrs: tuple = ()
        if rest and isinstance(rest[0], tuple) and rest[0][:1] == ("attrs",):
            attrs = rest[0][1]
            rest = rest[1:]
        return ast.App(str(name), attrs, tuple(rest), self._span(name))

    def attrs(self, children) -> tuple:
        return ("attrs", tuple(children))

    def attr(self, children) -> tuple:
        return (str(children[0]), children[1])

    @v_args(meta=True)
    def relation(self, meta, children) -> ast.Relation:
        dist, base, *layouts = children
        return ast.Relation(dist, base, layouts[-1], self._span(meta), tuple(layouts[:-1]))

    @v_args(meta=True)
    def membership(self, meta, children) -> ast.Membership:
        return ast.Membership(str(children[0]), str(children[1]), self._span(meta))

    @v_args(meta=True)
    def comparison(self, meta, children) -> ast.Comparison:
        return ast.Comparison(children[0], str(children[1]), children[2], self._span(meta))

    @v_args(meta=True)
    def equation(self, meta, children) -> ast.Equation:
        return ast.Equation(children[0], children[1], self._span(meta))

    def match(self, children):
        return ("match", children[0])

    def where(self, children):
        return ("where", tuple(children))

    def rewrite(self, children):
        return ("rewrite", children[0])

    def unfuzzed(self, children):
        return ("unfuzzed", str(children[0])[1:-1])

    @v_args(meta=True)
    def family(self, meta, children) -> ast.Family:
        name, *members = children
        return ast.Family(str(name), tuple(str(m) for m in members), self._span(meta))

    def _rule_fields(self, meta, children) -> dict:
        """What an equality rule and a canonical rule share: name, doc, clauses, span."""
        parts = dict(children[1:])
        return {
            "name": str(children[0]),
            "doc": _doc_comment(self.lines, meta.line),
            "match": parts["match"],
            "where": parts.get("where", ()),
            "rewrite": parts["rewrite"],
            "span": self._span(meta),
            "unfuzzed": parts.get("unfuzzed", ""),
        }

    @v_args(meta=True)
    def rule(self, meta, children) -> ast.Rule:
        return ast.Rule(**self._rule_fields(meta, children))

    def params(self, children: list[Token]) -> tuple:
        return ("params", tuple(ast.Var(str(c), self._span(c)) for c in children))

    def reference(self, children: list[Token]) -> tuple:
        return ("reference", ast.Var(str(children[0]), self._span(children[0])))

    @v_args(meta=True)
    def canon(self, meta, children) -> ast.CanonRule:
        return ast.CanonRule(**self._rule_fields(meta, children))

    @v_args(meta=True)
    def custom_call(self, meta, children) -> ast.CustomCallDecl:
        target, *rest = children
        parts = dict(r for r in rest if isinstance(r, tuple))
        (meaning,) = [r for r in rest if not isinstance(r, tuple)]
        return ast.CustomCallDecl(
            str(target)[1:-1],
            meaning,
            self._span(meta),
            parts.get("params"),
            parts.get("reference"),
        )

    @v_args(meta=True)
    def layout_decl(self, meta, children) -> ast.LayoutDecl:
        name, dim, axis, index = children
        params = (ast.Var(str(dim), self._span(dim)), ast.Var(str(axis), self._span(axis)))
        names = tuple(leaf for leaf in _index_leaves(index) if isinstance(leaf, ast.Var))
        return ast.LayoutDecl(str(name), params, _index_value(index), self._span(meta), names)

    def index_int(self, children):
        return ast.IntLit(int(children[0]), self._span(children[0]))

    def index_name(self, children):
        return ast.Var(str(children[0]), self._span(children[0]))

    def _index_op(op: str):  # noqa: N805  (a factory of transformer callbacks)
        return lambda self, children: (op, children[0], children[1])

    index_add, index_sub = _index_op("+"), _index_op("-")
    index_mul, index_div, index_mod = _index_op("*"), _index_op("/"), _index_op("%")

    def start(self, children):
        return children


def _index_leaves(index) -> list:
    """The names and numbers of a parsed index map, in source order."""
    if isinstance(index, tuple):
        return _index_leaves(index[1]) + _index_leaves(index[2])
    return [index]


def _index_value(index):
    """A parsed index map as `scalify.layout.IndexMap`: names and ints without spans."""
    if isinstance(index, tuple):
        return (index[0], _index_value(index[1]), _index_value(index[2]))
    return index.name if isinstance(index, ast.Var) else index.value


def _syntax_error(path: str, text: str, err: UnexpectedInput) -> ScalifyError:
    at_end = isinstance(err, UnexpectedToken) and err.token.type == "$END"
    if isinstance(err, UnexpectedEOF) or at_end:
        expected = sorted(x for x in err.expected if not x.startswith("__"))
        lines = text.rstrip().splitlines() or [""]
        return ScalifyError(
            f"unexpected end of file; expected one of: {', '.join(expected)}",
            path,
            len(lines),
            len(lines[-1]) + 1,
            lines[-1],
        )
    if isinstance(err, UnexpectedToken):
        found = repr(str(err.token)) if err.token.type != "$END" else "end of file"
        expected = sorted(x for x in err.expected if not x.startswith("__"))
        message = f"unexpected {found}; expected one of: {', '.join(expected)}"
    elif isinstance(err, UnexpectedCharacters):
        message = f"unexpected character {text[err.pos_in_stream]!r}"
    else:
        message = "syntax error"
    return ScalifyError(message, path, err.line, err.column, line_of(text, err.line))


def parse_rule_text(text: str, path: str) -> ast.RuleFile:
    """Parse one `.srl` file's text. Raises ScalifyError on a syntax error."""
    try:
        tree = _parser().parse(text)
    except UnexpectedInput as err:
        raise _syntax_error(path, text, err) from None
    items = _ToAst(path, text).transform(tree)
    families = tuple(i for i in items if isinstance(i, ast.Family))
    rules = tuple(i for i in items if isinstance(i, ast.Rule))
    custom_calls = tuple(i for i in items if isinstance(i, ast.CustomCallDecl))
    canon_rules = tuple(i for i in items if isinstance(i, ast.CanonRule))
    layouts = tuple(i for i in items if isinstance(i, ast.LayoutDecl))
    return ast.RuleFile(path, text, families, rules, custom_calls, canon_rules, layouts)
