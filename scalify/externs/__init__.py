"""What needs Python to decide: integer ranges of index code, affine index forms of offsets
computed from the device id, and per-device constant tables. Rules and folds ask these
questions; the answers are checked against numpy in the tests."""
