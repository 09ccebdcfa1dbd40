"""The HTML report (`scalify verify --format html`): what a real browser shows for an
equivalent and a buggy MLP, its screenshot, the SVG layout, and that the page is
self-contained.

The browser tests run Debian's Chromium headless. Without it they skip, unless
SCALIFY_REQUIRE_BROWSER=1 (set by .ci/run), where a missing browser is a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import MLP, REPO, bug_line

from scalify.report.html import COLOURS, render_html
from scalify.report.model import Neighbourhood, OutputResult, PictureNode, Report, Suspect
from scalify.report.svg import layered_layout, render_svg

HLO = MLP / "hlo"
BASE = str(HLO / "baseline.hlo")
BUGGY = str(HLO / "tp_bias_before_allreduce.hlo")
WINDOW = (1200, 2400)  # tall enough that the suspect's picture is on screen with any font
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


# --- the browser ---------------------------------------------------------------------------


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if os.environ.get("SCALIFY_REQUIRE_BROWSER") == "1":
        pytest.fail(
            "SCALIFY_REQUIRE_BROWSER=1 but neither chromium nor chromium-browser is on PATH"
        )
    pytest.skip("no chromium or chromium-browser on PATH (apt-get install chromium to run this)")


def browse(page: Path, profile: Path, *flags: str) -> str:
    """Run headless Chromium on a local page with its own profile; its stdout."""
    done = subprocess.run(
        [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *flags, page.as_uri()],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def write_report(cli, tmp_path: Path, distributed: str, code: int) -> Path:
    target = tmp_path / "report.html"
    result = cli("verify", BASE, distributed, "--format", "html", "-o", str(target))
    assert result.code == code, result.out + result.err
    assert f"report written to {target}" in result.out
    return target


def json_report(cli, distributed: str) -> dict:
    return json.loads(cli("verify", BASE, distributed, "--format", "json").out)


# --- a small DOM, from the browser's serialisation -----------------------------------------

VOID = {"meta", "link", "br", "hr", "img", "input", "source", "wbr", "col", "area", "base"}


class Element:
    def __init__(self, tag: str, attrs: dict[str, str]):
        self.tag, self.attrs, self.children = tag, attrs, []

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def find_all(self, test) -> list[Element]:
        found = [self] if test(self) else []
        for child in self.children:
            if isinstance(child, Element):
                found += child.find_all(test)
        return found

    def by_id(self, ident: str) -> Element:
        (found,) = self.find_all(lambda e: e.attrs.get("id") == ident)
        return found


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        element = Element(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(element)
        if tag not in VOID:
            self.stack.append(element)

    def handle_endtag(self, tag):
        for depth in range(len(self.stack) - 1, 0, -1):
            if self.stack[depth].tag == tag:
                del self.stack[depth:]
                return

    def handle_data(self, data):
        self.stack[-1].children.append(data)


def parse(html: str) -> Element:
    builder = _TreeBuilder()
    builder.feed(html)
    return builder.root


# --- a PNG, read with the standard library -------------------------------------------------


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB bytes) of an 8-bit, non-interlaced RGB or RGBA PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, [], None
    while pos < len(data):
        (size,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + size]
        pos += 12 + size
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    bpp = 3 if colour == 2 else 4
    stride = width * bpp
    raw = zlib.decompress(b"".join(idat))
    rows, prev = [], bytes(stride)
    for r in range(height):
        start = r * (stride + 1)
        line = _unfilter(raw[start], bytearray(raw[start + 1 : start + 1 + stride]), prev, bpp)
        rows.append(line)
        prev = line
    if bpp == 4:
        rows = [bytes(b for i, b in enumerate(row) if i % 4 != 3) for row in rows]
    return width, height, rows


def _unfilter(kind: int, line: bytearray, prev: bytes, bpp: int) -> bytes:
    if kind == 1:
        for i in range(bpp, len(line)):
            line[i] = (line[i] + line[i - bpp]) & 255
    elif kind == 2:
        line = bytearray((a + b) & 255 for a, b in zip(line, prev, strict=True))
    elif kind == 3:
        for i in range(len(line)):
            left = line[i - bpp] if i >= bpp else 0
            line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
    elif kind == 4:
        for i in range(len(line)):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    return bytes(line)


def colour_counts(rows: list[bytes]) -> dict[bytes, int]:
    counts: dict[bytes, int] = {}
    for row in rows:
        for i in range(0, len(row), 3):
            pixel = row[i : i + 3]
            counts[pixel] = counts.get(pixel, 0) + 1
    return counts


def pixels_of(counts: dict[bytes, int], name: str) -> int:
    """Pixels within a small distance of one of the page's named colours."""
    target = bytes.fromhex(COLOURS[name].lstrip("#"))
    return sum(
        n
        for px, n in counts.items()
        if all(abs(a - b) <= 6 for a, b in zip(px, target, strict=True))
    )


