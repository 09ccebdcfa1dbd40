"""Rule files (`*.srl`), shipped with Scalify as package data."""
