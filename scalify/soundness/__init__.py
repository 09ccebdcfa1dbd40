"""Checking the checker: `scalify rules lint` (compile, goldens, cases), numeric fuzzing of
every rule and of the prelude, and mutation testing of the verifier on correct pairs."""
