"""A small numpy SPMD simulator: the numeric ground truth for rules and verdicts."""

from scalify.values import NotSimulable

from .spmd import Mismatch, simulate

__all__ = ["Mismatch", "NotSimulable", "simulate"]
