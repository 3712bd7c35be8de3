// Package addons applies add-ons to a cluster: the network plugin, cluster
// DNS, metrics-server, the ingress controller and the user's addons and
// addons_include, each a named, ordered set of Kubernetes objects (Addon).
// It is the engine of rigger's add-ons phase and of `rigger plan`'s add-on
// changes; it knows nothing of nodes or of how the objects were made.
//
// # What it guarantees
//
// Apply: every object is applied with server-side apply under one field
// manager ("rigger"), forcing conflicts, with the API server's strict field
// validation (a field the schema does not declare is an error). Add-ons are
// applied one after the other in the order given; within an add-on,
// CustomResourceDefinitions and Namespaces come first (and the CRDs must be
// Established before anything else is applied), then the other objects by
// kind in Helm's install order (kinds Helm does not list, such as custom
// resources, after Ingress; APIServices and admission webhooks last),
// objects of one kind in the order given. A namespaced object without a
// namespace goes to "default", as with kubectl; a List is applied as its
// items. Applying the same add-ons again changes nothing in the cluster.
//
// Readiness: after applying an add-on, Apply waits until every object is
// Current by kstatus (Deployments, DaemonSets and StatefulSets rolled out,
// Jobs complete, CRDs established, ...), polling at most
// Options.ReadyTimeout, never sleeping a fixed time. LoadBalancer Services
// and objects annotated rigger.io/wait: "false" are not waited for. An
// object that fails or does not become ready is a *NotReadyError naming
// the add-on and the object, with its kstatus status and message, its
// conditions and its last Warning events (and its pods'). An object the
// API server rejects is an *ApplyError naming the object and the document
// it was read from.
//
// Inventory and pruning: each add-on's inventory is the ConfigMap
// kube-system/rigger-addon-<name>, listing the group, version, kind,
// namespace and name of every object rigger applied for it; every applied
// object carries the label rigger.io/addon=<name>. The inventory is written
// before the objects are applied (with what it already listed) and again
// after, so that nothing rigger creates goes untracked. With Options.Prune,
// an object listed in the inventory and gone from the add-on (and from
// every other add-on of the same Apply) is deleted, propagation
// Background, after the add-on is ready — but only when the live object
// still carries the add-on's label and has fields applied by rigger's field
// manager; anything else is reported as an Orphan and left alone. Without
// Prune (RKE's behaviour) such objects stay. Remove deletes a whole add-on
// that is no longer wanted through its inventory, under the same checks.
//
// Plan: Plan dry-runs every object (server-side, DryRun All) and compares
// the result with the live object, both without status and the metadata
// the server keeps (managedFields, resourceVersion, generation, uid,
// creationTimestamp): each object is Create, Configure (with the fields
// that differ; never a Secret's values), Unchanged, Prune or Orphan. The
// result, a ChangeSet, is a value that renders as text (Render) and JSON.
// Plan changes nothing; an object changed in the cluster by someone else
// shows as Configure, which is how drift is found, and Apply repairs it.
//
// # Input
//
// Decode reads multi-document YAML as kubectl does; Fetcher.UserAddons
// reads cluster.yml's addons and addons_include (files relative to
// cluster.yml, or http(s) URLs fetched with a timeout and a size limit).
// Everything read is bounded (Limits); errors name the source, the
// document and its line.
package addons
