//! Fixture pcaps.
