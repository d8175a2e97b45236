//! Zero-copy, bounds-checked protocol views.
