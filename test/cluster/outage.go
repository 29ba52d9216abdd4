package cluster

import (
	"errors"
	"fmt"
)

// StopAPIServer stops the kube-apiserver, leaving etcd running: a
// control-plane outage as every client sees it. The cluster must have
// been started with Options.RestartableAPIServer.
func (c *Cluster) StopAPIServer() error {
	if !c.restartable {
		return errors.New("StopAPIServer needs a control plane started with Options.RestartableAPIServer")
	}
	if err := c.Env.ControlPlane.GetAPIServer().Stop(); err != nil {
		return fmt.Errorf("stopping the kube-apiserver: %w", err)
	}
	return nil
}

// StartAPIServer starts the kube-apiserver StopAPIServer stopped, on the
// same address with the same certificates, and returns once it answers
// /healthz.
func (c *Cluster) StartAPIServer() error {
	if !c.restartable {
		return errors.New("StartAPIServer needs a control plane started with Options.RestartableAPIServer")
	}
	if err := c.Env.ControlPlane.GetAPIServer().Start(); err != nil {
		return fmt.Errorf("starting the kube-apiserver again: %w", err)
	}
	return nil
}
