package lock

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestParseStat(t *testing.T) {
	tail := " 1 4242 4242 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 %d 1000 100"
	tests := []struct {
		name      string
		stat      string
		wantState string
		wantStart uint64
		wantErr   bool
	}{
		{name: "running", stat: "4242 (rigger) S" + fmt.Sprintf(tail, 987654), wantState: "S", wantStart: 987654},
		{name: "command name with spaces and parentheses", stat: "7 (a) b (c)) R" + fmt.Sprintf(tail, 12), wantState: "R", wantStart: 12},
		{name: "zombie", stat: "8 (rigger) Z" + fmt.Sprintf(tail, 5), wantState: "Z", wantStart: 5},
		{name: "no command name", stat: "8 rigger S 1 2", wantErr: true},
		{name: "too short", stat: "8 (rigger) S 1 2 3", wantErr: true},
		{name: "start not a number", stat: "8 (rigger) S 1 4242 4242 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 x 1000", wantErr: true},
		{name: "empty", stat: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state, start, err := parseStat([]byte(tt.stat))
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseStat(%q) error %v, want error %v", tt.stat, err, tt.wantErr)
			}
			if err == nil && (state != tt.wantState || start != tt.wantStart) {
				t.Errorf("parseStat(%q) = %q, %d; want %q, %d", tt.stat, state, start, tt.wantState, tt.wantStart)
			}
		})
	}
}

// here is a fake machine whose only processes are those of running (pid →
// start time).
func here(running map[int]uint64) Machine {
	return Machine{Host: "vm", Boot: "boot-1", PIDNamespace: "pid:[4026531836]", Started: func(pid int) (uint64, error) {
		if pid == 666 {
			return 0, errors.New("permission denied")
		}
		start, ok := running[pid]
		if !ok {
			return 0, fmt.Errorf("process %d: %w", pid, fs.ErrNotExist)
		}
		return start, nil
	}}
}

// crashedHere is the holder record of a rigger of the machine here that
// started at 500 with pid 8443.
func crashedHere() Holder {
	return Holder{ID: "rigger apply on vm (pid 8443)", Host: "vm", PID: 8443, Command: "apply",
		Boot: "boot-1", PIDNamespace: "pid:[4026531836]", Start: 500}
}

func TestMachineGone(t *testing.T) {
	with := func(f func(*Holder)) Holder {
		h := crashedHere()
		f(&h)
		return h
	}
	tests := []struct {
		name    string
		running map[int]uint64
		holder  Holder
		want    bool
	}{
		{name: "pid free", holder: crashedHere(), want: true},
		{name: "still running", running: map[int]uint64{8443: 500}, holder: crashedHere()},
		{name: "pid reused by a later process", running: map[int]uint64{8443: 9000}, holder: crashedHere(), want: true},
		{name: "another host", holder: with(func(h *Holder) { h.Host = "laptop" })},
		{name: "same host name, another machine", holder: with(func(h *Holder) { h.Boot = "boot-2" })},
		{name: "another container on this kernel", holder: with(func(h *Holder) { h.PIDNamespace = "pid:[4026532000]" })},
		{name: "record of an older rigger", holder: Holder{ID: "rigger apply on vm (pid 8443)", Host: "vm", PID: 8443}},
		{name: "no start time", holder: with(func(h *Holder) { h.Start = 0 })},
		{name: "no pid", holder: with(func(h *Holder) { h.PID = 0 })},
		{name: "process not readable", holder: with(func(h *Holder) { h.PID = 666 })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := here(tt.running).Gone(tt.holder); got != tt.want {
				t.Errorf("Gone(%+v) = %v, want %v", tt.holder, got, tt.want)
			}
		})
	}
	if (Machine{Host: "vm"}).Gone(crashedHere()) {
		t.Error("a machine that knows nothing about itself took a holder for gone")
	}
}

// TestLocalMachineGone holds a lock file in a child process, whose record
// (its Me) names it: this machine sees it running, then gone once killed.
func TestLocalMachineGone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cluster.lock")
	cmd, kill := lockInChild(t, path)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var child Holder
	if err := json.Unmarshal(b, &child); err != nil {
		t.Fatal(err)
	}
	m := LocalMachine()
	if child.PID != cmd.Process.Pid || child.Boot == "" || child.Boot != m.Boot || child.PIDNamespace != m.PIDNamespace || child.Start == 0 {
		t.Fatalf("child's record %+v, machine %+v: want the child's pid, this boot and pid namespace, a start time", child, m)
	}
	if m.Gone(child) {
		t.Fatal("a running child is taken for gone")
	}
	kill()
	if !m.Gone(child) {
		t.Error("a killed child is not taken for gone")
	}
	me := Me("apply", testHolder("x").Since)
	if m.Gone(me) {
		t.Error("this process is taken for gone")
	}
}
