"""A small numpy SPMD simulator: the numeric ground truth for rules and verdicts."""

from scalify.simulate.spmd import Mismatch, simulate
from scalify.values import NotSimulable

__all__ = ["Mismatch", "NotSimulable", "simulate"]
