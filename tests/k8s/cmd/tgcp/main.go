// Command tgcp is the tenant-gateway test control plane: embedded etcd plus an
// in-process kube-apiserver (and, optionally, the garbage-collector and
// namespace controllers of kube-controller-manager), all on 127.0.0.1.
//
// It is a multi-call binary: invoked as "kubectl" (argv[0] basename, e.g. via a
// symlink) or as "tgcp kubectl ...", it is kubectl of the same Kubernetes
// version.
//
// Used only by tests; see ../../README.md.
package main

import (
	"os"
	"path/filepath"
	"strings"
)

func main() {
	base := strings.TrimSuffix(filepath.Base(os.Args[0]), ".exe")
	if base == "kubectl" {
		os.Exit(runKubectl())
	}
	if len(os.Args) > 1 && os.Args[1] == "kubectl" {
		os.Args = append([]string{"kubectl"}, os.Args[2:]...)
		os.Exit(runKubectl())
	}
	os.Exit(runControlPlane(os.Args[1:]))
}
