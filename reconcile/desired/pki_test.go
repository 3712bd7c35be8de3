package desired

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/spec"
)

// TestContainersFindTheirCertificates checks that every file under
// /etc/kubernetes/ssl a container refers to is among the files the PKI
// writes to that node, or, for an external etcd's, ConfigFiles.
func TestContainersFindTheirCertificates(t *testing.T) {
	checked := 0
	for _, example := range []string{"../../examples/clusters/ha/cluster.yml", "../../examples/clusters/three-role/cluster.yml", "testdata/external-etcd.yml"} {
		c, _, err := spec.Load(example)
		if err != nil {
			t.Fatal(err)
		}
		d, err := Build(c)
		if err != nil {
			t.Fatal(err)
		}
		req := pki.RequestFor(c)
		set, _, err := pki.Ensure(nil, req, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		for _, pn := range req.Nodes {
			files, err := pki.NodeFiles(set, req, pn)
			if err != nil {
				t.Fatal(err)
			}
			n, ok := d.Node(pn.Address)
			if !ok {
				t.Fatalf("%s: node %s is not in the desired state", example, pn.Address)
			}
			config, err := ConfigFiles(c, n)
			if err != nil {
				t.Fatal(err)
			}
			maps.Copy(files, config)
			for _, ctr := range n.Containers {
				for _, arg := range append(append([]string{}, ctr.Args...), ctr.Env...) {
					_, val, _ := strings.Cut(arg, "=")
					if !strings.HasPrefix(val, SSLDir) {
						continue
					}
					checked++
					if _, ok := files[val]; !ok {
						t.Errorf("%s: %s: %s refers to %s, which the PKI does not write to this node", example, pn.Address, ctr.Name, val)
					}
				}
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d certificate paths checked: the containers no longer refer to %s as expected", checked, SSLDir)
	}
}
