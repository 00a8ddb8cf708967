//! A frame's name as the graph shows it, and what its annotations say.

/// A frame as a person reads it: no kind annotation, and the folded
/// escapes (`%3B` for `;`, wallclock-stream(5)) turned back into the
/// characters of the name; a name that is not printable text (plain
/// folded input is read without the stream's reader) marked as
/// [`wallclock_stream::names`] marks it.
pub fn shown(f: &str) -> std::borrow::Cow<'_, str> {
    use std::borrow::Cow;
    match wallclock_stream::folded::unescape(deannotate(f)) {
        Cow::Borrowed(s) => wallclock_stream::names::check(s),
        Cow::Owned(s) => Cow::Owned(wallclock_stream::names::check(&s).into_owned()),
    }
}

/// A frame name without its `_[k]`/`_[w]`/`_[i]`/`_[j]` annotations.
pub fn deannotate(f: &str) -> &str {
    // A waker's kernel frame has two: `name_[k]_[w]`.
    let mut f = f;
    while f.ends_with(']') {
        match f.rfind("_[") {
            Some(ai) if f[ai..].len() == 4 && "kwij".contains(&f[ai + 2..ai + 3]) => f = &f[..ai],
            _ => break,
        }
    }
    f
}

/// A frame of a waker (stackmerge --wakers), or the `--` between a block
/// and its waker.
pub fn is_waker_frame(name: &str) -> bool {
    name.ends_with("_[w]") || name == "--"
}