# --- in the browser ------------------------------------------------------------------------


def test_buggy_pair_in_the_browser(cli, tmp_path):
    page = write_report(cli, tmp_path, BUGGY, 1)
    suspect = json_report(cli, BUGGY)["suspects"][0]
    line = bug_line("bias_before_allreduce")
    dom = parse(browse(page, tmp_path / "profile", "--dump-dom"))

    assert "not_equivalent" in dom.by_id("verdict").text()
    assert dom.by_id("mesh").text() == "dp=2,tp=4"
    section = dom.by_id("suspect-1")
    assert f"examples/mlp/model.py:{line}" in section.text()
    assert "counted 4 times" in section.text()
    assert "partial(sum, tp)" in section.text()  # an operand's proven relation

    (marked,) = section.find_all(lambda e: "hl" in e.classes())
    source_line = (MLP / "model.py").read_text().splitlines()[line - 1].strip()
    assert marked.attrs["data-line"] == str(line)
    assert source_line in marked.text()

    pictures = dom.by_id("pictures-1")
    assert len(pictures.find_all(lambda e: e.tag == "svg")) == 2
    (box,) = pictures.find_all(lambda e: "role-suspect" in e.classes())
    assert box.attrs["data-node"] == suspect["node"]
    label = [t.text() for t in box.find_all(lambda e: e.tag == "text")]
    shown = next(n for n in suspect["neighbourhood"]["distributed"] if n["role"] == "suspect")
    assert label == [shown["op"], shown["shape"], suspect["node"]]
    baseline_side = pictures.find_all(lambda e: "side-baseline" in e.classes())[0]
    assert baseline_side.find_all(lambda e: "role-related" in e.classes())

    assert "expected" in dom.by_id("counterexample").text()


def test_equivalent_pair_in_the_browser(cli, tmp_path):
    page = write_report(cli, tmp_path, str(HLO / "tp.hlo"), 0)
    dom = parse(browse(page, tmp_path / "profile", "--dump-dom"))
    verdict = dom.by_id("verdict").text()
    assert "equivalent" in verdict and "not_equivalent" not in verdict
    outputs = dom.find_all(lambda e: e.tag == "table")[0].text()
    assert "shard(0, dp)" in outputs and "NOT PROVED" not in outputs
    assert not dom.find_all(lambda e: "suspect" in e.classes())
    assert "w1: shard(1, tp) (annotation)" in dom.text()


@pytest.mark.parametrize(
    ("distributed", "code", "verdict_colour", "absent"),
    [(BUGGY, 1, "bad", "ok"), (str(HLO / "tp.hlo"), 0, "ok", "bad")],
    ids=["buggy", "equivalent"],
)
def test_screenshot_shows_the_verdict_and_the_picture(
    cli, tmp_path, distributed, code, verdict_colour, absent
):
    page = write_report(cli, tmp_path, distributed, code)
    shot = tmp_path / "report.png"
    size = f"--window-size={WINDOW[0]},{WINDOW[1]}"
    browse(page, tmp_path / "profile", f"--screenshot={shot}", size)
    assert shot.is_file() and shot.stat().st_size > 1000
    width, height, rows = png_pixels(shot.read_bytes())
    assert (width, height) == WINDOW
    counts = colour_counts(rows)
    assert len(counts) > 50, "the screenshot is blank"
    assert pixels_of(counts, verdict_colour) > 20_000  # the verdict banner
    assert pixels_of(counts, absent) < 2_000
    if code:  # the suspect's box and the baseline boxes it relates to are drawn
        assert pixels_of(counts, "suspect") > 3_000
        assert pixels_of(counts, "related") > 3_000
        assert pixels_of(counts, "highlight") > 3_000  # the snippet's suspect line


# --- without a browser ---------------------------------------------------------------------


