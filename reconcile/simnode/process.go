package simnode

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// Benchmarks run the simulated nodes in a child process (the test binary
// again, running one test that calls Serve), so that the memory and CPU
// time they measure in their own process are rigger's alone. The parent
// talks to the child by lines: the child says Ready once its nodes run,
// then answers each request on its standard input (Process.Ask); the end
// of its standard input stops the nodes.

// ChildKey starts a child process: its open files limit raised (a node
// takes a few), and the key its nodes accept read from the id_ed25519.pub
// the parent wrote in dir.
func ChildKey(dir string) (ssh.PublicKey, error) {
	if _, err := RaiseFileLimit(); err != nil {
		return nil, err
	}
	pub, err := os.ReadFile(filepath.Join(dir, "id_ed25519.pub"))
	if err != nil {
		return nil, err
	}
	key, _, _, _, err := ssh.ParseAuthorizedKey(pub)
	return key, err
}

// Ready is the child's first line.
const Ready = "simulated nodes ready"

// Process is a child process serving simulated nodes.
type Process struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
}

// StartProcess runs the test named test of this test binary in a child
// process, with env added to its environment, and waits up to ready for it
// to say Ready. Its standard error is this process's.
func StartProcess(test string, env []string, ready time.Duration) (*Process, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1", "-test.timeout=0")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the simulated nodes' process: %w", err)
	}
	p := &Process{cmd: cmd, in: in, lines: make(chan string, 1)}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	line, err := p.next(ready)
	if err == nil && line != Ready {
		err = fmt.Errorf("the simulated nodes' process said %q before its nodes were ready", line)
	}
	if err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// next is the child's next line, waited for up to timeout.
func (p *Process) next(timeout time.Duration) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case line, ok := <-p.lines:
		if !ok {
			return "", errors.New("the simulated nodes' process ended")
		}
		return line, nil
	case <-t.C:
		return "", fmt.Errorf("the simulated nodes' process did not answer within %s", timeout)
	}
}

// Ask sends the child one request (see Serve) and returns its answer,
// waited for up to timeout.
func (p *Process) Ask(request string, timeout time.Duration) (string, error) {
	if _, err := io.WriteString(p.in, request+"\n"); err != nil {
		return "", fmt.Errorf("ask the simulated nodes' process to %s: %w", request, err)
	}
	return p.next(timeout)
}

// PID is the child's process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Close stops the child (the end of its standard input) and waits for it.
func (p *Process) Close() error {
	p.in.Close()
	return p.cmd.Wait()
}

// settlePoll is how often Serve looks whether the nodes still hold
// connections.
const settlePoll = 10 * time.Millisecond

// Serve is the child's side: it says Ready on out, then answers each line
// of in, until in ends:
//
//   - "settle": "settled" once the nodes hold no connection (those of the
//     run before are closed), or "busy: …" after settle.
//   - "delay ADDRESS DURATION": the node at ADDRESS answers each Docker
//     API request DURATION late (Engine.SetDelay; "0s": at once); "ok".
//   - "hostile ADDRESS WAY": the node at ADDRESS answers as the Hostile
//     WAY says (Engine.SetHostile); "ok".
//
// Anything else is answered "unknown request: …".
func Serve(sim *Cluster, in io.Reader, out io.Writer, settle time.Duration) error {
	return ServeWith(sim, in, out, settle, nil)
}

// ServeWith is Serve, with extra answering the requests Serve does not
// know (its words; false: unknown to it too).
func ServeWith(sim *Cluster, in io.Reader, out io.Writer, settle time.Duration, extra func(fields []string) (string, bool)) error {
	if _, err := fmt.Fprintln(out, Ready); err != nil {
		return err
	}
	byAddress := make(map[string]*Node, len(sim.Nodes))
	for _, n := range sim.Nodes {
		byAddress[n.Address] = n
	}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		answer := "unknown request: " + sc.Text()
		switch {
		case len(f) == 1 && f[0] == "settle":
			answer = "settled"
			for deadline := time.Now().Add(settle); sim.Connections() > 0; {
				if time.Now().After(deadline) {
					answer = fmt.Sprintf("busy: the simulated nodes still hold %d connections after %s", sim.Connections(), settle)
					break
				}
				<-time.After(settlePoll)
			}
		case len(f) == 3 && f[0] == "delay":
			n := byAddress[f[1]]
			d, err := time.ParseDuration(f[2])
			switch {
			case n == nil:
				answer = "no simulated node " + f[1]
			case err != nil:
				answer = err.Error()
			default:
				n.Engine.SetDelay(d)
				answer = "ok"
			}
		case len(f) == 3 && f[0] == "hostile":
			if n := byAddress[f[1]]; n == nil {
				answer = "no simulated node " + f[1]
			} else {
				n.Engine.SetHostile(Hostile(f[2]))
				answer = "ok"
			}
		case extra != nil:
			if a, ok := extra(f); ok {
				answer = a
			}
		}
		if _, err := fmt.Fprintln(out, answer); err != nil {
			return err
		}
	}
	return sc.Err()
}
