// Command velero-store-reader reads every backup in a backup store with
// Velero's own persistence code (pkg/persistence: the store Velero's
// server syncs backups from, describes them from and restores them from),
// and prints what it read. iar's tests use it to check that a store iar
// wrote is one Velero reads, whatever faults it was written under.
//
// Usage: velero-store-reader BUCKET_DIR
//
// BUCKET_DIR is a bucket as a directory (versitygw's posix backend keeps
// each object as a file under it). The output is one JSON object per
// backup, {"name", "phase", "items", "error"}; the exit status is 1 when
// the store is not valid to Velero or any backup could not be read.
package main

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	velerov1api "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"github.com/vmware-tanzu/velero/pkg/persistence"
	"github.com/vmware-tanzu/velero/pkg/plugin/velero"
)

// dirStore is a velero.ObjectStore over a directory of buckets: the
// smallest object store Velero's persistence code can be given.
type dirStore struct{ root string }

func (d dirStore) path(bucket, key string) string {
	return filepath.Join(d.root, bucket, filepath.FromSlash(key))
}

func (d dirStore) Init(map[string]string) error { return nil }

func (d dirStore) PutObject(string, string, io.Reader) error {
	return errors.New("read only")
}

func (d dirStore) ObjectExists(bucket, key string) (bool, error) {
	info, err := os.Stat(d.path(bucket, key))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil && info.Mode().IsRegular(), err
}

func (d dirStore) GetObject(bucket, key string) (io.ReadCloser, error) {
	return os.Open(d.path(bucket, key))
}

// ListCommonPrefixes gives each key's prefix up to the first delimiter
// after prefix, with the delimiter, as S3 does.
func (d dirStore) ListCommonPrefixes(bucket, prefix, delimiter string) ([]string, error) {
	keys, err := d.ListObjects(bucket, prefix)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, key := range keys {
		rest := strings.TrimPrefix(key, prefix)
		if i := strings.Index(rest, delimiter); i >= 0 {
			common := prefix + rest[:i+len(delimiter)]
			if !seen[common] {
				seen[common] = true
				out = append(out, common)
			}
		}
	}
	return out, nil
}

func (d dirStore) ListObjects(bucket, prefix string) ([]string, error) {
	root := filepath.Join(d.root, bucket)
	var keys []string
	err := filepath.WalkDir(root, func(path string, entry fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		// versitygw's own scratch (multipart parts), which its S3
		// listing never shows.
		if entry.IsDir() && entry.Name() == ".sgwtmp" {
			return fs.SkipDir
		}
		if !entry.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if strings.HasPrefix(key, prefix) {
			keys = append(keys, key)
		}
		return nil
	})
	sort.Strings(keys)
	return keys, err
}

func (d dirStore) DeleteObject(string, string) error { return errors.New("read only") }

func (d dirStore) CreateSignedURL(string, string, time.Duration) (string, error) {
	return "", errors.New("no signed URLs")
}

type getter struct{ store velero.ObjectStore }

func (g getter) GetObjectStore(string) (velero.ObjectStore, error) { return g.store, nil }

type result struct {
	Name  string `json:"name"`
	Phase string `json:"phase,omitempty"`
	Items int    `json:"items"`
	Error string `json:"error,omitempty"`
}

// read reads one backup as Velero's restore and describe do: its
// metadata, its item operations, volume snapshots, volume infos and pod
// volume backups, and every entry of its tarball.
func read(store persistence.BackupStore, name string) result {
	r := result{Name: name}
	backup, err := store.GetBackupMetadata(name)
	if err != nil {
		r.Error = fmt.Sprintf("metadata: %v", err)
		return r
	}
	r.Phase = string(backup.Status.Phase)
	if backup.Name != name {
		r.Error = fmt.Sprintf("metadata names %q", backup.Name)
		return r
	}
	if _, err := store.GetBackupItemOperations(name); err != nil {
		r.Error = fmt.Sprintf("item operations: %v", err)
		return r
	}
	if _, err := store.GetBackupVolumeSnapshots(name); err != nil {
		r.Error = fmt.Sprintf("volume snapshots: %v", err)
		return r
	}
	if _, err := store.GetBackupVolumeInfos(name); err != nil {
		r.Error = fmt.Sprintf("volume infos: %v", err)
		return r
	}
	if _, err := store.GetPodVolumeBackups(name); err != nil {
		r.Error = fmt.Sprintf("pod volume backups: %v", err)
		return r
	}
	// A backup that never wrote its tarball (Failed before its items)
	// has none; one that claims items must have it.
	contents, err := store.GetBackupContents(name)
	if err != nil {
		if backup.Status.Phase == velerov1api.BackupPhaseCompleted ||
			backup.Status.Phase == velerov1api.BackupPhasePartiallyFailed {
			r.Error = fmt.Sprintf("contents: %v", err)
		}
		return r
	}
	defer contents.Close()
	gz, err := gzip.NewReader(contents)
	if err != nil {
		r.Error = fmt.Sprintf("contents: %v", err)
		return r
	}
	archive := tar.NewReader(gz)
	for {
		header, err := archive.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			r.Error = fmt.Sprintf("contents: %v", err)
			return r
		}
		if _, err := io.Copy(io.Discard, archive); err != nil {
			r.Error = fmt.Sprintf("contents %s: %v", header.Name, err)
			return r
		}
		if header.Typeflag == tar.TypeReg && strings.HasSuffix(header.Name, ".json") {
			r.Items++
		}
	}
	return r
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: velero-store-reader BUCKET_DIR")
		os.Exit(2)
	}
	dir := filepath.Clean(os.Args[1])
	location := &velerov1api.BackupStorageLocation{
		Spec: velerov1api.BackupStorageLocationSpec{
			Provider: "dir",
			StorageType: velerov1api.StorageType{
				ObjectStorage: &velerov1api.ObjectStorageLocation{Bucket: filepath.Base(dir)},
			},
		},
	}
	logger := logrus.New()
	logger.SetOutput(os.Stderr)
	store, err := persistence.NewObjectBackupStoreGetter(nil).
		Get(location, getter{dirStore{root: filepath.Dir(dir)}}, logger)
	if err != nil {
		fmt.Fprintln(os.Stderr, "velero-store-reader:", err)
		os.Exit(1)
	}
	if err := store.IsValid(); err != nil {
		fmt.Fprintln(os.Stderr, "velero-store-reader:", err)
		os.Exit(1)
	}
	names, err := store.ListBackups()
	if err != nil {
		fmt.Fprintln(os.Stderr, "velero-store-reader:", err)
		os.Exit(1)
	}
	sort.Strings(names)
	failed := false
	out := json.NewEncoder(os.Stdout)
	for _, name := range names {
		r := read(store, name)
		failed = failed || r.Error != ""
		_ = out.Encode(r)
	}
	if failed {
		os.Exit(1)
	}
}
