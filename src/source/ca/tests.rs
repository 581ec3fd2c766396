//! Unit tests of the local-CA source.
