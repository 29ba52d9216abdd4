package jsonvalue

// word is a string of the vocabulary, and the same string as an any: a
// string stored in an any is otherwise a fresh allocation each time.
type word struct {
	text  string
	value any
}

// vocabulary is the keys Kubernetes objects repeat in every object, and
// the values an AdmissionReview repeats in every request.
var vocabulary = func() []word {
	var words []word
	for _, k := range []string{
		"apiVersion", "kind", "metadata", "name", "namespace", "labels", "annotations", "uid", "resourceVersion",
		"generation", "creationTimestamp", "ownerReferences", "finalizers", "managedFields", "generateName",
		"spec", "status", "template", "replicas", "minAvailable", "selector", "matchLabels", "conditions",
		"type", "reason", "message", "lastTransitionTime", "observedGeneration", "value", "key", "operator", "values",
		"containers", "initContainers", "image", "imagePullPolicy", "command", "args", "env", "envFrom", "ports",
		"containerPort", "protocol", "resources", "limits", "requests", "cpu", "memory", "nvidia.com/gpu",
		"volumeMounts", "mountPath", "volumes", "restartPolicy", "nodeSelector", "tolerations", "affinity",
		"serviceAccountName", "schedulingGroup", "podGroupName", "podSpec", "roleName", "startsAfter",
		"cliques", "cliqueNames", "podCliqueScalingGroups", "terminationDelay", "workloadType", "trainingSpec",
		"maxRestarts", "maxRuntime", "replicatedJobs", "dependsOn", "startupPolicy", "startupPolicyOrder",
		"successPolicy", "failurePolicy", "ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit",
		"completions", "parallelism", "runtimeRef", "trainer", "numNodes", "numProcPerNode", "mlPolicy", "torch",
		"podGroupPolicy", "coscheduling", "volcano", "workload", "scheduleTimeoutSeconds", "initializer",
		"dataset", "model", "storageUri", "suspend", "managedBy", "podTemplateOverrides", "targetJobs",
		"headlessServiceConfig", "publishNotReadyAddresses", "podCliqueScalingGroupConfigs", "autoScalingConfig",
		"scaleConfig", "priorityClassName", "schedulerName", "topologySpreadConstraints", "maxSkew", "topologyKey",
		"whenUnsatisfiable", "labelSelector", "nodeAffinity", "podAffinity", "podAntiAffinity", "matchExpressions",
		"requiredDuringSchedulingIgnoredDuringExecution", "preferredDuringSchedulingIgnoredDuringExecution",
		"nodeSelectorTerms", "weight", "preference", "effect", "tolerationSeconds", "securityContext", "runAsUser",
		"runAsGroup", "runAsNonRoot", "fsGroup", "privileged", "capabilities", "add", "drop", "workingDir",
		"valueFrom", "fieldRef", "fieldPath", "secretKeyRef", "configMapKeyRef", "resourceFieldRef", "optional",
		"configMap", "secret", "secretName", "emptyDir", "medium", "sizeLimit", "hostPath", "path",
		"persistentVolumeClaim", "claimName", "readOnly", "subPath", "items", "defaultMode", "livenessProbe",
		"readinessProbe", "startupProbe", "httpGet", "tcpSocket", "exec", "port", "initialDelaySeconds",
		"periodSeconds", "timeoutSeconds", "failureThreshold", "successThreshold", "terminationGracePeriodSeconds",
		"hostNetwork", "dnsPolicy", "imagePullSecrets", "subdomain", "hostname", "ephemeral-storage",
		"hugepages-2Mi", "rdma/ib",
		// Enumerated values.
		"Never", "Always", "OnFailure", "IfNotPresent", "TCP", "UDP", "True", "False", "Unknown", "Exists",
		"Equal", "NoSchedule", "NoExecute", "PreferNoSchedule", "In", "NotIn", "DoesNotExist", "Training",
		"Inference", "InOrder", "AnyOrder", "ClusterFirst", "Memory", "DoNotSchedule", "ScheduleAnyway",
		"kubernetes.io/hostname",
		// managedFields, which every stored object carries.
		"manager", "time", "fieldsType", "fieldsV1", "FieldsV1", "subresource", "Update", "Apply", ".",
		"f:metadata", "f:spec", "f:status", "f:labels", "f:annotations", "f:template", "f:replicas",
		"f:conditions", "f:containers", "f:name", "f:image", "f:args", "f:resources", "f:limits", "f:podSpec",
		"f:cliques", "f:roleName", "f:minAvailable", "f:startsAfter", "f:workloadType", "f:trainingSpec",
		"f:terminationDelay", "f:restartPolicy", "f:ownerReferences", "f:finalizers", "f:readyReplicas",
		"f:wasAvailable", "f:type", "f:reason", "f:message", "f:lastTransitionTime",
		"f:observedGeneration", "readyReplicas", "wasAvailable", "availableReplicas", "kubectl-client-side-apply",
		"kubectl", "kubectl-create", "kubectl-edit", "shepherd",
		// An AdmissionReview's envelope, keys and the values it repeats.
		"request", "requestKind", "requestResource", "subResource", "requestSubResource", "operation",
		"userInfo", "username", "groups", "extra", "object", "oldObject", "dryRun", "options", "fieldManager",
		"group", "version", "resource", "admission.k8s.io/v1", "AdmissionReview", "meta.k8s.io/v1",
		"CreateOptions", "UpdateOptions", "DeleteOptions", "CREATE", "UPDATE", "DELETE", "CONNECT",
		"system:authenticated", "system:masters", "system:serviceaccounts",
		"v1", "v1alpha1", "v1alpha2", "v1alpha3", "v1beta1", "grove.io", "trainer.kubeflow.org", "jobset.x-k8s.io",
		"scheduling.k8s.io", "shepherd.dev", "PodCliqueSet", "PodClique", "PodCliqueScalingGroup", "TrainJob",
		"TrainingRuntime", "ClusterTrainingRuntime", "JobSet", "WorkloadPolicy", "podcliquesets", "podcliques",
		"podcliquescalinggroups", "trainjobs", "trainingruntimes", "clustertrainingruntimes", "jobsets",
		"workloadpolicies",
	} {
		words = append(words, word{text: k, value: k})
	}
	return words
}()

