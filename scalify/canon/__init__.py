"""Canonical folds: framework-independent clean-ups that normalise a loaded graph's spellings
before saturation (`canonicalize.canonicalize` runs them in order). Each is a directed
rewrite; they are the knowledge that issue 35 moves into `.srl` canonical rules."""
