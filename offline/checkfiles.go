package offline

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shepherd-k8s/shepherd/celrules"
)

// CheckFilesInput is `shepherd check`'s command line: the paths and
// settings as given.
type CheckFilesInput struct {
	// Files are the manifests checked; Old the stored objects of an UPDATE
	// or DELETE; Context the objects lookups need; Policies
	// WorkloadPolicies and PolicyExceptions. StdinPath reads Stdin, once.
	Files    []string
	Old      string
	Context  []string
	Policies []string
	Stdin    io.Reader
	// MaxInput bounds each file and standard input.
	MaxInput int64
	// Operation is CREATE, UPDATE or DELETE; "" is UPDATE with Old, else
	// CREATE.
	Operation string
	// FieldValidation is Strict (also "") or Warn.
	FieldValidation string
	Timeout         time.Duration
	// WorkloadAPI: judge as if the cluster served the Workload API.
	WorkloadAPI bool
	Rules       celrules.Config
	// KeepObjects keeps each admitted object in its result.
	KeepObjects bool
}

// CheckFiles validates in, reads its files and checks their objects
// (Check). Every error is one of the input — a setting that does not go
// with another, a file that does not parse, an object over the timeout —
// and names the flag, or the file and line.
func CheckFiles(ctx context.Context, in CheckFilesInput) ([]CheckResult, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	op, err := in.validate()
	if err != nil {
		return nil, err
	}
	objects, err := ReadManifests(in.Files, in.Stdin, in.MaxInput)
	if err != nil {
		return nil, err
	}
	var olds []Manifest
	if in.Old != "" {
		if olds, err = ReadManifests([]string{in.Old}, in.Stdin, in.MaxInput); err != nil {
			return nil, err
		}
	}
	ctxObjs, err := ReadManifests(in.Context, in.Stdin, in.MaxInput)
	if err != nil {
		return nil, err
	}
	if op == "CREATE" {
		// Created together, as by kubectl apply -f of the same files: a
		// TrainJob's runtime in the same directory exists for V-TJ-3.
		for _, m := range objects {
			ctxObjs = append(ctxObjs, Manifest{Obj: m.Obj.DeepCopy(), File: m.File, Line: m.Line})
		}
	}
	policies, excs, err := ReadPolicies(in.Policies, in.Stdin, in.MaxInput)
	if err != nil {
		return nil, err
	}
	chain, err := NewChain(in.Rules, ctxObjs, policies, excs, in.WorkloadAPI)
	if err != nil {
		return nil, err
	}
	return Check(ctx, CheckInput{
		Chain: chain, Schemas: in.Rules.Schemas, Operation: op, Objects: objects, Olds: olds,
		FieldValidation: in.FieldValidation, Timeout: in.Timeout, KeepObjects: in.KeepObjects,
	})
}

// validate checks the settings against each other and returns the
// operation.
func (in *CheckFilesInput) validate() (string, error) {
	if len(in.Files) == 0 {
		return "", fmt.Errorf("check needs at least one -f FILE|DIR")
	}
	switch in.FieldValidation {
	case metav1.FieldValidationStrict, metav1.FieldValidationWarn:
	case "":
		in.FieldValidation = metav1.FieldValidationStrict
	default:
		return "", fmt.Errorf("--field-validation must be Strict or Warn, got %q", in.FieldValidation)
	}
	op := strings.ToUpper(in.Operation)
	if op == "" {
		op = "CREATE"
		if in.Old != "" {
			op = "UPDATE"
		}
	}
	switch op {
	case "CREATE":
		if in.Old != "" {
			return "", fmt.Errorf("--old goes with --operation UPDATE or DELETE")
		}
	case "UPDATE", "DELETE":
	default:
		return "", fmt.Errorf("--operation must be CREATE, UPDATE or DELETE, got %q", in.Operation)
	}
	if op == "UPDATE" && in.Old == "" {
		return "", fmt.Errorf("--operation UPDATE needs --old FILE with the stored object")
	}
	if in.Timeout <= 0 {
		return "", fmt.Errorf("--timeout must be positive, got %v", in.Timeout)
	}
	readsStdin := 0
	for _, paths := range [][]string{in.Files, {in.Old}, in.Context, in.Policies} {
		for _, p := range paths {
			if p == StdinPath {
				readsStdin++
			}
		}
	}
	if readsStdin > 1 {
		return "", fmt.Errorf("standard input (-) can be read only once: give it to one of -f, --old, --context, --policy")
	}
	return op, nil
}
