//! A Rust program whose frame names are what a demangler really produces:
//! generic arguments with `;` and spaces (`stage::<[u8; 8]>`), and a
//! function beside its own closure (`main` calls `stage::<..>`, which
//! waits in `inner`, then the closure `stage::<..>::{closure#0}` that
//! `stage` returned), so that one sibling's name continues the other's
//! with `:`, a byte that sorts before `;`. Built with v0 symbol mangling
//! (generic arguments kept in the symbols).
//!
//! Usage: rustnames SECONDS. Sleeps in 1 ms steps, half the time under
//! `stage` (through `inner`), half in the closure.

use std::hint::black_box;
use std::time::{Duration, Instant};

#[inline(never)]
fn inner(n: u64) -> u64 {
    std::thread::sleep(Duration::from_millis(1));
    black_box(n.wrapping_mul(6364136223846793005).wrapping_add(1))
}

#[inline(never)]
fn stage<T: Default + AsRef<[u8]>>(until: Instant) -> impl Fn(Instant) -> u64 {
    let t = T::default();
    let mut acc = t.as_ref().len() as u64;
    while Instant::now() < until {
        acc = inner(acc);
    }
    #[inline(never)]
    move |until: Instant| {
        let mut x = acc;
        while Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
            x = black_box(x.rotate_left(7) ^ 1);
        }
        x
    }
}

fn main() {
    let secs: f64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1.0);
    let half = Duration::from_secs_f64(secs / 2.0);
    let f = stage::<[u8; 8]>(Instant::now() + half);
    let x = black_box(&f)(Instant::now() + half);
    println!("{x}");
}
