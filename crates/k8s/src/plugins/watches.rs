//! The two ConfigMap watches the plugin watcher reads (plugin ConfigMaps,
//! Velero plugin-config ConfigMaps): kube-runtime's [`watcher`], reflected
//! into a [`reflector::Store`] (a re-list is buffered until complete, so
//! an object deleted while the watch was down disappears at once), and
//! retried after a failure by kube's [`DefaultBackoff`] (client-go's
//! reflector: 800 ms doubling, jittered, reset after two minutes without a
//! failure) with each delay capped at [`MAX_RETRY_DELAY`]. A failure comes
//! out as a [`WatchFailure`]: what failed, what to grant when the API
//! server refused, and when it is tried again.

use super::configmap::{LABEL, VELERO_LABEL};
use super::registry::WatchFailure;
use futures::{Stream, StreamExt, future};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::core::Status;
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, DefaultBackoff, Event};
use kube::runtime::{WatchStreamExt, reflector};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The longest a failed watch waits before it tries again, as Kubernetes'
/// own clients (client-go's reflector caps its backoff at 30 s).
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(30);

/// What iar needs on the ConfigMaps of its namespace, as a Role rule.
const CONFIGMAP_RULE: &str =
    "apiGroups [\"\"], resources [configmaps], verbs [get, list, watch, patch]";

/// Which of the two watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Plugin,
    Velero,
}

impl Kind {
    /// The label the watch selects by.
    pub(super) fn label(self) -> &'static str {
        match self {
            Kind::Plugin => LABEL,
            Kind::Velero => VELERO_LABEL,
        }
    }
}

/// One watch's events; `Err`: it failed, and waits to retry.
pub(super) type Item = (Kind, Result<Event<ConfigMap>, WatchFailure>);

/// Watches the ConfigMaps of `api` labelled as `kind` says: the store its
/// events are reflected into (before each is yielded), and the events.
pub(super) fn watch(
    api: Api<ConfigMap>,
    namespace: &str,
    kind: Kind,
) -> (
    reflector::Store<ConfigMap>,
    impl Stream<Item = Item> + Send + 'static,
) {
    let (store, writer) = reflector::store();
    let events =
        watcher::watcher(api, watcher::Config::default().labels(kind.label())).reflect(writer);
    let retry = Retry::new(DefaultBackoff::default());
    (store, retried(events, retry, kind, namespace.to_string()))
}

/// `events` with `retry` between a failure and the next attempt, each
/// failure described.
fn retried<S, B>(
    events: S,
    retry: Retry<B>,
    kind: Kind,
    namespace: String,
) -> impl Stream<Item = Item> + Send + 'static
where
    S: Stream<Item = watcher::Result<Event<ConfigMap>>> + Send + 'static,
    B: Backoff + 'static,
{
    let streak = retry.streak.clone();
    events
        // kube's watcher begins every (re)list with an `Init`, and
        // `StreamBackoff` resets on any `Ok`: a list refused again and
        // again would be retried at the first delay for ever. The store
        // has had the `Init` (it is reflected before this); the backoff
        // does not see it, and nothing downstream needs it.
        .filter(|event| future::ready(!matches!(event, Ok(Event::Init))))
        .backoff(retry)
        .map(move |event| {
            // `StreamBackoff` took the next delay before passing the error.
            let event = event.map_err(|e| {
                let Streak { failures, delay } = *lock(&streak);
                failure(&e, kind, &namespace, failures, delay)
            });
            (kind, event)
        })
}

/// Failures in a row of one watch, and the delay before its next attempt.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Streak {
    failures: u32,
    delay: Duration,
}

fn lock(streak: &Mutex<Streak>) -> MutexGuard<'_, Streak> {
    streak.lock().unwrap_or_else(|e| e.into_inner())
}

/// A backoff capped at [`MAX_RETRY_DELAY`] that keeps count: the failures
/// in a row and the delay it handed out last, for the failure's message.
pub(super) struct Retry<B = DefaultBackoff> {
    inner: B,
    streak: Arc<Mutex<Streak>>,
}

impl<B: Backoff> Retry<B> {
    pub(super) fn new(inner: B) -> Self {
        Retry {
            inner,
            streak: Arc::default(),
        }
    }
}

impl<B: Backoff> Iterator for Retry<B> {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        // kube's jitter adds up to the delay again, above the cap too.
        let delay = self.inner.next()?.min(MAX_RETRY_DELAY);
        let mut streak = lock(&self.streak);
        streak.failures = streak.failures.saturating_add(1);
        streak.delay = delay;
        Some(delay)
    }
}

impl<B: Backoff> Backoff for Retry<B> {
    fn reset(&mut self) {
        self.inner.reset();
        *lock(&self.streak) = Streak::default();
    }
}

