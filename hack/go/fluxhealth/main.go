// Command fluxhealth judges Kubernetes objects as Flux's kustomize-controller does when it waits
// for them: the objects whose kind a `healthCheckExprs` entry names are read by Flux's own CEL
// status reader (github.com/fluxcd/pkg/runtime/cel), every other object by kstatus, the library
// the controller falls back to. Written for the tests (tests/support/flux.py); built and cached
// by hack/tools.sh, never committed as a binary.
//
// Reads one JSON document on stdin:
//
//	{"healthCheckExprs": [{"apiVersion": ..., "kind": ..., "current": ..., ...}], "objects": [...]}
//
// and writes one JSON array on stdout, one entry per object, in order:
//
//	{"status": "Current|InProgress|Failed|Terminating|Unknown|...", "message": "...", "error": "..."}
//
// Exit status 2 when the input or an expression is refused (the message on stderr), else 0.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling/engine"
	kstatusreaders "github.com/fluxcd/cli-utils/pkg/kstatus/polling/statusreaders"
	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"github.com/fluxcd/pkg/apis/kustomize"
	runtimecel "github.com/fluxcd/pkg/runtime/cel"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

type input struct {
	HealthCheckExprs []kustomize.CustomHealthCheck `json:"healthCheckExprs"`
	Objects          []json.RawMessage             `json:"objects"`
}

type verdict struct {
	Status  string `json:"status"`
	Message string `json:"message"`
	Error   string `json:"error,omitempty"`
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "fluxhealth: "+format+"\n", args...)
	os.Exit(2)
}

func main() {
	raw, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail("reading stdin: %v", err)
	}
	var in input
	if err := json.Unmarshal(raw, &in); err != nil {
		fail("stdin is not the expected JSON document: %v", err)
	}
	// The custom reader first, kstatus for the rest: the order the controller's polling
	// engine uses (custom status readers ahead of the default generic one).
	readers := []engine.StatusReader{}
	if len(in.HealthCheckExprs) > 0 {
		newReader, err := runtimecel.NewStatusReader(in.HealthCheckExprs)
		if err != nil {
			fail("healthCheckExprs refused: %v", err)
		}
		readers = append(readers, newReader(nil))
	}
	fallback := kstatusreaders.NewGenericStatusReader(nil, status.Compute)
	ctx := context.Background()
	out := make([]verdict, 0, len(in.Objects))
	for i, object := range in.Objects {
		// Decoded as the controller's client decodes it: integers are int64, which the built-in
		// observedGeneration check needs (encoding/json would make them float64).
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(object); err != nil {
			fail("objects[%d] is not a Kubernetes object: %v", i, err)
		}
		reader := fallback
		for _, candidate := range readers {
			if candidate.Supports(u.GroupVersionKind().GroupKind()) {
				reader = candidate
				break
			}
		}
		rs, err := reader.ReadStatusForObject(ctx, nil, u)
		if err != nil {
			fail("objects[%d]: %v", i, err)
		}
		v := verdict{Status: rs.Status.String(), Message: rs.Message}
		if rs.Error != nil {
			v.Error = rs.Error.Error()
		}
		out = append(out, v)
	}
	encoded, err := json.Marshal(out)
	if err != nil {
		fail("encoding the answer: %v", err)
	}
	fmt.Println(string(encoded))
}
