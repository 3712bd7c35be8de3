// Package desired computes what should run on each node of a cluster: the
// component containers of RKE's node plans (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, nginx-proxy, kubelet, kube-proxy),
// with their images, commands, flags, environment and bind mounts.
//
// Build is a pure function of the defaulted cluster.yml (spec.Cluster): it
// does no I/O and takes no context, so the planner can call it as often as it
// likes and tests can compare its output byte for byte. What it cannot know
// without looking at a node (the Docker root directory, the CPU architecture,
// whether an etcd cluster already exists) is either left to the planner or
// filled with RKE's default, as each field's comment says.
//
// The flags follow RKE (cluster/plan.go): every component gets the flags
// that come from the cluster (addresses, certificates, ranges), then RKE's
// default service options (spec/rkemeta) of the Kubernetes release the
// kubernetes image runs — its tag's series wins over kubernetes_version, as
// in RKE — where an empty option removes the flag, then the settings RKE
// adds on top (authorization mode, admission plugins, audit log), then the
// user's extra_args (which override a flag of the same name) and
// extra_args_array (which replace it with repeated flags). Flags are rendered `--flag=value`, sorted by name,
// so that the same cluster.yml always gives the same command line.
//
// Each container carries the labels LabelCluster, LabelComponent and
// LabelSpecHash; Container.Hash says what the hash covers. Drift is a
// running container whose hash label differs from the desired one.
package desired