/// A failure of the watch, with what to grant when it was refused.
fn failure(
    e: &watcher::Error,
    kind: Kind,
    namespace: &str,
    attempt: u32,
    retry_in: Duration,
) -> WatchFailure {
    let what = format!(
        "the ConfigMaps labelled {} in namespace {namespace:?}",
        kind.label()
    );
    let refused = |verb: &str, status: &Status| {
        let said = match status.message.as_str() {
            "" => "forbidden",
            said => said,
        };
        format!(
            "cannot {verb} {what}: {}; grant iar's identity get, list, watch and patch on configmaps in {namespace:?} (a Role rule {CONFIGMAP_RULE}, as deploy/rbac.yaml and deploy/velero/rbac.yaml have) (rule: plugin-configmap-access)",
            said
        )
    };
    let reason = match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s)) if s.is_forbidden() => {
            refused("list", s)
        }
        watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s))
            if s.is_forbidden() =>
        {
            refused("watch", s)
        }
        watcher::Error::WatchError(s) if s.is_forbidden() => refused("watch", s),
        other => format!("watching {what}: {other}"),
    };
    // Whole milliseconds: kube's jitter leaves nanoseconds.
    let shown = Duration::from_millis(u64::try_from(retry_in.as_millis()).unwrap_or(u64::MAX));
    WatchFailure {
        label: kind.label(),
        attempt,
        retry_in,
        message: format!(
            "{reason}; failure {attempt} in a row, retried in {}",
            humantime::format_duration(shown)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::stream;

    /// 1 ms, doubling; reset to 1 ms.
    struct Doubling(Duration);

    impl Iterator for Doubling {
        type Item = Duration;
        fn next(&mut self) -> Option<Duration> {
            let delay = self.0;
            self.0 *= 2;
            Some(delay)
        }
    }

    impl Backoff for Doubling {
        fn reset(&mut self) {
            self.0 = Duration::from_millis(1);
        }
    }

    fn refused_list() -> watcher::Error {
        watcher::Error::InitialListFailed(kube::Error::Api(
            Status::failure(
                "configmaps is forbidden: User \"restricted\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"iar-system\"",
                "Forbidden",
            )
            .with_code(403)
            .boxed(),
        ))
    }

    fn cm(name: &str) -> ConfigMap {
        ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..ConfigMap::default()
        }
    }

    /// kube's watcher restarts a refused list with an `Init` each time:
    /// the delay grows all the same, and only an event (the list going
    /// through) brings it back to the first.
    #[tokio::test]
    async fn the_delay_grows_across_refused_lists_and_resets_on_an_event() {
        let events = stream::iter([
            Ok(Event::Init),
            Err(refused_list()),
            Ok(Event::Init),
            Err(refused_list()),
            Ok(Event::Init),
            Err(refused_list()),
            Ok(Event::Init),
            Ok(Event::InitApply(cm("a"))),
            Ok(Event::InitDone),
            Err(watcher::Error::NoResourceVersion),
        ]);
        let retry = Retry::new(Doubling(Duration::from_millis(1)));
        let out: Vec<Item> = retried(events, retry, Kind::Plugin, "iar-system".into())
            .collect()
            .await;
        let failures: Vec<(u32, Duration)> = out
            .iter()
            .filter_map(|(_, e)| e.as_ref().err())
            .map(|f| (f.attempt, f.retry_in))
            .collect();
        let ms = Duration::from_millis;
        assert_eq!(
            failures,
            [(1, ms(1)), (2, ms(2)), (3, ms(4)), (1, ms(1))],
            "{out:?}"
        );
        let passed: Vec<&str> = out
            .iter()
            .filter_map(|(_, e)| e.as_ref().ok())
            .map(|e| match e {
                Event::Init => "Init",
                Event::InitApply(_) => "InitApply",
                Event::InitDone => "InitDone",
                Event::Apply(_) => "Apply",
                Event::Delete(_) => "Delete",
            })
            .collect();
        assert_eq!(passed, ["InitApply", "InitDone"], "Init is not passed on");
    }

    /// kube's default backoff starts at 800 ms and never goes down while
    /// failures go on; capped, no delay exceeds 30 s.
    #[test]
    fn the_default_backoff_is_bounded() {
        let mut retry = Retry::new(DefaultBackoff::default());
        let delays: Vec<Duration> = (0..20).map(|_| retry.next().unwrap()).collect();
        assert!(
            (Duration::from_millis(800)..Duration::from_millis(1600)).contains(&delays[0]),
            "{delays:?}"
        );
        assert!(delays.windows(2).all(|w| w[0] <= w[1]), "{delays:?}");
        assert!(delays.iter().all(|d| *d <= MAX_RETRY_DELAY), "{delays:?}");
        // 800 ms doubled six times is over the cap, jitter or not.
        assert!(
            delays[6..].iter().all(|d| *d == MAX_RETRY_DELAY),
            "{delays:?}"
        );
        assert_eq!(lock(&retry.streak).failures, 20);
        retry.reset();
        assert_eq!(*lock(&retry.streak), Streak::default());
        assert!(retry.next().unwrap() < Duration::from_millis(1600));
    }

    /// A refused list names the verb, the namespace, the rule to grant
    /// and when it is retried.
    #[test]
    fn a_refused_list_says_what_to_grant() {
        let f = failure(
            &refused_list(),
            Kind::Plugin,
            "iar-system",
            2,
            Duration::from_nanos(1_712_345_678),
        );
        assert_eq!(f.label, LABEL);
        let m = &f.message;
        for part in [
            "cannot list the ConfigMaps labelled iar.dev/plugin in namespace \"iar-system\"",
            "User \"restricted\" cannot list resource \"configmaps\"",
            CONFIGMAP_RULE,
            "(rule: plugin-configmap-access)",
            "failure 2 in a row, retried in 1s 712ms",
        ] {
            assert!(m.contains(part), "{part:?} not in {m}");
        }
        let other = failure(
            &watcher::Error::NoResourceVersion,
            Kind::Velero,
            "velero",
            1,
            Duration::from_millis(800),
        );
        assert!(
            other.message.starts_with(
                "watching the ConfigMaps labelled velero.io/plugin-config in namespace \"velero\": no metadata.resourceVersion"
            ),
            "{}",
            other.message
        );
        assert!(!other.message.contains("rule:"), "{}", other.message);
    }
}
