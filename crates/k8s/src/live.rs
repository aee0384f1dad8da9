//! A live API server as the cluster a backup reads: items listed through
//! discovery (every listable resource at its preferred version, CRDs
//! included) in pages, `cluster-get` answered by GET.
//!
//! Plugin calls are synchronous and run on blocking threads; [`get`]
//! bridges them to the async client with the runtime's handle, so that a
//! plugin waiting on the API server never holds a runtime thread. Async
//! callers use [`get_async`] and never block.
//!
//! [`get`]: ClusterReader::get
//! [`get_async`]: ClusterReader::get_async

use iar_core::catalog::GroupResource;
use iar_core::cluster::catalog::{ApiResourceRow, ServerVersion};
use iar_core::cluster::{ClusterError, ClusterReader, ClusterWriter, Created};
use iar_core::item::{Item, ItemRef};
use iar_core::select::BackupFilter;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams, Preconditions};
use kube::discovery::{ApiCapabilities, ApiResource, Discovery, Scope, verbs};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::RwLock;

/// Longest a plugin's `cluster-get` waits for the API server (discovery
/// included), within its call's wall-clock ceiling.
pub const GET_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// What discovery said about one resource.
#[derive(Clone, Debug)]
struct Resource {
    api: ApiResource,
    namespaced: bool,
    listable: bool,
    gettable: bool,
    /// What discovery says may be done with it.
    verbs: Vec<String>,
}

/// The API server, read-only.
pub struct LiveCluster {
    client: kube::Client,
    handle: tokio::runtime::Handle,
    resources: RwLock<Option<Arc<HashMap<GroupResource, Resource>>>>,
    page_size: u32,
    requests: AtomicU64,
    discovered_at: std::sync::Mutex<Option<std::time::Instant>>,
}

/// How long an unknown resource is taken as unknown before a lookup may
/// run discovery again.
pub const REDISCOVER_AFTER: std::time::Duration = std::time::Duration::from_secs(10);

impl LiveCluster {
    /// `handle`: the runtime the client's connections live on; plugin
    /// threads block on it while they wait for an answer.
    pub fn new(client: kube::Client, handle: tokio::runtime::Handle) -> Self {
        LiveCluster {
            client,
            handle,
            resources: RwLock::new(None),
            page_size: 500,
            requests: AtomicU64::new(0),
            discovered_at: std::sync::Mutex::new(None),
        }
    }

    /// Objects per list request (500, as kubectl and Velero page).
    pub fn with_page_size(mut self, page_size: u32) -> Self {
        self.page_size = page_size.max(1);
        self
    }