def test_layered_layout_of_a_small_graph():
    # a -> b -> d, a -> c -> d, a -> d, and e feeding d only: d is two steps below a
    # (longest path), and e sits just above its user d, not at the top.
    nodes = [(1, []), (2, [1]), (3, [1]), (4, [2, 3, 1, 5]), (5, [])]
    place = layered_layout(nodes)
    layer = {n: place[n][0] for n in place}
    assert layer == {1: 0, 2: 1, 3: 1, 4: 2, 5: 1}
    assert sorted(place[n][1] for n in (2, 3, 5)) == [0, 1, 2]
    assert place[1] == (0, 0) and place[4] == (2, 0)
    assert layered_layout([]) == {}
    assert layered_layout([(7, [99])]) == {7: (0, 0)}  # operands not shown are ignored


def test_layout_orders_a_layer_to_avoid_crossings():
    # sources x (left), y (right); y's user was listed first: it moves under y.
    place = layered_layout([(1, []), (2, []), (3, [2]), (4, [1])])
    assert place[4][1] < place[3][1]


def test_svg_draws_every_box_and_edge():
    nodes = [
        PictureNode(1, "p.1", "parameter x", "f32[4]", [], "operand"),
        PictureNode(2, "q.2", "exp", "f32[4]", [1], "suspect", "unrelated to the baseline"),
    ]
    svg = render_svg(nodes, "picture", "t")
    assert svg.count("<rect") == 2 and svg.count('class="edge"') == 1
    assert 'data-node="q.2"' in svg and "role-suspect" in svg and "unrelated" in svg
    assert 'marker-end="url(#t-arrow)"' in svg


def _report(file: str, line: int, verdict: str = "unknown") -> Report:
    hood = Neighbourhood(
        [PictureNode(5, "x<y>", "add", "f32[2]", [], "suspect", "unrelated to the baseline")],
        [],
        "no distributed node shown is related to the baseline",
    )
    return Report(
        verdict=verdict,
        baseline="b.hlo",
        distributed="d.hlo",
        mesh="tp=2",
        outputs=[OutputResult(0, "out", "replicate", "unrelated", False)],
        suspects=[Suspect("add", "x<y>", file, line, "f", "a <reason>", ["`a` is x"], "", hood)],
        relations={"inputs": ["x: replicate (default)"], "outputs": ["output 0: replicate"]},
        stats={"seconds": {"prove": 0.1}, "rules_fired": {"r": 2}, "baseline_nodes": 1},
        notes=["a note with `code`"],
    )


def test_page_is_self_contained_and_escaped():
    page = render_html(_report("examples/mlp/model.py", bug_line("bias_before_allreduce")))
    assert not re.search(r"https?:", page), "the page refers to a network resource"
    assert not re.search(r"\b(src|href)\s*=", page)
    assert "@import" not in page and "url(http" not in page
    assert "<script" not in page
    assert "x&lt;y&gt;" in page and "a &lt;reason&gt;" in page
    assert 'class="v-unknown"' in page and "no distributed node shown" in page


def test_real_report_pages_are_self_contained(cli):
    for distributed, code in ((BUGGY, 1), (str(HLO / "tp.hlo"), 0)):
        result = cli("verify", BASE, distributed, "--format", "html")
        assert result.code == code
        assert result.out.startswith("<!DOCTYPE html>")
        assert not re.search(r"https?:", result.out)


def test_missing_source_file_is_said_not_hidden(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    page = render_html(_report("nowhere/model.py", 3))
    assert "source file nowhere/model.py not found" in page
    page = render_html(_report("", 0))
    assert "no source location" in page


def test_snippet_is_found_from_another_folder(tmp_path, monkeypatch):
    """A relative source path is looked up above the distributed file too."""
    monkeypatch.chdir(tmp_path)
    report = _report("examples/mlp/model.py", 41)
    report.distributed = str(REPO / "examples" / "mlp" / "hlo" / "tp.hlo")
    assert 'data-line="41"' in render_html(report)


def test_json_neighbourhood_is_bounded(cli):
    report = json_report(cli, BUGGY)
    hood = report["suspects"][0]["neighbourhood"]
    assert 1 <= len(hood["distributed"]) <= 12 and len(hood["baseline"]) <= 12
    roles = {n["role"] for n in hood["distributed"]}
    assert {"suspect", "operand"} <= roles
    names = {n["name"] for n in hood["baseline"]}
    assert "dot_general.3" in names  # what the suspect's operand is proven related to
    ids = {n["id"] for n in hood["distributed"]}
    assert all(set(n["operands"]) <= ids for n in hood["distributed"])
    assert len(json.dumps(report)) < 20_000
