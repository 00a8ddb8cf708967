// A Rust program whose functions stacksym must name, demangled and without
// hashes: main -> wcrs::engine::Runner::run -> wcrs::engine::step::<u64> ->
// wcrs::leaf. Each records an instruction pointer inside itself; it prints
// them root first, then waits for stdin to close.
use std::io::Read;
use std::sync::atomic::{AtomicUsize, Ordering};

static CHAIN: [AtomicUsize; 4] = [AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0)];

// A macro, not a function, so no inlined `here` frame appears in the chain.
macro_rules! here {
    () => {{
        let ip: usize;
        #[cfg(target_arch = "x86_64")]
        unsafe {
            std::arch::asm!("lea {}, [rip]", out(reg) ip)
        };
        #[cfg(target_arch = "aarch64")]
        unsafe {
            std::arch::asm!("adr {}, .", out(reg) ip)
        };
        ip
    }};
}

mod wcrs {
    use super::CHAIN;
    use std::sync::atomic::Ordering;

    #[inline(never)]
    pub fn leaf(x: u64) -> u64 {
        CHAIN[3].store(here!(), Ordering::SeqCst);
        std::hint::black_box(x) + 1
    }

    pub mod engine {
        use super::super::CHAIN;
        use std::sync::atomic::Ordering;

        pub struct Runner {
            pub base: u64,
        }

        #[inline(never)]
        pub fn step<T: Into<u64> + Copy>(v: T) -> u64 {
            CHAIN[2].store(here!(), Ordering::SeqCst);
            super::leaf(v.into()) * 2
        }

        impl Runner {
            #[inline(never)]
            pub fn run(&self) -> u64 {
                CHAIN[1].store(here!(), Ordering::SeqCst);
                step::<u64>(self.base) + 1
            }
        }
    }
}

fn main() {
    CHAIN[0].store(here!(), Ordering::SeqCst);
    let r = std::hint::black_box(wcrs::engine::Runner { base: 7 }).run();
    println!("pid {}", std::process::id());
    let c: Vec<String> = CHAIN.iter().map(|a| format!("{:#x}", a.load(Ordering::SeqCst))).collect();
    println!("chain {}", c.join(" "));
    println!("result {r}");
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
}
