// Package coldconverge holds TestColdConverges: a newcomer's first apply,
// made again and again on fresh sandbox nodes of a busy machine (make
// test-cold, and make test TEST_COLD_RUNS=N). It has no code of its own: it
// is a package of its own so that go test runs its converges in a slot of
// their own beside the other sandbox packages, where in reconcile's test
// binary they ran after TestClusterSandbox, on the run's longest path
// (docs/testing.md).
package coldconverge