// wordIndex finds a word by a hash of a few of its bytes: open addressing
// over a table a few times larger than the vocabulary, each slot the word's
// index plus one. Every admitted object's keys are looked up here, and this
// is several times cheaper than a map[string]word, which hashes every byte.
var wordIndex = func() *[1 << wordBits]uint16 {
	var t [1 << wordBits]uint16
	for i, w := range vocabulary {
		h := wordHash([]byte(w.text))
		for t[h] != 0 {
			if vocabulary[t[h]-1].text == w.text {
				panic("jsonvalue: duplicate vocabulary word " + w.text)
			}
			h = (h + 1) & (1<<wordBits - 1)
		}
		t[h] = uint16(i + 1)
	}
	return &t
}()

const wordBits = 10

func wordHash(b []byte) uint32 {
	n := len(b)
	if n == 0 {
		return 0
	}
	h := uint32(n)*0x9E3779B1 ^ uint32(b[0])<<8 ^ uint32(b[n-1])<<16 ^ uint32(b[n/2])<<24
	h *= 0x85EBCA6B
	return h >> (32 - wordBits)
}

// lookupWord returns the vocabulary's word b spells, or nil.
func lookupWord(b []byte) *word {
	for h := wordHash(b); ; h = (h + 1) & (1<<wordBits - 1) {
		i := wordIndex[h]
		if i == 0 {
			return nil
		}
		if w := &vocabulary[i-1]; w.text == string(b) {
			return w
		}
	}
}
