//! Long analyses run in steps that stop at a deadline, so that a caller with a single thread
//! (the web viewer) can let the browser draw and handle input between steps; native callers
//! pass [`Deadline::NEVER`] and run them in one go on a background thread.

use web_time::{Duration, Instant};

/// When a step of long work should stop and hand control back.
#[derive(Clone, Copy, Debug)]
pub struct Deadline(Option<Instant>);

impl Deadline {
    /// Never stop: run to the end.
    pub const NEVER: Deadline = Deadline(None);

    /// Stop once `duration` has passed from now.
    pub fn after(duration: Duration) -> Deadline {
        Deadline(Some(Instant::now() + duration))
    }

    /// True once the deadline has passed (never for [`Deadline::NEVER`]).
    #[inline]
    pub fn passed(self) -> bool {
        self.0.is_some_and(|at| Instant::now() >= at)
    }
}

/// What a step of long work gave: its result, or the work to go on with.
pub enum Step<Done, Work> {
    Done(Done),
    Pending(Work),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_never_passes_and_a_past_deadline_has_passed() {
        assert!(!Deadline::NEVER.passed());
        assert!(Deadline::after(Duration::ZERO).passed());
        assert!(!Deadline::after(Duration::from_secs(3600)).passed());
    }
}
