package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// WorkloadRecord is shepherd's record of one workload it governs: a
// TrainJob or a PodCliqueSet. It holds everything shepherd derives about
// that workload — its phase, restarts, deadline and TTL and who enforces
// each, its Workload and PodGroups, and per PodClique the availability and
// restart history — so that shepherd never keeps state in annotations or
// conditions of objects that another controller rewrites (Grove replaces
// PodClique annotations on every reconcile; Trainer prints a TrainJob's last
// condition as its state). The workload controls its record, so garbage
// collection removes the record with it. Only shepherd writes records;
// users read them: `kubectl get workloadrecords -A` lists every governed
// workload.
//
// The record of a TrainJob is named trainjob-<name>, that of a PodCliqueSet
// podcliqueset-<name>, in the workload's namespace.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,shortName=wlr,categories=shepherd
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.spec.workloadRef.kind`,description="The governed workload's kind"
// +kubebuilder:printcolumn:name="Workload",type=string,JSONPath=`.spec.workloadRef.name`,description="The governed workload's name"
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`,description="Pending, Running, Suspended, Succeeded or Failed"
// +kubebuilder:printcolumn:name="Restarts",type=integer,JSONPath=`.status.restartCount`,description="Restarts of a Training PodCliqueSet"
// +kubebuilder:printcolumn:name="Deadline",type=string,JSONPath=`.status.deadline.dueTime`,description="When the active deadline falls (empty: none, or suspended)"
// +kubebuilder:printcolumn:name="Deadline-By",type=string,JSONPath=`.status.deadline.enforcedBy`,description="Who enforces the deadline: shepherd or Trainer",priority=1
// +kubebuilder:printcolumn:name="TTL",type=string,JSONPath=`.status.ttl.dueTime`,description="When shepherd deletes the finished workload"
// +kubebuilder:printcolumn:name="Gang-By",type=string,JSONPath=`.status.gangTermination.enforcedBy`,description="Who gang-terminates a PodCliqueSet: shepherd or Grove",priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`,description="Why the phase is what it is",priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type WorkloadRecord struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   WorkloadRecordSpec   `json:"spec"`
	Status WorkloadRecordStatus `json:"status,omitempty"`
}

// WorkloadRecordSpec names the workload recorded.
type WorkloadRecordSpec struct {
	// WorkloadRef is the governed workload, in the record's namespace.
	WorkloadRef WorkloadRef `json:"workloadRef"`
}

// WorkloadRef names one incarnation of a workload.
type WorkloadRef struct {
	// APIVersion is the workload's group/version.
	// +kubebuilder:validation:MinLength=1
	APIVersion string `json:"apiVersion"`
	// Kind is TrainJob or PodCliqueSet.
	// +kubebuilder:validation:Enum=TrainJob;PodCliqueSet
	Kind string `json:"kind"`
	// Name is the workload's name.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// UID is the incarnation recorded; a workload of the same name created
	// later has a record of its own.
	UID types.UID `json:"uid"`
}

// Phase is a governed workload's phase as shepherd sees it.
// +kubebuilder:validation:Enum=Pending;Running;Suspended;Succeeded;Failed
type Phase string

// Phases. Succeeded and Failed are final.
const (
	PhasePending   Phase = "Pending"
	PhaseRunning   Phase = "Running"
	PhaseSuspended Phase = "Suspended"
	PhaseSucceeded Phase = "Succeeded"
	PhaseFailed    Phase = "Failed"
)

// Enforcer names who enforces a limit.
// +kubebuilder:validation:Enum=shepherd;Trainer;Grove
type Enforcer string

// Enforcers.
const (
	EnforcerShepherd Enforcer = "shepherd"
	EnforcerTrainer  Enforcer = "Trainer"
	EnforcerGrove    Enforcer = "Grove"
)

