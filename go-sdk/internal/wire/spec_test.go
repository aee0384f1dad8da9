package wire

import (
	"reflect"
	"testing"

	"iar.dev/sdk/velero"
)

// A repeated spec is handed out as a copy that shares nothing with the
// one kept: every slice, map and pointer field of the spec types (this
// fails when a field is added to them and not to their clone).
func TestARepeatedSpecSharesNothing(t *testing.T) {
	text := `{"includedNamespaces":["a"],"excludedNamespaces":["b"],"includedResources":["c"],"excludedResources":["d"],"storageLocation":"s","snapshotVolumes":true,"defaultVolumesToFsBackup":false,"includeClusterResources":true}`
	var first, second velero.BackupSpec
	if err := backupSpecs.decode(text, &first, cloneBackupSpec); err != nil {
		t.Fatal(err)
	}
	if err := backupSpecs.decode(text, &second, cloneBackupSpec); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(first, second) || !reflect.DeepEqual(first, backupSpecs.spec) {
		t.Fatalf("%+v %+v", first, second)
	}
	sharesNothing(t, reflect.ValueOf(second), reflect.ValueOf(backupSpecs.spec))

	var r velero.RestoreSpec
	if err := restoreSpecs.decode(`{"backupName":"b","namespaceMapping":{"a":"b"}}`, &r, cloneRestoreSpec); err != nil {
		t.Fatal(err)
	}
	if err := restoreSpecs.decode(`{"backupName":"b","namespaceMapping":{"a":"b"}}`, &r, cloneRestoreSpec); err != nil {
		t.Fatal(err)
	}
	sharesNothing(t, reflect.ValueOf(r), reflect.ValueOf(restoreSpecs.spec))
}

func sharesNothing(t *testing.T, a, b reflect.Value) {
	t.Helper()
	for i := 0; i < a.NumField(); i++ {
		f, g := a.Field(i), b.Field(i)
		switch f.Kind() {
		case reflect.Slice, reflect.Map, reflect.Pointer:
			if f.IsNil() {
				t.Errorf("%s: the test's spec leaves it unset", a.Type().Field(i).Name)
			} else if f.UnsafePointer() == g.UnsafePointer() {
				t.Errorf("%s: shared with the kept spec", a.Type().Field(i).Name)
			}
		case reflect.String, reflect.Bool:
		default:
			t.Errorf("%s: a %s field the clone does not know", a.Type().Field(i).Name, f.Kind())
		}
	}
}

func TestADifferentSpecIsDecodedAgain(t *testing.T) {
	var s velero.BackupSpec
	for _, loc := range []string{"one", "two", "one"} {
		if err := backupSpecs.decode(`{"storageLocation":"`+loc+`"}`, &s, cloneBackupSpec); err != nil {
			t.Fatal(err)
		}
		if s.StorageLocation != loc {
			t.Errorf("got %q, want %q", s.StorageLocation, loc)
		}
	}
	if err := backupSpecs.decode(`{"storageLocation":`, &s, cloneBackupSpec); err == nil {
		t.Error("an invalid spec decoded")
	}
}
