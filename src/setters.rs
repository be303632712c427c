//! `setters!`: the chainable setters of the structs a caller builds ([`Options`](crate::Options),
//! [`Limits`](crate::Limits), the filters). Each is named after its field, takes the field's
//! value and returns the struct, so `Options::default().readers(0).batch_max(16)` reads as the
//! struct literal it replaces; the fields stay public to read.

/// Defines `pub fn field(mut self, value: Type) -> Self` for each `field: Type`, with the doc
/// comment given before it.
macro_rules! setters {
    ($($(#[$doc:meta])* $field:ident: $ty:ty;)*) => {
        $(
            $(#[$doc])*
            #[must_use]
            pub fn $field(mut self, value: $ty) -> Self {
                self.$field = value;
                self
            }
        )*
    };
}

pub(crate) use setters;
