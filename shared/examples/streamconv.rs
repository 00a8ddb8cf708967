//! `streamconv [FILE...]`: read a stream (JSON, folded, perf script or
//! binary) and write it again in the framing `WALLCLOCK_STREAM_FORMAT` asks
//! for. Used by `scripts/bench binary` to give the pipeline a binary raw
//! input, as a capture tool writes it with `WALLCLOCK_STREAM_FORMAT=bincode`.

use std::io::Write;
use std::path::PathBuf;

use wallclock_stream::cli::{for_each_record, open_output, run_main};
use wallclock_stream::{ReaderOptions, Writer};

fn main() {
    run_main("streamconv", || {
        let files: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
        let mut w = Writer::from_env(open_output(None)?)?;
        for_each_record(&files, ReaderOptions::default(), |r| Ok(w.write(&r)?))?;
        w.flush()?;
        w.get_mut().flush()?;
        Ok(0)
    })
}
