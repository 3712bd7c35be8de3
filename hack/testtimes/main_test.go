package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRun(t *testing.T) {
	stream := strings.Join([]string{
		`{"Action":"start","Package":"x/a"}`,
		`{"Action":"run","Package":"x/a","Test":"TestOK"}`,
		`{"Action":"output","Package":"x/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}`,
		`{"Action":"output","Package":"x/a","Test":"TestOK","Output":"    a_test.go:9: quiet when it passes\n"}`,
		`{"Action":"pass","Package":"x/a","Test":"TestOK","Elapsed":3.5}`,
		`{"Action":"run","Package":"x/a","Test":"TestOK/sub"}`,
		`{"Action":"pass","Package":"x/a","Test":"TestOK/sub","Elapsed":3.4}`,
		`{"Action":"output","Package":"x/a","Output":"PASS\n"}`,
		`{"Action":"output","Package":"x/a","Output":"ok  \ta\t3.600s\n"}`,
		`{"Action":"pass","Package":"x/a","Elapsed":3.6}`,
		`{"Action":"start","Package":"b"}`,
		`{"Action":"run","Package":"b","Test":"TestBad"}`,
		`{"Action":"output","Package":"b","Test":"TestBad","Output":"=== RUN   TestBad\n"}`,
		`{"Action":"output","Package":"b","Test":"TestBad","Output":"    b_test.go:12: want 2, got 3\n"}`,
		`{"Action":"run","Package":"b","Test":"TestBad/case"}`,
		`{"Action":"output","Package":"b","Test":"TestBad/case","Output":"=== RUN   TestBad/case\n"}`,
		`{"Action":"output","Package":"b","Test":"TestBad/case","Output":"    b_test.go:20: a log line\n"}`,
		`{"Action":"output","Package":"b","Test":"TestBad/case","Output":"    b_test.go:21: the case's error,\n"}`,
		`{"Action":"output","Package":"b","Test":"TestBad/case","Output":"        on two lines\n"}`,
		`{"Action":"output","Package":"b","Test":"TestBad/case","Output":"    --- FAIL: TestBad/case (0.50s)\n"}`,
		`{"Action":"fail","Package":"b","Test":"TestBad/case","Elapsed":0.5}`,
		`{"Action":"output","Package":"b","Test":"TestBad","Output":"--- FAIL: TestBad (1.00s)\n"}`,
		`{"Action":"fail","Package":"b","Test":"TestBad","Elapsed":1}`,
		`{"Action":"run","Package":"b","Test":"TestHangs"}`,
		`{"Action":"output","Package":"b","Test":"TestHangs","Output":"=== RUN   TestHangs\n"}`,
		`{"Action":"output","Package":"b","Output":"panic: test timed out after 1m0s\n"}`,
		`{"Action":"output","Package":"b","Output":"FAIL\tb\t60.100s\n"}`,
		`{"Action":"fail","Package":"b","Elapsed":60.1}`,
		`{"ImportPath":"c [c.test]","Action":"build-output","Output":"c/c_test.go:3:1: syntax error\n"}`,
		`{"ImportPath":"c [c.test]","Action":"build-fail"}`,
		`{"Action":"start","Package":"d"}`,
		`{"Action":"output","Package":"d","Output":"?   \td\t[no test files]\n"}`,
		`{"Action":"skip","Package":"d","Elapsed":0}`,
		`go: some word of go test's own`,
		`{"Action":"start","Package":"e"}`,
		`{"Action":"output","Package":"e","Output":"what e said before the stream was cut\n"}`,
	}, "\n") + "\n"
	var out strings.Builder
	ok, err := run(strings.NewReader(stream), &out, 2)
	if err != nil || ok {
		t.Fatalf("run: ok %v, error %v; want a failure", ok, err)
	}
	want := `ok  	x/a	3.600s
=== RUN   TestBad/case
    b_test.go:20: a log line
    b_test.go:21: the case's error,
        on two lines
    --- FAIL: TestBad/case (0.50s)
=== RUN   TestBad
    b_test.go:12: want 2, got 3
--- FAIL: TestBad (1.00s)
=== RUN   TestHangs
panic: test timed out after 1m0s
FAIL	b	60.100s
c/c_test.go:3:1: syntax error
?   	d	[no test files]
go: some word of go test's own
what e said before the stream was cut
FAIL	e	(the stream ended before the package did)

The 2 slowest packages (of 3, 1m4s in all):
   1m0.1s  b  FAILED
     3.6s  x/a

The 2 slowest tests (of 2, 5s in all):
     3.5s  x/a TestOK
       1s  b TestBad  FAILED

Failed (1), with the last messages each logged:
  b TestBad/case
    | b_test.go:20: a log line
    | b_test.go:21: the case's error,
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}

	out.Reset()
	ok, err = run(strings.NewReader(strings.Join(strings.Split(stream, "\n")[:10], "\n")), &out, 10)
	if err != nil || !ok {
		t.Errorf("a passing stream: ok %v, error %v", ok, err)
	}
}
