"""The `scalify` command line. Exit codes: 0 equivalent, 1 not proved, 2 bad input or usage,
3 equivalent only under input layouts Scalify inferred (`equivalent, assuming`)."""

from __future__ import annotations

import argparse
import os
import sys
from importlib import resources
from pathlib import Path

from scalify.engine.memory import MIN_FREE_SHARE
from scalify.errors import ScalifyError

EXIT_BAD_INPUT = 2


def default_rules_dir() -> Path:
    """`./rules` when the current folder has one, else the rules shipped with Scalify."""
    local = Path("rules")
    if local.is_dir() and any(local.glob("*.srl")):
        return local
    return Path(str(resources.files("scalify.rules")))


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2 too; keep its usage line
        self.print_usage(sys.stderr)
        print(f"scalify: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def _positive(text: str) -> int:
    """An integer of at least 1 (argparse turns the ValueError into a usage error)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number of at least 1, got {value}")
    return value


def _share(text: str) -> float:
    """A share from 0 to 1 (argparse turns the ValueError into a usage error)."""
    value = float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a share from 0 to below 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="scalify", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    verify = commands.add_parser("verify", help="prove a distributed graph equals its baseline")
    verify.add_argument("baseline", help="baseline graph file (HLO text, or a torch.export .pt2)")
    verify.add_argument(
        "distributed", help="distributed graph file (HLO text, or a torch.export .pt2)"
    )
    verify.add_argument(
        "--rules",
        type=Path,
        default=None,
        help="folder of .srl rule files (default: ./rules or the bundled rules)",
    )
    verify.add_argument(
        "--mesh", help="device mesh, e.g. tp=8 or dp=2,tp=4 (default: from the graph)"
    )
    verify.add_argument("--relations", help="JSON file with input/output layouts")
    verify.add_argument("--format", choices=["text", "json", "sarif", "html"], default="text")
    verify.add_argument("-o", "--output", help="write the report to this file")
    verify.add_argument(
        "--max-rounds",
        type=int,
        default=20_000,
        help="saturation round limit (a round: analysis, then one rule pass)",
    )
    verify.add_argument("--node-limit", type=int, default=2_000_000, help="e-graph size limit")
    verify.add_argument(
        "--min-free-memory",
        type=_share,
        default=MIN_FREE_SHARE,
        metavar="SHARE",
        help="stop proving (verdict unknown) when the machine's free memory falls under this "
        "share of it (0 to 1; 0: never)",
    )
    verify.add_argument(
        "-j",
        "--jobs",
        type=_positive,
        default=1,
        metavar="N",
        help="prove distinct layers in N processes at once (default 1: fits 2 cores)",
    )
    verify.add_argument(
        "--check-canon",
        action="store_true",
        help="run each graph as loaded and as canonicalised on random inputs and stop with an "
        "internal error if they differ (the Python folds' translation check; small graphs)",
    )
    verify.add_argument(
        "--no-simulate",
        action="store_true",
        help="do not run small graphs numerically to confirm a mismatch",
    )
    verify.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="print only the verdict line and no progress (for CI logs)",
    )

    sim = commands.add_parser(
        "simulate",
        help="run both graphs numerically on random inputs "
        "(small shapes) and compare their outputs",
    )
    sim.add_argument("baseline")
    sim.add_argument("distributed")
    sim.add_argument("--mesh")
    sim.add_argument("--relations")
    sim.add_argument("--seed", type=int, default=0)

    capture = commands.add_parser(
        "capture", help="run a torch-xla model and write baseline/distributed HLO for verify"
    )
    capture.add_argument("function", help="distributed program, MODULE:FUNCTION")
    capture.add_argument("--baseline", required=True, help="baseline program, MODULE:FUNCTION")
    capture.add_argument("--mesh", required=True, help="device mesh, e.g. tp=4")
    capture.add_argument("-o", "--out", required=True, help="folder to write the files to")
    capture.add_argument("--python", help="torch-xla interpreter (default: $SCALIFY_XLA_PYTHON)")

    rules = commands.add_parser("rules", help="work with rule files")
    rule_commands = rules.add_subparsers(dest="rules_command", required=True, parser_class=_Parser)
    lint = rule_commands.add_parser("lint", help="compile rules, check goldens, run cases")
    lint.add_argument("folder", nargs="?", type=Path, default=None)
    lint.add_argument("--bless", action="store_true", help="rewrite golden files")
    lint.add_argument(
        "--fuzz",
        type=int,
        default=25,
        metavar="N",
        help="random instances each rule is checked on numerically (0: off)",
    )
    lint.add_argument("--seed", type=int, default=0, help="fuzzing seed")
    lint.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="print how many instances each rule and extern was fuzzed on",
    )
    show = rule_commands.add_parser("compile", help="print the egglog text of a rule folder")
    show.add_argument("folder", nargs="?", type=Path, default=None)
    return parser


def _verify(args: argparse.Namespace) -> int:
    from scalify.canon import translation
    from scalify.report import render
    from scalify.verify import Limits, verify_files

    if args.check_canon:
        os.environ[translation.ENV_FLAG] = "1"

    report = verify_files(
        args.baseline,
        args.distributed,
        args.rules or default_rules_dir(),
        args.mesh,
        args.relations,
        Limits(
            args.max_rounds,
            args.node_limit,
            not args.no_simulate,
            progress=sys.stderr.isatty() and not args.quiet,
            jobs=args.jobs,
            min_free_memory=args.min_free_memory,
        ),
    )
    text = render(report, args.format)
    if args.quiet and not args.output:
        first = report.suspects[0] if report.suspects else None
        where = f" ({first.file}:{first.line})" if first and first.file else ""
        print(f"verdict: {report.outcome}{where}")
    elif args.output:
        Path(args.output).write_text(text)
        print(f"verdict: {report.outcome} (report written to {args.output})")
    else:
        sys.stdout.write(text)
    return report.exit_code


def _simulate(args: argparse.Namespace) -> int:
    from scalify.frontends import load_graph
    from scalify.relations import bind_unpaired_inputs, output_relations, read_relations_file
    from scalify.simulate import NotSimulable, simulate
    from scalify.verify import choose_mesh, inferred_input_relations

    base, dist = load_graph(args.baseline), load_graph(args.distributed)
    given = read_relations_file(args.relations) if args.relations else None
    mesh = choose_mesh(args.mesh, dist, given)
    bound = bind_unpaired_inputs(base, dist, mesh, given)
    base, dist, given = bound.base, bound.dist, bound.given
    inputs = inferred_input_relations(base, dist, mesh, given)
    outputs = output_relations(base, dist, mesh, given, inputs)
    try:
        mismatch = simulate(base, dist, mesh, inputs, outputs, seed=args.seed)
    except NotSimulable as why:
        raise ScalifyError(f"cannot simulate: {why}", args.distributed) from None
    if mismatch:
        print(f"outputs differ (mesh {mesh}, seed {args.seed}): {mismatch.describe()}")
        return 1
    print(f"outputs agree on random inputs (mesh {mesh}, seed {args.seed})")
    return 0


def _capture(args: argparse.Namespace) -> int:
    from scalify.capture.xla import torch_xla

    done = torch_xla(args.function, args.baseline, mesh=args.mesh, out=args.out, python=args.python)
    seconds = ", ".join(f"{role} {s}s" for role, s in done.seconds.items())
    print(f"wrote {done.baseline}, {done.distributed}, {done.relations} ({seconds})")
    print(f"next: {done.verify_command()}")
    return 0


def _lint(args: argparse.Namespace) -> int:
    from scalify.soundness.extern_fuzz import SCALE
    from scalify.soundness.lint import lint_rules

    folder = args.folder or default_rules_dir()
    result = lint_rules(folder, bless=True if args.bless else None, fuzz=args.fuzz, seed=args.seed)
    for message in result.messages:
        print(message)
    if args.verbose:
        print("\n".join(f"fuzz: {line}" for line in result.fuzzed + result.externs))
    status = "ok" if not result.failures else f"{result.failures} problem(s)"
    fuzzed = (
        f", {len(result.fuzzed)} rule(s) fuzzed on up to {args.fuzz} instances each and "
        f"{len(result.externs)} extern(s) on {SCALE * args.fuzz}"
        if args.fuzz
        else ""
    )
    print(f"{folder}: {status}; {result.cases} case(s) run{fuzzed}")
    return 1 if result.failures else 0


def _compile(args: argparse.Namespace) -> int:
    from scalify.compiler.compile import compile_rule_dir

    sys.stdout.write(compile_rule_dir(args.folder or default_rules_dir()).program() + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "verify":
            return _verify(args)
        if args.command == "simulate":
            return _simulate(args)
        if args.command == "capture":
            return _capture(args)
        if args.rules_command == "lint":
            return _lint(args)
        return _compile(args)
    except ScalifyError as err:
        print(err.render(), file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as err:
        print(f"error: {err.strerror}: {err.filename}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as err:  # a bug in Scalify, not in the input: say so, without a traceback
        if os.environ.get("SCALIFY_DEBUG") == "1":
            raise
        print(
            f"scalify: internal error: {type(err).__name__}: {err}\n"
            "  this is a bug in Scalify; rerun with SCALIFY_DEBUG=1 for the traceback",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    raise SystemExit(main())
