package desired

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// hashVersion starts the hashed encoding, so that a future change of what
// the hash covers is a deliberate, visible one (every container is then
// replaced once).
const hashVersion = "rigger.io/spec-hash/v1"

// hashLen is the number of hex digits of the hash kept: 64 bits, plenty to
// tell two specs of one component apart.
const hashLen = 16

// hashed is the canonical encoding of what Hash covers. encoding/json writes
// struct fields in declaration order, and nil and empty slices are written
// alike (see Hash), so equal specs always give equal bytes.
type hashed struct {
	Version       string   `json:"v"`
	Image         string   `json:"image"`
	Entrypoint    []string `json:"entrypoint"`
	Args          []string `json:"args"`
	Env           []string `json:"env"`
	Binds         []string `json:"binds"`
	NetworkMode   string   `json:"network_mode"`
	PidMode       string   `json:"pid_mode"`
	Privileged    bool     `json:"privileged"`
	RestartPolicy string   `json:"restart_policy"`
	User          string   `json:"user"`
	// Later fields are left out when empty, so that adding them changed
	// no existing hash.
	VolumesFrom []string `json:"volumes_from,omitempty"`
	RunOnce     bool     `json:"run_once,omitempty"`
	Binary      string   `json:"binary,omitempty"`
	Confined    bool     `json:"confined,omitempty"`
}

// Hash is the spec hash of the container: the first 16 hex digits of the
// SHA-256 of a canonical JSON encoding of its image, entrypoint, args, env,
// binds, network mode, PID mode, privileged flag, restart policy, user,
// the containers whose volumes it mounts, whether it runs once, the
// rigger binary copied into it and whether it is confined.
// Order matters within each list (it is Docker's order too).
//
// It does not cover Name (the planner matches containers by name), Labels
// (they carry the hash itself) or BootstrapArgs (etcd reads them only when a
// member first starts, so a membership change must not replace healthy
// members).
func (c Container) Hash() string {
	sum := sha256.Sum256([]byte(c.SpecJSON()))
	return hex.EncodeToString(sum[:])[:hashLen]
}

// SpecJSON is the canonical JSON of the fields Hash covers. It is stored in
// the container's LabelSpec, so that a later plan can say what changed.
func (c Container) SpecJSON() string {
	h := hashed{
		Version:       hashVersion,
		Image:         c.Image,
		Entrypoint:    nonNil(c.Entrypoint),
		Args:          nonNil(c.Args),
		Env:           nonNil(c.Env),
		Binds:         nonNil(c.Binds),
		NetworkMode:   c.NetworkMode,
		PidMode:       c.PidMode,
		Privileged:    c.Privileged,
		RestartPolicy: c.RestartPolicy,
		User:          c.User,
		VolumesFrom:   c.VolumesFrom,
		RunOnce:       c.RunOnce,
		Binary:        c.Binary,
		Confined:      c.Confined,
	}
	b, err := json.Marshal(h)
	if err != nil {
		// Strings, bools and string slices always encode.
		panic("desired: encode container spec: " + err.Error())
	}
	return string(b)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
