package simnode

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
)

// The engine's versions: an engine that RKE's Kubernetes versions
// support, speaking an API version rigger's client negotiates down to.
const (
	EngineVersion = "26.1.5"
	APIVersion    = "1.45"
)

// Engine is an in-process Docker Engine API keeping its state in memory:
// containers (created, running or exited; nothing runs), the images it
// has, and the host's files that containers bind-mount. It answers what
// rigger's observe and execute call: ping, version, info, the container
// list, inspect, create, start, stop, restart, rename, remove and logs,
// the archive API (GET, HEAD, PUT) and image inspect and pull. Anything
// else is a 404 with the engine's JSON error shape.
type Engine struct {
	srv      *http.Server
	ln       *connListener
	requests atomic.Int64
	// delay is how long each request waits before it is answered
	// (SetDelay).
	delay atomic.Int64
	// hostile is how the engine answers (SetHostile; nil: as an engine).
	hostile atomic.Pointer[Hostile]

	mu         sync.Mutex
	containers map[string]*simContainer // by ID
	names      map[string]string        // name → ID
	images     map[string]bool
	files      map[string][]byte // the host's files, by absolute path
}

type simContainer struct {
	id, name string
	created  time.Time
	started  time.Time
	config   container.Config
	host     container.HostConfig
	state    container.ContainerState
	exitCode int
	// own are the files of the container's own filesystem (what is
	// written outside its bind mounts).
	own map[string][]byte
}

// Container is a container to put on a node before a run (Engine.Add).
type Container struct {
	Name       string
	Image      string
	Labels     map[string]string
	Binds      []string // host:container[:options]
	Entrypoint []string
	Cmd        []string
	Env        []string
	// State is running when empty; else created or exited.
	State container.ContainerState
}

// NewEngine returns an engine with nothing on it, serving the connections
// its node hands it.
func NewEngine() *Engine {
	e := &Engine{ln: newConnListener(), containers: map[string]*simContainer{}, names: map[string]string{},
		images: map[string]bool{}, files: map[string][]byte{}}
	e.srv = &http.Server{Handler: e.routes(), ReadHeaderTimeout: time.Minute}
	go func() { _ = e.srv.Serve(e.ln) }()
	return e
}

// Close stops the API and closes its connections.
func (e *Engine) Close() { _ = e.srv.Close() }

// serveConn serves the API on c; false when the engine is closed.
func (e *Engine) serveConn(c net.Conn) bool { return e.ln.put(c) }

// SetDelay makes the engine wait d before it answers each request (0:
// none): a slow node, an engine under load or far away.
func (e *Engine) SetDelay(d time.Duration) { e.delay.Store(int64(d)) }

// Requests is how many API requests the engine has answered.
func (e *Engine) Requests() int { return int(e.requests.Load()) }

// Add puts a container on the node, with its image, and returns its ID.
func (e *Engine) Add(c Container) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	state := c.State
	if state == "" {
		state = container.StateRunning
	}
	sc := e.newContainer(c.Name, container.Config{Image: c.Image, Labels: c.Labels, Entrypoint: c.Entrypoint,
		Cmd: c.Cmd, Env: c.Env}, container.HostConfig{Binds: c.Binds})
	sc.state = state
	if state == container.StateRunning {
		sc.started = sc.created
	}
	e.images[c.Image] = true
	return sc.id
}

// AddImage puts an image on the node.
func (e *Engine) AddImage(ref string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.images[ref] = true
}

// WriteFile puts a file on the node's host filesystem.
func (e *Engine) WriteFile(p string, b []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.files[path.Clean(p)] = b
}

// Files returns a copy of the node's host files.
func (e *Engine) Files() map[string][]byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string][]byte, len(e.files))
	for p, b := range e.files {
		out[p] = b
	}
	return out
}

// ContainerStates returns the state of each container, by name.
func (e *Engine) ContainerStates() map[string]container.ContainerState {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]container.ContainerState, len(e.containers))
	for _, c := range e.containers {
		out[c.name] = c.state
	}
	return out
}

