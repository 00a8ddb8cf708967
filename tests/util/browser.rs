//! A real browser looks at an SVG: headless Chromium (installed by
//! `scripts/setup --tests`) renders it to a PNG, read back as pixels.

use std::path::Path;
use std::process::Command;

/// The screenshot: `width` x `height` RGB pixels, row by row.
pub struct Shot {
    pub width: usize,
    pub height: usize,
    pub px: Vec<(u8, u8, u8)>,
}

/// Render `svg` in a window 1200 wide (the graph's own width) and as tall
/// as the graph (at least 720: a tall graph is seen whole) and read the
/// screenshot; `dir` holds the browser's profile and the PNG.
pub fn screenshot(svg: &Path, dir: &Path) -> Shot {
    let text = std::fs::read_to_string(svg).unwrap();
    let height = text
        .split_once(" height=\"")
        .and_then(|(_, t)| t.split('"').next())
        .and_then(|h| h.parse::<f64>().ok())
        .map_or(720, |h| (h.ceil() as usize).clamp(720, 8000));
    let png = dir.join(format!("{}.png", svg.file_name().unwrap().to_string_lossy()));
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ])
        .arg(format!("--window-size=1200,{height}"))
        .arg(format!("--user-data-dir={}", dir.join("chromium-profile").display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", svg.display()))
        .output()
        .expect("chromium is not installed: run `sudo scripts/setup --tests` (scripts/test does)");
    assert!(png.is_file(), "chromium wrote no screenshot: {}", String::from_utf8_lossy(&out.stderr));
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let step = match info.color_type {
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        c => panic!("unexpected PNG colour type {c:?}"),
    };
    let px = buf[..info.buffer_size()].chunks(step).map(|p| (p[0], p[1], p[2])).collect();
    Shot { width: info.width as usize, height: info.height as usize, px }
}

impl Shot {
    /// How many pixels `f` holds for.
    pub fn count(&self, f: impl Fn((u8, u8, u8)) -> bool) -> usize {
        self.px.iter().filter(|&&p| f(p)).count()
    }

    /// The leftmost and rightmost columns of dark (text) pixels in rows
    /// `rows`: where the title is drawn. None when no text is there.
    pub fn text_span(&self, rows: std::ops::Range<usize>) -> Option<(usize, usize)> {
        let mut span: Option<(usize, usize)> = None;
        for y in rows.filter(|&y| y < self.height) {
            for x in 0..self.width {
                let (r, g, b) = self.px[y * self.width + x];
                if r < 90 && g < 90 && b < 90 {
                    span = Some(span.map_or((x, x), |(a, z)| (a.min(x), z.max(x))));
                }
            }
        }
        span
    }

    /// The graph is drawn and its title fits: frames cover at least
    /// `min_frames` of the screen (pixels neither background nor text),
    /// and the title's text, in the top 40 rows, ends short of both edges.
    pub fn assert_readable(&self, what: &str, min_frames: f64) {
        let total = (self.width * self.height) as f64;
        // Background: inferno's pale gradient and white; text: dark.
        let framed = self.count(|(r, g, b)| {
            let (mx, mn) = (r.max(g).max(b), r.min(g).min(b));
            mx as u16 - mn as u16 > 40
        }) as f64;
        eprintln!("{what}: {:.1}% of the screen in coloured frames", 100.0 * framed / total);
        assert!(framed >= total * min_frames, "{what}: the browser shows almost no frames ({:.2}%)", 100.0 * framed / total);
        let (l, r) = self.text_span(0..40).unwrap_or_else(|| panic!("{what}: no title drawn"));
        eprintln!("{what}: title from x={l} to x={r} of {}", self.width);
        assert!(l >= 4 && r + 4 < self.width, "{what}: the title runs off the graph (x {l}..{r} of {})", self.width);
    }
}