// WorkloadRecordStatus is what shepherd derived about the workload.
type WorkloadRecordStatus struct {
	// Phase is the workload's phase: a TrainJob's from its conditions
	// (Trainer's), a Training PodCliqueSet's from shepherd's lifecycle.
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// Reason is a CamelCase word saying why the phase is what it is
	// (e.g. MaxRestartsExceeded, DeadlineExceeded); Message says it in
	// words.
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`

	// StartTime is when a Training PodCliqueSet's pods first started.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// RestartCount is how many restarts of a Training PodCliqueSet
	// shepherd committed.
	// +optional
	RestartCount *int32 `json:"restartCount,omitempty"`
	// Cliques is what shepherd keeps per PodClique of a PodCliqueSet.
	// +listType=map
	// +listMapKey=name
	// +optional
	Cliques []CliqueRecord `json:"cliques,omitempty"`

	// Deadline is the workload's active deadline, when it has one.
	// +optional
	Deadline *Limit `json:"deadline,omitempty"`
	// TTL is the time a finished workload is kept, when it has one.
	// +optional
	TTL *Limit `json:"ttl,omitempty"`

	// GangTermination says who terminates a breached gang of a
	// PodCliqueSet of workloadType Inference, and why.
	// +optional
	GangTermination *GangTermination `json:"gangTermination,omitempty"`
	// PodGroups names the Workload and PodGroups shepherd created for a
	// TrainJob (scheduling.k8s.io); the condition WorkloadReady says
	// whether it could.
	// +optional
	PodGroups *PodGroups `json:"podGroups,omitempty"`

	// Conditions: WorkloadReady (a TrainJob's Workload and PodGroups).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Limit is a time limit on the workload and who enforces it.
type Limit struct {
	// Seconds is the limit.
	Seconds int64 `json:"seconds"`
	// DueTime is when it falls; unset while the clock does not run (a
	// suspended or unfinished job).
	// +optional
	DueTime *metav1.Time `json:"dueTime,omitempty"`
	// EnforcedBy is who acts when it falls.
	EnforcedBy Enforcer `json:"enforcedBy"`
}

// GangTermination is who terminates a PodCliqueSet's breached gangs.
type GangTermination struct {
	// EnforcedBy is shepherd or Grove. Under the setting auto it is Grove
	// once Grove writes MinAvailableBreached on the set's PodCliques;
	// under on it is shepherd, which still leaves to Grove each breach
	// Grove would terminate no later than shepherd would.
	EnforcedBy Enforcer `json:"enforcedBy"`
	// Message says why, in words.
	// +optional
	Message string `json:"message,omitempty"`
}

// PodGroups are a TrainJob's Workload and PodGroups.
type PodGroups struct {
	// APIVersion is the scheduling.k8s.io version they were created in.
	APIVersion string `json:"apiVersion"`
	// Workload is the Workload's name.
	Workload string `json:"workload"`
	// Names are the PodGroups' names.
	// +listType=atomic
	// +optional
	Names []string `json:"names,omitempty"`
}

// CliqueRecord is what shepherd keeps about one PodClique.
type CliqueRecord struct {
	// Name is the PodClique's name.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// UID is the PodClique incarnation this entry is about; an entry of
	// another UID is stale.
	// +optional
	UID types.UID `json:"uid,omitempty"`
	// WasAvailable is sticky: the clique once reached minAvailable
	// (reset by a restart, so a restarted gang is protected like a new one).
	// +optional
	WasAvailable bool `json:"wasAvailable,omitempty"`
	// BreachedSince is when the clique, once available, fell below
	// minAvailable (an Inference PodCliqueSet whose gang shepherd
	// terminates): the terminationDelay runs from it. Unset while the
	// clique is not breached.
	// +optional
	BreachedSince *metav1.Time `json:"breachedSince,omitempty"`
	// Succeeded: all of the clique's pods exited 0 (sticky).
	// +optional
	Succeeded bool `json:"succeeded,omitempty"`
	// Restart is the last restart of the clique's replica that marked this
	// clique (a Training PodCliqueSet).
	// +optional
	Restart *CliqueRestart `json:"restart,omitempty"`
}

// CliqueRestart is the last restart of a Training PodCliqueSet replica
// that included this PodClique: its number and the pods it replaces. It is
// shepherd's durable record of a restart in flight (Done unset) and, once
// done, of the pods that must never count again.
type CliqueRestart struct {
	// Restart is the restartCount this restart brings the PodCliqueSet to.
	// +kubebuilder:validation:Minimum=1
	Restart int32 `json:"restart"`
	// Pods are the UIDs of the pods the restart replaces; they never count
	// again, even lingering in Terminating.
	// +listType=atomic
	// +optional
	Pods []types.UID `json:"pods,omitempty"`
	// Failed: this clique's breach caused the restart.
	// +optional
	Failed bool `json:"failed,omitempty"`
	// Done: the replaced pods are gone or terminating and the clique waits
	// for its new pods like a new gang.
	// +optional
	Done bool `json:"done,omitempty"`
}

// WorkloadRecordList is a list of WorkloadRecords.
// +kubebuilder:object:root=true
type WorkloadRecordList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WorkloadRecord `json:"items"`
}

func init() {
	SchemeBuilder.Register(&WorkloadRecord{}, &WorkloadRecordList{})
}
