//! Examples and end-to-end tests for idem live in `examples/` and `tests/`.
