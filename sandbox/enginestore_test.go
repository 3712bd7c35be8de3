package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

func TestEngineStoreKey(t *testing.T) {
	imgs := []builtImage{{Ref: RiggerImage, Key: "r1"}, {Ref: ToolsImage, Key: "t1"}, {Ref: HyperkubeImage, Key: "h1"}}
	stored := storeImages(imgs)
	if len(stored) != 2 || stored[0].Ref != ToolsImage || stored[1].Ref != HyperkubeImage {
		t.Fatalf("storeImages = %v, want all but %s", stored, RiggerImage)
	}
	base := engineStoreKey("Docker version 20.10.24", stored)
	withExtra := append(slices.Clone(imgs), builtImage{Ref: HyperkubeRef("v1.34.4"), Key: "x1", Extra: true})
	if k := engineStoreKey("Docker version 20.10.24", storeImages(withExtra)); k != base {
		t.Errorf("another release's image changed the store key (%s, was %s): asking for a release would make the store again", k, base)
	}
	if again := engineStoreKey("Docker version 20.10.24\n", storeImages(imgs)); again != base {
		t.Errorf("the same images and engine give %s and %s", base, again)
	}
	rebuilt := []builtImage{{Ref: RiggerImage, Key: "r2"}, {Ref: ToolsImage, Key: "t1"}, {Ref: HyperkubeImage, Key: "h1"}}
	if k := engineStoreKey("Docker version 20.10.24", storeImages(rebuilt)); k != base {
		t.Errorf("a new rigger image changed the store key (%s, was %s): every build of rigger would make the store again", k, base)
	}
	changed := []builtImage{{Ref: ToolsImage, Key: "t1"}, {Ref: HyperkubeImage, Key: "h2"}}
	if k := engineStoreKey("Docker version 20.10.24", changed); k == base {
		t.Error("an image with new content kept the store key")
	}
	if k := engineStoreKey("Docker version 24.0.7", stored); k == base {
		t.Error("another engine version kept the store key")
	}
}

func TestSeedEngine(t *testing.T) {
	ctx := context.Background()
	store := t.TempDir()
	layer := filepath.Join(store, "overlay2", "abc", "diff", "bin", "tool")
	meta := filepath.Join(store, "image", "overlay2", "repositories.json")
	for path, body := range map[string]string{layer: "layer file", meta: `{"Repositories":{}}`} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../abc/diff", filepath.Join(store, "overlay2", "l")); err != nil {
		t.Fatal(err)
	}
	n := Node{Name: "node1", Dir: t.TempDir()}
	root := n.mountDir("/var/lib/docker")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}

	seeded, err := seedEngine(ctx, n, store)
	if err != nil || !seeded {
		t.Fatalf("seedEngine of a new node = %v, %v; want true", seeded, err)
	}
	if !sameFile(t, layer, filepath.Join(root, "overlay2", "abc", "diff", "bin", "tool")) {
		t.Error("a layer file was copied, not hard-linked")
	}
	if sameFile(t, meta, filepath.Join(root, "image", "overlay2", "repositories.json")) {
		t.Error("the image metadata is hard-linked: an engine that rewrote it in place would change every node's")
	}
	if target, err := os.Readlink(filepath.Join(root, "overlay2", "l")); err != nil || target != "../abc/diff" {
		t.Errorf("the layer link is %q, %v; want ../abc/diff", target, err)
	}
	if _, err := os.Stat(filepath.Join(root, ".rigger-seed")); !os.IsNotExist(err) {
		t.Errorf("the copy's working directory is left: %v", err)
	}

	// An engine that has run keeps its data root as it is.
	if err := os.WriteFile(filepath.Join(root, "image", "overlay2", "repositories.json"), []byte("the node's own"), 0o644); err != nil {
		t.Fatal(err)
	}
	if seeded, err := seedEngine(ctx, n, store); err != nil || seeded {
		t.Errorf("seedEngine of a node whose engine has run = %v, %v; want false", seeded, err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "image", "overlay2", "repositories.json")); string(b) != "the node's own" {
		t.Errorf("a second seed changed the node's metadata to %q", b)
	}

	// A copy that fails leaves nothing in place, and the engine imports
	// every image itself.
	other := Node{Name: "node2", Dir: t.TempDir()}
	if err := os.MkdirAll(other.mountDir("/var/lib/docker"), 0o755); err != nil {
		t.Fatal(err)
	}
	if seeded, err := seedEngine(ctx, other, filepath.Join(store, "missing")); err == nil || seeded {
		t.Errorf("seedEngine from a missing store = %v, %v; want an error", seeded, err)
	}
	if entries, _ := os.ReadDir(other.mountDir("/var/lib/docker")); len(entries) != 0 {
		t.Errorf("a failed seed left %v in the data root", entries)
	}
}

func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	var sa, sb syscall.Stat_t
	if err := syscall.Stat(a, &sa); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(b, &sb); err != nil {
		t.Fatal(err)
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino
}