// running reports whether a container named name runs, and since when.
func (e *Engine) running(name string) (time.Time, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.containers[e.names[name]]
	if c == nil || c.state != container.StateRunning {
		return time.Time{}, false
	}
	return c.started, true
}

// newContainer records a created container; e.mu is held.
func (e *Engine) newContainer(name string, cfg container.Config, host container.HostConfig) *simContainer {
	var b [32]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	if name == "" {
		name = "sim_" + id[:12]
	}
	c := &simContainer{id: id, name: name, created: time.Now(), config: cfg, host: host,
		state: container.StateCreated, own: map[string][]byte{}}
	e.containers[id] = c
	e.names[name] = id
	return c
}

// lookup finds a container by ID, name or ID prefix; e.mu is held.
func (e *Engine) lookup(ref string) *simContainer {
	ref = strings.TrimPrefix(ref, "/")
	if c := e.containers[ref]; c != nil {
		return c
	}
	if id, ok := e.names[ref]; ok {
		return e.containers[id]
	}
	if len(ref) >= 12 {
		for id, c := range e.containers {
			if strings.HasPrefix(id, ref) {
				return c
			}
		}
	}
	return nil
}

var versionPrefix = regexp.MustCompile(`^/v[0-9]+\.[0-9]+/`)

func (e *Engine) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /_ping", e.ping)
	mux.HandleFunc("HEAD /_ping", e.ping)
	mux.HandleFunc("GET /version", e.version)
	mux.HandleFunc("GET /info", e.info)
	mux.HandleFunc("GET /containers/json", e.list)
	mux.HandleFunc("POST /containers/create", e.create)
	mux.HandleFunc("GET /containers/{id}/json", e.withContainer(e.inspect))
	mux.HandleFunc("POST /containers/{id}/start", e.withContainer(e.start))
	mux.HandleFunc("POST /containers/{id}/stop", e.withContainer(e.stop))
	mux.HandleFunc("POST /containers/{id}/kill", e.withContainer(e.stop))
	mux.HandleFunc("POST /containers/{id}/restart", e.withContainer(e.restart))
	mux.HandleFunc("POST /containers/{id}/rename", e.withContainer(e.rename))
	mux.HandleFunc("DELETE /containers/{id}", e.withContainer(e.remove))
	mux.HandleFunc("GET /containers/{id}/logs", e.withContainer(e.logs))
	mux.HandleFunc("GET /containers/{id}/archive", e.withContainer(e.getArchive))
	mux.HandleFunc("HEAD /containers/{id}/archive", e.withContainer(e.getArchive))
	mux.HandleFunc("PUT /containers/{id}/archive", e.withContainer(e.putArchive))
	mux.HandleFunc("POST /images/create", e.pull)
	mux.HandleFunc("GET /images/", e.imageInspect)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		apiError(w, http.StatusNotFound, "page not found (not simulated): "+r.Method+" "+r.URL.Path)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.requests.Add(1)
		if d := time.Duration(e.delay.Load()); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		w.Header().Set("Api-Version", APIVersion)
		w.Header().Set("Ostype", "linux")
		w.Header().Set("Server", "Docker/"+EngineVersion+" (linux) simulated")
		if loc := versionPrefix.FindStringIndex(r.URL.Path); loc != nil {
			r.URL.Path = r.URL.Path[loc[1]-1:]
			r.URL.RawPath = ""
		}
		if e.answerHostile(w, r) {
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func apiError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"message": msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (e *Engine) ping(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-cache, no-store, must-revalidate")
	if r.Method == http.MethodGet {
		_, _ = io.WriteString(w, "OK")
	}
}

func (e *Engine) version(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, types.Version{Version: EngineVersion, APIVersion: APIVersion, MinAPIVersion: "1.24",
		Os: "linux", Arch: "amd64", KernelVersion: "simulated"})
}

func (e *Engine) info(w http.ResponseWriter, _ *http.Request) {
	e.mu.Lock()
	n := len(e.containers)
	e.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"ID": "simulated", "Containers": n, "ServerVersion": EngineVersion,
		"OSType": "linux", "Architecture": "x86_64", "Driver": "overlay2", "CgroupDriver": "systemd", "CgroupVersion": "2"})
}