    /// API requests this cluster has made (discovery, list pages, gets).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    fn count(&self, n: u64) {
        self.requests.fetch_add(n, Ordering::Relaxed);
        iar_core::metrics::global().cluster_requests(n);
    }

    /// Every resource at its group's preferred version, from aggregated
    /// discovery (two requests however many groups there are).
    async fn discover(&self) -> Result<Arc<HashMap<GroupResource, Resource>>, ClusterError> {
        let discovery = crate::reach::until_reached(crate::reach::READ_PATIENCE, || {
            Discovery::new(self.client.clone()).run_aggregated()
        })
        .await
        .map_err(|e| api_error("discovery".into(), e))?;
        self.count(2);
        let mut map = HashMap::new();
        for group in discovery.groups() {
            for (api, caps) in group.recommended_resources() {
                let ApiCapabilities {
                    scope, operations, ..
                } = &caps;
                let resource = Resource {
                    namespaced: matches!(scope, Scope::Namespaced),
                    listable: operations.iter().any(|o| o == verbs::LIST),
                    gettable: operations.iter().any(|o| o == verbs::GET),
                    verbs: operations.clone(),
                    api: api.clone(),
                };
                map.insert(GroupResource::new(&api.group, &api.plural), resource);
            }
        }
        let map = Arc::new(map);
        *self.resources.write().await = Some(map.clone());
        *self.discovered_at.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(std::time::Instant::now());
        Ok(map)
    }

    async fn resources(&self) -> Result<Arc<HashMap<GroupResource, Resource>>, ClusterError> {
        if let Some(known) = self.resources.read().await.clone() {
            return Ok(known);
        }
        self.discover().await
    }

    /// The resource named, discovering again when it is unknown (a CRD
    /// created since the last discovery), but at most once per
    /// [`REDISCOVER_AFTER`]: a plugin asking for resources that do not
    /// exist cannot make every lookup two discovery requests.
    async fn resource(&self, gr: &GroupResource) -> Result<Option<Resource>, ClusterError> {
        if let Some(r) = self.resources().await?.get(gr) {
            return Ok(Some(r.clone()));
        }
        let recent = self
            .discovered_at
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|at| at.elapsed() < REDISCOVER_AFTER);
        if recent {
            return Ok(None);
        }
        Ok(self.discover().await?.get(gr).cloned())
    }

    fn api(&self, r: &Resource, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(ns) if r.namespaced => Api::namespaced_with(self.client.clone(), ns, &r.api),
            _ => Api::all_with(self.client.clone(), &r.api),
        }
    }

    /// Lists one resource (in one namespace, or everywhere) page by page.
    async fn list_resource(
        &self,
        r: &Resource,
        namespace: Option<&str>,
        filter: &BackupFilter,
        spool: Option<&Arc<iar_core::spool::Spool>>,
        out: &mut Vec<Item>,
    ) -> Result<(), ClusterError> {
        let api = self.api(r, namespace);
        let mut params = ListParams::default().limit(self.page_size);
        if !filter.label_selector().is_empty() {
            params = params.labels(filter.label_selector());
        }
        loop {
            // A page is read again while the API server cannot be reached
            // (a restart, a dropped connection): one lost list failed a
            // whole backup in the fault campaign.
            let page =
                crate::reach::until_reached(crate::reach::READ_PATIENCE, || api.list(&params))
                    .await
                    .map_err(|e| {
                        let what = format!(
                            "listing {}{}",
                            GroupResource::new(&r.api.group, &r.api.plural),
                            namespace.map(|n| format!(" in {n}")).unwrap_or_default()
                        );
                        api_error(what, e)
                    })?;
            self.count(1);
            let mut kept = Vec::with_capacity(page.items.len());
            for object in page.items {
                let item = to_item(&r.api, object)?;
                // The server applied the label selector; namespaces and
                // resources are decided here, by the same rules as files.
                if filter.matches(&item) {
                    kept.push(item);
                }
            }
            match spool {
                // Held as spool positions: each page's objects leave
                // memory as they are listed. Written on a blocking thread
                // (file I/O), a page at a time.
                Some(spool) => {
                    let spool = spool.clone();
                    let spooled = tokio::task::spawn_blocking(move || {
                        kept.into_iter()
                            .map(|i| i.spooled(&spool))
                            .collect::<Vec<_>>()
                    })
                    .await
                    .map_err(|e| ClusterError::Panicked(e.to_string()))?;
                    out.extend(spooled);
                }
                None => out.extend(kept),
            }
            match page.metadata.continue_ {
                Some(token) if !token.is_empty() => params = params.continue_token(&token),
                _ => return Ok(()),
            }
        }
    }
}

/// Characters left as they are in a path segment; everything else is
/// percent-encoded. kube formats paths from the parts unescaped, and the
/// identifier check already refuses what could change a path's meaning:
/// this keeps that true should a check ever be loosened.
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b':');

fn path_segment(part: &str) -> String {
    percent_encoding::utf8_percent_encode(part, SEGMENT).to_string()
}

/// A request with no resource to name that had no answer within `wait`.
fn no_answer(what: &str, wait: std::time::Duration) -> ClusterError {
    ClusterError::Api {
        what: what.into(),
        source: format!("no answer from the API server within {wait:?}").into(),
    }
}

fn api_error(what: String, e: impl std::error::Error + Send + Sync + 'static) -> ClusterError {
    ClusterError::Api {
        what,
        source: Box::new(e),
    }
}

/// A listed object as an item: list responses leave out each object's
/// apiVersion and kind, so they come from discovery.
fn to_item(api: &ApiResource, object: DynamicObject) -> Result<Item, ClusterError> {
    let mut value = serde_json::to_value(&object)
        .map_err(|e| api_error(format!("{} from the API server", api.kind), e))?;
    if let Value::Object(map) = &mut value {
        map.insert("apiVersion".into(), Value::String(api.api_version.clone()));
        map.insert("kind".into(), Value::String(api.kind.clone()));
    }
    let id = ItemRef::new(
        api.group.clone(),
        api.plural.clone(),
        object.metadata.namespace.clone().unwrap_or_default(),
        object.metadata.name.clone().unwrap_or_default(),
    );
    Ok(Item::with_id(id, value))
}

