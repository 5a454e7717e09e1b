//! What unit tests across the crate share.

/// The first instant of a test that steps time by hand, as the job state's table tests do:
/// every later instant is this one plus a duration the test chooses, handed to the state in
/// its `Env` (the state reads no clock of its own).
#[allow(
    clippy::disallowed_methods,
    reason = "a test's one reading of the clock, from which it counts its own time"
)]
pub(crate) fn epoch() -> std::time::Instant {
    std::time::Instant::now()
}
