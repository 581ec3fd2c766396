//! What adopt tells the operator, as it happens: each line reaches the
//! terminal or pipe at once (stdout is line-buffered), so a wait of
//! minutes is never silent and the plan is on screen before anything is
//! written; the same text is kept for the caller. A sink that fails (a
//! closed pipe) stops nothing: the node is being changed, and stopping
//! halfway for a reader that left would be worse than going on unheard.

use std::io::Write as _;

pub struct Out {
    sink: Box<dyn std::io::Write + Send>,
    kept: String,
}

impl Out {
    /// Lines to `sink` as they come (stdout for the command), kept too.
    pub fn to(sink: impl std::io::Write + Send + 'static) -> Self {
        Self {
            sink: Box::new(sink),
            kept: String::new(),
        }
    }

    /// Lines kept only (tests, and waits whose progress nobody reads).
    pub fn kept() -> Self {
        Self::to(std::io::sink())
    }

    pub fn push_str(&mut self, s: &str) {
        self.kept.push_str(s);
        let _ = self.sink.write_all(s.as_bytes());
        if s.contains('\n') {
            let _ = self.sink.flush();
        }
    }

    /// Everything written so far.
    pub fn text(&self) -> &str {
        &self.kept
    }

    pub fn into_text(self) -> String {
        self.kept
    }
}

impl std::fmt::Write for Out {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.push_str(s);
        Ok(())
    }
}
