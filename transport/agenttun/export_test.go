package agenttun

// NewMemory is an empty Backend in memory, for the tests of package
// agenttun_test.
func NewMemory() Backend { return &memory{} }
