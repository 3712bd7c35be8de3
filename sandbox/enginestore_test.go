package sandbox

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

func TestEngineStoreKey(t *testing.T) {
	imgs := []builtImage{{Ref: RiggerImage, Key: "r1", Rigger: true}, {Ref: ToolsImage, Key: "t1"}, {Ref: HyperkubeImage, Key: "h1"},
		{Ref: RKEToolsStandInImage, Key: "s1", Rigger: true}, {Ref: HyperkubeRef("v1.34.4"), Key: "x1"}}
	stored := storeImages(imgs)
	if refs := imageRefs(stored); !slices.Equal(refs, []string{ToolsImage, HyperkubeImage, HyperkubeRef("v1.34.4")}) {
		t.Fatalf("storeImages = %v, want all but the images with rigger's binary", refs)
	}
	base := engineStoreKey("Docker version 20.10.24", stored)
	if again := engineStoreKey("Docker version 20.10.24\n", []builtImage{stored[2], stored[0], stored[1]}); again != base {
		t.Errorf("the same images in another order and engine give %s and %s", base, again)
	}
	rebuilt := slices.Clone(imgs)
	rebuilt[0].Key, rebuilt[3].Key = "r2", "s2"
	if k := engineStoreKey("Docker version 20.10.24", storeImages(rebuilt)); k != base {
		t.Errorf("a new rigger changed the store key (%s, was %s): every build of rigger would make the store again", k, base)
	}
	changed := []builtImage{{Ref: ToolsImage, Key: "t1"}, {Ref: HyperkubeImage, Key: "h2"}, {Ref: HyperkubeRef("v1.34.4"), Key: "x1"}}
	if k := engineStoreKey("Docker version 20.10.24", changed); k == base {
		t.Error("an image with new content kept the store key")
	}
	if k := engineStoreKey("Docker version 24.0.7", stored); k == base {
		t.Error("another engine version kept the store key")
	}
}

// TestEngineStores: a store holding more than a sandbox asks for is the
// one it seeds from; a new store keeps what the newest one had; the old
// ones go, but for one a node is being seeded from.
func TestEngineStores(t *testing.T) {
	const version = "Docker version 20.10.24"
	cache := t.TempDir()
	archive := func(name string) string {
		path := filepath.Join(cache, "images", name+".tar")
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	tools := builtImage{Ref: ToolsImage, Key: "t1", Archive: archive("tools")}
	kube := builtImage{Ref: HyperkubeImage, Key: "h1", Archive: archive("kube")}
	next := builtImage{Ref: HyperkubeRef("v1.33.13"), Key: "x1", Archive: archive("kube133")}
	gone := builtImage{Ref: HyperkubeRef("v1.34.4"), Key: "y1", Archive: filepath.Join(cache, "images", "no-longer.tar")}
	base := filepath.Join(cache, "engine")
	makeStore := func(imgs ...builtImage) string {
		dir := filepath.Join(base, engineStoreKey(version, imgs))
		if err := os.MkdirAll(filepath.Join(dir, "overlay2"), 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(imgs)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, storeManifest), b, 0o600); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	older := makeStore(tools, kube)
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(older, old, old); err != nil {
		t.Fatal(err)
	}
	newest := makeStore(tools, kube, next, gone)
	if err := os.MkdirAll(filepath.Join(base, "0123456789abcdef0123"), 0o755); err != nil { // a store of before, without a manifest
		t.Fatal(err)
	}

	stores := engineStores(base, version)
	if len(stores) != 2 || stores[0].dir != newest || stores[1].dir != older {
		t.Fatalf("engineStores = %+v, want the two with manifests, newest first", stores)
	}
	if !stores[0].holds([]builtImage{kube, tools}) {
		t.Error("a store with two more releases does not hold the default images")
	}
	if stores[1].holds([]builtImage{tools, next}) {
		t.Error("a store without v1.33.13 holds it")
	}
	if stores[0].holds([]builtImage{tools, {Ref: HyperkubeImage, Key: "h2"}}) {
		t.Error("a store holds an image rebuilt with other content")
	}

	rebuiltKube := builtImage{Ref: HyperkubeImage, Key: "h2", Archive: archive("kube-h2")}
	union := storeUnion([]builtImage{tools, rebuiltKube}, stores[0].images)
	if got := imageRefs(union); !slices.Equal(got, []string{ToolsImage, HyperkubeImage, HyperkubeRef("v1.33.13")}) {
		t.Errorf("storeUnion = %v: want what was asked for and the newest store's v1.33.13, not its v1.34.4 whose archive is gone", got)
	}
	if union[1].Key != "h2" {
		t.Errorf("storeUnion kept the old content of %s", HyperkubeImage)
	}

	// A node being seeded from the older store (its lock held shared)
	// keeps it; everything else but the store kept goes.
	seeding, err := lockFileShared(context.Background(), older+".lock")
	if err != nil {
		t.Fatal(err)
	}
	removeEngineStores(base, newest, newProgress(nil))
	entries, _ := os.ReadDir(base)
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if want := []string{filepath.Base(newest), filepath.Base(older), filepath.Base(older) + ".lock"}; !sameSet(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}
	seeding.unlock()
	removeEngineStores(base, newest, newProgress(nil))
	if _, err := os.Stat(older); !os.IsNotExist(err) {
		t.Errorf("the older store, no longer seeded from, is still there (%v)", err)
	}
}

func imageRefs(imgs []builtImage) []string {
	var refs []string
	for _, img := range imgs {
		refs = append(refs, img.Ref)
	}
	return refs
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
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
