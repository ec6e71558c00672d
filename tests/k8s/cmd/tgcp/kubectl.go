package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"

	// Import to initialize client auth plugins (as k8s.io/kubernetes/cmd/kubectl does).
	_ "k8s.io/client-go/plugin/pkg/client/auth"
)

// runKubectl is k8s.io/kubernetes/cmd/kubectl's main.
func runKubectl() int {
	logs.GlogSetter(cmd.GetLogVerbosity(os.Args)) // nolint:errcheck
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err) // prints and exits non-zero
		return 1
	}
	return 0
}
