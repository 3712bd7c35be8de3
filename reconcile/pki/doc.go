// Package pki makes and keeps the cluster's certificates: the cluster CA
// (kube-ca), the certificates of every component with RKE's names, the
// service-account signing key, and the kubeconfigs built from them.
//
// [Ensure] is the heart of it: a pure function from the certificates that
// exist and what the cluster needs ([Request]) to the certificates that should
// exist, with a [Change] for each difference. It never replaces an existing
// CA unless the request asks for it ([Rotation] with CA, the explicit CA
// rotation of rotate_certificates and rigger cert rotate), so a cluster keeps
// its identity for as long as one copy of its PKI survives: in the state
// directory ([Save], [Load]) or on a control-plane node ([NodePath],
// [FromFiles]). A CA rotation reaches the nodes in stages ([Staged]) in which
// both CAs are trusted ([Set.Trust]) until every certificate is the new CA's.
//
// Keys are ECDSA P-256. Randomness comes from crypto/rand: since Go 1.26 the
// crypto packages ignore a caller's io.Reader, so tests that need determinism
// use testing/cryptotest.SetGlobalRandom instead of an injected reader.
package pki
