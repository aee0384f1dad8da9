//! Waiting for a condition by polling it until a deadline: the startup of
//! the servers and the node here (whose failures are [`StartError`]s, a
//! program that exited among them), and the waits tests call on them (a
//! node Ready, a pod Running), which fail the test.
//!
//! `iar_tests::wait_for` does this for the tests; this crate cannot use it:
//! it is a crate of its own so that any crate's tests can dev-depend on it
//! without iar-tests (whose build script builds every guest component).
//!
//! [`StartError`]: crate::StartError

use std::time::{Duration, Instant};

/// What one look found: `Ok(Ok(v))` what was waited for; `Ok(Err(last))`
/// not yet, with what it saw; `Err(e)` a failure that waiting cannot
/// mend (a program exited), returned at once.
pub(crate) type Look<T, E> = Result<Result<T, String>, E>;

/// Looks every `every` until `look` is done or fails; past `deadline`,
/// `timed_out` of what it last saw.
pub(crate) fn until<T, E>(
    deadline: Instant,
    every: Duration,
    mut look: impl FnMut() -> Look<T, E>,
    timed_out: impl FnOnce(String) -> E,
) -> Result<T, E> {
    loop {
        match look()? {
            Ok(v) => return Ok(v),
            Err(last) if Instant::now() > deadline => return Err(timed_out(last)),
            Err(_) => std::thread::sleep(every),
        }
    }
}

/// [`until`] for a look that awaits.
pub(crate) async fn until_async<T, E, F, Fut>(
    deadline: Instant,
    every: Duration,
    mut look: F,
    timed_out: impl FnOnce(String) -> E,
) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Look<T, E>>,
{
    loop {
        match look().await? {
            Ok(v) => return Ok(v),
            Err(last) if Instant::now() > deadline => return Err(timed_out(last)),
            Err(_) => tokio::time::sleep(every).await,
        }
    }
}

/// [`until_async`] for a test's wait: fails the test after `within`,
/// saying what it waited for, what it last saw (as `iar_tests::wait_for`)
/// and then what `explain` says (a log, read once).
pub(crate) async fn wait_for<T, F, Fut>(
    what: &str,
    within: Duration,
    every: Duration,
    mut check: F,
    explain: impl FnOnce() -> String,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let waited = until_async(
        Instant::now() + within,
        every,
        || {
            let look = check();
            async move { Ok::<_, String>(look.await) }
        },
        |last| {
            format!(
                "{what}: gave up after {within:?}; last: {last}\n{}",
                explain()
            )
        },
    )
    .await;
    waited.unwrap_or_else(|e| panic!("{e}"))
}
