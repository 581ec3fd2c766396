//! What adopt tells the operator, as it happens (a wait of minutes is never silent), kept
//! for tests too. A sink that fails (a closed pipe) stops nothing: stopping halfway for a
//! reader that left would be worse than going on unheard.

use std::io::Write as _;

pub struct Out {
    sink: Box<dyn std::io::Write + Send>,
    #[cfg(test)]
    kept: String,
}

impl Out {
    pub fn to(sink: impl std::io::Write + Send + 'static) -> Self {
        Self {
            sink: Box::new(sink),
            #[cfg(test)]
            kept: String::new(),
        }
    }

    pub fn push_str(&mut self, s: &str) {
        #[cfg(test)]
        self.kept.push_str(s);
        let _ = self.sink.write_all(s.as_bytes());
        if s.contains('\n') {
            let _ = self.sink.flush();
        }
    }
}

impl std::fmt::Write for Out {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.push_str(s);
        Ok(())
    }
}

#[cfg(test)]
mod kept {
    impl super::Out {
        pub fn kept() -> Self {
            Self::to(std::io::sink())
        }

        pub fn text(&self) -> &str {
            &self.kept
        }
    }
}
