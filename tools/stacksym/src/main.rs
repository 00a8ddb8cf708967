//! stacksym: raw stack addresses to names. The work is in the library.
fn main() {
    // Big blocks (a file's decompressed debug sections, its symbol
    // index) from mmap, given back when the file is let go (evict.rs):
    // glibc otherwise raises its threshold once the first such block is
    // freed, takes the next ones from the heap, and the heap stays as
    // large. 5-10 MB less at the peak for a system-wide capture.
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets an allocator parameter; nothing is allocated yet.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10);
    }
    let cli: stacksym::Cli = wallclock_stream::spellings::parse("stacksym");
    wallclock_stream::cli::run_main("stacksym", || stacksym::run(&cli));
}
