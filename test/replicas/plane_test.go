package replicas

import (
	"net"
	"strconv"

	"github.com/shepherd-k8s/shepherd/test/bed"
	"github.com/shepherd-k8s/shepherd/test/cluster"
)

// plane is a control plane the replicas run against, with what a pair of
// them needs of it: the audit log that counts their writes, the address
// the apiserver calls shepherd's webhooks on (proxied to the standby), and
// the flags each replica needs there.
type plane struct {
	*cluster.Cluster
	auditLog string
	// webhook is the host:port shepherd's webhook configurations name.
	webhook string
	// replicaArgs are the flags every replica on the plane gets.
	replicaArgs []string
	// operators are the users of the upstream operators running beside
	// the replicas, whose writes audited leaves out.
	operators []string
	// suite is the test bed, nil on the seed plane.
	suite *bed.Suite
}

var (
	// seed serves the seed-shaped CRDs and the Workload API with no
	// operator: the Grove and Workload failover tests play Grove and
	// kubelets there (Grove is not on the module proxy; its model runs
	// on the bed), and the standby test needs only admission.
	seed *plane
	// onBed is the test bed (test/bed): the real Trainer, JobSet and Job
	// controllers, the garbage collector, kube-scheduler and kwok; the
	// TrainJob failover tests run there, and no test plays Trainer.
	onBed *plane
)

// seedPlane is the plane of env, whose webhooks envtest registered.
func seedPlane(c *cluster.Cluster) *plane {
	wh := c.Env.WebhookInstallOptions
	return &plane{Cluster: c, auditLog: c.AuditLog, webhook: net.JoinHostPort(wh.LocalServingHost, strconv.Itoa(wh.LocalServingPort))}
}

// bedPlane is the plane of a bed started without serve: its replicas serve
// the bed's pair on loopback.
func bedPlane(s *bed.Suite) *plane {
	return &plane{
		Cluster: s.Cluster, auditLog: s.Bed.AuditLog, webhook: s.WebhookAddr, suite: s,
		replicaArgs: []string{"--webhook-host=127.0.0.1", "--cert-dir=" + s.CertDir, "--cert-mode=cert-manager"},
		operators:   []string{bed.TrainerUser, bed.JobSetUser, bed.KCMUser, bed.SchedulerUser, bed.KwokUser},
	}
}
