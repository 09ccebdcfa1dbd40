"""The compiled-rules store (compiler/cache.py) and egglog's chunked feeding
(engine/egraph.py): what keeps the cold command line near its parse time, checked for what
they must never do (serve a stale compile, hide an error, split a command)."""

from __future__ import annotations

from pathlib import Path

import pytest
from scalify.compiler import compile as compile_module
from scalify.compiler.compile import compile_texts

from scalify.engine.egraph import CHUNK_TEXT, _chunks, top_level_forms
from scalify.errors import ScalifyError

RULE = """# neg(x[blk]) == neg(x)[blk]
rule neg_shard:
  match   neg(X)
  where   X ~ x @ shard(d, a)
  rewrite neg(X) ~ neg(x) @ shard(d, a)
"""


@pytest.fixture
def store(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("SCALIFY_CACHE", str(tmp_path / "store"))
    return tmp_path / "store"


def _counting(monkeypatch) -> list[int]:
    calls: list[int] = []
    compile_ = compile_module._compile

    def counted(sources):
        calls.append(1)
        return compile_(sources)

    monkeypatch.setattr(compile_module, "_compile", counted)
    return calls


def test_a_rule_set_compiled_once_is_served_from_the_store(store, monkeypatch):
    calls = _counting(monkeypatch)
    first = compile_texts([("a.srl", RULE)])
    again = compile_texts([("a.srl", RULE)])
    assert len(calls) == 1 and len(list(store.glob("rules-*.pickle"))) == 1
    assert again.program() == first.program()


def test_an_edited_rule_file_is_compiled_again(store, monkeypatch):
    calls = _counting(monkeypatch)
    compile_texts([("a.srl", RULE)])
    edited = compile_texts([("a.srl", RULE.replace("neg", "abs"))])
    assert len(calls) == 2 and "abs" in edited.program()


def test_an_error_is_reported_every_time_and_never_stored(store):
    bad = RULE.replace("shard(d, a)\n  rewrite", "shard(d)\n  rewrite")
    for _ in range(2):
        with pytest.raises(ScalifyError, match="takes 2 arguments"):
            compile_texts([("a.srl", bad)])
    assert not store.exists() or not list(store.glob("rules-*.pickle"))


def test_a_damaged_entry_is_compiled_again(store, monkeypatch):
    compile_texts([("a.srl", RULE)])
    (entry,) = store.glob("rules-*.pickle")
    entry.write_bytes(b"not a pickle")
    calls = _counting(monkeypatch)
    assert "neg_shard" in compile_texts([("a.srl", RULE)]).program()
    assert len(calls) == 1


def test_the_store_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv("SCALIFY_CACHE", "off")
    monkeypatch.setattr(Path, "home", lambda: tmp_path)
    calls = _counting(monkeypatch)
    compile_texts([("a.srl", RULE)])
    compile_texts([("a.srl", RULE)])
    assert len(calls) == 2 and not (tmp_path / ".cache").exists()


def test_egglog_text_is_split_at_its_top_level_forms_only():
    text = '(rule ((= ?n (Op1 "a)b" ?k ?x))) ; a comment (with parens\n  ((union ?n ?x)))\n(run 1)'
    forms = top_level_forms(text)
    assert forms == [
        '(rule ((= ?n (Op1 "a)b" ?k ?x))) ; a comment (with parens\n  ((union ?n ?x)))',
        "(run 1)",
    ]


def test_chunks_keep_every_command_whole_and_in_order():
    commands = [f"(relation R{i} (i64))" for i in range(2000)]
    chunks = list(_chunks(commands))
    assert len(chunks) > 1 and all(len(c) <= CHUNK_TEXT for c in chunks)
    assert "\n".join(chunks).split("\n") == commands
