//! [`Padded`]: a value alone in its cache lines.

use std::ops::Deref;

/// `T` alone in its 128 bytes (two cache lines: the adjacent-line prefetcher moves lines
/// in pairs), so that what one thread writes there never shares a line with what another
/// thread uses elsewhere (false sharing).
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

impl<T> Deref for Padded<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}
