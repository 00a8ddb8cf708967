//! The kinds of time a graph shows, as indexes into a [`Mix`].

use wallclock_stream::Kind;

pub const ON: usize = 0;
pub const OFF: usize = 1;
pub const GPU: usize = 2;
pub const OTHER: usize = 3;

/// Time (or samples) of one stack or frame box, split by kind.
pub type Mix = [u64; 4];

pub fn kind_index(k: Kind) -> usize {
    match k {
        Kind::On => ON,
        Kind::Off => OFF,
        Kind::Gpu => GPU,
        Kind::Other => OTHER,
    }
}
