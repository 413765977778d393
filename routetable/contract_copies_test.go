package routetable

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestContractExampleCopiesAreCurrent: packages test against copies of the contract's
// examples (so the tests need nothing outside the repository). Where the shared contract
// lies beside the repository, as on developer machines and in CI, every copy must still
// equal its original.
func TestContractExampleCopiesAreCurrent(t *testing.T) {
	const shared = "../../shared/contract/examples"
	if _, err := os.Stat(shared); errors.Is(err, fs.ErrNotExist) {
		t.Log("no shared contract beside the repository; nothing to compare")
		return
	}
	copies := 0
	for _, dir := range []string{"testdata/examples", "../stats/testdata", "../relay/testdata", "../relaysim/testdata", "../register/testdata"} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.IsDir() || filepath.Ext(e.Name()) != ".json" {
				continue
			}
			original, err := os.ReadFile(filepath.Join(shared, e.Name()))
			if errors.Is(err, fs.ErrNotExist) {
				continue // a test fixture of our own, not a copy
			}
			if err != nil {
				t.Fatal(err)
			}
			cp, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			copies++
			if !bytes.Equal(bytes.TrimSpace(cp), bytes.TrimSpace(original)) {
				t.Errorf("%s/%s differs from the contract's example: copy it again", dir, e.Name())
			}
		}
	}
	if copies == 0 {
		t.Fatal("found no copies of the contract's examples")
	}
}
