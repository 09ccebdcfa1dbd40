"""A thin session over egglog's bindings: feed text in chunks, run with limits, read tables.

egglog 13.2 parses one program with memory quadratic in its length, so commands go in small
chunks. Saturation runs in rounds (analysis to fixpoint, then one pass of layout rules) so
that a round limit, a node limit or a floor of free memory can stop it, and hitting one is
reported.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources

import egglog.bindings as egglog

from scalify.engine.memory import MIN_FREE_SHARE, memory_low
from scalify.errors import ScalifyError

# At most this many commands, and about this much text, per parse: egglog's parse costs
# memory quadratic in the text it is given.
CHUNK = 400
CHUNK_TEXT = 8_000
REPORT_PASSES = 12
# The most rounds run between two checks of the size limit; a check reads every table's
# size (the batch adapts to the growth, see `saturate`).
ROUNDS_PER_CHECK = 20


@dataclass
class RunStats:
    rounds: int = 0
    saturated: bool = False
    limit: str = ""  # "" or which limit stopped the run
    nodes: int = 0
    rule_matches: dict[str, int] = field(default_factory=dict)


def prelude_text() -> str:
    """The engine's own rules and tables (`prelude.egg`), loaded into every e-graph."""
    return resources.files("scalify.engine").joinpath("prelude.egg").read_text()


def _chunks(commands: list[str]) -> Iterator[str]:
    """`commands` joined into texts of at most CHUNK commands and CHUNK_TEXT characters (a
    longer command alone)."""
    batch: list[str] = []
    size = 0
    for command in commands:
        if batch and (len(batch) == CHUNK or size + len(command) > CHUNK_TEXT):
            yield "\n".join(batch)
            batch, size = [], 0
        batch.append(command)
        size += len(command) + 1  # and the newline that joins it
    if batch:
        yield "\n".join(batch)


def top_level_forms(text: str) -> list[str]:
    """The top-level s-expressions of egglog text, each whole (comments dropped)."""
    forms, depth, start, in_string, comment = [], 0, None, False, False
    for i, ch in enumerate(text):
        if comment:
            comment = ch != "\n"
        elif in_string:
            in_string = ch != '"' or text[i - 1] == "\\"
        elif ch == ";":
            comment = True
        elif ch == '"':
            in_string = True
        elif ch == "(":
            if depth == 0:
                start = i
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                forms.append(text[start : i + 1])
    return forms


class EGraphSession:
    """One egglog e-graph with Scalify's prelude loaded, then `programs`."""

    def __init__(self, *programs: str) -> None:
        self.egraph = egglog.EGraph()
        for program in (prelude_text(), *programs):
            # one command at a time into the chunks: a whole rule set parsed at once costs
            # memory quadratic in its text (1.1 GB for the shipped rules, against 0.25 GB)
            self.feed(top_level_forms(program))

    def feed(self, commands: list[str]) -> None:
        """Run `commands` (egglog text) in chunks."""
        for text in _chunks(commands):
            try:
                self.egraph.run_program(*self.egraph.parse_program(text))
            except egglog.EggSmolError as err:
                raise ScalifyError(f"the e-graph engine rejected the program: {err}") from None

    def holds(self, fact: str) -> bool:
        """Whether egglog's `(check FACT)` holds now."""
        try:
            self.egraph.run_program(*self.egraph.parse_program(f"(check {fact})"))
        except egglog.EggSmolError:
            return False
        return True

    def run_analysis(self) -> None:
        """The analysis rules alone, to saturation: for terms added after a proof."""
        self.egraph.run_program(
            *self.egraph.parse_program("(run-schedule (saturate (run analysis)))")
        )

    def size(self) -> int:
        (output,) = self.egraph.run_program(*self.egraph.parse_program("(print-size)"))
        return sum(n for _, n in output.sizes)

    def saturate(
        self,
        max_rounds: int,
        node_limit: int,
        rounds_per_check: int = ROUNDS_PER_CHECK,
        min_free_memory: float = MIN_FREE_SHARE,
    ) -> RunStats:
        """Run the layout rules until nothing changes, `max_rounds` pass, the e-graph passes
        `node_limit` nodes, or the machine's free memory falls under `min_free_memory` of its
        total. The size and the memory are read between batches of rounds: a batch starts at
        one round and doubles up to `rounds_per_check` while the e-graph grows slowly, and
        falls back to one round once it doubles in a batch or nears the limit, so a rule that
        makes it explode is stopped a round after it starts rather than twenty."""
        stats = RunStats()
        schedules: dict[int, list] = {}
        batch = 1
        while stats.rounds < max_rounds:
            batch = min(batch, max_rounds - stats.rounds)
            if batch not in schedules:
                schedules[batch] = self.egraph.parse_program(
                    f"(run-schedule (repeat {batch} (saturate (run analysis)) (run layout)))"
                )
            outputs = self.egraph.run_program(*schedules[batch])
            stats.rounds += batch
            updated = False
            for output in outputs:
                report = output.report
                updated |= report.updated
                for rule, count in report.num_matches_per_rule.items():
                    stats.rule_matches[rule] = stats.rule_matches.get(rule, 0) + count
            before, stats.nodes = stats.nodes, self.size()
            if not updated:
                stats.saturated = True
                break
            if stats.nodes > node_limit:
                stats.limit = f"e-graph node limit {node_limit} reached"
                break
            low = memory_low(min_free_memory)
            if low:
                stats.limit = f"{low} at {stats.nodes} e-graph nodes"
                break
            fast = stats.nodes > 2 * before or stats.nodes > node_limit // 4
            batch = 1 if fast else min(2 * batch, rounds_per_check)
        else:
            stats.limit = f"round limit {max_rounds} reached"
        # The report runs a bounded number of passes: a placement chain is at most a few
        # layouts deep, and a bound keeps an e-class that holds a layout of itself (a cycle)
        # from growing Desc facts without end.
        # Each pass is its own call, the free memory read between them as between rounds.
        self.egraph.run_program(
            *self.egraph.parse_program("(run-schedule (saturate (run analysis)))")
        )
        report_pass = self.egraph.parse_program("(run-schedule (run report))")
        for _ in range(REPORT_PASSES):
            low = memory_low(min_free_memory)
            if low:
                stats.limit = stats.limit or f"{low} while describing the proof"
                break
            outputs = self.egraph.run_program(*report_pass)
            if not any(output.report.updated for output in outputs):
                break
        return stats

    def frozen(self):
        return self.egraph.freeze()

    def i64(self, value) -> int:
        return self.egraph.value_to_i64(value)

    def string(self, value) -> str:
        return self.egraph.value_to_string(value)


_LOADED: dict[str, tuple[tuple[str, ...], EGraphSession]] = {}


@contextmanager
def rules_session(*programs: str) -> Iterator[EGraphSession]:
    """An e-graph holding the prelude and `programs` (the rules), loaded once per process and
    programs. Each use runs between `(push)` and `(pop)`, so it starts from the rules alone:
    loading and compiling the rules, most of a small proof's time, is paid once. A use may
    add rows to the prelude's tables but must declare none (no `let`): egglog 13.2 keeps
    tables declared after a `(push)` in registries the `(pop)` does not restore."""
    loaded = _LOADED.get("rules")
    if loaded is None or loaded[0] != programs:
        loaded = _LOADED["rules"] = (programs, EGraphSession(*programs))
    session = loaded[1]
    session.feed(["(push)"])
    try:
        yield session
    finally:
        session.feed(["(pop)"])
