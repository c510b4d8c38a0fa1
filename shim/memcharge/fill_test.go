package memcharge

import (
	"os"
	"path/filepath"
	"testing"
)

// TestShmemHugeMayApply reads THP settings as sysfs shows them: any that
// lets a memfd's fallocate take huge folios makes helpers fill by pages.
func TestShmemHugeMayApply(t *testing.T) {
	for _, c := range []struct {
		name   string
		global string
		sizes  map[string]string
		want   bool
	}{
		{"none", "", nil, false},
		{"never", "always within_size advise [never] deny force", nil, false},
		{"advise", "always within_size advise [advise] deny force", nil, false},
		{"always", "[always] within_size advise never deny force", nil, true},
		{"within_size", "always [within_size] advise never deny force", nil, true},
		{"force", "always within_size advise never deny [force]", nil, true},
		{"mthp always", "always within_size advise [never] deny force",
			map[string]string{"hugepages-64kB": "[always] inherit within_size advise never", "hugepages-2048kB": "always inherit within_size advise [never]"}, true},
		{"mthp inherit never", "always within_size advise [never] deny force",
			map[string]string{"hugepages-64kB": "always [inherit] within_size advise never"}, false},
		{"mthp all never", "always within_size advise [deny] deny force",
			map[string]string{"hugepages-16kB": "always inherit within_size advise [never]", "hugepages-64kB": "always inherit within_size [advise] never"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if c.global != "" {
				writeSetting(t, filepath.Join(dir, "shmem_enabled"), c.global)
			}
			for size, v := range c.sizes {
				if err := os.Mkdir(filepath.Join(dir, size), 0o755); err != nil {
					t.Fatal(err)
				}
				writeSetting(t, filepath.Join(dir, size, "shmem_enabled"), v)
			}
			if got := shmemHugeMayApply(dir); got != c.want {
				t.Fatalf("shmemHugeMayApply = %v, want %v", got, c.want)
			}
		})
	}
}

func writeSetting(t *testing.T, path, v string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(v+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestFillByPages runs the charge and text tests with helpers that fill
// by pages, as they do on hosts with shmem THP enabled: the same charges,
// refusals at the limit and invariants as by fallocate.
func TestFillByPages(t *testing.T) {
	t.Setenv(FillModeEnv, "pages")
	for name, f := range map[string]func(*testing.T){
		"ChargeReachesCgroup":           TestChargeReachesCgroup,
		"ChargeRefusedAtLimit":          TestChargeRefusedAtLimit,
		"TextsInPodPages":               TestTextsInPodPages,
		"TextRefusedAtLimit":            TestTextRefusedAtLimit,
		"TextsShareBlocks":              TestTextsShareBlocks,
		"TextFillFailureKeepsLiveTexts": TestTextFillFailureKeepsLiveTexts,
		"ArenaInvariants":               TestArenaInvariants,
	} {
		t.Run(name, f)
	}
}
