//! `iar new --lang go`: a Go plugin module that builds outside any
//! checkout with only the Go toolchain (the SDK by a `replace` to a local
//! copy; it has no dependencies, so nothing is fetched), with a working
//! backup and restore action pair and a test file that passes.

use crate::scaffold::check_name;
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};

/// The `go-sdk` of the checkout this binary was built from, if it is
/// still there.
pub fn local_sdk() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../go-sdk");
    dir.join("go.mod")
        .exists()
        .then(|| dir.canonicalize().ok())?
}

/// Writes the module into `dir` (which must not exist or be empty), its
/// go.mod replacing `iar.dev/sdk` with `sdk` (a directory holding the Go
/// SDK). Returns the files written.
pub fn write(name: &str, dir: &Path, sdk: &Path) -> anyhow::Result<Vec<PathBuf>> {
    check_name(name)?;
    if !sdk.join("go.mod").exists() {
        bail!(
            "{} is not the Go SDK (no go.mod): pass --sdk with iar's go-sdk directory",
            sdk.display()
        );
    }
    if dir.exists()
        && std::fs::read_dir(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .next()
            .is_some()
    {
        bail!("{} exists and is not empty", dir.display());
    }
    let files = [
        (
            "go.mod".to_string(),
            GO_MOD
                .replace("{name}", name)
                .replace("{sdk}", &sdk.display().to_string()),
        ),
        ("main.go".into(), MAIN_GO.replace("{name}", name)),
        (
            format!("{name}.iar-test.yaml"),
            crate::scaffold::TEST_YAML
                .replace(
                    "`cargo build --target wasm32-wasip2 --release`",
                    "`iar build`",
                )
                .replace("target/wasm32-wasip2/release/{wasm}.wasm", "{name}.wasm")
                .replace("{name}", name),
        ),
        ("README.md".into(), README.replace("{name}", name)),
        (".gitignore".into(), "*.wasm\n".to_string()),
    ];
    let mut written = Vec::new();
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for (rel, text) in files {
        let path = dir.join(rel);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

const GO_MOD: &str = r#"module {name}

go 1.24

require iar.dev/sdk v0.0.0

// iar's Go SDK, from a local copy: it has no dependencies of its own, so
// the build fetches nothing.
replace iar.dev/sdk => {sdk}
"#;

const MAIN_GO: &str = r#"// Command {name} is a pair of iar item actions, as a Velero plugin ships
// them. The backup half labels every Pod and ConfigMap it is given, so a
// restore can tell which backup tool saved them; the restore half takes
// the label off again, since the restored object is a new one.
//
// Config (the plugin's settings file, or `iar run --config key=value`):
// label is the key=value to set (default backed-up-by={name}).
package main

import (
	"fmt"
	"strings"

	"iar.dev/sdk/backupaction"
	"iar.dev/sdk/host"
	"iar.dev/sdk/log"
	"iar.dev/sdk/restoreaction"
	"iar.dev/sdk/unstructured"
	"iar.dev/sdk/velero"
)

// Velero's interfaces; the embedded types answer Progress and Cancel for
// an action that starts no operations.
type backupPlugin struct {
	velero.NoBackupOperations
	log log.FieldLogger
}

type restorePlugin struct {
	velero.NoRestoreOperations
	log log.FieldLogger
}

// A component runs init() when it is instantiated (never main): register
// the actions there. Importing backupaction and restoreaction is what
// exports them.
func init() {
	backupaction.Register(&backupPlugin{log: log.New()})
	restoreaction.Register(&restorePlugin{log: log.New()})
}

func main() {}

// label is the configured label as key and value.
func label() (string, string, error) {
	l := host.ConfigOr("label", "backed-up-by={name}")
	k, v, ok := strings.Cut(l, "=")
	if !ok {
		// An error fails this item, not the backup, and names it.
		return "", "", fmt.Errorf("config label: %q is not key=value", l)
	}
	return strings.TrimSpace(k), strings.TrimSpace(v), nil
}

// AppliesTo is asked once when the plugin is loaded: Execute is called
// only for the items this selects (resources, namespaces, labels).
func (p *backupPlugin) AppliesTo() (velero.ResourceSelector, error) {
	return velero.ResourceSelector{IncludedResources: []string{"pods", "configmaps"}}, nil
}

// Execute is called for each selected item. Return the item, changed or
// not; the host refuses one whose kind, namespace or name changed.
func (p *backupPlugin) Execute(item *unstructured.Unstructured, backup *velero.Backup) (*unstructured.Unstructured, []velero.ResourceIdentifier, string, []velero.ResourceIdentifier, error) {
	k, v, err := label()
	if err != nil {
		return nil, nil, "", nil, err
	}
	item.SetLabel(k, v)
	if backup.Phase == velero.PhaseFinalize {
		p.log.Debugf("finalizing %s", item.GetName())
	}
	return item, nil, "", nil, nil
}

func (p *restorePlugin) AppliesTo() (velero.ResourceSelector, error) {
	return velero.ResourceSelector{IncludedResources: []string{"pods", "configmaps"}}, nil
}

// Execute is called for each selected item of a restore, before it is
// created: input.Item as it will be created (still in its backed-up
// namespace, as Velero hands it over: the restore maps it after),
// input.ItemFromBackup as it was saved.
func (p *restorePlugin) Execute(input *velero.RestoreItemActionExecuteInput) (*velero.RestoreItemActionExecuteOutput, error) {
	k, _, err := label()
	if err != nil {
		return nil, err
	}
	labels := input.Item.GetLabels()
	if _, ok := labels[k]; ok {
		delete(labels, k)
		input.Item.SetLabels(labels)
		p.log.Debugf("restoring %s from %s", input.Item.GetName(), input.Restore.Spec.BackupName)
	}
	return velero.NewRestoreItemActionExecuteOutput(input.Item), nil
}
"#;

const README: &str = r#"# {name}

A pair of iar item actions (backup and restore) in Go: a Kubernetes
backup plugin that runs as a sandboxed WebAssembly component.

```sh
iar build                  # go build (GOOS=wasip1) + iar componentize -> {name}.wasm
iar test                   # runs {name}.iar-test.yaml
iar conformance {name}.wasm
iar run --plugin {name}.wasm --item pod.yaml
```

`main.go` is the pair of actions, shaped like Velero's BackupItemActionV2
and RestoreItemActionV2; `{name}.iar-test.yaml` holds their tests. See
iar's `docs/plugin-guide.md` (Go) for the SDK, the limits and what each
error means.
"#;
