// Module pause is the sandbox's pod infrastructure container, built by
// rigger sandbox into rigger-sandbox/pause (see main.go). It needs nothing
// but the standard library.
module github.com/rigger/rigger/hack/kube-build/pause

go 1.22