func (e *Engine) list(w http.ResponseWriter, r *http.Request) {
	all := r.URL.Query().Get("all")
	f, err := filters.FromJSON(r.URL.Query().Get("filters"))
	if err != nil {
		apiError(w, http.StatusBadRequest, err.Error())
		return
	}
	e.mu.Lock()
	out := make([]container.Summary, 0, len(e.containers))
	for _, c := range e.containers {
		if (all == "" || all == "0" || all == "false") && c.state != container.StateRunning {
			continue
		}
		if !f.MatchKVList("label", c.config.Labels) || (f.Contains("name") && !f.Match("name", c.name)) ||
			(f.Contains("status") && !f.ExactMatch("status", string(c.state))) {
			continue
		}
		out = append(out, c.summary())
	}
	e.mu.Unlock()
	slices.SortFunc(out, func(a, b container.Summary) int { return strings.Compare(a.Names[0], b.Names[0]) })
	writeJSON(w, http.StatusOK, out)
}

func (c *simContainer) mounts() []container.MountPoint {
	var out []container.MountPoint
	for _, b := range c.host.Binds {
		parts := strings.Split(b, ":")
		if len(parts) < 2 {
			continue
		}
		m := container.MountPoint{Type: mount.TypeBind, Source: parts[0], Destination: parts[1], RW: true,
			Propagation: mount.PropagationRPrivate}
		if len(parts) > 2 {
			m.Mode = parts[2]
			m.RW = !slices.Contains(strings.Split(parts[2], ","), "ro")
		}
		out = append(out, m)
	}
	return out
}

func (c *simContainer) status() string {
	switch c.state {
	case container.StateRunning:
		return "Up " + upFor(time.Since(c.started))
	case container.StateExited:
		return fmt.Sprintf("Exited (%d) %s ago", c.exitCode, upFor(time.Since(c.created)))
	}
	return "Created"
}

// upFor writes a duration the way the engine's list does, roughly.
func upFor(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%d seconds", max(1, int(d.Seconds())))
	case d < time.Hour:
		return fmt.Sprintf("%d minutes", int(d.Minutes()))
	}
	return fmt.Sprintf("%d hours", int(d.Hours()))
}

func (c *simContainer) summary() container.Summary {
	return container.Summary{
		ID: c.id, Names: []string{"/" + c.name}, Image: c.config.Image, ImageID: "sha256:" + imageID(c.config.Image),
		Command: strings.Join(slices.Concat(c.config.Entrypoint, c.config.Cmd), " "), Created: c.created.Unix(),
		State: c.state, Status: c.status(), Labels: c.config.Labels, Mounts: c.mounts(),
		HostConfig: struct {
			NetworkMode string            `json:",omitempty"`
			Annotations map[string]string `json:",omitempty"`
		}{NetworkMode: string(c.host.NetworkMode)},
	}
}

func imageID(ref string) string {
	return hex.EncodeToString([]byte(ref + strings.Repeat("0", 32)))[:64]
}

func (e *Engine) create(w http.ResponseWriter, r *http.Request) {
	var req container.CreateRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		apiError(w, http.StatusBadRequest, "decode create request: "+err.Error())
		return
	}
	if req.Config == nil {
		apiError(w, http.StatusBadRequest, "config cannot be empty in order to create a container")
		return
	}
	name := strings.TrimPrefix(r.URL.Query().Get("name"), "/")
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.images[req.Config.Image] {
		apiError(w, http.StatusNotFound, "No such image: "+req.Config.Image)
		return
	}
	if _, ok := e.names[name]; ok && name != "" {
		apiError(w, http.StatusConflict, fmt.Sprintf("Conflict. The container name \"/%s\" is already in use", name))
		return
	}
	var host container.HostConfig
	if req.HostConfig != nil {
		host = *req.HostConfig
	}
	c := e.newContainer(name, *req.Config, host)
	writeJSON(w, http.StatusCreated, container.CreateResponse{ID: c.id, Warnings: []string{}})
}