impl LiveCluster {
    /// The resource `id` names, for a write: known to discovery, and with
    /// a namespace exactly when it is namespaced.
    async fn writable(&self, id: &ItemRef) -> Result<Resource, ClusterError> {
        iar_core::identifier::check(id).map_err(|part| ClusterError::InvalidIdentifier {
            id: id.clone(),
            part: Box::new(part),
        })?;
        let gr = id.group_resource();
        let Some(r) = self.resource(&gr).await? else {
            return Err(ClusterError::Refused(format!(
                "writing {id}: the API server has no resource {gr}"
            )));
        };
        match (r.namespaced, id.namespace.is_empty()) {
            (true, true) => Err(ClusterError::Refused(format!(
                "writing {id}: {gr} is namespaced and no namespace was given"
            ))),
            (false, false) => Err(ClusterError::Refused(format!(
                "writing {id}: {gr} is cluster-scoped, so it has no namespace"
            ))),
            _ => Ok(r),
        }
    }

    async fn create_async(&self, id: &ItemRef, object: Value) -> Result<Created, ClusterError> {
        let r = self.writable(id).await?;
        let api = self.api(&r, Some(&id.namespace));
        let object: DynamicObject =
            serde_json::from_value(object).map_err(|e| api_error(format!("creating {id}"), e))?;
        self.count(1);
        match api.create(&PostParams::default(), &object).await {
            Ok(created) => Ok(Created::New(to_item(&r.api, created)?.into_value())),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                let existing = self.get_async(id).await?;
                // Deleted again between the two requests: tell the caller
                // to try again rather than invent an object.
                existing.map(Created::Existing).ok_or_else(|| {
                    ClusterError::Refused(format!(
                        "creating {id}: it existed, then was gone; try again"
                    ))
                })
            }
            // A refusal the API server answered: nothing was created.
            Err(kube::Error::Api(status)) if status.code < 500 && status.code != 429 => {
                Err(api_error(format!("creating {id}"), status))
            }
            // The answer was lost (a connection cut, an API server
            // restarting, a 5xx): the create may have landed. Read back,
            // an object there is returned as found (the caller records
            // it if it is the plugin's own for this backup), or it would
            // be left behind, unrecorded, when the backup goes (the fault
            // campaign found a VolumeSnapshot outliving its backup).
            Err(e) => {
                for _ in 0..20 {
                    match self.get_async(id).await {
                        Ok(Some(existing)) => return Ok(Created::Existing(existing)),
                        Ok(None) => break,
                        Err(_) => tokio::time::sleep(std::time::Duration::from_millis(250)).await,
                    }
                }
                Err(api_error(format!("creating {id}"), e))
            }
        }
    }

    async fn replace_live(&self, id: &ItemRef, object: Value) -> Result<Value, ClusterError> {
        let r = self.writable(id).await?;
        let api = self.api(&r, Some(&id.namespace));
        let object: DynamicObject =
            serde_json::from_value(object).map_err(|e| api_error(format!("replacing {id}"), e))?;
        self.count(1);
        let replaced = api
            .replace(&id.name, &PostParams::default(), &object)
            .await
            .map_err(|e| {
                let what = format!("replacing {id}");
                // What a writer acts on apart: read again and retry, the
                // object is gone, the object was refused.
                match &e {
                    kube::Error::Api(s) if s.code == 409 => {
                        ClusterError::Conflict(format!("{what}: {}", s.message))
                    }
                    kube::Error::Api(s) if s.code == 404 => {
                        ClusterError::NotFound(format!("{what}: {}", s.message))
                    }
                    kube::Error::Api(s) if matches!(s.code, 400 | 422) => {
                        ClusterError::Invalid(format!("{what}: {}", s.message))
                    }
                    _ => api_error(what, e),
                }
            })?;
        Ok(to_item(&r.api, replaced)?.into_value())
    }

    /// Deletes `id` only while its uid is `uid` (a precondition the API
    /// server checks): a newer object of the same name is never deleted.
    async fn delete_live(&self, id: &ItemRef, uid: &str) -> Result<bool, ClusterError> {
        let r = self.writable(id).await?;
        let api = self.api(&r, Some(&id.namespace));
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        self.count(1);
        match api.delete(&id.name, &params).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if matches!(status.code, 404 | 409) => Ok(false),
            Err(e) => Err(api_error(format!("deleting {id}"), e)),
        }
    }

    fn within<T>(
        &self,
        id: &ItemRef,
        budget: std::time::Duration,
        f: impl std::future::Future<Output = Result<T, ClusterError>>,
    ) -> Result<T, ClusterError> {
        let late = |wait| ClusterError::TimedOut {
            id: id.clone(),
            wait,
        };
        self.bounded(budget, late, f)
    }

    /// `f` on the runtime for at most `budget` (and [`GET_TIMEOUT`]), from
    /// a plugin's blocking thread; past that, `late(wait)`.
    fn bounded<T>(
        &self,
        budget: std::time::Duration,
        late: impl FnOnce(std::time::Duration) -> ClusterError,
        f: impl std::future::Future<Output = Result<T, ClusterError>>,
    ) -> Result<T, ClusterError> {
        let wait = budget.min(GET_TIMEOUT);
        // The timer is made inside `block_on`: tokio makes it on the
        // current runtime, and a plugin's blocking thread has none.
        self.handle
            .block_on(async { tokio::time::timeout(wait, f).await })
            .map_err(|_| late(wait))?
    }
}

