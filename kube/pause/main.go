// Command pause is the first process of every pod sandbox on `slinkyml dev kube`'s node: it holds
// the pod's namespaces open while the pod lives, collects children that end up re-parented to it
// (it is PID 1 when the pod shares one PID namespace), and exits 0 when the runtime stops the pod
// (SIGINT or SIGTERM). Our own program: no registry is reachable, so the image is built here.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("slinkyml pause 1")
		return
	}
	signals := make(chan os.Signal, 16)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		reapChildren()
	}
}

// reapChildren collects every child that has exited, so none stays a zombie; SIGCHLD signals
// coalesce, hence the loop until no exited child is left.
func reapChildren() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