// withContainer runs h with the container of the path's {id}, e.mu held.
func (e *Engine) withContainer(h func(http.ResponseWriter, *http.Request, *simContainer)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		defer e.mu.Unlock()
		c := e.lookup(r.PathValue("id"))
		if c == nil {
			apiError(w, http.StatusNotFound, "No such container: "+r.PathValue("id"))
			return
		}
		h(w, r, c)
	}
}

func (e *Engine) inspect(w http.ResponseWriter, _ *http.Request, c *simContainer) {
	st := &container.State{Status: c.state, Running: c.state == container.StateRunning, ExitCode: c.exitCode}
	if !c.started.IsZero() {
		st.StartedAt = c.started.Format(time.RFC3339Nano)
	}
	host, cfg := c.host, c.config
	writeJSON(w, http.StatusOK, container.InspectResponse{
		ContainerJSONBase: &container.ContainerJSONBase{
			ID: c.id, Created: c.created.Format(time.RFC3339Nano), Name: "/" + c.name, State: st,
			Image: "sha256:" + imageID(c.config.Image), HostConfig: &host, Driver: "overlay2",
		},
		Config: &cfg, Mounts: c.mounts(),
	})
}

func (e *Engine) start(w http.ResponseWriter, _ *http.Request, c *simContainer) {
	if c.state == container.StateRunning {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	c.state, c.started, c.exitCode = container.StateRunning, time.Now(), 0
	w.WriteHeader(http.StatusNoContent)
}

func (e *Engine) stop(w http.ResponseWriter, _ *http.Request, c *simContainer) {
	if c.state != container.StateRunning {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	c.state = container.StateExited
	w.WriteHeader(http.StatusNoContent)
}

func (e *Engine) restart(w http.ResponseWriter, _ *http.Request, c *simContainer) {
	c.state, c.started, c.exitCode = container.StateRunning, time.Now(), 0
	w.WriteHeader(http.StatusNoContent)
}

func (e *Engine) rename(w http.ResponseWriter, r *http.Request, c *simContainer) {
	name := strings.TrimPrefix(r.URL.Query().Get("name"), "/")
	if _, ok := e.names[name]; ok {
		apiError(w, http.StatusConflict, fmt.Sprintf("Conflict. The container name \"/%s\" is already in use", name))
		return
	}
	delete(e.names, c.name)
	c.name = name
	e.names[name] = c.id
	w.WriteHeader(http.StatusNoContent)
}

func (e *Engine) remove(w http.ResponseWriter, r *http.Request, c *simContainer) {
	force := r.URL.Query().Get("force")
	if c.state == container.StateRunning && force != "1" && force != "true" {
		apiError(w, http.StatusConflict, "cannot remove container \"/"+c.name+"\": container is running: stop the container before removing or force remove")
		return
	}
	delete(e.containers, c.id)
	delete(e.names, c.name)
	w.WriteHeader(http.StatusNoContent)
}

func (e *Engine) logs(w http.ResponseWriter, _ *http.Request, _ *simContainer) {
	w.Header().Set("Content-Type", "application/vnd.docker.multiplexed-stream")
	w.WriteHeader(http.StatusOK)
}

// resolve maps a path in container c to where its content lives: the host
// path under one of its bind mounts (host true), or the container's own
// filesystem.
func (c *simContainer) resolve(p string) (string, bool) {
	p = path.Clean(p)
	for _, m := range c.mounts() {
		dst := path.Clean(m.Destination)
		if p == dst || strings.HasPrefix(p, dst+"/") {
			return path.Join(m.Source, strings.TrimPrefix(p, dst)), true
		}
	}
	return p, false
}

// tree returns the files under p in c (p itself when it is a file):
// relative names, and whether p is a directory; ok is false when nothing
// is there. A bind mount's destination is always there, even empty.
func (e *Engine) tree(c *simContainer, p string) (files map[string][]byte, dir, ok bool) {
	where, onHost := c.resolve(p)
	src := c.own
	if onHost {
		src = e.files
	}
	if b, isFile := src[where]; isFile {
		return map[string][]byte{"": b}, false, true
	}
	files = map[string][]byte{}
	prefix := strings.TrimSuffix(where, "/") + "/"
	for fp, b := range src {
		if strings.HasPrefix(fp, prefix) {
			files[strings.TrimPrefix(fp, prefix)] = b
		}
	}
	mountPoint := slices.ContainsFunc(c.mounts(), func(m container.MountPoint) bool {
		return path.Clean(m.Destination) == path.Clean(p)
	})
	return files, true, len(files) > 0 || mountPoint
}

func (e *Engine) getArchive(w http.ResponseWriter, r *http.Request, c *simContainer) {
	p := path.Clean(r.URL.Query().Get("path"))
	files, dir, ok := e.tree(c, p)
	if !ok {
		apiError(w, http.StatusNotFound, "Could not find the file "+p+" in container "+c.name)
		return
	}
	base := path.Base(p)
	stat := container.PathStat{Name: base, Mode: 0o644, Mtime: c.created}
	if dir {
		stat.Mode = fs.ModeDir | 0o755
	} else {
		stat.Size = int64(len(files[""]))
	}
	js, _ := json.Marshal(stat)
	w.Header().Set("X-Docker-Container-Path-Stat", base64.StdEncoding.EncodeToString(js))
	w.Header().Set("Content-Type", "application/x-tar")
	if r.Method == http.MethodHead {
		return
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if !dir {
		_ = tw.WriteHeader(&tar.Header{Name: base, Mode: 0o644, Size: int64(len(files[""])), ModTime: c.created, Typeflag: tar.TypeReg})
		_, _ = tw.Write(files[""])
	} else {
		names := make([]string, 0, len(files))
		for n := range files {
			names = append(names, n)
		}
		slices.Sort(names)
		dirs := map[string]bool{}
		writeDir := func(d string) {
			if !dirs[d] {
				dirs[d] = true
				_ = tw.WriteHeader(&tar.Header{Name: d + "/", Mode: 0o755, ModTime: c.created, Typeflag: tar.TypeDir})
			}
		}
		writeDir(base)
		for _, n := range names {
			full := path.Join(base, n)
			var parents []string
			for d := path.Dir(full); d != base && d != "."; d = path.Dir(d) {
				parents = append(parents, d)
			}
			for i := len(parents) - 1; i >= 0; i-- {
				writeDir(parents[i])
			}
			b := files[n]
			_ = tw.WriteHeader(&tar.Header{Name: full, Mode: 0o600, Size: int64(len(b)), ModTime: c.created, Typeflag: tar.TypeReg})
			_, _ = tw.Write(b)
		}
	}
	_ = tw.Close()
	_, _ = w.Write(buf.Bytes())
}

func (e *Engine) putArchive(w http.ResponseWriter, r *http.Request, c *simContainer) {
	p := path.Clean(r.URL.Query().Get("path"))
	tr := tar.NewReader(r.Body)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			apiError(w, http.StatusBadRequest, "read archive: "+err.Error())
			return
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			apiError(w, http.StatusBadRequest, "read archive: "+err.Error())
			return
		}
		where, onHost := c.resolve(path.Join(p, h.Name))
		if onHost {
			e.files[where] = b
		} else {
			c.own[where] = b
		}
	}
	w.WriteHeader(http.StatusOK)
}

func (e *Engine) pull(w http.ResponseWriter, r *http.Request) {
	ref := r.URL.Query().Get("fromImage")
	if tag := r.URL.Query().Get("tag"); tag != "" {
		ref += ":" + tag
	}
	e.mu.Lock()
	e.images[ref] = true
	e.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"status": "Downloaded newer image for " + ref})
}

func (e *Engine) imageInspect(w http.ResponseWriter, r *http.Request) {
	ref, ok := strings.CutSuffix(strings.TrimPrefix(r.URL.Path, "/images/"), "/json")
	if !ok {
		apiError(w, http.StatusNotFound, "page not found (not simulated): "+r.Method+" "+r.URL.Path)
		return
	}
	e.mu.Lock()
	has := e.images[ref]
	e.mu.Unlock()
	if !has {
		apiError(w, http.StatusNotFound, "No such image: "+ref)
		return
	}
	writeJSON(w, http.StatusOK, image.InspectResponse{ID: "sha256:" + imageID(ref), RepoTags: []string{ref},
		Os: "linux", Architecture: "amd64"})
}