impl ClusterWriter for LiveCluster {
    fn is_live(&self) -> bool {
        true
    }

    fn create_within(
        &self,
        id: &ItemRef,
        object: Value,
        budget: std::time::Duration,
    ) -> Result<Created, ClusterError> {
        self.within(id, budget, self.create_async(id, object))
    }

    fn replace_within(
        &self,
        id: &ItemRef,
        object: Value,
        budget: std::time::Duration,
    ) -> Result<Value, ClusterError> {
        self.within(id, budget, self.replace_live(id, object))
    }

    fn delete_within(
        &self,
        id: &ItemRef,
        uid: &str,
        budget: std::time::Duration,
    ) -> Result<bool, ClusterError> {
        self.within(id, budget, self.delete_live(id, uid))
    }
}

#[async_trait::async_trait]
impl ClusterReader for LiveCluster {
    fn catalog_within(
        &self,
        budget: std::time::Duration,
    ) -> Result<Arc<Vec<ApiResourceRow>>, ClusterError> {
        let resources = self.bounded(
            budget,
            |wait| no_answer("discovery", wait),
            self.resources(),
        )?;
        let mut rows: Vec<ApiResourceRow> = resources
            .values()
            .map(|r| ApiResourceRow {
                group: r.api.group.clone(),
                version: r.api.version.clone(),
                kind: r.api.kind.clone(),
                resource: r.api.plural.clone(),
                // Aggregated discovery, as kube reads it, keeps neither.
                singular: String::new(),
                short_names: Vec::new(),
                namespaced: r.namespaced,
                verbs: r.verbs.clone(),
            })
            .collect();
        rows.sort_by(|a, b| (&a.group, &a.resource).cmp(&(&b.group, &b.resource)));
        Ok(Arc::new(rows))
    }

    fn server_version_within(
        &self,
        budget: std::time::Duration,
    ) -> Result<ServerVersion, ClusterError> {
        let version = async {
            (self.client.apiserver_version().await).map_err(|e| api_error("/version".into(), e))
        };
        let info = self.bounded(budget, |wait| no_answer("/version", wait), version)?;
        self.count(1);
        Ok(ServerVersion {
            major: info.major,
            minor: info.minor,
            git_version: info.git_version,
        })
    }

    fn get(&self, id: &ItemRef) -> Result<Option<Value>, ClusterError> {
        // Plugin calls run on blocking threads, which may wait on the
        // runtime; tokio refuses (panics) if a runtime thread tries.
        self.handle.block_on(self.get_async(id))
    }

