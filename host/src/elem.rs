//! The element types a tensor may hold: the DSL's own trait.
pub use rustile::Elem;
