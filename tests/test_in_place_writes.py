"""Writes that later ops see: an in-place op on a tensor read afterwards, or through a slice
of one, is read as the tensor's new value; a write through another view makes every later
read of the tensor a clear error. None may be read as the old value (a wrong value written
into a slice was proved equal to the right one before)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from scalify.api import check_equivalent, fake_mesh  # noqa: E402
from scalify.errors import ScalifyError  # noqa: E402


@pytest.fixture(scope="module")
def mesh():
    return fake_mesh("tp=2")


def _into_slice(scale: float):
    def program(x, y):
        out = x.clone()
        out[:, :2].copy_(y * scale)
        return out

    return program


def _check(mesh, baseline, parallel, *shapes):
    inputs = tuple(torch.randn(*s) for s in shapes)
    return check_equivalent(baseline, parallel, mesh=mesh, example_inputs=inputs)


def test_a_wrong_value_written_into_a_slice_is_not_proved(mesh):
    report = _check(mesh, _into_slice(1.0), _into_slice(2.0), (4, 4), (4, 2))
    assert report.verdict == "not_equivalent"


def test_the_same_write_is_proved(mesh):
    report = _check(mesh, _into_slice(1.0), _into_slice(1.0), (4, 4), (4, 2))
    assert report.verdict == "equivalent"


def test_pieces_written_into_empty_memory_are_their_concatenation(mesh):
    """DeepSeek-V3's key states: `new_empty`, then each part copied into its slice."""

    def pieces(x, y):
        out = x.new_empty(4, 6)
        out[:, :4].copy_(x)
        out[:, 4:].copy_(y)
        return out

    report = _check(mesh, lambda x, y: torch.cat([x, y], dim=1), pieces, (4, 4), (4, 2))
    assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]


def test_an_in_place_op_on_a_tensor_read_again_is_its_new_value(mesh):
    def twice(x):
        h = x * 2
        h.add_(1)
        return h * 3

    report = _check(mesh, lambda x: (x * 2 + 1) * 3, twice, (4, 4))
    assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]
    report = _check(mesh, lambda x: x * 2 * 3, twice, (4, 4))
    assert report.verdict == "not_equivalent"


def test_chained_in_place_ops_on_a_slice_write_the_tensor(mesh):
    """`y[:, :2].add_(1).mul_(2)`: the second op writes through the first's result, which
    is the slice of y."""

    def chained(x):
        y = x.clone()
        y[:, :2].add_(1).mul_(2)
        return y

    def functional(x):
        return torch.cat([(x[:, :2] + 1) * 2, x[:, 2:]], dim=1)

    report = _check(mesh, functional, chained, (4, 4))
    assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]
    report = _check(mesh, lambda x: torch.cat([x[:, :2] + 1, x[:, 2:]], dim=1), chained, (4, 4))
    assert report.verdict == "not_equivalent"


def test_a_write_through_another_view_then_read_is_refused(mesh):
    def through_transpose(x, y):
        out = x.clone()
        out.t()[:2].copy_(y)  # rows of the transpose: columns of out
        return out

    with pytest.raises(ScalifyError, match="wrote into its memory in place"):
        _check(mesh, through_transpose, through_transpose, (4, 4), (2, 4))


def _softmax_grad_by_hand(scale: float):
    """Megatron's cross-entropy backward, by its own in-place steps: the softmax written
    into its input (`torch.exp(x, out=x)`, `div_`), one entry per row lowered through a
    reshaped view of it, then the whole scaled in place."""

    def program(x, target):
        probs = x - x.amax(dim=-1, keepdim=True)
        torch.exp(probs, out=probs)
        probs.div_(probs.sum(dim=-1, keepdim=True))
        rows = probs.view(-1, probs.shape[-1])
        rows[torch.arange(rows.shape[0]), target.view(-1)] -= scale
        probs.mul_(2.0)
        return probs

    return program


def test_writes_through_a_reshaped_view_and_into_an_out_argument_are_read(mesh):
    """(softmax - one_hot) * 2 where the rows are reached through `view(-1, n)`: read, not
    refused, and read as the value the program computes (the simulation agrees with the
    plain formula; a wrong entry does not)."""

    def plain(x, target):
        hot = torch.nn.functional.one_hot(target, x.shape[-1]).to(x.dtype)
        return (torch.softmax(x, dim=-1) - hot) * 2.0

    x, target = torch.randn(2, 3, 5), torch.randint(0, 5, (2, 3))
    good = check_equivalent(
        plain, _softmax_grad_by_hand(1.0), mesh=mesh, example_inputs=(x, target)
    )
    assert good.verdict != "not_equivalent", good.counterexample
    wrong = check_equivalent(
        plain, _softmax_grad_by_hand(2.0), mesh=mesh, example_inputs=(x, target)
    )
    assert wrong.verdict == "not_equivalent"


def _rows_written(scale: float, order=(0, 1, 2)):
    """A scan's output filled one index at a time (`out[:, i] = ...`, transformers' gated
    delta rule): each write is through a `select` view."""

    def program(x):
        out = torch.zeros_like(x)
        for i in order:
            out[:, i] = x[:, i] * scale + i
        return out

    return program


def test_writes_through_an_index_are_the_rows_they_write(mesh):
    """Read, not refused (a later read of `out` was an error before): the same writes prove."""
    report = _check(mesh, _rows_written(1.0), _rows_written(1.0), (4, 3))
    assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]


def test_a_wrong_value_written_through_an_index_is_not_proved(mesh):
    report = _check(mesh, _rows_written(1.0), _rows_written(2.0), (4, 3))
    assert report.verdict == "not_equivalent"
    report = _check(mesh, _rows_written(1.0), _rows_written(1.0, order=(0, 1)), (4, 3))
    assert report.verdict == "not_equivalent"  # the last row never written: zeros


def _padded(scale: float):
    """`F.pad` as transformers shifts its labels: PyTorch's decomposition fills a tensor and
    writes the input into a slice of it with `prims.copy_to`."""

    def program(x):
        return torch.nn.functional.pad(x * scale, (0, 1), value=-100.0)[:, 1:]

    return program


def test_a_pad_reads_the_values_it_writes(mesh):
    """The write was dropped once: both programs were the fill, and different inputs
    proved equal (transformers' training losses saw every label ignored)."""
    report = _check(mesh, _padded(1.0), _padded(1.0), (4, 3))
    assert report.verdict == "equivalent", [s.reason for s in report.suspects[:2]]
    report = _check(mesh, _padded(1.0), _padded(2.0), (4, 3))
    assert report.verdict == "not_equivalent"