    fn get_json_within(
        &self,
        id: &ItemRef,
        budget: std::time::Duration,
    ) -> Result<Option<Arc<str>>, ClusterError> {
        let answer = self.within(id, budget, self.get_async(id))?;
        Ok(answer.map(|v| iar_core::item::json_text(&v).into()))
    }

    async fn get_async(&self, id: &ItemRef) -> Result<Option<Value>, ClusterError> {
        // Checked here too, whoever asks: a name can come from an object's
        // own fields (a Pod's claimName), and kube formats URL paths from
        // the parts as they are.
        iar_core::identifier::check(id).map_err(|part| ClusterError::InvalidIdentifier {
            id: id.clone(),
            part: Box::new(part),
        })?;
        let gr = id.group_resource();
        let Some(r) = self.resource(&gr).await? else {
            return Ok(None);
        };
        if !r.gettable {
            return Err(ClusterError::NotGettable(gr));
        }
        let namespace = path_segment(&id.namespace);
        let api = self.api(&r, Some(&namespace));
        let found = api
            .get_opt(&path_segment(&id.name))
            .await
            .map_err(|e| api_error(format!("reading {id}"), e))?;
        self.count(1);
        Ok(match found {
            None => None,
            Some(object) => Some(to_item(&r.api, object)?.into_value()),
        })
    }

    async fn delete_async(&self, id: &ItemRef, uid: &str) -> Result<bool, ClusterError> {
        self.delete_live(id, uid).await
    }

    /// One request: `limit + 1` objects asked for, so that one more than
    /// the limit tells the list is too long without reading it all.
    fn list_within(
        &self,
        gr: &GroupResource,
        namespace: &str,
        selector: &iar_core::select::labels::LabelSelector,
        limit: usize,
        budget: std::time::Duration,
    ) -> Result<Vec<Arc<str>>, ClusterError> {
        let what = ItemRef::new(
            gr.group.clone(),
            gr.resource.clone(),
            namespace.to_string(),
            "",
        );
        self.within(&what, budget, async {
            let Some(r) = self.resource(gr).await? else {
                return Ok(Vec::new());
            };
            if !r.listable {
                return Err(ClusterError::CannotList);
            }
            let api = self.api(&r, (!namespace.is_empty()).then_some(namespace));
            let mut params =
                ListParams::default().limit(u32::try_from(limit + 1).unwrap_or(u32::MAX));
            let text = selector.to_string();
            if !text.is_empty() {
                params = params.labels(&text);
            }
            self.count(1);
            let page =
                crate::reach::until_reached(crate::reach::READ_PATIENCE, || api.list(&params))
                    .await
                    .map_err(|e| api_error(format!("listing {gr}"), e))?;
            if page.items.len() > limit || page.metadata.continue_.is_some_and(|c| !c.is_empty()) {
                return Err(ClusterError::TooMany {
                    what: gr.to_string(),
                    limit,
                });
            }
            let items = page
                .items
                .into_iter()
                .map(|o| to_item(&r.api, o))
                .collect::<Result<Vec<_>, _>>()?;
            iar_core::cluster::list_answer(gr, items, limit)
        })
    }

    async fn list(&self, filter: &BackupFilter) -> Result<Vec<Item>, ClusterError> {
        let resources = self.discover().await?;
        let mut names: Vec<&GroupResource> = resources.keys().collect();
        names.sort();
        let selector = filter.selector();
        let namespaces = selector.exact_namespaces();
        let mut items = Vec::new();
        // One spool per listing, gone with the last of its items.
        let spool = iar_core::spool::Spool::new()
            .inspect_err(|e| {
                tracing::warn!(
                    "no spool in the temporary directory ({e}): listed objects are kept in memory"
                )
            })
            .ok();
        let spool = spool.as_ref();
        for gr in names {
            let r = &resources[gr];
            if !r.listable || !selector.includes_resource(&gr.group, &gr.resource) {
                continue;
            }
            match (&namespaces, r.namespaced) {
                (_, false) if !selector.includes_cluster_scope() => {}
                (Some(list), true) => {
                    for ns in list {
                        self.list_resource(r, Some(ns), filter, spool, &mut items)
                            .await?;
                    }
                }
                _ => {
                    self.list_resource(r, None, filter, spool, &mut items)
                        .await?
                }
            }
        }
        Ok(items)
    }
}
